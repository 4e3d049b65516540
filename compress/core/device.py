"""Where a command runs its model: ``--device auto|cpu|cuda|cuda:N``, resolved in one place.

The syntax check (:func:`device_problem`) imports nothing, so configs can validate a recipe before
torch loads. :func:`resolve_device` turns the setting into a ``torch.device``: ``auto`` is the
first GPU when torch sees one, else the CPU; ``cuda`` or ``cuda:N`` on a machine where torch sees
no such GPU is refused with a message saying what to use instead, rather than failing later deep
inside a forward pass. :func:`mixed_precision` says which reduced precision a device runs well.

``--precision auto|fp32|bf16|fp16`` is decided here too, once per stage, from the device: bf16
autocast only where the device runs it natively (a CPU with ``avx512_bf16`` or ``amx_bf16``, a GPU
with bf16), fp16 on a GPU without bf16, fp32 otherwise. On a CPU without those flags bf16 autocast
is emulated: measured 3.3x slower than fp32 per training step and 4x at inference (MPNet-base on an
Intel Xeon with AVX-512 VNNI but no BF16), so a recipe default must not assume it.
:func:`decide_precision` is the pure rule (a flag set in, a :class:`PrecisionChoice` out);
:func:`resolve_precision` feeds it this machine's flags or GPU.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Collection, Mapping

from compress.core.errors import CompressError

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


#: What ``--precision`` accepts: ``auto`` decides from the device (:func:`decide_precision`).
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
#: CPU flags (``/proc/cpuinfo``) of native bf16 matrix instructions: AVX-512 BF16 and AMX BF16.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


#: oneDNN's ISA names as ``ONEDNN_MAX_CPU_ISA`` takes them, with their bit masks (``dnnl_cpu_isa_t``): an ISA
#: includes every one whose bits it holds.
ONEDNN_ISAS = {"SSE41": 0x1, "AVX": 0x3, "AVX2": 0x7, "AVX2_VNNI": 0xF, "AVX2_VNNI_2": 0x1F, "AVX512_CORE": 0x27,
               "AVX512_CORE_VNNI": 0x67, "AVX512_CORE_BF16": 0xE7, "AVX10_1_512": 0x1EF, "AVX512_CORE_FP16": 0x1EF,
               "AVX10_1_512_AMX": 0xFEF, "AVX512_CORE_AMX": 0xFEF, "AVX10_1_512_AMX_FP16": 0x1FEF,
               "AVX512_CORE_AMX_FP16": 0x1FEF}
#: The lowest oneDNN ISA with native bf16 dot products (AVX-512 BF16).
ONEDNN_BF16_ISA = "AVX512_CORE_BF16"


def onednn_isa_cap(environ: Mapping[str, str] | None = None) -> str | None:
    """The ISA ``ONEDNN_MAX_CPU_ISA`` (or its older name ``DNNL_MAX_CPU_ISA``) caps oneDNN at, upper-cased; ``None``
    where it is unset, ``DEFAULT``/``ALL``, or a name this table does not know (a newer ISA, above bf16)."""
    env = os.environ if environ is None else environ
    value = (env.get("ONEDNN_MAX_CPU_ISA") or env.get("DNNL_MAX_CPU_ISA") or "").strip().upper()
    return value if value in ONEDNN_ISAS else None


def cap_blocks_bf16(cap: str | None) -> bool:
    """Whether a oneDNN ISA cap leaves out native bf16: PyTorch's CPU matmuls then emulate bf16 even on a CPU whose
    flags have it (measured on the Intel Xeon with AMX: a bf16 linear layer 4.5x slower than fp32 under
    ``AVX512_CORE_VNNI``, 5.6x faster without the cap)."""
    bf16 = ONEDNN_ISAS[ONEDNN_BF16_ISA]
    return cap is not None and ONEDNN_ISAS[cap] & bf16 != bf16


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (Linux); empty where that file cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@dataclass(frozen=True)
class PrecisionChoice:
    """What ``--precision SETTING`` means on one device: the precision used, why, and a warning if any."""

    setting: str
    precision: str
    reason: str
    warning: str | None = None

    def line(self) -> str:
        """The line a stage prints once: ``precision auto -> fp32: this CPU has no avx512_bf16/AMX; ...``."""
        return f"precision {self.setting} -> {self.precision}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """What ``compress.json`` (and bench's ``results.json``) record under ``"precision"``."""
        return {"setting": self.setting, "precision": self.precision, "reason": self.reason}


def precision_problem(setting: Any) -> str | None:
    """The message for a ``--precision`` value that is not one of :data:`PRECISIONS`, else ``None``."""
    if setting in PRECISIONS:
        return None
    return f"--precision {setting!r} is not a precision; use {', '.join(PRECISIONS)}."


def decide_precision(setting: str, device_type: str, flags: Collection[str] = (),
                     cuda_bf16: bool = False, device: str | None = None, isa_cap: str | None = None) -> PrecisionChoice:
    """The precision ``setting`` means on a device of ``device_type`` (``cpu``, ``cuda``, ...).

    A pure rule, so tests decide from constructed flag sets: on a CPU, ``auto`` is bf16 only when
    ``flags`` (the CPU's) hold ``avx512_bf16`` or ``amx_bf16`` (else fp32); on CUDA, bf16 where
    ``cuda_bf16`` (``torch.cuda.is_bf16_supported()``), fp16 where not. An explicit ``bf16`` is kept
    on a CPU without those flags, with a warning (it is emulated there), and becomes fp16 on a GPU
    without bf16, as the Trainer cannot run it; ``fp16`` is refused on a CPU (no grad scaler there,
    and no native fp16 matmuls on the CPUs this targets). ``device`` only names the device in reasons.
    ``isa_cap`` is ``ONEDNN_MAX_CPU_ISA`` (:func:`onednn_isa_cap`): a cap below AVX-512 BF16 makes the CPU one
    without native bf16, whatever its flags, since oneDNN then emulates it.
    """
    problem = precision_problem(setting)
    if problem:
        raise CompressError(problem)
    name = device or device_type
    if device_type == "cuda":
        if setting == "fp32":
            return PrecisionChoice(setting, "fp32", "as asked")
        if setting == "fp16":
            return PrecisionChoice(setting, "fp16", "as asked (autocast, with a grad scaler when training)")
        if cuda_bf16:
            why = f"{name} supports bf16 (torch.cuda.is_bf16_supported())"
            return PrecisionChoice(setting, "bf16", why if setting == "auto" else f"as asked; {why}")
        why = f"{name} has no bf16 support (torch.cuda.is_bf16_supported() is False); fp16 autocast with a grad scaler"
        if setting == "auto":
            return PrecisionChoice(setting, "fp16", why)
        return PrecisionChoice(setting, "fp16", f"{why} instead", warning=f"--precision bf16: {why} instead")
    if device_type != "cpu":
        if setting in ("auto", "fp32"):
            return PrecisionChoice(setting, "fp32", f"no autocast rule for {name}" if setting == "auto" else "as asked")
        raise CompressError(f"--precision {setting} is for the CPU or a CUDA GPU, not {name}; use auto or fp32.")
    native = sorted(set(flags) & set(NATIVE_BF16_FLAGS))
    without = "this CPU has no avx512_bf16/AMX"
    if native and cap_blocks_bf16(isa_cap):
        without = f"ONEDNN_MAX_CPU_ISA={isa_cap} keeps oneDNN below {ONEDNN_BF16_ISA} (this CPU has {'/'.join(native)})"
        native = []
    if setting == "fp16":
        raise CompressError("--precision fp16 runs on CUDA GPUs only (autocast with a grad scaler); on the CPU use "
                            "auto, fp32 or bf16.")
    if setting == "fp32":
        return PrecisionChoice(setting, "fp32", "as asked")
    if native:
        why = f"this CPU has {'/'.join(native)} (native bf16 matrix instructions)"
        return PrecisionChoice(setting, "bf16", why if setting == "auto" else f"as asked; {why}")
    if setting == "auto":
        return PrecisionChoice(setting, "fp32", f"{without}; bf16 autocast would be emulated")
    why = f"{without}, so bf16 autocast is emulated (several times slower than fp32)"
    return PrecisionChoice(setting, "bf16", f"as asked; {why}",
                           warning=f"--precision bf16: {why}; use --precision auto (fp32 here) unless bf16 "
                                   "numerics are the point")


def resolve_precision(setting: str, device: Any = "cpu", announce: bool = True) -> PrecisionChoice:
    """:func:`decide_precision` for ``device`` on this machine: its CPU flags, or its GPU's bf16 support.

    ``announce`` prints the decision (and any warning, to stderr) once: the stage calls this once.
    Under ``torchrun`` only rank 0 prints.
    """
    import sys

    import torch

    device = torch.device(device)
    if device.type == "cuda":
        with torch.cuda.device(device):
            choice = decide_precision(setting, "cuda", cuda_bf16=torch.cuda.is_bf16_supported(), device=str(device))
    else:
        choice = decide_precision(setting, device.type, cpu_flags() if device.type == "cpu" else (), device=str(device),
                                  isa_cap=onednn_isa_cap())
    if announce and int(os.environ.get("RANK", "0")) == 0:
        print(choice.line())
        if choice.warning:
            print(f"warning: {choice.warning}", file=sys.stderr)
    return choice


def mixed_precision(device) -> str | None:
    """The reduced precision ``device`` runs fast: ``"bf16"``, ``"fp16"`` or ``None``.

    What ``--precision auto`` chooses there (:func:`decide_precision`), ``None`` where that is fp32:
    bf16 autocast on CPUs with AVX-512 BF16/AMX and on GPUs where ``torch.cuda.is_bf16_supported()``;
    fp16 (with a grad scaler when training) on older GPUs; none on other CPUs (bf16 still runs there,
    emulated and slow).
    """
    choice = resolve_precision("auto", device, announce=False).precision
    return None if choice == "fp32" else choice
