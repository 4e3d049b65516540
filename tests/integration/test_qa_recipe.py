"""The question-answering chain as a recipe: teacher -> distilled student -> ONNX -> optimize -> bench -> gate.

Tiny models on the synthetic SQuAD files of tests/unit/compress/test_qa_teacher.py, through ``run_recipe`` (the
``bert-compress run`` path, bench and optimize in their own processes), so every stage's wiring for
readers is exercised together; ``recipes/qa.yaml`` is the same chain on the built-in SQuAD set.
"""

from __future__ import annotations

import json

from compress.pipeline import load_recipe, plan, run_recipe
from tests.conftest import make_bert
from tests.support.squad import squad_splits

from tests.support.paths import ROOT


def test_the_shipped_qa_recipe_plans_the_whole_chain():
    recipe = load_recipe(ROOT / "recipes" / "qa.yaml")
    assert [c.stage for c in plan(recipe)] == ["teacher", "distill", "export", "optimize", "bench", "gate"]


def test_a_reader_recipe_runs_end_to_end_and_its_gate_decides_f1(tmp_path):
    data = squad_splits(tmp_path / "squad")
    encoder = make_bert(tmp_path / "encoder", layers=2)
    recipe = tmp_path / "qa.yaml"
    recipe.write_text(f"""\
out: {tmp_path / 'run'}
data: {data}
teacher: {{model: {encoder}, epochs: 2, lr: 0.003, batch_size: 16, max_length: 48}}
distill: {{student: 2x32, init: teacher-layers, epochs: 2, lr: 0.003, batch_size: 16, max_length: 48}}
export: {{}}
optimize: {{candidates: "onnx-fp32,onnx-int8-fused", batch_sizes: [1, 4], seq_len: 48, warmup: 1, runs: 3, threads: 1,
           max_accuracy_drop: 0.1}}
bench: {{quick: true, memory: false, seq_lens: [48], threads: 1, traffic: test}}
gate:
  rules:
    max_f1_drop: 0.3
""")
    status = run_recipe(load_recipe(recipe))
    assert [r["stage"] for r in status] == ["teacher", "distill", "export", "optimize", "bench", "gate"]
    assert all(r["status"] == "ran" or r["status"].startswith("ran") for r in status), status
    run = tmp_path / "run"
    student = json.loads((run / "student" / "compress.json").read_text())
    assert student["task"] == "question-answering" and student["metrics"]["test"]["exact_match"] > 0.8
    chosen = json.loads((run / "optimized" / "compress.json").read_text())
    assert chosen["kind"] == "choice" and chosen["optimize"]["metric"] == "f1"
    results = json.loads((run / "bench" / "results.json").read_text())
    assert results["data"]["metric"] == "f1" and {a["name"] for a in results["artifacts"]} >= {"teacher", "student"}
    assert "max_f1_drop" in (run / "gate-junit.xml").read_text()
