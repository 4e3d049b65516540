"""Scoring a sentence encoder on one split of scored pairs: STS Spearman, and an INT8 copy's vectors against fp32."""

from __future__ import annotations

import pytest

from compress.config import DataOptions
from compress.errors import CompressError
from compress.quality import split_scorer
from compress.runtime import Predictor
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
    got = scorer.metrics((a, b))
    assert got == sts_scores(a, b, pairs.scores("validation"))


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
    assert scorer.failures(record, max_drop=100.0) == []


def test_text_without_scores_is_refused_in_one_line(tmp_path):
    path = tmp_path / "domain.txt"
    path.write_text("\n".join(corpus(200)), encoding="utf-8")
    texts = get_task("sentence-embedding").aspect("data").load(DataOptions(data=str(path)))
    with pytest.raises(CompressError, match="needs scored sentence pairs"):
        split_scorer(texts, "validation")
