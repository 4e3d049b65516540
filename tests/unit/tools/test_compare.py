"""The ablation table: accuracies, seed means and paired McNemar p-values on known predictions."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.accuracy import mcnemar_p
from tools.studies.compare import Row, Run, parse_rows, table


def _run(val, test):
    return Run(Path("x"), {"validation": np.asarray(val), "test": np.asarray(test)}, {})


def test_table_reports_means_pooled_accuracy_and_paired_p_values():
    labels = {"validation": np.array([1, 0, 1, 0]), "test": np.array([1, 1, 0, 0, 1, 0, 1, 0, 1, 0])}
    base = Row("base", [_run([1, 0, 1, 0], [1, 1, 0, 0, 1, 0, 1, 0, 0, 1])])  # test 8/10
    better = Row("better", [_run([1, 0, 1, 1], [1, 1, 0, 0, 1, 0, 1, 0, 1, 0])])  # test 10/10, val 3/4
    teacher = _run([1, 0, 1, 0], [1, 1, 0, 0, 1, 0, 1, 0, 1, 1])
    text = table([base, better], labels, base, teacher)
    lines = text.splitlines()
    assert lines[2].startswith("| base (baseline) | 1 | 100.0% | 80.0% | 85.7% | 90.0% | - | - |")
    # test: better is right on the 2 sentences base got wrong, and nowhere worse: exact p = 2 * (1/2)^2 = 0.5
    assert mcnemar_p(better.runs[0].pred["test"] == labels["test"], base.runs[0].pred["test"] == labels["test"]) == 0.5
    assert lines[3] == "| better | 1 | 75.0% | 100.0% | 92.9% | 90.0% | 0.50 | 1.00 |"


def test_seed_groups_pair_seed_by_seed_and_show_mean_and_sd():
    labels = {"validation": np.array([1, 0]), "test": np.array([1, 0, 1, 0])}
    base = Row("b", [_run([1, 0], [1, 0, 1, 0]), _run([1, 0], [1, 0, 0, 0])])
    other = Row("o", [_run([1, 1], [1, 0, 1, 0]), _run([0, 0], [0, 0, 0, 0])])
    lines = table([base, other], labels, base, None).splitlines()
    assert "| o | 2 | 50.0 ± 0.0% | 75.0 ± 35.4% |" in lines[3]


def test_parse_rows_names_groups():
    rows = parse_rows(["runs/a", "seeds:runs/x-s0,runs/x-s1", "best=runs/y0,runs/y1,runs/y2"])
    assert [(n, len(d)) for n, d in rows] == [("a", 1), ("x (2 seeds)", 2), ("best", 3)]
