"""The INT8 fallback loop: the order of the candidates, where it stops, a candidate that fails to
build, and what is kept when no candidate meets the budget.

The model has a planted outlier: one output row of the pooler is scaled x1000 while the classifier
ignores that pooler output (its column is zero), so the fp32 model computes exactly what it
computed before. A per-tensor INT8 scale is then set by the outlier and the pooler's other rows
round to almost nothing (the prediction falls towards chance); per-channel scales give each row
its own and keep the accuracy. So the measured drops differ between the first two candidates by
construction, and a budget between them must stop the loop at the second.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from compress.artifact import read_meta
from compress.config import DataOptions
from compress.errors import CompressError
from compress.export import export_onnx
from compress.quantize import candidate_plan, quantize
from compress.runtime import Predictor
from tests.conftest import make_bert, sentiment_rows, train_briefly, write_csv

ORT_DYNAMIC = ["per-tensor", "per-channel", "per-channel+reduce-range", "per-channel+sensitive-fp32"]


def test_candidate_plans_are_pinned():
    """The order fallbacks are tried in, written out (the docs and users rely on it)."""
    names = lambda *a, **k: [s.name for s in candidate_plan(*a, **k)]  # noqa: E731
    assert names("ort-dynamic") == ORT_DYNAMIC
    assert names("ort-dynamic", per_channel=True) == ["per-channel", "per-channel+reduce-range",
                                                      "per-channel+sensitive-fp32"]
    assert names("ort-dynamic", reduce_range=True) == ["per-tensor+reduce-range", "per-channel+reduce-range",
                                                       "per-channel+reduce-range+sensitive-fp32"]
    assert names("torch-dynamic") == ["per-tensor", "per-channel", "per-channel+sensitive-fp32"]
    assert names("torch-dynamic", per_channel=True) == ["per-channel", "per-channel+sensitive-fp32"]
    assert names("ort-static") == ["per-channel+static-minmax", "per-channel+static-percentile",
                                   "per-channel+static-percentile+sensitive-fp32"]
    assert names("torch-bf16") == ["bf16"]


@pytest.fixture(scope="module")
def outlier(tmp_path_factory):
    """(fp32 ONNX artifact, data) for a briefly trained 2-layer BERT with the planted pooler outlier."""
    import torch

    from compress.modeling import load_classifier

    root = tmp_path_factory.mktemp("quantize-fallback")
    folder = train_briefly(make_bert(root / "bert", layers=2, head=True), steps=60, seed=0)
    model, tokenizer, _ = load_classifier(folder)
    with torch.no_grad():
        model.bert.pooler.dense.weight[0] *= 1000.0
        model.bert.pooler.dense.bias[0] *= 1000.0
        model.classifier.weight[:, 0] = 0.0
    planted = root / "planted"
    model.save_pretrained(planted, safe_serialization=True)
    tokenizer.save_pretrained(planted)
    config = json.loads((planted / "config.json").read_text())
    (planted / "config.json").write_text(json.dumps({**config, "architectures": ["BertForSequenceClassification"]}))
    data = write_csv(root / "sentiment.csv", sentiment_rows(240, seed=3))
    return export_onnx(planted, root / "onnx"), data, root


@pytest.fixture(scope="module")
def every_fallback(outlier):
    """A budget no candidate can meet (negative): every candidate is built and measured."""
    exported, data, root = outlier
    path = quantize(exported, root / "all", data=DataOptions(str(data)), max_accuracy_drop=-1.0)
    return path, read_meta(path)["quantization"]


def test_every_candidate_over_budget_keeps_the_best_with_its_numbers(every_fallback, outlier, capsys):
    path, q = every_fallback
    _, data, _ = outlier
    cands = q["candidates"]
    assert [c["name"] for c in cands] == ORT_DYNAMIC
    assert all("error" not in c and c["within_budget"] is False for c in cands)
    drops = [c["accuracy_drop"] for c in cands]
    # the planted outlier: per-tensor loses accuracy, per-channel scales do not
    assert drops[0] >= 0.2 and drops[1] <= 0.05, drops
    best = max(c["accuracy"] for c in cands)
    first_best = next(c for c in cands if c["accuracy"] == best)  # ties go to the earlier, simpler one
    assert q["chosen"] == first_best["name"] != "per-tensor"
    assert q["within_budget"] is False
    assert (q["accuracy_int8"], q["accuracy_drop"], q["size_bytes_int8"]) == (
        first_best["accuracy"], first_best["accuracy_drop"], first_best["size_bytes"])
    meta = read_meta(path)
    assert meta["metrics"]["validation"]["accuracy"] == first_best["accuracy"]
    assert any(f"kept the best one ({first_best['name']}, drop {first_best['accuracy_drop']:.4f})" in n
               for n in meta["notes"])
    # the file written is that candidate: its validation accuracy is the one recorded
    task = DataOptions(str(data)).load()
    predicted = Predictor.load(path).logits(task.texts("validation")).argmax(-1)
    assert float((predicted == np.asarray(task.splits["validation"]["label"])).mean()) == first_best["accuracy"]


def test_a_budget_between_two_candidates_stops_at_the_first_within_it(every_fallback, outlier):
    """The budget is the second candidate's measured drop (within means drop <= budget) and below the
    first's: the loop must try exactly two candidates and keep the second."""
    _, all_q = every_fallback
    exported, data, root = outlier
    drops = [c["accuracy_drop"] for c in all_q["candidates"]]
    budget = drops[1]
    assert drops[0] > budget
    path = quantize(exported, root / "part-way", data=DataOptions(str(data)), max_accuracy_drop=budget)
    q = read_meta(path)["quantization"]
    assert [c["name"] for c in q["candidates"]] == ORT_DYNAMIC[:2]
    assert [c["within_budget"] for c in q["candidates"]] == [False, True]
    assert q["chosen"] == "per-channel" and q["within_budget"] is True
    assert q["accuracy_drop"] == budget
    assert not any("no candidate kept" in n for n in read_meta(path)["notes"])


def test_when_every_candidate_fails_to_build_nothing_is_written_and_each_error_is_named(outlier, tmp_path):
    """A real quantizer failure: one word-embedding row (of a token the tokenizer never produces for
    these texts) is NaN. The fp32 model never reads that row, so it exports with parity and predicts
    as before, but ONNX Runtime derives the INT8 scale of the whole table from its min and max,
    which are NaN, and stops on its own check ("scale issue") in every candidate: none may be
    written, and the error says why for each one."""
    import torch

    from compress.modeling import load_classifier

    _, data, root = outlier
    model, tokenizer, _ = load_classifier(root / "planted")
    unused = tokenizer.convert_tokens_to_ids("[unused99]")
    assert unused not in {i for t in sentiment_rows(240, seed=3) for i in tokenizer(t["text"])["input_ids"]}
    with torch.no_grad():
        model.bert.embeddings.word_embeddings.weight[unused] = float("nan")
    broken = tmp_path / "broken"
    model.save_pretrained(broken, safe_serialization=True)
    tokenizer.save_pretrained(broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "architectures": ["BertForSequenceClassification"]}))
    exported = export_onnx(broken, tmp_path / "onnx")
    assert np.isfinite(Predictor.load(exported).logits(["a wonderful film"])).all()

    with pytest.raises(CompressError) as failed:
        quantize(exported, tmp_path / "int8", data=DataOptions(str(data)), max_accuracy_drop=-1.0)
    message = str(failed.value)
    assert message.startswith(f"every INT8 candidate for {exported} failed (")
    assert "nothing was written" in message
    for name in ORT_DYNAMIC:
        assert f"{name}: AssertionError: scale issue" in message
    assert not (tmp_path / "int8").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".int8")]  # the work folder is gone too
