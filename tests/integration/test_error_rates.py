"""The error-rate script end to end on tiny models: twins built for real, real bench runs, the table."""

from __future__ import annotations

import json

import pytest

from tools.studies.error_rates import build_deeper, main, pseudo_runs, resample_examples, slice_rounds
from benchmarks.gate import load_results
from tests.conftest import make_bert, sentiment_rows, write_csv


def test_build_deeper_duplicates_one_layer(tmp_path):
    from compress.runtime.predictor import Predictor

    student = make_bert(tmp_path / "student", layers=2, head=True, seed=1)
    deeper = build_deeper(student, tmp_path / "deeper")
    predictor = Predictor.load(deeper, threads=1)
    assert predictor.config.num_hidden_layers == 3 and predictor.kind == "pytorch"
    assert predictor.num_parameters > Predictor.load(student, threads=1).num_parameters
    meta = json.loads((deeper / "compress.json").read_text())
    assert meta["stage"] == "slowdown" and meta["config"] == {"duplicated_layer": 1, "layers": 3}


def test_error_rates_end_to_end_on_tiny_models(tmp_path, capsys):
    from compress.stages.export import export_onnx
    from compress.stages.quantize import quantize

    data = write_csv(tmp_path / "data.csv", sentiment_rows(200, seed=3))
    teacher = make_bert(tmp_path / "teacher", layers=4, head=True, seed=2)
    student = make_bert(tmp_path / "student", layers=2, head=True, seed=1)
    weak = make_bert(tmp_path / "weak", layers=2, head=True, seed=9)
    int8 = quantize(export_onnx(student, tmp_path / "onnx"), tmp_path / "onnx-int8")
    rules = tmp_path / "gates.toml"
    rules.write_text('[rules]\nmax_accuracy_drop = 0.9\nmin_agreement = 0.01\nmax_regression = 0.05\n\n'
                     '[artifacts."onnx-int8"]\nmin_speedup = 0.1\n')
    out = tmp_path / "rates"
    argv = ["--reference", str(teacher), "--artifacts", str(student), str(int8), "--weak", str(weak),
            "--out", str(out), "--rules", str(rules), "--runs", "2", "--rounds", "30", "--block-rounds", "6",
            "--warmup", "1", "--batch-sizes", "1", "--seq-lens", "16", "--threads", "1", "--accuracy-trials", "20",
            "--window", "3", "--data", str(data), "--limit", "40"]
    assert main(argv) == 0
    text = (out / "rates.md").read_text()
    assert "python -m tools.studies.error_rates --reference" in text
    report = json.loads((out / "rates.json").read_text())
    rows = {(r["rule"], r["artifact"], r["scenario"], r["source"]): r for r in report["rows"]}
    # Five pseudo-reruns per run, two runs: 10 single-run trials; 10 pairs per run; 2 windows of 3 per run.
    assert rows[("min_speedup", "onnx-int8", "no change", "pseudo-reruns")]["trials"] == 10
    assert rows[("min_speedup", "onnx-int8", "15% slowdown", "pseudo-reruns")]["trials"] == 10
    assert rows[("max_regression", "student", "15% slowdown", "pseudo-reruns")]["trials"] == 20
    assert rows[("min_speedup", "onnx-int8", "no change", "real reruns")]["trials"] == 2
    assert rows[("max_regression", "onnx-int8", "no change", "real reruns")]["trials"] == 1
    assert rows[("history", "student", "no change", "pseudo-reruns")]["trials"] == 4
    assert rows[("max_accuracy_drop", "student", "2-point accuracy loss", "test-set resamples")]["trials"] == 20
    # A loose speedup limit on a 4-layer teacher vs a 2-layer INT8 student never fails a no-change trial
    # (a 6-round block on a loaded machine may come out inconclusive: its interval is wide, not wrong).
    no_change = rows[("min_speedup", "onnx-int8", "no change", "pseudo-reruns")]
    assert no_change["fail"] == 0 and no_change["pass"] + no_change["inconclusive"] == 10 and no_change["pass"] >= 5
    # The same model on the same resampled examples never "regresses" in accuracy.
    assert rows[("max_regression", "student", "no change", "test-set resamples")]["pass"] == 20
    assert len(report["speedup_spread"]) == 2
    # The slowed twins were real artifacts measured in the same rounds.
    run = load_results(out / "run-0" / "results.json")
    layers = {a["name"]: a["num_hidden_layers"] for a in run["artifacts"]}
    assert layers["slow-pytorch"] == 3 and layers["slow-onnx-int8"] == 3 and layers["student"] == 2


def test_pseudo_runs_recompute_statistics_from_their_rounds():
    from tests.support.results import make_results

    doc = make_results()
    blocks = pseudo_runs(doc, 100)
    assert len(blocks) == 3 and blocks[1]["settings"]["runs"] == 100
    entry = blocks[1]["artifacts"][1]["latency"][0]
    assert entry["rounds_ns"] == doc["artifacts"][1]["latency"][0]["rounds_ns"][100:200] and entry["runs"] == 100
    assert entry["speedup"]["median"] == pytest.approx(3.0, rel=0.02)
    one = slice_rounds(doc, 0, 1)
    assert one["artifacts"][0]["latency"][0]["speedup"]["median"] == 1.0
    import numpy as np

    index = np.array([0, 0, 950])
    resampled = resample_examples(doc, index)
    assert resampled["data"]["labels"] == [0, 0, 0] and resampled["artifacts"][0]["quality"]["accuracy"] == pytest.approx(2 / 3)
