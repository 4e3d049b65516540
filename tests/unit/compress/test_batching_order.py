"""Predictor's batching: texts are sorted by length, padded per batch, and every output goes back to its input.

A batching bug is silent: a label lands on the wrong sentence, or padding leaks into a score, and
every number still looks plausible. The expected answers here are the model run on one text at a
time (no padding, no reordering), and the arrays a hand-written padding of the token ids gives.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compress.core.errors import CompressError
from compress.core.numerics import softmax
from compress.runtime.predictor import Predictor, encode_batches, normalize_texts

TEXTS = ["good", "a really wonderful and moving film with a superb cast", "bad plot", "the movie",
         "the story was quite dull and the acting was weak", "funny", "a charming film", "tedious"]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> Path:
    from conftest import make_bert

    folder = make_bert(tmp_path_factory.mktemp("batching") / "clf", layers=1, head=True, num_labels=3, seed=3)
    import json

    config = json.loads((folder / "config.json").read_text())
    config["id2label"] = {"0": "neg", "1": "neu", "2": "pos"}
    config["label2id"] = {"neg": 0, "neu": 1, "pos": 2}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _one_at_a_time(folder: Path, texts, pairs=None) -> np.ndarray:
    """The model's logits for each text alone: nothing to pad, nothing to reorder."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    rows = []
    with torch.inference_mode():
        for i, text in enumerate(texts):
            enc = tok(text, pairs[i], return_tensors="pt") if pairs else tok(text, return_tensors="pt")
            rows.append(model(**enc).logits[0].numpy())
    return np.stack(rows)


# ----------------------------------------------------------------------------- encode_batches


def test_batches_are_sorted_by_length_and_padded_to_their_own_longest_row(tokenizer):
    ids = tokenizer(TEXTS)["input_ids"]
    n, batches = encode_batches(tokenizer, TEXTS, max_length=128, batch_size=3, need_token_types=False)
    assert n == len(TEXTS) and [len(idx) for idx, _ in batches] == [3, 3, 2]
    order = np.concatenate([idx for idx, _ in batches])
    assert sorted(order.tolist()) == list(range(len(TEXTS)))  # every text once
    lengths = [len(ids[i]) for i in order]
    assert lengths == sorted(lengths, reverse=True)  # longest first, across and within batches
    for idx, arrays in batches:
        assert set(arrays) == {"input_ids", "attention_mask"}  # no token types unless the model takes them
        width = max(len(ids[i]) for i in idx)
        assert arrays["input_ids"].shape == arrays["attention_mask"].shape == (len(idx), width)
        assert arrays["input_ids"].dtype == arrays["attention_mask"].dtype == np.int64
        for row, i in enumerate(idx):
            k = len(ids[i])
            assert arrays["input_ids"][row, :k].tolist() == ids[i]
            assert (arrays["input_ids"][row, k:] == tokenizer.pad_token_id).all()
            assert arrays["attention_mask"][row].tolist() == [1] * k + [0] * (width - k)


def test_equal_lengths_keep_the_input_order(tokenizer):
    texts = ["good", "bad", "dull", "funny", "a charming film"]
    _, batches = encode_batches(tokenizer, texts, max_length=128, batch_size=2, need_token_types=False)
    assert [i for idx, _ in batches for i in idx.tolist()] == [4, 0, 1, 2, 3]  # a stable sort


def test_pairs_get_their_token_types_and_the_second_text(tokenizer):
    pairs = [("good", "a really wonderful film"), ("the plot", "bad")]
    n, batches = encode_batches(tokenizer, pairs, max_length=128, batch_size=8, need_token_types=True)
    (idx, arrays), = batches
    enc = tokenizer(["good", "the plot"], ["a really wonderful film", "bad"])
    for row, i in enumerate(idx):
        k = len(enc["input_ids"][i])
        assert arrays["input_ids"][row, :k].tolist() == enc["input_ids"][i]
        assert arrays["token_type_ids"][row, :k].tolist() == enc["token_type_ids"][i]
        assert (arrays["token_type_ids"][row, k:] == 0).all()
    assert n == 2 and arrays["token_type_ids"].max() == 1


def test_long_texts_are_cut_at_max_length_and_empty_input_is_no_batch(tokenizer):
    long = " ".join(["good"] * 50)
    _, batches = encode_batches(tokenizer, [long, "bad"], max_length=16, batch_size=4, need_token_types=False)
    assert batches[0][1]["input_ids"].shape == (2, 16)
    assert encode_batches(tokenizer, [], max_length=16, batch_size=4, need_token_types=False) == (0, [])


def test_a_tokenizer_without_a_pad_token_pads_with_zero(tokenizer):
    tokenizer.pad_token = None
    assert tokenizer.pad_token_id is None
    _, batches = encode_batches(tokenizer, ["good", "a wonderful film"], 128, 2, need_token_types=False)
    ids = batches[0][1]["input_ids"]
    assert ids[1, -1] == 0 and ids[0, -1] != 0


@pytest.mark.parametrize("batch_size", [0, -1])
def test_batch_size_below_one_is_refused(tokenizer, batch_size):
    with pytest.raises(CompressError, match="batch-size"):
        encode_batches(tokenizer, TEXTS, 128, batch_size, need_token_types=False)


def test_batch_size_one_is_one_row_per_batch(tokenizer):
    _, batches = encode_batches(tokenizer, TEXTS[:3], 128, 1, need_token_types=False)
    assert [len(idx) for idx, _ in batches] == [1, 1, 1]


def test_normalize_texts_splits_pairs_and_keeps_order():
    assert normalize_texts("one") == (["one"], None)
    assert normalize_texts(("a", "b")) == (["a"], ["b"])  # one pair, not two texts
    assert normalize_texts([("a", "b"), ["c", "d"]]) == (["a", "c"], ["b", "d"])
    assert normalize_texts(["x", "y"]) == (["x", "y"], None)
    assert normalize_texts([]) == ([], None)
    with pytest.raises(CompressError, match="mix"):
        normalize_texts(["x", ("a", "b")])
    with pytest.raises(CompressError, match="input 1"):
        normalize_texts([("a", "b"), ("c", "d", "e")])
    with pytest.raises(CompressError, match="input 0 is a int"):
        normalize_texts([3])
    with pytest.raises(CompressError, match=r"got a bytes, not a text .*\(decode bytes first"):
        normalize_texts(b"good")
    for wrong, name in (({"text": "good"}, "dict"), (5, "int")):
        with pytest.raises(CompressError, match=f"got a {name}, not a text or a list of texts; give a") as error:
            normalize_texts(wrong)
        assert "decode" not in str(error.value)


def test_length_sorted_batches_and_pad_rows_on_their_own():
    """The two pieces every batching path shares, called directly: the refusals, no token types given
    (zeros when the model takes them), and no rows at all."""
    from compress.core.windows import length_sorted_batches, pad_rows

    for wrong in (0, True, 2.0):
        with pytest.raises(CompressError, match="batch-size"):
            length_sorted_batches([3, 1], wrong)
    arrays = pad_rows([[5, 6], [7]], None, 9, need_token_types=True)
    assert arrays["input_ids"].tolist() == [[5, 6], [7, 9]] and arrays["token_type_ids"].tolist() == [[0, 0], [0, 0]]
    empty = pad_rows([], None, 0, need_token_types=False)
    assert empty["input_ids"].shape == empty["attention_mask"].shape == (0, 0)


# ----------------------------------------------------------------------------- Predictor


def test_logits_come_back_in_the_input_order_whatever_the_batch_size(classifier):
    expected = _one_at_a_time(classifier, TEXTS)
    predictor = Predictor.load(classifier, threads=1)
    for batch_size in (1, 3, 32):
        got = predictor.logits(TEXTS, batch_size=batch_size)
        assert got.shape == (len(TEXTS), 3) and got.dtype == np.float32
        np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=f"batch_size={batch_size}")
    assert predictor.logits([]).shape == (0, 3) and predictor.logits([]).dtype == np.float32
    np.testing.assert_allclose(predictor.logits(TEXTS[1]), expected[1:2], atol=1e-5)  # one text


def test_pairs_come_back_in_order_with_their_token_types(classifier):
    firsts = ["good", "the story was quite dull", "a film"]
    seconds = ["a really wonderful and moving film", "bad", "the acting was weak and the plot tedious"]
    expected = _one_at_a_time(classifier, firsts, seconds)
    predictor = Predictor.load(classifier, threads=1)
    got = predictor.logits(list(zip(firsts, seconds)), batch_size=2)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_predict_names_the_argmax_label_of_each_input(classifier):
    predictor = Predictor.load(classifier, threads=1)
    logits = _one_at_a_time(classifier, TEXTS)
    labels, probs = predictor.predict(TEXTS, batch_size=3)
    names = ["neg", "neu", "pos"]
    assert labels == [names[i] for i in logits.argmax(-1)]
    np.testing.assert_allclose(probs, softmax(logits), atol=1e-5)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-6)


def test_a_choice_sends_each_batch_to_the_artifact_chosen_for_its_size(classifier, tmp_path):
    """A ``choice`` folder by hand: BERT (takes token types) for batch 1, MPNet (does not) for batch 8.

    Each batch must reach the artifact measured nearest its size on a log scale (2 rows: BERT, 3
    rows: MPNet) with the arrays that artifact takes: a pair's token types kept for BERT (its answer
    depends on them), dropped for MPNet (whose forward names no such argument)."""
    import json
    import shutil

    from conftest import make_mpnet

    folder = tmp_path / "choice"
    shutil.copytree(classifier, folder / "bert")
    make_mpnet(folder / "mpnet", layers=1, head=True, num_labels=3, seed=4)
    (folder / "compress.json").write_text(json.dumps(
        {"complete": True, "kind": "choice", "choice": {"by_batch_size": {"8": "mpnet", "1": "bert"}}}))
    choice = Predictor.load(folder, threads=1)
    bert, mpnet = Predictor.load(folder / "bert", threads=1), Predictor.load(folder / "mpnet", threads=1)
    assert choice.kind == "choice" and choice.need_token_types  # tokenized as the first (smallest batch) one
    assert choice.for_batch_size(1).kind == choice.for_batch_size(2).kind == "pytorch"
    assert choice.for_batch_size(2) is choice.for_batch_size(1) is not choice.for_batch_size(3)
    pairs = [("good", "a really wonderful film"), ("the plot", "bad"), ("a charming film", "the acting was weak")]
    for rows, alone in ((1, bert), (2, bert), (3, mpnet)):
        _, ((_, arrays),) = encode_batches(choice.tokenizer, pairs[:rows], 128, 8, need_token_types=True)
        assert arrays["token_type_ids"].max() == 1  # the pair's second text: BERT's answer depends on it
        taken = arrays if alone.need_token_types else {k: v for k, v in arrays.items() if k != "token_type_ids"}
        np.testing.assert_allclose(choice.forward(arrays), alone.forward(taken), atol=1e-6, err_msg=f"{rows} rows")
    assert not np.allclose(bert.forward(arrays), mpnet.forward(taken), atol=1e-3)  # the two answer differently


def test_window_batches_pad_with_the_models_pad_token_else_zero(classifier):
    """The padding id is the tokenizer's own (here moved off 0, so a hard-coded 0 shows), else 0."""
    predictor = Predictor.load(classifier, threads=1)
    predictor.tokenizer.pad_token = "[MASK]"
    mask_id = predictor.tokenizer.pad_token_id
    assert mask_id not in (None, 0, 1)
    windows = predictor.windows(["good", "a really wonderful and moving film"])
    (idx, arrays), = predictor.window_batches(windows, 2)
    assert idx.tolist() == [1, 0] and arrays["input_ids"][1, -1] == mask_id
    assert arrays["attention_mask"][1].tolist() == [1] * len(windows.input_ids[0]) + [0] * (
        len(windows.input_ids[1]) - len(windows.input_ids[0]))
    predictor.tokenizer.pad_token = None
    (_, arrays), = predictor.window_batches(windows, 2)
    assert arrays["input_ids"][1, -1] == 0


def test_a_tagger_gets_each_windows_token_rows_trimmed_of_padding(tmp_path):
    """For a head on every token, each window's output is its own tokens' rows (the batch's padding cut
    off), in window order; ``predict`` answers with one tagging result per text, its options passed on."""
    import torch
    from transformers import BertConfig, BertForTokenClassification

    from conftest import make_tokenizer

    torch.manual_seed(5)
    tags = ["O", "B-PER", "I-PER"]
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128, num_labels=3,
                        id2label=dict(enumerate(tags)), label2id={t: i for i, t in enumerate(tags)},
                        architectures=["BertForTokenClassification"])
    model = BertForTokenClassification(config).eval()
    folder = tmp_path / "tagger"
    model.save_pretrained(folder)
    make_tokenizer().save_pretrained(folder)
    predictor = Predictor.load(folder, threads=1)
    assert predictor.task == "token-classification"
    windows = predictor.windows(TEXTS)
    got = predictor.run_windows(windows, batch_size=3)
    with torch.inference_mode():
        for w, ids in enumerate(windows.input_ids):  # one window at a time: no padding, no reordering
            expected = model(input_ids=torch.tensor([ids]),
                             token_type_ids=torch.tensor([windows.token_type_ids[w]])).logits[0].numpy()
            assert got[w].shape == expected.shape == (len(ids), 3)
            np.testing.assert_allclose(got[w], expected, atol=1e-5, err_msg=f"window {w}")
    results = predictor.predict(TEXTS[:3], batch_size=2, aggregation="max", word_tags=True)
    assert [r["text"] for r in results] == TEXTS[:3]
    assert [len(r["word_tags"]) for r in results] == [len(t.split()) for t in TEXTS[:3]]
    with pytest.raises(CompressError, match="aggregation"):
        predictor.predict(TEXTS[:1], aggregation="mean-ish")
    default = predictor.predict(TEXTS[:2])  # first sub-token, no per-word lists unless asked
    assert default == predictor.predict(TEXTS[:2], aggregation="first", word_tags=False)
    assert [sorted(r) for r in default] == [["entities", "text"]] * 2


def test_more_labels_than_a_short_texts_tokens_keep_every_logit(tmp_path):
    """A classifier's output row is one logit per label, never cut to the window's token count (a
    3-token text, 5 labels), and ``max`` pooling set on the predictor is the pooling used."""
    from conftest import make_bert

    folder = make_bert(tmp_path / "five", layers=1, head=True, num_labels=5, seed=1)
    expected = _one_at_a_time(folder, ["good", "bad plot"])
    predictor = Predictor.load(folder, threads=1)
    np.testing.assert_allclose(predictor.logits(["good", "bad plot"]), expected, atol=1e-5)
    long = " ".join(TEXTS * 6)  # past max_length: several windows, pooled
    predictor.set_windows(stride=8)
    windows = predictor.windows([long])
    assert len(windows) > 1
    rows = np.stack(predictor.run_windows(windows))
    np.testing.assert_allclose(predictor.set_windows(8, "max").logits([long]), rows.max(0, keepdims=True), atol=1e-6)
    np.testing.assert_allclose(predictor.set_windows(8, "mean").logits([long]), rows.mean(0, keepdims=True),
                               atol=1e-5)
