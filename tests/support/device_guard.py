"""A second device on a CPU-only machine, so device mix-ups fail in CI as they would on a GPU.

Inside :class:`OtherDevice`, ``tensor.to("meta")`` and ``model.to("meta")`` give tensors that
report ``device="meta"`` but keep their real values (a wrapper subclass around a CPU tensor), so
models compute real numbers there. Every operation is checked the way CUDA checks it: mixing a
tensor on that device with a CPU tensor (other than a 0-dim scalar, which CUDA accepts too) raises
:class:`DeviceMismatch`, and ``.numpy()`` on it raises, as on ``cuda``. ``.cpu()`` and ``.to("cpu")``
bring the values back. Code that forgets to move a batch to its model's device, or to bring
logits back before ``.numpy()``, fails here exactly where it would fail on a GPU.

"meta" is used as the name because PyTorch knows the device type on every build and routes its
composite operations (attention included) through generic kernels for it; no values ever live
on PyTorch's own meta backend.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

DEVICE = torch.device("meta")


class DeviceMismatch(RuntimeError):
    """Tensors on two devices met in one operation."""


class OnDevice(torch.Tensor):
    """A CPU tensor that says it lives on :data:`DEVICE`."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor):
        return torch.Tensor._make_wrapper_subclass(cls, elem.size(), strides=elem.stride(),
                                                   storage_offset=elem.storage_offset(), dtype=elem.dtype,
                                                   layout=elem.layout, device=DEVICE, requires_grad=elem.requires_grad)

    def __init__(self, elem: torch.Tensor):
        self.elem = elem

    def __repr__(self) -> str:
        return f"OnDevice({self.elem!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return NotImplemented  # only meaningful inside OtherDevice


def _wrap(elem: torch.Tensor, like: torch.Tensor | None = None) -> OnDevice:
    """Wrap ``elem``; a view of a normal tensor made under inference mode must be a normal tensor too."""
    if like is not None and not like.is_inference():
        with torch.inference_mode(False):
            return OnDevice(elem)
    return OnDevice(elem)


def _unwrap(x):
    return x.elem if isinstance(x, OnDevice) else x


def _is_target(device) -> bool:
    return device is not None and torch.device(device).type == DEVICE.type


class OtherDevice(TorchDispatchMode):
    """Run a block with :data:`DEVICE` available as a second, checked device; counts the checks made."""

    def __init__(self):
        super().__init__()
        self.checked = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        on_device = [t for t in tensors if isinstance(t, OnDevice)]
        name = func.overloadpacket.__name__
        if name in ("_to_copy", "to"):  # .to(), .cpu(), .float() ... (inference mode skips the _to_copy form)
            target = kwargs.get("device")
            for a in args[1:]:
                if isinstance(a, torch.device):
                    target = a
                elif isinstance(a, torch.Tensor):  # .to(other): other's device and dtype
                    target = a.device
            cpu = torch.device("cpu")
            rest = {k: (cpu if k == "device" else v) for k, v in kwargs.items()}
            rest_args = [cpu if isinstance(a, torch.device) else _unwrap(a) for a in args[1:]]
            out = func(_unwrap(args[0]), *rest_args, **rest)
            if _is_target(target) or (target is None and isinstance(args[0], OnDevice)):
                return out if isinstance(out, OnDevice) else _wrap(out, args[0])
            return out
        if on_device:
            self.checked += 1
            strays = [t for t in tensors if not isinstance(t, OnDevice) and t.dim() > 0]
            if strays and name not in ("copy_",):
                raise DeviceMismatch(f"{func}: expected all tensors on {DEVICE}, found one on {strays[0].device} "
                                     f"(shape {tuple(strays[0].shape)})")
        if _is_target(kwargs.get("device")):  # a factory call: torch.arange(..., device=x.device)
            out = func(*args, **{**kwargs, "device": torch.device("cpu")})
            return tree_map(lambda x: OnDevice(x) if isinstance(x, torch.Tensor) else x, out)
        out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
        if args and isinstance(args[0], torch.Tensor) and out is _unwrap(args[0]):
            return args[0]  # an in-place operation returns its own input, wrapped or not
        if on_device:
            base = args[0] if func.is_view and isinstance(args[0], torch.Tensor) else None
            return tree_map(lambda x: _wrap(x, base) if isinstance(x, torch.Tensor) and not isinstance(x, OnDevice)
                            else x, out)
        return out
