"""INT8 readers: quantize's budget check decided on validation SQuAD F1, and optimize choosing among them.

A tiny BERT reader trained here on the synthetic SQuAD files of tests/test_qa_teacher.py (answers
found exactly, so F1 means something). Each INT8 candidate is scored by the serving path
(``Predictor.predict`` on the validation questions, windows and n-best decoding included) against
the fp32 reader's answers on the same questions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compress.config import DataOptions, TeacherConfig, TrainSettings
from tests.conftest import make_bert
from tests.test_qa_teacher import squad_file


@pytest.fixture(scope="module")
def squad(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("squad")
    for split, n, seed in (("train", 200, 1), ("validation", 40, 2), ("test", 40, 3)):
        squad_file(root / f"{split}.json", n, seed)
    return root


@pytest.fixture(scope="module")
def reader(squad, tmp_path_factory) -> Path:
    from compress.teacher import train_teacher

    root = tmp_path_factory.mktemp("reader")
    cfg = TeacherConfig(model=str(make_bert(root / "encoder", layers=2)), data=DataOptions(str(squad)), max_length=48,
                        train=TrainSettings(epochs=2, lr=3e-3, batch_size=16, logging_steps=1000))
    return train_teacher(cfg, root / "teacher")


def test_ort_int8_of_a_reader_is_checked_on_validation_f1_and_serves_spans(reader, squad, tmp_path):
    from compress.quantize import quantize
    from compress.runtime import Predictor

    out = quantize(reader, tmp_path / "int8", method="ort-dynamic", data=DataOptions(str(squad)),
                   max_accuracy_drop=0.05)
    meta = json.loads((out / "compress.json").read_text())
    q = meta["quantization"]
    assert meta["task"] == "question-answering" and meta["stride"] == 16 and q["metric"] == "f1"
    assert q["f1_fp32"] > 0.9 and q["within_budget"] is True and q["f1_drop"] <= 0.05
    chosen = next(c for c in q["candidates"] if c["name"] == q["chosen"])
    assert {"f1", "f1_drop", "exact_match", "agreement", "max_abs_logit_diff"} <= set(chosen)
    assert meta["metrics"]["validation"]["n"] == 40 and 0.9 <= meta["metrics"]["validation"]["agreement"] <= 1.0
    passage = "the film was long . the key is white . a bad day"
    answer = Predictor.load(out).predict([("what is the key ?", passage)])[0]
    assert answer["answer"] == "white" and passage[answer["start"]:answer["end"]] == "white"


def test_a_budget_no_candidate_meets_tries_every_fallback_and_says_f1(reader, squad, tmp_path, capsys):
    from compress.quantize import quantize

    out = quantize(reader, tmp_path / "int8", method="ort-dynamic", data=DataOptions(str(squad)),
                   max_accuracy_drop=-1.0)
    q = json.loads((out / "compress.json").read_text())["quantization"]
    assert len(q["candidates"]) > 1 and q["within_budget"] is False
    assert all("f1_drop" in c for c in q["candidates"] if "error" not in c)
    err = capsys.readouterr().err
    assert "F1 drop" in err and "no candidate kept the f1 drop within -1" in err


def test_static_int8_calibrates_on_question_passage_pairs(reader, squad, tmp_path):
    from compress.ort_static import calibration_texts
    from compress.quantize import quantize
    from compress.tasks.qa_data import load_qa_data

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
    from compress.optimize import format_decision, optimize
    from compress.runtime import Predictor

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
