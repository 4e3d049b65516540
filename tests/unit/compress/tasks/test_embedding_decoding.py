"""Predictor.encode of a sentence encoder through the real ONNX runtime, and the decoding aspect's answers."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from compress.core.errors import CompressError
from compress.runtime.predictor import Predictor
from compress.serving.schemas import BadInput
from compress.tasks import get_task
from compress.tasks.protocol import missing_members
from compress.tasks.sentence_embedding import decoding
from compress.tasks.sentence_embedding.long_texts import encode_long
from compress.tasks.sentence_embedding.pooling import encode, load_pooled_encoder
from tests.support.embedding import corpus, make_st_folder, onnx_encoder_artifact


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    root = tmp_path_factory.mktemp("embedding-decoding")
    folder = make_st_folder(root / "st", normalize=True)
    return folder, onnx_encoder_artifact(folder, root / "onnx", max_length=32)


def test_encode_gives_float32_unit_vectors_equal_to_pytorch(encoder):
    folder, artifact = encoder
    predictor = Predictor.load(artifact, threads=1, stride=8)
    assert predictor.task == "sentence-embedding" and predictor.max_length == 32
    texts = corpus(5, seed=7) + [" ".join(corpus(20, seed=8))]  # the last one needs several windows
    vectors = predictor.encode(texts, batch_size=4)
    assert vectors.dtype == np.float32 and vectors.shape == (6, 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    model, tok, _ = load_pooled_encoder(folder)
    np.testing.assert_allclose(vectors[:5], encode(model, tok, texts[:5], max_length=32), atol=1e-5)
    np.testing.assert_allclose(vectors[5], encode_long(model, tok, texts[5:], max_length=32, stride=8)[0], atol=1e-5)
    np.testing.assert_array_equal(predictor.predict(texts, batch_size=4), vectors)
    assert predictor.encode("one text").shape == (1, 32)


def test_settings_of_other_tasks_are_refused(encoder):
    predictor = Predictor.load(encoder[1], threads=1)
    with pytest.raises(CompressError, match="aggregation: settings of another task's predictions"):
        predictor.predict(["a text"], aggregation="simple")


def test_predict_prints_one_json_line_per_text(encoder):
    predictor = Predictor.load(encoder[1], threads=1)
    args = argparse.Namespace(texts=["rain today", "a good match"], question=None, context_file=None, word_tags=False,
                              batch_size=2, model=str(encoder[1]))
    lines = decoding.predict_command(predictor, args, lambda texts: list(texts))
    rows = [json.loads(line) for line in lines]
    assert [r["text"] for r in rows] == ["rain today", "a good match"] and len(rows[0]["embedding"]) == 32


def test_the_server_reads_texts_and_answers_vectors(encoder):
    predictor = Predictor.load(encoder[1], threads=1)
    parsed = decoding.parse_request(["rain", "snow and wind"], {}, {})
    assert parsed.inputs == ["rain", "snow and wind"] and not parsed.single and parsed.length == 13
    raw = decoding.predict_batch(predictor, parsed.key, parsed.inputs, 8)
    answer = decoding.format_results(parsed, raw, predictor.label_names)
    assert len(answer) == 2 and len(answer[0]) == 32 and isinstance(answer[0][0], float)
    one = decoding.parse_request("rain", {}, {})
    assert len(decoding.format_results(one, decoding.predict_batch(predictor, one.key, one.inputs, 8), [])) == 32
    with pytest.raises(BadInput, match=r"inputs\[1\]: must be a string"):
        decoding.parse_request(["rain", 3], {}, {})


def test_windows_of_a_model_that_does_not_normalise_stay_unnormalised():
    from compress.core.windows import Windows

    rows = [np.array([3.0, 0.0]), np.array([0.0, 1.0])]
    windows = Windows(input_ids=[[1, 2, 3], [4]], token_type_ids=[[0] * 3, [0]], attention_mask=[[1] * 3, [1]],
                      offsets=[[], []], word_ids=[[], []], sample=np.array([0, 0]), segment=np.zeros((2, 2), int),
                      start=np.zeros(2, int), doc_lengths=np.array([4]), max_length=8, stride=0, pair=False)
    np.testing.assert_allclose(decoding.combine_windows(windows, rows, "mean")[0], [2.25, 0.25])
    unit = [np.array([1.0, 0.0]), np.array([0.0, 1.0])]
    got = decoding.combine_windows(windows, unit, "mean")[0]
    np.testing.assert_allclose(got, np.array([0.75, 0.25]) / np.hypot(0.75, 0.25), rtol=1e-6)


def test_the_task_has_every_decoding_member():
    assert missing_members(get_task("sentence-embedding"), "decoding") == []
