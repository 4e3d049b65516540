"""A usable alternate signal stack for the main thread, so a Python signal handler can run.

CPython installs its signal handlers with ``SA_ONSTACK``: they run on the thread's alternate stack
(``sigaltstack``). OpenVINO's CPU plugin (2026.4) sets its own alternate stack while it compiles a
model and restores an earlier one when its infer requests are destroyed; when they are destroyed out
of order, the main thread is left with an alternate stack in freed memory, and the next signal
(Ctrl-C) kills the process with a segmentation fault instead of running the handler (measured: after
``optimize`` measured an OpenVINO candidate in-process, a SIGINT segfaulted). :func:`ensure_signal_stack`
checks the current alternate stack and, when it is not in mapped memory, installs one of its own.
Linux only; elsewhere, or if ``ctypes`` cannot reach libc, it does nothing.
"""

from __future__ import annotations

import ctypes
import sys

_SS_DISABLE = 2
_SIZE = 1 << 16
_buffer = None  # ours, kept alive for the life of the process


class _StackT(ctypes.Structure):
    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]


def _mapped(address: int, size: int) -> bool:
    try:
        with open("/proc/self/maps", encoding="ascii") as maps:
            for line in maps:
                low, high = (int(x, 16) for x in line.split()[0].split("-"))
                if low <= address and address + size <= high and "rw" in line.split()[1]:
                    return True
    except OSError:
        return True  # cannot tell: leave it alone
    return False


def ensure_signal_stack() -> bool:
    """Install a fresh alternate signal stack when the current one is not in mapped memory; whether it did."""
    global _buffer
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        current = _StackT()
        if libc.sigaltstack(None, ctypes.byref(current)) != 0:
            return False
        if current.ss_flags & _SS_DISABLE or _mapped(int(current.ss_sp or 0), int(current.ss_size)):
            return False
        _buffer = _buffer or ctypes.create_string_buffer(_SIZE)
        fresh = _StackT(ctypes.cast(_buffer, ctypes.c_void_p).value, 0, _SIZE)
        return libc.sigaltstack(ctypes.byref(fresh), None) == 0
    except (OSError, AttributeError, ValueError):
        return False
