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
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from compress.core.artifact import read_meta, write_artifact
from compress.config import DataOptions
from compress.core.errors import CompressError
from compress.stages.export import PARITY_TEXTS, export_onnx
from compress.runtime.formats.onnx import ONNX_FILE
from compress.stages.quantize import CandidateSpec, _choose, candidate_plan, quantize, sensitive_torch_modules
from compress.runtime.predictor import Predictor
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
    # bf16 and the fp32 IR have no INT8 setting to choose, and compress.json records none as used
    assert candidate_plan("torch-bf16", per_channel=True) == [CandidateSpec(False, False, False, precision="bf16")]
    assert candidate_plan("openvino-fp32", per_channel=True) == [CandidateSpec(False, False, False, precision="fp32")]
    assert names("ort-dynamic", per_channel=True, reduce_range=True) == ["per-channel+reduce-range",
                                                                         "per-channel+reduce-range+sensitive-fp32"]
    assert names("ort-static", reduce_range=True) == ["per-channel+static-minmax+reduce-range",
                                                      "per-channel+static-percentile+reduce-range",
                                                      "per-channel+static-percentile+reduce-range+sensitive-fp32"]
    assert names("openvino-fp32") == ["fp32"]
    assert names("openvino-int8") == ["per-channel+static-nncf-performance", "per-channel+static-nncf-mixed",
                                      "per-channel+static-nncf-mixed+sensitive-fp32"]
    # the settings are recorded per candidate in compress.json: flags as booleans, never None
    for method in ("ort-dynamic", "ort-static", "torch-dynamic", "torch-bf16", "openvino-fp32", "openvino-int8"):
        for per_channel in (False, True):
            for spec in candidate_plan(method, per_channel=per_channel):
                assert all(isinstance(v, bool) for v in (spec.per_channel, spec.reduce_range, spec.exclude_sensitive))


def test_choose_keeps_the_first_within_budget_else_the_most_accurate_and_earliest():
    """The kept candidate, on records as the loop writes them (name, accuracy, within_budget)."""
    def rec(name: str, accuracy: float, within: bool) -> dict:
        return {"name": name, "accuracy": accuracy, "within_budget": within}

    over, first, second = rec("a", 0.6, False), rec("b", 0.9, True), rec("c", 0.95, True)
    assert _choose([over, first, second]) is first  # the first within budget, not the most accurate one
    assert _choose([over, second]) is second
    tie_a, tie_b, worse = rec("d", 0.9, False), rec("e", 0.9, False), rec("f", 0.3, False)
    assert _choose([over, tie_a, tie_b, worse]) is tie_a  # none within: the most accurate, ties to the earlier
    assert _choose([worse, over]) is over and _choose([tie_b, tie_a]) is tie_b
    # without --data nothing is measured: the (only) candidate built
    unmeasured = {"name": "per-tensor"}
    assert _choose([unmeasured, {"name": "per-channel"}]) is unmeasured


#: Set by tools/mutation/mutate.py: a folder shared by every mutant's test run (see :func:`built_once`).
FIXTURE_CACHE = "MUTATION_FIXTURE_CACHE"


def built_once(name: str, build: Callable[[Path], None], scratch: Path) -> Path:
    """``build(folder)`` run into ``scratch/name``; under the mutation driver, once per mutation run.

    The driver runs these tests once per mutant of compress/stages/quantize.py, each in a fresh pytest
    session. What is built here (the planted model trained, its exports) does not run that module,
    so it is the same for every mutant; training it again costs about half of a mutant's 20 s. With
    ``MUTATION_FIXTURE_CACHE`` set (the driver sets it to a folder in its scratch copy, new each run),
    the first session builds into it and the others read it. Outside the driver nothing is shared.
    """
    cache = os.environ.get(FIXTURE_CACHE)
    if not cache:
        build(scratch / name)
        return scratch / name
    done = Path(cache) / name
    if not done.is_dir():
        Path(cache).mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache))
        build(staging / name)
        try:
            os.rename(staging / name, done)  # atomic: a reader sees the whole folder or none
        except OSError:  # another session got there first, from the same inputs
            pass
        shutil.rmtree(staging, ignore_errors=True)
    return done


def _build_planted(folder: Path) -> None:
    """A briefly trained 2-layer BERT with the planted pooler outlier in ``folder/planted``, its data beside it."""
    import torch

    from compress.runtime.modeling import load_classifier

    trained = train_briefly(make_bert(folder / "bert", layers=2, head=True), steps=60, seed=0)
    model, tokenizer, _ = load_classifier(trained)
    with torch.no_grad():
        model.bert.pooler.dense.weight[0] *= 1000.0
        model.bert.pooler.dense.bias[0] *= 1000.0
        model.classifier.weight[:, 0] = 0.0
    _save_classifier(model, tokenizer, folder / "planted")
    write_csv(folder / "sentiment.csv", sentiment_rows(240, seed=3))


def _save_classifier(model, tokenizer, folder: Path) -> None:
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["BertForSequenceClassification"]}))


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """(PyTorch fp32 folder, data, scratch root) for a briefly trained 2-layer BERT with the planted pooler outlier."""
    root = tmp_path_factory.mktemp("quantize-fallback")
    built = built_once("planted-bert", _build_planted, root)
    return built / "planted", built / "sentiment.csv", root


@pytest.fixture(scope="module")
def outlier(planted):
    """(fp32 ONNX artifact, data, scratch root): the planted model exported."""
    folder, data, root = planted
    return built_once("planted-onnx", lambda out: export_onnx(folder, out), root), data, root


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
    assert any(f"kept the best one on accuracy ({first_best['name']}, drop {first_best['accuracy_drop']:.4f}: " in n
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
    assert not any("no candidate passed the checks" in n for n in read_meta(path)["notes"])


def test_when_every_candidate_fails_to_build_nothing_is_written_and_each_error_is_named(planted, tmp_path):
    """A real quantizer failure: one word-embedding row (of a token the tokenizer never produces for
    these texts) is NaN. The fp32 model never reads that row, so it exports with parity and predicts
    as before, but ONNX Runtime derives the INT8 scale of the whole table from its min and max,
    which are NaN, and stops on its own check ("scale issue") in every candidate: none may be
    written, and the error says why for each one."""
    import torch

    from compress.runtime.modeling import load_classifier

    folder, data, _ = planted
    tokenizer = load_classifier(folder)[1]
    unused = tokenizer.convert_tokens_to_ids("[unused99]")
    assert unused not in {i for t in sentiment_rows(240, seed=3) for i in tokenizer(t["text"])["input_ids"]}

    def build(out: Path) -> None:
        model = load_classifier(folder)[0]
        with torch.no_grad():
            model.bert.embeddings.word_embeddings.weight[unused] = float("nan")
        _save_classifier(model, tokenizer, out / "broken")
        export_onnx(out / "broken", out / "onnx")

    exported = built_once("nan-row-onnx", build, tmp_path) / "onnx"
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


# PyTorch dynamic INT8 runs the same loop on the same planted model without an ONNX export: the per-tensor
# scale of the pooler is set by its outlier row there too.
TORCH_DYNAMIC = ["per-tensor", "per-channel", "per-channel+sensitive-fp32"]


@pytest.fixture(scope="module")
def torch_every_fallback(planted):
    """torch-dynamic under a budget no candidate meets: all three built and measured."""
    folder, data, root = planted
    path = quantize(folder, root / "torch-all", method="torch-dynamic", data=DataOptions(str(data)),
                    max_accuracy_drop=-1.0)
    return path, read_meta(path)


def test_torch_loop_measures_every_candidate_and_keeps_the_best(torch_every_fallback, planted):
    from compress.runtime.modeling import load_classifier

    path, meta = torch_every_fallback
    folder, data, _ = planted
    q = meta["quantization"]
    cands = q["candidates"]
    assert [c["name"] for c in cands] == TORCH_DYNAMIC
    assert [(c["per_channel"], c["exclude_sensitive"]) for c in cands] == [(False, False), (True, False), (True, True)]
    assert all("error" not in c and c["within_budget"] is False for c in cands)
    drops = [c["accuracy_drop"] for c in cands]
    assert drops[0] >= 0.2 and drops[1] <= 0.05, drops
    assert all(c["accuracy_drop"] == pytest.approx(q["accuracy_fp32"] - c["accuracy"], abs=1e-6) for c in cands)
    # the per-tensor pooler moves the logits more than per-channel scales do
    assert cands[0]["max_abs_logit_diff"] > cands[1]["max_abs_logit_diff"] >= 0
    # only the last candidate keeps layers in fp32: exactly the sensitive ones, so it is the largest file
    assert [c["excluded"] for c in cands[:2]] == [[], []]
    assert cands[2]["excluded"] == sensitive_torch_modules(load_classifier(folder)[0]) != []
    assert cands[2]["size_bytes"] > cands[1]["size_bytes"]
    best = max(c["accuracy"] for c in cands)
    kept = next(c for c in cands if c["accuracy"] == best)
    assert q["chosen"] == kept["name"] != "per-tensor" and q["within_budget"] is False
    assert (q["accuracy_int8"], q["accuracy_drop"], q["size_bytes_int8"]) == (kept["accuracy"], kept["accuracy_drop"],
                                                                               kept["size_bytes"])
    assert meta["metrics"]["validation"]["accuracy"] == kept["accuracy"]
    assert any(f"kept the best one on accuracy ({kept['name']}, " in n for n in meta["notes"])
    # each candidate's time is part of the loop's, which is part of the stage's (rounded to 0.01 s each)
    loop, total = meta["timings"]["candidates_s"], meta["timings"]["total_s"]
    assert all(isinstance(t, float) and t == round(t, 2) >= 0 for t in [c["seconds"] for c in cands] + [loop])
    assert sum(c["seconds"] for c in cands) <= loop + 0.03 <= total + 0.04
    # the file written is the kept candidate: its validation accuracy is the one recorded
    task = DataOptions(str(data)).load()
    predicted = Predictor.load(path).logits(task.texts("validation")).argmax(-1)
    assert float((predicted == np.asarray(task.splits["validation"]["label"])).mean()) == kept["accuracy"]


def test_torch_loop_stops_at_the_first_candidate_within_budget(torch_every_fallback, planted):
    """A budget equal to the second candidate's drop (within means drop <= budget) stops there; a
    generous one stops at the first."""
    _, all_meta = torch_every_fallback
    folder, data, root = planted
    drops = [c["accuracy_drop"] for c in all_meta["quantization"]["candidates"]]
    assert drops[0] > drops[1]
    for budget, tried in ((drops[1], 2), (1.0, 1)):
        path = quantize(folder, root / f"torch-{tried}", method="torch-dynamic", data=DataOptions(str(data)),
                        max_accuracy_drop=budget)
        meta = read_meta(path)
        q = meta["quantization"]
        assert [c["name"] for c in q["candidates"]] == TORCH_DYNAMIC[:tried]
        assert [c["within_budget"] for c in q["candidates"]] == [False] * (tried - 1) + [True]
        assert q["chosen"] == TORCH_DYNAMIC[tried - 1] and q["within_budget"] is True
        assert q["accuracy_drop"] == drops[tried - 1] <= budget
        assert not any("no candidate passed the checks" in n for n in meta["notes"])


def test_without_data_one_candidate_is_built_and_nothing_is_judged(planted):
    """No --data: nothing to measure against, so the requested setting is built alone and kept."""
    folder, _, root = planted
    path = quantize(folder, root / "torch-no-data", method="torch-dynamic")
    meta = read_meta(path)
    q = meta["quantization"]
    assert [c["name"] for c in q["candidates"]] == ["per-tensor"]
    assert "accuracy" not in q["candidates"][0] and "within_budget" not in q["candidates"][0]
    assert q["chosen"] == "per-tensor" and q["within_budget"] is None and q["accuracy_fp32"] is None
    assert q["size_bytes_int8"] == q["candidates"][0]["size_bytes"]
    assert "metrics" not in meta and not any("no candidate passed the checks" in n for n in meta["notes"])



def test_the_requested_setting_and_the_fp32_reading_go_to_the_candidates(planted, tmp_path):
    """--per-channel is the first candidate tried, and every candidate is measured the way the fp32 model
    reads text: its recorded max_length, stride and pooling (here a window of 8 tokens, so the longer
    probe texts are windowed). A candidate read with its own defaults (the tokenizer's limit, a quarter
    window, mean pooling) would record another logit difference than its artifact shows."""
    from compress.core.windows import default_stride

    folder, _, _ = planted
    setting = {"max_length": 8, "stride": 3, "pooling": "max"}

    def copy(tmp: Path) -> None:
        for item in folder.iterdir():
            shutil.copyfile(item, tmp / item.name)

    # the fp32 folder as a stage writes it: its compress.json records the reading in the stage's config
    recorded = write_artifact(tmp_path / "recorded", copy, {"stage": "teacher", "kind": "pytorch", "config": setting})
    fp32 = Predictor.load(recorded)
    assert (fp32.max_length, fp32.stride, fp32.pooling) == (8, 3, "max")

    path = quantize(recorded, tmp_path / "int8", method="torch-dynamic", per_channel=True)
    cand = read_meta(path)["quantization"]["candidates"]
    assert [(c["name"], c["per_channel"]) for c in cand] == [("per-channel", True)]
    written = Predictor.load(path)  # the artifact records its parent's reading
    assert (written.max_length, written.stride, written.pooling) == (8, 3, "max")
    reference = fp32.logits(PARITY_TEXTS)

    def diff(model: Predictor) -> float:
        return float(np.max(np.abs(model.logits(PARITY_TEXTS) - reference)))

    measured = cand[0]["max_abs_logit_diff"]
    assert measured == pytest.approx(diff(written), abs=1e-6)
    assert default_stride(8) != 3
    # each of the candidate's own defaults reads the probe texts differently
    own = [diff(Predictor.load(path, max_length=128, stride=3, pooling="max")),
           diff(written.set_windows(default_stride(8), "max")), diff(written.set_windows(3, "mean"))]
    assert all(abs(d - measured) > 1e-4 for d in own), (measured, own)


def test_reduce_range_is_passed_to_the_plan_and_to_the_quantizer(outlier, tmp_path):
    """--reduce-range without --per-channel: the first ORT candidate is per-tensor with 7-bit weights
    (ONNX Runtime's reduced range for QInt8 is -64..64, where the full range reaches 127)."""
    import onnx
    from onnx import numpy_helper

    def widest_int8_weight(artifact: Path) -> int:
        graph = onnx.load(str(artifact / ONNX_FILE)).graph
        weights = [numpy_helper.to_array(t) for t in graph.initializer if t.data_type == onnx.TensorProto.INT8]
        assert weights
        return max(int(np.abs(w.astype(np.int16)).max()) for w in weights)

    exported, _, _ = outlier
    path = quantize(exported, tmp_path / "int8", reduce_range=True)
    cand = read_meta(path)["quantization"]["candidates"]
    assert [(c["name"], c["per_channel"], c["reduce_range"]) for c in cand] == [
        ("per-tensor+reduce-range", False, True)]
    assert 32 <= widest_int8_weight(path) <= 64 < widest_int8_weight(quantize(exported, tmp_path / "full"))
