"""The run history: appending summaries, the window of comparable runs, z and t flags, malformed lines."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from benchmarks.gate import EXIT_FAIL, EXIT_MALFORMED, EXIT_PASS
from benchmarks.history import (HISTORY_SCHEMA, append_history, check_artifact, metric_series, read_history,
                                summarize_run)
from compress.cli import main
from compress.core.errors import CompressError
from tests.support.results import make_results


def _run(run_id: str, int8_speedup_b1: float, accuracy: float = 0.87, cpu: str = "test", threads: int = 2) -> dict:
    """A history line of the crafted results with the INT8 artifact's batch-1 speedup and accuracy set."""
    line = summarize_run(make_results())
    line["run_id"] = run_id
    line["machine"].update(cpu_model=cpu, threads=threads)
    art = line["artifacts"]["student-int8"]
    art["latency"][0]["speedup"] = {"estimate": int8_speedup_b1, "low": int8_speedup_b1 - 0.01,
                                    "high": int8_speedup_b1 + 0.01}
    art["accuracy"] = {"estimate": accuracy, "low": accuracy - 0.02, "high": accuracy + 0.02}
    return line


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


WINDOW = [8.0, 8.1, 7.9, 8.05, 7.95, 8.0, 8.1, 7.9, 8.0, 8.02]  # mean 8.002, sd ~0.07


def test_append_writes_one_line_per_run(tmp_path):
    path = tmp_path / "history.jsonl"
    results = make_results()
    append_history(path, results)
    results["run_id"] = "run-1"
    append_history(path, results)
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    runs = read_history(path)
    assert [r["run_id"] for r in runs] == ["run-0", "run-1"]
    run = runs[0]
    assert run["schema"] == HISTORY_SCHEMA and run["machine"] == {"cpu_model": "test", "available_cpus": 2, "threads": 2}
    art = run["artifacts"]["student-int8"]
    assert [(e["batch_size"], e["seq_len"]) for e in art["latency"]] == [(1, 128), (8, 128)]
    assert art["latency"][0]["speedup"]["estimate"] == pytest.approx(8.0, rel=0.01)
    assert art["accuracy"]["estimate"] == 0.87 and art["agreement"]["estimate"] == 0.93
    assert "rounds_ns" not in lines[0] and "predictions" not in lines[0]  # a summary, not the samples


def test_window_takes_the_last_n_comparable_runs(tmp_path):
    past = [_run(f"r{i}", v) for i, v in enumerate(WINDOW)]
    past.insert(3, _run("other-cpu", 2.0, cpu="another CPU"))       # another machine kind: left out
    past.insert(5, _run("other-threads", 3.0, threads=8))           # other thread count: left out
    current = _run("now", 8.0)
    series = dict((label, values) for label, _, values in metric_series(current, past + [current], "student-int8", 5))
    assert series["speedup at batch 1 seq 128"] == WINDOW[-5:]  # the current run itself is left out too
    assert series["accuracy"] == [0.87] * 5


def test_z_score_flags_a_run_outside_the_window(tmp_path):
    past = [_run(f"r{i}", v) for i, v in enumerate(WINDOW)]
    ok = check_artifact(_run("now", 7.95), past, "student-int8", window=10, threshold=3.0, test="z")
    assert ok["status"] == "pass" and "z score" in ok["measured"]
    slow = check_artifact(_run("now", 7.5), past, "student-int8", window=10, threshold=3.0, test="z")
    assert slow["status"] == "fail" and "speedup at batch 1 seq 128 7.5 is" in slow["message"]
    row = next(r for r in slow["rows"] if r["metric"] == "speedup at batch 1 seq 128")
    assert row["score"] == pytest.approx((7.5 - row["mean"]) / row["sd"]) and row["score"] < -3
    faster = check_artifact(_run("now", 9.0), past, "student-int8", window=10, threshold=3.0, test="z")
    assert faster["status"] == "pass"  # better than usual is not a regression
    # A threshold the user loosens lets it pass; the accuracy (identical in every run) is held by its own CI.
    assert check_artifact(_run("now", 7.5), past, "student-int8", 10, 10.0, "z")["status"] == "pass"
    drop = check_artifact(_run("now", 8.0, accuracy=0.80), past, "student-int8", 10, 3.0, "z")
    assert drop["status"] == "fail" and "accuracy" in drop["message"]


def test_too_little_history_is_skipped():
    past = [_run("r0", 8.0), _run("r1", 8.1)]
    verdict = check_artifact(_run("now", 5.0), past, "student-int8", window=20, threshold=3.0, test="t")
    assert verdict["status"] == "skip" and "fewer than 3 comparable earlier runs" in verdict["message"]


def test_gate_history_through_the_command(tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(make_results()))
    rules = tmp_path / "gates.toml"
    rules.write_text("[rules]\nmax_size_mb = 1000\n")
    history = _write(tmp_path / "history.jsonl", [_run(f"r{i}", v) for i, v in enumerate(WINDOW)])
    args = ["gate", str(results), "--rules", str(rules), "--history", str(history), "--window", "10",
            "--history-test", "z"]
    assert main(args) == EXIT_PASS  # INT8 at batch 1 is 8.0x, like the last ten runs
    out = capsys.readouterr().out
    assert "history" in out and "z 3 sd, last 10" in out
    slow = make_results()
    from tests.support.results import _latency
    slow["artifacts"][2]["latency"][0] = _latency(1, 128, 7.0, seed=3)
    slow["run_id"] = "slow"
    results.write_text(json.dumps(slow))
    assert main(args) == EXIT_FAIL
    assert "student-int8 history: speedup at batch 1 seq 128 7" in capsys.readouterr().out
    # The run that bench --history appended before the gate ran is not compared with itself.
    append_history(history, slow)
    assert main(args) == EXIT_FAIL


@pytest.mark.parametrize("line, expected", [
    ("{not json", "history.jsonl:3: not a JSON line"),
    ('{"schema": "something"}', "history.jsonl:3: not a bert-compress history line"),
    ('{"schema": "bert-compress-bench-history", "version": 9}', "history.jsonl:3: history line version 9"),
    ('{"schema": "bert-compress-bench-history", "version": 1, "machine": {}, "data": {}}',
     "history.jsonl:3: 'artifacts' is missing"),
    ('{"schema": "bert-compress-bench-history", "version": 1, "machine": {}, "data": {}, '
     '"artifacts": {"a": {"latency": [{"speedup": {}}], "accuracy": {}, "agreement": {}}}}',
     "history.jsonl:3: artifact 'a' has a latency entry without a speedup estimate"),
])
def test_malformed_history_lines_exit_3_with_file_and_line(tmp_path, capsys, line, expected):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(make_results()))
    rules = tmp_path / "gates.toml"
    rules.write_text("[rules]\nmax_size_mb = 1000\n")
    history = tmp_path / "history.jsonl"
    good = json.dumps(_run("r0", 8.0))
    history.write_text(f"{good}\n\n{line}\n{good}\n")  # the blank line 2 is allowed
    junit = tmp_path / "gate.xml"
    code = main(["gate", str(results), "--rules", str(rules), "--history", str(history), "--junit", str(junit)])
    assert code == EXIT_MALFORMED
    err = capsys.readouterr().err
    assert expected in err and "--history" in err
    assert expected in junit.read_text()
    with pytest.raises(CompressError, match="history.jsonl:3"):
        read_history(history)


def test_bench_history_path_is_checked_before_measuring(tmp_path):
    from benchmarks.history import check_history_writable

    with pytest.raises(CompressError, match="does not exist"):
        check_history_writable(tmp_path / "missing-dir" / "h.jsonl")
    with pytest.raises(CompressError, match="not a file"):
        check_history_writable(tmp_path)
    check_history_writable(tmp_path / "new.jsonl")  # created on first append


def test_history_lines_are_copies_not_views():
    results = make_results()
    line = summarize_run(results)
    before = copy.deepcopy(line)
    results["artifacts"][1]["quality"]["accuracy"] = 0.0
    assert line == before
