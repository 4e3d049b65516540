"""``python -m benchmarks.load_http`` end to end on a tiny ONNX classifier, a fraction of a second per arm: every
arm runs and reports what docs/serving.md's table shows, and the soak mode samples the server's memory."""

from __future__ import annotations

import json

import pytest

from benchmarks.load_http import main, report
from tests.conftest import make_bert


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from compress.stages.export import export_onnx

    root = tmp_path_factory.mktemp("load_http")
    return export_onnx(make_bert(root / "bert", layers=2, head=True), root / "onnx")


@pytest.fixture
def texts(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_text("a good film\nthe plot was dull\n\nwonderful acting and a charming story\n", encoding="utf-8")
    return path


def test_every_arm_runs_in_rounds_and_reports_throughput_latency_and_batches(model, texts, tmp_path, capsys):
    out = tmp_path / "load.json"
    assert main(["--model", str(model), "--texts", str(texts), "--duration", "0.6", "--rounds", "2", "--warmup", "0.2",
                 "--clients", "6", "--threads", "1", "--max-batch", "4,8", "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    arms = results["arms"]
    assert set(arms) == {"in_process_b1", "in_process_b32", "served_max_batch_4", "served_max_batch_8",
                         "served_one_at_a_time", "served_half_load"}
    for name, arm in arms.items():
        assert arm["texts"] > 0 and not arm["errors"], name
        assert len(arm["rounds"]) == (1 if name == "served_half_load" else 2), name
    for name in ("in_process_b1", "served_max_batch_4", "served_one_at_a_time", "served_half_load"):
        assert arms[name]["p50_ms"] <= arms[name]["p99_ms"], name
    assert arms["in_process_b32"]["p50_ms"] is None  # a call of 512 texts is not a request
    assert arms["served_one_at_a_time"]["mean_batch"] == 1.0
    assert 1.0 <= arms["served_max_batch_4"]["mean_batch"] <= 4 and arms["served_max_batch_8"]["mean_batch"] <= 6
    assert sum(arms["served_max_batch_8"]["sizes"].values()) == pytest.approx(1.0, abs=0.01)
    assert arms["served_half_load"]["rate"] == pytest.approx(arms["served_max_batch_4"]["throughput"] / 2, abs=0.1)
    assert results["machine"]["cpu_model"] and results["command"].startswith("python -m benchmarks.load_http")
    printed = capsys.readouterr().out
    assert printed.strip() == report(results) and "--max-batch 8: " in printed and "half-load p99" in printed


def test_soak_samples_the_servers_memory(model, texts, capsys):
    assert main(["--model", str(model), "--texts", str(texts), "--clients", "4", "--threads", "1", "--soak", "1.2",
                 "--soak-interval", "0.3"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("soak 1.2 s, 4 clients, --max-batch 8:") and "server RSS" in line and "errors 0" in line


def test_a_soak_too_short_for_two_samples_is_one_line(model, texts, capsys):
    assert main(["--model", str(model), "--texts", str(texts), "--soak", "0.2", "--soak-interval", "1"]) == 2
    assert "fewer than two memory samples" in capsys.readouterr().err
