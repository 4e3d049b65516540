"""INT8 readers: quantize's budget check decided on validation SQuAD F1, and optimize choosing among them.

A tiny BERT reader trained here on the synthetic SQuAD files of tests/unit/compress/test_qa_teacher.py (answers
found exactly, so F1 means something). Each INT8 candidate is scored by the serving path
(``Predictor.predict`` on the validation questions, windows and n-best decoding included) against
the fp32 reader's answers on the same questions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compress.config import DataOptions, TeacherConfig, TrainSettings
from tests.conftest import gate_verdict, make_bert
from tests.support.squad import squad_splits


@pytest.fixture(scope="module")
def squad(tmp_path_factory) -> Path:
    return squad_splits(tmp_path_factory.mktemp("squad"))


@pytest.fixture(scope="module")
def reader(squad, tmp_path_factory) -> Path:
    from compress.stages.teacher import train_teacher

    root = tmp_path_factory.mktemp("reader")
    cfg = TeacherConfig(model=str(make_bert(root / "encoder", layers=2)), data=DataOptions(str(squad)), max_length=48,
                        train=TrainSettings(epochs=2, lr=3e-3, batch_size=16, logging_steps=1000))
    return train_teacher(cfg, root / "teacher")


def test_ort_int8_of_a_reader_is_checked_on_validation_f1_and_serves_spans(reader, squad, tmp_path):
    from compress.stages.quantize import quantize
    from compress.runtime.predictor import Predictor

    out = quantize(reader, tmp_path / "int8", method="ort-dynamic", data=DataOptions(str(squad)),
                   max_accuracy_drop=0.05)
    meta = json.loads((out / "compress.json").read_text())
    q = meta["quantization"]
    assert meta["task"] == "question-answering" and meta["stride"] == 16 and q["metric"] == "f1"
    assert q["f1_fp32"] > 0.9 and q["within_budget"] is True and q["f1_drop"] <= 0.05
    chosen = next(c for c in q["candidates"] if c["name"] == q["chosen"])
    assert {"f1", "f1_drop", "exact_match", "agreement", "max_abs_logit_diff"} <= set(chosen)
    # a reader's ladder starts at per-channel weight scales (Task.int8_per_channel), and says so
    assert q["candidates"][0]["per_channel"] is True and meta["config"]["per_channel"] is False
    assert any("question-answering default" in n for n in meta["notes"])
    assert meta["metrics"]["validation"]["n"] == 40 and 0.9 <= meta["metrics"]["validation"]["agreement"] <= 1.0
    passage = "the film was long . the key is white . a bad day"
    answer = Predictor.load(out).predict([("what is the key ?", passage)])[0]
    assert answer["answer"] == "white" and passage[answer["start"]:answer["end"]] == "white"


def test_a_budget_no_candidate_meets_tries_every_fallback_and_says_f1(reader, squad, tmp_path, capsys):
    from compress.stages.quantize import quantize

    out = quantize(reader, tmp_path / "int8", method="ort-dynamic", data=DataOptions(str(squad)),
                   max_accuracy_drop=-1.0)
    q = json.loads((out / "compress.json").read_text())["quantization"]
    assert len(q["candidates"]) > 1 and q["within_budget"] is False
    assert all("f1_drop" in c for c in q["candidates"] if "error" not in c)
    err = capsys.readouterr().err
    assert "F1 drop" in err and "no candidate passed the checks on validation; kept the best one on f1" in err


def test_static_int8_calibrates_on_question_passage_pairs(reader, squad, tmp_path):
    from compress.stages.ort_static import calibration_texts
    from compress.stages.quantize import quantize
    from compress.tasks.question_answering.data import load_qa_data

    pairs = calibration_texts(load_qa_data(str(squad)), 8)
    assert len(pairs) == 8 and all(isinstance(p, tuple) and len(p) == 2 for p in pairs)
    out = quantize(reader, tmp_path / "static", method="ort-static", data=DataOptions(str(squad)),
                   calibration_size=32, max_accuracy_drop=0.1)
    q = json.loads((out / "compress.json").read_text())["quantization"]
    assert q["metric"] == "f1" and q["f1_int8"] is not None and q["f1_fp32"] > 0.9


def test_optimize_a_reader_scores_candidates_on_f1_and_serves_the_choice(reader, squad, tmp_path):
    """optimize on a reader: each candidate (ONNX fp32, ORT INT8 fused, ORT static INT8 calibrated on
    question + passage pairs) scored on validation F1 against the PyTorch reader; the choice artifact answers."""
    from compress.config import OptimizeConfig
    from compress.stages.optimize import format_decision, optimize
    from compress.runtime.predictor import Predictor

    cfg = OptimizeConfig(model=str(reader), data=DataOptions(str(squad)),
                         candidates="onnx-fp32,onnx-int8-fused,onnx-static-unfused", batch_sizes=[1, 8], seq_len=48,
                         warmup=1, runs=3, max_accuracy_drop=0.05, calibration_size=16)
    out = optimize(cfg, tmp_path / "choice", progress=False)
    meta = json.loads((out / "compress.json").read_text())
    assert meta["task"] == "question-answering" and meta["optimize"]["metric"] == "f1" and meta["stride"] == 16
    rows = {r["name"]: r for r in meta["optimize"]["table"]}
    assert set(rows) == {"pytorch", "onnx-fp32", "onnx-int8-fused", "onnx-static-unfused"}
    assert rows["pytorch"]["f1_drop"] == 0.0 and rows["pytorch"]["agreement"] == 1.0
    assert abs(rows["onnx-fp32"]["f1"] - rows["pytorch"]["f1"]) < 1e-9 and rows["onnx-fp32"]["agreement"] == 1.0
    for row in rows.values():
        assert row["eligible"] is (row["f1_drop"] <= 0.05)
    assert "F1" in format_decision(meta)
    served = Predictor.load(out)
    assert served.task == "question-answering"
    assert served.predict([("what is the key ?", "a long day . the key is pink . the end")])[0]["answer"] == "pink"


# ----------------------------------------------------------------------------- bench and gate on SQuAD F1


@pytest.fixture(scope="module")
def reader_results(reader, squad, tmp_path_factory) -> Path:
    """``bench --quick`` of the reader: PyTorch (reference), its ONNX export and an ORT INT8 copy, with the test
    questions replayed at their real lengths (``--traffic test``)."""
    from compress.cli import main
    from compress.stages.export import export_onnx
    from compress.stages.quantize import quantize

    root = tmp_path_factory.mktemp("reader-bench")
    exported = export_onnx(reader, root / "onnx")
    int8 = quantize(exported, root / "int8", method="ort-dynamic")
    out = root / "bench"
    assert main(["bench", str(exported), str(int8), "--reference", str(reader), "--data", str(squad), "--out", str(out),
                 "--quick", "--threads", "1", "--no-memory", "--traffic", "test", "--seq-lens", "48"]) == 0
    return out


def test_bench_scores_a_reader_on_squad_f1_per_question(reader, reader_results):
    from compress.config import DataOptions
    from compress.runtime.predictor import Predictor
    from compress.tasks.question_answering.metrics import question_scores

    results = json.loads((reader_results / "results.json").read_text())
    assert results["data"]["metric"] == "f1" and results["data"]["task"] == "question-answering"
    data = DataOptions(**results["data"]["options"]).load_any()
    arts = {a["name"]: a for a in results["artifacts"]}
    ref = arts[results["reference"]]["quality"]
    answers = [a["answer"] for a in Predictor.load(reader).predict(data.texts("test"))]
    expected = question_scores(answers, data.gold_answers("test"))
    assert ref["question_f1"] == pytest.approx(expected["f1"].tolist()) and ref["f1"] == pytest.approx(expected["f1"].mean())
    assert ref["exact_match"] == pytest.approx(expected["exact_match"].mean()) and ref["agreement"] == 1.0
    for art in arts.values():
        q = art["quality"]
        assert len(q["question_f1"]) == len(q["same_answer"]) == q["n"] == len(answers)
        if not art["is_reference"]:
            assert q["f1_drop"]["estimate"] == pytest.approx(ref["f1"] - q["f1"])
            assert q["agreement"] == pytest.approx(sum(q["same_answer"]) / q["n"])
        assert art["latency"] and art["traffic"]["batch1"]["requests"] == q["n"]
    report = (reader_results / "report.md").read_text()
    assert "F1 [95%]" in report and "same answer" in report and "exact match" in report



def test_gate_decides_a_reader_on_f1_paired_over_questions(reader_results, tmp_path, capsys):
    import copy

    code, out = gate_verdict(reader_results, tmp_path, "[rules]\nmax_f1_drop = 0.5\nmin_agreement = 0.5\n")
    assert code == 0, out
    assert "max_f1_drop" in out and "of answers identical" in out
    # An artifact that answers nothing right: F1 0 on every question, so the drop is the reference's whole F1.
    results = json.loads((reader_results / "results.json").read_text())
    worse = next(a for a in results["artifacts"] if not a["is_reference"])
    n = worse["quality"]["n"]
    worse["quality"].update(question_f1=[0.0] * n, f1=0.0, same_answer=[0] * n, agreement=0.0)
    (tmp_path / "worse").mkdir()
    (tmp_path / "worse" / "results.json").write_text(json.dumps(results))
    code, out = gate_verdict(tmp_path / "worse", tmp_path, "[rules]\nmax_f1_drop = 0.1\nmin_agreement = 0.5\n")
    assert code == 1 and "F1 fell by +" in out and "entity" not in out, out
    code, out = gate_verdict(tmp_path / "worse", tmp_path, "[rules]\nmax_f1_regression = 0.1\n",
                      baseline=reader_results / "results.json")
    assert code == 1 and "F1 fell" in out, out
    code, out = gate_verdict(reader_results, tmp_path, "[rules]\nmax_f1_regression = 0.0\n",
                      baseline=reader_results / "results.json")
    assert code == 0 and "paired" in out, out
    # A classifier's accuracy rule on a reader's results is refused in one line.
    code, out = gate_verdict(reader_results, tmp_path, "[rules]\nmax_accuracy_drop = 0.1\n")
    assert code == 3 and "a reader's (SQuAD F1)" in capsys.readouterr().err
    # A damaged per-question list is a clear input error, not a silent pass.
    damaged = copy.deepcopy(json.loads((reader_results / "results.json").read_text()))
    damaged["artifacts"][1]["quality"]["question_f1"] = damaged["artifacts"][1]["quality"]["question_f1"][:-1]
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "results.json").write_text(json.dumps(damaged))
    code, out = gate_verdict(tmp_path / "damaged", tmp_path, "[rules]\nmax_f1_drop = 0.5\n")
    assert code == 3 and "question_f1 should be 40 scores" in capsys.readouterr().err


def test_predict_command_answers_questions_about_a_passage_file(reader, tmp_path, capsys):
    from compress.cli import main

    passage = tmp_path / "passage.txt"
    passage.write_text("the story was long . the key is silver . the end", encoding="utf-8")
    assert main(["predict", "--model", str(reader), "--question", "what is the key ?", "--question", "what is the key",
                 "--context-file", str(passage), "--threads", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("silver\tscore=") for line in lines)
    start, end = (int(x) for x in lines[0].split("\t")[2].removeprefix("chars ").split("-"))
    assert passage.read_text()[start:end] == "silver"
    # The span search's settings, as run_qa.py users know them; the one-word answer survives the tightest.
    assert main(["predict", "--model", str(reader), "--question", "what is the key ?", "--context-file", str(passage),
                 "--doc-stride", "8", "--n-best", "1", "--max-answer-length", "1", "--threads", "1"]) == 0
    assert capsys.readouterr().out.startswith("silver\tscore=")
    for argv, expected in (([], "give --question Q"), (["--question", "q"], "give --question Q"),
                           (["--question", "q", "--context-file", str(tmp_path / "none.txt")], "no such file"),
                           (["--question", "q", "--context-file", str(passage), "--n-best", "0"], "--n-best must be"),
                           (["--question", "q", "--context-file", str(passage), "--doc-stride", "999"], "stride"),
                           (["a text"], "instead of positional texts")):
        assert main(["predict", "--model", str(reader), *argv]) != 0
        assert expected in capsys.readouterr().err


@pytest.mark.parametrize("importance", ["magnitude", "taylor"])
def test_pruning_a_reader_removes_heads_and_recovers_by_distillation(reader, squad, tmp_path, importance):
    """Heads and FFN neurons of a reader removed physically (torch-pruning; Taylor scores from its own span
    loss), then recovered by distilling the unpruned reader's start/end scores; scored on SQuAD F1 throughout."""
    from compress.config import PruneConfig
    from compress.stages.prune.stage import prune
    from compress.runtime.predictor import Predictor

    cfg = PruneConfig(model=str(reader), data=DataOptions(str(squad)), heads=0.5, ffn=0.5, importance=importance,
                      importance_batches=2, recover_epochs=2, max_length=48,
                      train=TrainSettings(epochs=0, lr=3e-3, batch_size=16, logging_steps=1000))
    out = prune(cfg, tmp_path / "pruned")
    meta = json.loads((out / "compress.json").read_text())
    p = meta["pruning"]
    assert meta["task"] == "question-answering" and meta["stride"] == 16 and p["metric"] == "f1"
    assert p["heads"]["total_after"] == p["heads"]["total_before"] // 2 and p["parameters"]["after"] < p["parameters"]["before"]
    assert p["f1"]["before"]["test"] > 0.9 and p["f1"]["after_recovery"]["test"] > 0.8, p["f1"]
    assert meta["metrics"]["test"]["unpruned_f1"] == p["f1"]["before"]["test"]
    assert p["recovery"]["distillation"]["intermediate"] is True, p["recovery"]["distillation"]
    served = Predictor.load(out)
    assert served.predict([("what is the key ?", "a film . the key is brown . the end")])[0]["answer"] == "brown"
