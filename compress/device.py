"""Where a command runs its model: ``--device auto|cpu|cuda|cuda:N``, resolved in one place.

The syntax check (:func:`device_problem`) imports nothing, so configs can validate a recipe before
torch loads. :func:`resolve_device` turns the setting into a ``torch.device``: ``auto`` is the
first GPU when torch sees one, else the CPU; ``cuda`` or ``cuda:N`` on a machine where torch sees
no such GPU is refused with a message saying what to use instead, rather than failing later deep
inside a forward pass. :func:`mixed_precision` says which reduced precision a device runs well,
so ``--bf16`` on a GPU without bf16 falls back to fp16 (with the Trainer's grad scaler).
"""

from __future__ import annotations

import os
import re
from typing import Any

from compress.errors import CompressError

#: What ``--device`` accepts, as the error messages say it.
DEVICE_FORMS = "auto, cpu, cuda or cuda:N (N a GPU index such as cuda:0)"
_SPEC = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def device_problem(spec: Any) -> str | None:
    """The message for a ``--device`` value that is not one of :data:`DEVICE_FORMS`, else ``None``."""
    if isinstance(spec, str) and _SPEC.match(spec):
        return None
    return f"--device {spec!r} is not a device; use {DEVICE_FORMS}."


def check_device_spec(spec: Any) -> str:
    """``spec`` when it is well formed; a :class:`CompressError` naming the accepted forms otherwise."""
    problem = device_problem(spec)
    if problem:
        raise CompressError(problem)
    return spec


def resolve_device(spec: str = "auto"):
    """The ``torch.device`` that ``--device spec`` means on this machine.

    ``auto``: ``cuda`` when ``torch.cuda.is_available()``, else ``cpu``. ``cuda``/``cuda:N`` where
    torch sees no such GPU: a :class:`CompressError` saying so and what to use instead.
    """
    import torch

    check_device_spec(spec)
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        built = f"this torch ({torch.__version__}) is built without CUDA" if torch.version.cuda is None else \
            f"this torch is built for CUDA {torch.version.cuda} but finds no GPU or driver"
        raise CompressError(f"--device {spec}: torch sees no CUDA device (torch.cuda.is_available() is False; "
                            f"{built}). Use --device cpu, or --device auto to take a GPU only when there is one.")
    device = torch.device(spec)
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise CompressError(f"--device {spec}: torch sees {count} CUDA device(s) (cuda:0 to cuda:{count - 1}). "
                            "Pick one of those, or use --device cuda.")
    return device


def device_name(device) -> str:
    """``cpu`` or ``cuda:N`` (the index filled in): what artifacts and results record."""
    import torch

    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return str(device)


def training_device(spec: str = "auto"):
    """:func:`resolve_device` for a Trainer-based stage, which places the model itself.

    The Trainer (accelerate) runs on the *current* CUDA device, so ``cuda:N`` makes GPU N current.
    Under ``torchrun`` each rank takes its own GPU (``cuda:LOCAL_RANK``, as accelerate assigns it), so
    work before the Trainer (soft labels) runs there too; one fixed index there is refused.
    """
    device = resolve_device(spec)
    if device.type != "cuda":
        return device
    import torch

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        if device.index is not None:
            raise CompressError(f"--device {spec} picks one GPU, but this is a distributed run where each process "
                                "takes its own GPU (LOCAL_RANK). Use --device cuda or auto.")
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))  # the GPU accelerate gives this rank
    if device.index is not None:
        torch.cuda.set_device(device)
    return device


def cpu_supports_bf16() -> bool:
    """Whether this CPU has native bf16 matrix instructions (AVX-512 BF16 or AMX), per /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def mixed_precision(device) -> str | None:
    """The reduced precision ``device`` runs fast: ``"bf16"``, ``"fp16"`` or ``None``.

    bf16 autocast on CPUs with AVX-512 BF16/AMX and on GPUs where ``torch.cuda.is_bf16_supported()``;
    fp16 (with a grad scaler when training) on older GPUs; none on other CPUs (bf16 still runs there,
    emulated and slow).
    """
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        with torch.cuda.device(device):
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if device.type == "cpu":
        return "bf16" if cpu_supports_bf16() else None
    return None


def half_dtype(device):
    """The autocast dtype for ``--bf16`` on ``device``: bf16, except fp16 on a GPU without bf16."""
    import torch

    return torch.float16 if mixed_precision(device) == "fp16" else torch.bfloat16
