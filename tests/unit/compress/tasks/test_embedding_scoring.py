"""Scoring a sentence encoder on one split of scored pairs: STS Spearman, and an INT8 copy's vectors against fp32."""

from __future__ import annotations

import numpy as np
import pytest

from compress.config import DataOptions
from compress.core.errors import CompressError
from compress.stages.quality import split_scorer
from compress.runtime.predictor import Predictor
from compress.tasks import get_task
from compress.tasks.sentence_embedding.data import EmbeddingPairs
from compress.tasks.sentence_embedding.metrics import sts_scores
from tests.support.embedding import corpus, make_st_folder, onnx_encoder_artifact


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = tmp_path_factory.mktemp("embedding-scoring")
    fp32 = onnx_encoder_artifact(make_st_folder(root / "st", normalize=True), root / "fp32", max_length=48)
    int8 = root / "int8"
    int8.mkdir()
    for item in fp32.iterdir():
        if item.name != "model.onnx":
            (int8 / item.name).write_bytes(item.read_bytes())
    quantize_dynamic(str(fp32 / "model.onnx"), str(int8 / "model.onnx"), weight_type=QuantType.QInt8)
    return Predictor.load(fp32, threads=1), Predictor.load(int8, threads=1)


@pytest.fixture(scope="module")
def pairs():
    data = get_task("sentence-embedding").aspect("data").load(DataOptions(data="stsb-captions", limit=40))
    assert isinstance(data, EmbeddingPairs) and data.task == "sentence-embedding"
    return data


def test_the_split_is_scored_by_the_spearman_of_the_cosines(artifacts, pairs):
    fp32, _ = artifacts
    scorer = split_scorer(pairs, "validation")
    assert scorer.metric == "spearman" and scorer.n == 40
    a, b = scorer.predict(fp32)
    assert a.shape == b.shape == (40, 32)
    got, x100 = scorer.metrics((a, b)), sts_scores(a, b, pairs.scores("validation"))
    # a fraction, as every task's metric in quantize and optimize (the teacher's and distill's records: x100)
    assert got == {"spearman": x100["spearman"] / 100, "pearson": x100["pearson"] / 100, "n": 40}
    assert -1 <= got["spearman"] <= 1


def test_an_int8_copy_is_judged_on_its_vectors(artifacts, pairs):
    fp32, int8 = artifacts
    scorer = split_scorer(pairs, "validation")
    reference = scorer.predict(fp32)
    same = scorer.compare(reference, reference)
    assert same["spearman_drop"] == 0 and same["agreement"] == pytest.approx(1.0)
    assert same["min_cosine"] == pytest.approx(1.0) and same["neighbour_recall"] == 1.0
    record = scorer.compare(scorer.predict(int8), reference)
    assert 0.9 < record["min_cosine"] <= record["agreement"] < 1.0
    assert set(record) >= {"spearman", "spearman_drop", "agreement", "n", "min_cosine", "pearson", "neighbour_recall"}
    assert scorer.failures(record, max_drop=1.0) == []
    assert record["spearman_drop"] == pytest.approx(scorer.metrics(reference)["spearman"] - record["spearman"], abs=1e-6)
    half_a_point = scorer.failures({**record, "spearman_drop": 0.006}, max_drop=0.005)  # the cross-encoder's scale
    assert half_a_point and "drop 0.0060 > budget 0.005" in half_a_point[0]


def test_text_without_scores_is_refused_in_one_line(tmp_path):
    path = tmp_path / "domain.txt"
    path.write_text("\n".join(corpus(200)), encoding="utf-8")
    texts = get_task("sentence-embedding").aspect("data").load(DataOptions(data=str(path)))
    with pytest.raises(CompressError, match="needs scored sentence pairs"):
        split_scorer(texts, "validation")


def test_bench_scores_every_artifact_against_the_reference(artifacts, pairs):
    from benchmarks.gate_rules import GateInputError
    from compress.tasks.sentence_embedding import scoring

    fp32, int8 = artifacts
    section = scoring.bench_quality(pairs, "validation", fp32, None)
    records = section.score({"fp32": fp32, "int8": int8}, "fp32", batch_size={"fp32": 8, "int8": 16})
    ref, got = records["fp32"], records["int8"]
    assert ref["neighbour_recall"] == 1.0 and ref["agreement"] == pytest.approx(1.0) and "spearman_drop" not in ref
    assert got["n_pairs"] == 40 and got["n_texts"] == len(section.texts) == len(got["neighbour_recalls"])
    drop = got["spearman_drop"]
    assert drop["low"] <= drop["estimate"] <= drop["high"]
    assert drop["estimate"] == pytest.approx(ref["spearman"] - got["spearman"])
    assert -1 <= got["spearman"] <= 1 and -1 <= got["pearson"] <= 1  # fractions, as the cross-encoder's
    facts = scoring.check_results_data({"data": section.data_record()}, 2, "results.json")
    assert facts == {"texts": len(section.texts), "pairs": 40} and section.data_record()["metric"] == "spearman"
    scoring.check_results_quality(got, facts, 2, "$.artifacts[1].quality", "results.json")
    with pytest.raises(GateInputError, match="neighbour_recalls should be"):
        scoring.check_results_quality({**got, "neighbour_recalls": [2.0]}, facts, 2, "$.artifacts[1].quality",
                                      "results.json")
    lines = scoring.report_quality([{"name": "fp32", "kind": "onnx-fp32", "is_reference": True, "quality": ref},
                                    {"name": "int8", "kind": "onnx-int8", "is_reference": False, "quality": got}], ref)
    assert "neighbour recall@10 [95%]" in lines[0] and "`int8`" in lines[3]
    assert scoring.gate_rules() == {"min_neighbour_recall": "unit_mean", "max_spearman_drop": "f1_drop"}
    assert "use min_neighbour_recall" in scoring.gate_refusal("min_agreement")
    records = scoring.gate_records()
    assert records.mean_units(got).tolist() == got["neighbour_recalls"]
    assert records.f1(got) == pytest.approx(got["spearman"], abs=1e-4)  # the gate's scale: a fraction
    interval = records.drop(records.units(ref), records.units(got), 0.95)
    assert interval.estimate == pytest.approx(drop["estimate"], abs=1e-4)
    assert f"{100 * got['spearman']:.1f}" in lines[3]  # the table shows it x100


def test_the_spearman_drop_interval_is_a_paired_bootstrap_over_pairs():
    from scipy import stats

    from compress.tasks.sentence_embedding.metrics import spearman_drop_interval

    rng = np.random.default_rng(5)
    gold = rng.uniform(0, 5, size=80)
    good, worse = gold + rng.normal(0, 0.5, 80), gold + rng.normal(0, 2.0, 80)
    interval = spearman_drop_interval(good, worse, gold, resamples=500)
    expected = 100 * (stats.spearmanr(good, gold).statistic - stats.spearmanr(worse, gold).statistic)
    assert interval.estimate == pytest.approx(expected)
    assert 0 < interval.low < interval.estimate < interval.high


def test_a_student_of_another_width_has_no_cosine_agreement(artifacts, pairs, tmp_path):
    """384 against 768: bench records the agreement as null (no common space), neighbour recall all the same."""
    from compress.tasks.sentence_embedding import scoring

    fp32, _ = artifacts
    narrow = Predictor.load(onnx_encoder_artifact(make_st_folder(tmp_path / "st", hidden=16, layers=1),
                                                  tmp_path / "narrow", max_length=48), threads=1)
    section = scoring.bench_quality(pairs, "validation", fp32, None)
    got = section.score({"fp32": fp32, "narrow": narrow}, "fp32", batch_size=16)["narrow"]
    assert got["agreement"] is None and got["min_cosine"] is None and 0 <= got["neighbour_recall"] <= 1
    assert "0.0000" not in "\n".join(scoring.report_quality(
        [{"name": "narrow", "kind": "onnx-fp32", "is_reference": False, "quality": got}], got))
