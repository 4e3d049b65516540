"""A dangling alternate signal stack is repaired before it turns Ctrl-C into a segfault.

OpenVINO's CPU plugin (2026.4) leaves the main thread's ``sigaltstack`` in freed memory (see
:mod:`compress.core.signal_stack`). Here the same state is made on purpose, deterministically: an
anonymous ``mmap`` is installed as the alternate stack and then unmapped. Each case runs in a
subprocess, so the case that must crash (nothing repairs the stack) crashes a child, not the test
worker; that case proves the broken state is real, the others that the repair and the OpenVINO
Predictor's release path fix it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from tests.support.paths import ROOT
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sigaltstack repair is Linux-only")

BREAK_STACK = """
import ctypes, mmap, signal
class StackT(ctypes.Structure):
    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]
libc = ctypes.CDLL(None, use_errno=True)
area = mmap.mmap(-1, 1 << 16)
view = ctypes.c_char.from_buffer(area)
address = ctypes.addressof(view)
del view  # mmap refuses to close while a ctypes view exports its buffer
assert libc.sigaltstack(ctypes.byref(StackT(address, 0, 1 << 16)), None) == 0
import gc; gc.collect()
area.close()  # munmap: the alternate stack now points at unmapped memory
"""

# Python's own SIGINT handler first: a process started with SIGINT ignored (a background job of a
# non-interactive shell, some CI runners) inherits SIG_IGN, and the signal would then never be delivered.
RAISE_SIGINT = """
signal.signal(signal.SIGINT, signal.default_int_handler)
try:
    signal.raise_signal(signal.SIGINT)
except KeyboardInterrupt:
    print("handled")
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


@linux_only
def test_a_dangling_alternate_stack_crashes_the_next_signal_unless_repaired():
    broken = _run(BREAK_STACK + RAISE_SIGINT)
    assert broken.returncode == -signal.SIGSEGV, (broken.returncode, broken.stdout, broken.stderr)

    repaired = _run(BREAK_STACK + "from compress.core.signal_stack import ensure_signal_stack\n"
                               "print('repaired', ensure_signal_stack())\n" + RAISE_SIGINT)
    assert repaired.returncode == 0, repaired.stderr
    assert repaired.stdout.split() == ["repaired", "True", "handled"]


@linux_only
def test_a_healthy_alternate_stack_is_left_alone():
    kept = _run("from compress.core.signal_stack import ensure_signal_stack\n"
                "print(ensure_signal_stack(), ensure_signal_stack())\n" + "import signal\n" + RAISE_SIGINT)
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout.split() == ["False", "False", "handled"]


@linux_only
def test_closing_an_openvino_predictor_repairs_the_stack_it_leaves(tmp_path):
    """The serving path: a Predictor is opened on an OpenVINO IR, used, and dropped (its requests are
    destroyed); the stack is then broken on purpose too, as OpenVINO would leave it, and a SIGINT must still
    reach Python's handler because ``close`` repairs it after freeing the requests."""
    from compress.runtime.formats.openvino import openvino_missing

    missing = openvino_missing()
    if missing:
        pytest.skip(f"OpenVINO tests skipped: {missing}")
    from compress.stages.quantize import quantize
    from tests.conftest import make_bert

    ir_dir = quantize(make_bert(tmp_path / "bert", layers=1, head=True), tmp_path / "ir", method="openvino-fp32")
    code = (f"from compress.runtime.predictor import Predictor\n"
            f"p = Predictor.load({str(ir_dir)!r}, threads=1)\n"
            "print(p.kind, p.logits(['a short text', 'another one']).shape)\n"
            + BREAK_STACK + "p.close()\n" + RAISE_SIGINT)
    done = _run(code)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split()[0] == "openvino-fp32" and done.stdout.split()[-1] == "handled"
