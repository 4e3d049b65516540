"""``from compress.runtime import Predictor`` (the README's import) works in a fresh interpreter: the package reads the
name from its ``predictor`` module on first use, without importing it up front."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import ROOT


def test_the_predictor_is_importable_from_the_package_in_a_fresh_process():
    code = ("import sys, compress.runtime.modeling; assert 'compress.runtime.predictor' not in sys.modules; "
            "from compress.runtime import Predictor; print(Predictor.__module__)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "compress.runtime.predictor"
