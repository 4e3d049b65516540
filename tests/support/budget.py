"""A speed measurement of the demo recipe's shape, constructed: what the planner tests plan from.

A module the budget tests import their fixtures from, not a ``conftest.py``: a second conftest in a test folder
without ``__init__.py`` is imported as the top-level module ``conftest`` and hides ``tests/conftest.py`` from the
modules that import helpers from it (``from conftest import make_bert``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compress.budget.measure import SpeedMeasurement
from tests.support.paths import ROOT


def measurement(speed: float = 1.0, seconds: float = 40.0) -> SpeedMeasurement:
    """The demo's rows with unit times about those of 2 AVX-512 EPYC cores in bf16, divided by ``speed``."""
    times = dict(teacher_row_s=0.009, student_step_s=0.36, student_row_s=0.0014, teacher_fp32_row_s=0.03,
                 export_s=3.0, data_s=2.0, model_s=6.0)
    return SpeedMeasurement(
        cpu="constructed", precision="bf16",
        rows={"train": 8452, "validation": 1056, "test": 1058, "transfer": 46344},
        teacher_step_s={0: 1.9 / speed, 6: 1.18 / speed},
        round_s={k: v / speed for k, v in {"teacher@1x128": 0.16, "teacher@32x128": 3.5, "student@1x128": 0.01,
                                           "student@32x128": 0.3}.items()},
        seconds=seconds, **{k: v / speed for k, v in times.items()})


@pytest.fixture
def demo_recipe(tmp_path) -> Path:
    """recipes/default.yaml writing under tmp_path."""
    text = (ROOT / "recipes" / "default.yaml").read_text(encoding="utf-8")
    path = tmp_path / "default.yaml"
    path.write_text(text.replace("out: runs/demo", f"out: {tmp_path / 'run'}"), encoding="utf-8")
    return path


@pytest.fixture
def make_measurement():
    return measurement
