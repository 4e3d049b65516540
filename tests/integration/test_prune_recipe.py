"""recipes/prune.yaml: teacher -> student -> prune (+ recovery) -> export -> INT8 -> bench -> gate, wired end to end.

The shipped recipe is checked for its wiring (each stage reads the folder the one before wrote);
the same chain runs on tiny models, the bench replaying real traffic, and the gate reads the result.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compress.pipeline import load_recipe, plan, run_recipe
from tests.conftest import make_bert, sentiment_rows, write_csv

from tests.support.paths import ROOT
CHAIN = ["teacher", "distill", "prune", "export", "quantize", "bench", "gate"]


def test_shipped_prune_recipe_wires_the_pruned_student_through_int8_to_the_gate(tmp_path):
    recipe = load_recipe(ROOT / "recipes" / "prune.yaml", str(tmp_path / "run"))
    calls = {c.stage: c for c in plan(recipe)}
    assert list(calls) == CHAIN
    out = tmp_path / "run"
    assert calls["prune"].config.model == str(out / "student")
    assert calls["export"].config.model == str(out / "pruned")
    assert calls["quantize"].config.model == str(out / "onnx") and calls["quantize"].output == out / "onnx-int8"
    bench = calls["bench"].config
    assert bench.reference == str(out / "teacher")
    assert bench.artifacts == [str(out / n) for n in ("student", "pruned", "onnx", "onnx-int8")]
    assert bench.traffic == "test"
    assert calls["gate"].config.results == str(out / "bench" / "results.json")


@pytest.mark.slow  # seven stages with three trainings: ~4 minutes on a busy 2-core machine
def test_tiny_prune_chain_end_to_end(tmp_path):
    data = write_csv(tmp_path / "sentiment.csv", sentiment_rows(160))
    encoder = make_bert(tmp_path / "encoder")
    path = tmp_path / "prune.yaml"
    path.write_text(f"""\
out: {tmp_path / 'run'}
data: {{data: {data}}}
teacher: {{model: {encoder}, epochs: 2, lr: 0.002, batch_size: 16}}
distill: {{student: 2x32, init: teacher-layers, epochs: 1, lr: 0.002, batch_size: 16,
          allow_untrained_teacher: true}}  # mechanics: a tiny teacher may stay at chance
prune: {{heads: 0.5, ffn: 0.5, recover_epochs: 1, lr: 0.002, batch_size: 16}}
export: {{}}
quantize: {{method: ort-dynamic, max_accuracy_drop: 1.0}}
bench: {{batch_sizes: [1], seq_lens: [16], threads: 1, warmup: 1, runs: 3, memory: false, traffic: test,
         traffic_limit: 8}}
gate: {{rules: {{max_accuracy_drop: 1.0}}}}
""")
    status = run_recipe(load_recipe(path))
    assert [r["stage"] for r in status] == CHAIN
    assert all(r["status"] == "ran" for r in status), status
    run = tmp_path / "run"
    pruned = json.loads((run / "pruned" / "compress.json").read_text())
    assert pruned["stage"] == "prune"
    int8 = json.loads((run / "onnx-int8" / "compress.json").read_text())
    assert int8["kind"] == "onnx-int8" and Path(int8["parent"]["path"]) == run / "onnx"
    assert Path(json.loads((run / "onnx" / "compress.json").read_text())["parent"]["path"]) == run / "pruned"
    results = json.loads((run / "bench" / "results.json").read_text())
    assert [a["name"] for a in results["artifacts"]] == ["teacher", "student", "pruned", "onnx", "onnx-int8"]
    assert all(a["traffic"]["batch1"]["requests"] == 8 for a in results["artifacts"])
    assert (run / "gate-junit.xml").exists()
