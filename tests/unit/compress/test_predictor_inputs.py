"""``Predictor``'s input errors: every malformed input is one CompressError saying what was wrong and
what to give instead, before any model runs; valid inputs of every accepted form still predict.

On a PyTorch artifact and its ONNX export (the serving path), since both share the checks."""

from __future__ import annotations

import numpy as np
import pytest

from compress.core.errors import CompressError
from compress.runtime.predictor import Predictor
from tests.conftest import make_bert


@pytest.fixture(scope="module")
def predictors(tmp_path_factory):
    from compress.stages.export import export_onnx

    root = tmp_path_factory.mktemp("inputs")
    model = make_bert(root / "model", layers=1, head=True, seed=2)
    return {"pytorch": Predictor.load(model), "onnx-fp32": Predictor.load(export_onnx(model, root / "onnx")),
            "folder": model}


KINDS = ["pytorch", "onnx-fp32"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bad, message", [
    ([("a", "b", "c")], r"input 0 is \('a', 'b', 'c'\); a sentence pair is a \(text, pair\) tuple of two strings"),
    ([("a",)], r"input 0 is \('a',\); a sentence pair"),
    ([("a", None)], r"input 0 is \('a', None\); a sentence pair"),
    (["good", ("a", 3)], r"the inputs mix single texts and \(text, pair\) tuples"),
    (["good", ("a", "b")], r"the inputs mix single texts and \(text, pair\) tuples"),
    (["good", 3], r"input 1 is a int, not a string"),
    (["good", None], r"input 1 is a NoneType, not a string"),
    ([b"good"], r"input 0 is a bytes, not a string"),
    (None, r"got a NoneType, not a text or a list of texts"),
    (7, r"got a int, not a text"),
    (b"good", r"got a bytes, .*decode bytes first"),
    ({"text": "good"}, r"got a dict, not a text"),
])
def test_bad_inputs_are_one_clear_error(predictors, kind, bad, message):
    predictor = predictors[kind]
    with pytest.raises(CompressError, match=rf"^predict: {message}"):
        predictor.logits(bad)
    with pytest.raises(CompressError, match=rf"^predict: {message}"):
        predictor.predict(bad)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batch_size", [0, -1, 1.5, "8", True, None])
def test_batch_size_must_be_a_whole_number_of_at_least_one(predictors, kind, batch_size):
    with pytest.raises(CompressError, match=rf"^--batch-size must be a whole number of at least 1, got {batch_size!r}"):
        predictors[kind].logits(["good", "bad"], batch_size=batch_size)
    with pytest.raises(CompressError, match=r"^--batch-size"):
        predictors[kind].predict(["good"], batch_size=batch_size)


@pytest.mark.parametrize("threads", [0, -2, 1.5, "2", False])
def test_threads_must_be_a_whole_number_of_at_least_one(predictors, threads):
    folder = predictors["folder"]
    for target in (folder, predictors["onnx-fp32"].path):
        with pytest.raises(CompressError, match=rf"^--threads must be a whole number of at least 1, got {threads!r}"):
            Predictor.load(target, threads=threads)


@pytest.mark.parametrize("max_length", [0, -5, 129, 10_000, 64.0])
def test_max_length_must_fit_the_position_table(predictors, max_length):
    with pytest.raises(CompressError, match=rf"^--max-length {max_length!r}: .* runs sequences of 1 to 128 tokens"):
        Predictor.load(predictors["folder"], max_length=max_length)


@pytest.mark.parametrize("kind", KINDS)
def test_every_accepted_form_predicts(predictors, kind):
    """One text, one pair, lists and tuples of either, a generator, numpy strings, batch size 1 and above
    the count: the same logits for the same text whatever the form, in the caller's order."""
    predictor = predictors[kind]
    texts = ["a wonderful film", "dull", "the plot was weak and the acting tedious"]
    expected = predictor.logits(texts, batch_size=2)
    assert expected.shape == (3, 2) and np.isfinite(expected).all()
    assert np.allclose(predictor.logits(texts[0]), expected[:1], atol=1e-5)
    assert np.allclose(predictor.logits(tuple(texts)), expected, atol=1e-5)  # three texts, not a pair
    assert np.allclose(predictor.logits(t for t in texts), expected, atol=1e-5)
    assert np.allclose(predictor.logits(np.array(texts)), expected, atol=1e-5)
    assert np.allclose(predictor.logits(texts, batch_size=1), expected, atol=1e-5)
    assert np.allclose(predictor.logits(texts, batch_size=np.int64(100)), expected, atol=1e-5)
    pair = ("a wonderful film", "with a tedious plot")
    one = predictor.logits(pair)
    assert one.shape == (1, 2)
    assert np.allclose(predictor.logits([pair, list(pair)]), np.vstack([one, one]), atol=1e-5)
    assert predictor.logits([]).shape == (0, 2)
    labels, probs = predictor.predict(texts)
    assert labels == [predictor.label_names[i] for i in expected.argmax(-1)] and np.allclose(probs.sum(-1), 1)


@pytest.mark.parametrize("kind", KINDS)
def test_a_readers_span_settings_on_a_classifier_are_one_clear_error(predictors, kind):
    with pytest.raises(CompressError, match=r"^max_answer_length, n_best: span-search settings of a question-answering"):
        predictors[kind].predict(["good"], n_best=3, max_answer_length=10)
