"""Sliding windows in a tagger's training rows, scoring and soft labels (nothing cut at ``max_length``).

A sentence three times the window is tokenized into overlapping rows; every word must be labelled at
its first sub-token of the *sentence* (a window that begins inside a word labels nothing there), and
read back from exactly one row: the one where its first sub-token has the most context, the rule
``Predictor`` uses. The logits fed back are built from the row's own tokens, so a wrong position, a
continuation sub-token or a word read twice shows as a wrong number, not only as a wrong count.
"""

from __future__ import annotations

import numpy as np
import pytest

from compress.tasks.token_classification.alignment import IGNORE_INDEX
from compress.tasks.token_classification.words import sentence_word_logits, tokenize_tagged_split, word_tags
from compress.core.windows import encode_windows, max_context_windows

#: Words of several sub-tokens ("gurez" is gu ##rez in the test vocabulary) among one-token ones.
WORDS = ("Gurez", "is", "a", "town", "in", "Kashmir", "and", "the", "river", "flows", "past", "Gurez")


def _sentences():
    long = [WORDS[i % len(WORDS)] for i in range(60)]  # about 3x a 24-token window
    return [long, ["the", "town"], long[:7]]


def _split(sentences):
    from datasets import Dataset

    tags = [[(i % 3) for i in range(len(s))] for s in sentences]
    return Dataset.from_dict({"tokens": sentences, "tags": tags}), tags


def test_a_long_sentence_is_windowed_and_every_word_labelled_once_per_window_at_its_first_subtoken(tokenizer, capsys):
    sentences = _sentences()
    ds, tags = _split(sentences)
    rows = tokenize_tagged_split(ds, tokenizer, 24, stride=6)
    assert "1 of 3 sentences are longer than 24 tokens" in capsys.readouterr().err
    samples = rows["sample"]
    assert samples.count(0) >= 3 and samples.count(1) == samples.count(2) == 1
    assert all(len(ids) <= 24 for ids in rows["input_ids"])
    whole = tokenizer(sentences[0], is_split_into_words=True)
    firsts = {}
    for p, w in enumerate(whole.word_ids()):
        if w is not None:
            firsts.setdefault(w, whole["input_ids"][p])
    labelled: dict[int, int] = {}
    for r in np.flatnonzero(np.asarray(samples) == 0):
        ids, labels, words = rows[int(r)]["input_ids"], rows[int(r)]["labels"], rows[int(r)]["word_ids"]
        for p, label in enumerate(labels):
            if label == IGNORE_INDEX:
                continue
            word = words[p]
            assert ids[p] == firsts[word], "a label off the word's first sub-token"
            assert label == tags[0][word]
            labelled[word] = labelled.get(word, 0) + 1
        # a continuation sub-token at the start of a window carries no label
        pieces = tokenizer.convert_ids_to_tokens(ids)
        assert all(labels[p] == IGNORE_INDEX for p, piece in enumerate(pieces) if piece.startswith("##"))
    assert sorted(labelled) == list(range(len(sentences[0])))
    assert max(labelled.values()) == 2  # the overlaps: a word there is a training example in both windows


def test_each_word_is_read_from_the_window_with_most_context(tokenizer):
    sentences = _sentences()
    ds, _ = _split(sentences)
    rows = tokenize_tagged_split(ds, tokenizer, 24, stride=6)
    # fake logits: each position's row holds (its token id, its row number), so what is read back says where from
    logits = [np.stack([np.asarray(ids, dtype=np.float64), np.full(len(ids), r, dtype=np.float64)], axis=1)
              for r, ids in enumerate(rows["input_ids"])]
    merged = sentence_word_logits(logits, rows)
    assert [len(m[0]) for m in merged] == [len(s) for s in sentences] and all(m[1].all() for m in merged)

    windows = encode_windows(tokenizer, [sentences[0]], max_length=24, stride=6, words=True)
    chosen = max_context_windows(windows.spans(0), int(windows.doc_lengths[0]))
    doc_words = windows.document_word_ids(0)
    whole = tokenizer(sentences[0], is_split_into_words=True)["input_ids"][1:-1]
    for word in range(len(sentences[0])):
        t = doc_words.index(word)  # the word's first sub-token in the sentence's tokens
        token_id, row = merged[0][0][word]
        assert token_id == whole[t] and row == chosen[t], f"word {word}"
    # the short sentences are one row each, read as they are
    assert merged[1][0][:, 1].tolist() == [rows["sample"].index(1)] * 2


def test_word_tags_of_windowed_rows_match_a_window_that_holds_the_sentence_whole(tokenizer):
    """With logits that depend on the token only (no context), the windowed sentence must be tagged
    exactly as the same sentence in one window large enough to hold it."""
    sentences = _sentences()
    ds, _ = _split(sentences)
    names = ["O", "B-LOC", "I-LOC"]

    def tags(max_length: int):
        rows = tokenize_tagged_split(ds, tokenizer, max_length, stride=6)
        logits = [np.stack([np.sin(np.asarray(ids, dtype=float) * k) for k in (1.0, 2.0, 3.0)], axis=1)
                  for ids in rows["input_ids"]]
        return word_tags(logits, rows, names), len(rows)

    windowed, n_windowed = tags(24)
    whole, n_whole = tags(128)
    assert n_windowed > n_whole == len(sentences)
    assert windowed == whole


def test_an_empty_split_and_a_mismatched_logit_count():
    from datasets import Dataset

    from tests.conftest import make_tokenizer

    rows = tokenize_tagged_split(Dataset.from_dict({"tokens": [], "tags": []}), make_tokenizer(), 24)
    assert len(rows) == 0 and sentence_word_logits([], rows) == []
    ds, _ = _split([["the", "town"]])
    one = tokenize_tagged_split(ds, make_tokenizer(), 24)
    with pytest.raises(ValueError, match="2 rows of logits for 1 windows"):
        sentence_word_logits([np.zeros((4, 3))] * 2, one)
