"""Token classification on the training side: words to aligned token labels, batches, word-level scoring.

What a tagger stage (the teacher today) needs beyond what a sentence classifier needs:

- :func:`tokenize_tagged_split`: each sentence's words tokenized as pre-split words
  (``is_split_into_words``) into windows of ``max_length`` tokens (:mod:`compress.core.windows`: a
  sentence that fits is one row, a longer one several that overlap by ``stride`` tokens), each
  word's tag on its **first** sub-token and ``-100`` on the rest and on special tokens
  (:mod:`compress.tasks.token_classification.alignment`), as a ``datasets.Dataset`` with the ``word_ids``, the sentence
  (``sample``) and, per word, the position it is read from (``read_at``) kept;
- :func:`token_collator`: ``DataCollatorForTokenClassification`` (labels padded with ``-100``)
  fed only the model's columns;
- :func:`sentence_word_logits` / :func:`word_tags` / :func:`evaluate_tagger`: the model's per-token
  logits read per word (first sub-token, the same rule as the labels; a long sentence's word from
  the window where it has the most context, as :class:`compress.runtime.predictor.Predictor` reads it) and
  scored with entity-level F1 (:mod:`compress.tasks.token_classification.metrics`, seqeval's default rules) through
  the registry's task;
- :func:`entity_f1_callback`: a Trainer callback that scores validation after every epoch, so the
  training log shows entity F1, not only the loss.

Nothing is cut: a sentence longer than ``max_length`` tokens is trained on in every window (a word in
two windows' overlap is a training example in both, as transformers' QA examples train on
overlapping windows) and read back, for scoring and soft labels, from one window per word.
Imports transformers and datasets only inside the functions that need them.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

import numpy as np

from compress.tasks.token_classification.alignment import IGNORE_INDEX
from compress.core.windows import Windows, encode_windows, max_context_windows, window_stride
from compress.tasks.tables import DynamicPaddingCollator
from compress.runtime.modeling import accepts_token_types, autocast, model_device
from compress.stages.training import epoch_validation_callback
from compress.core.progress import progress as show_progress

#: Columns a token-classification model takes (``token_type_ids`` only when the tokenizer makes them).
MODEL_COLUMNS = ("input_ids", "attention_mask", "token_type_ids")
NO_WORD = -1


def window_rows(windows: Windows, tags: Sequence[Sequence[int]], n_words: Sequence[int]) -> dict[str, list]:
    """The training rows of windowed sentences: per window its ``word_ids`` (``-1`` off the words),
    ``labels`` (each word's tag at its first sub-token of the *sentence*, so a window that begins
    inside a word does not label that word's continuation), ``sample`` (its sentence) and
    ``read_at``: for each word of the sentence, the position in this window it is read from, or -1
    when another window gives it more context (:func:`compress.core.windows.max_context_windows`) or it
    has no token at all. Every word with a token is read from exactly one window of its sentence."""
    out: dict[str, list] = {"input_ids": [], "attention_mask": [], "token_type_ids": [], "labels": [], "word_ids": [],
                            "sample": [], "n_words": [], "read_at": []}
    for i in range(windows.n_samples):
        rows = windows.windows_of(i)
        chosen = max_context_windows(windows.spans(i), int(windows.doc_lengths[i]))
        first_token: dict[int, int] = {}  # word -> its first sub-token's index in the sentence's tokens
        for k, w in enumerate(rows):
            a = int(windows.segment[w, 0])
            for p, word in enumerate(windows.word_ids[w]):
                if word is not None:
                    first_token.setdefault(int(word), int(windows.start[w]) + p - a)
        for k, w in enumerate(rows):
            a, start = int(windows.segment[w, 0]), int(windows.start[w])
            ids = [NO_WORD if word is None else int(word) for word in windows.word_ids[w]]
            labels = [IGNORE_INDEX] * len(ids)
            read_at = [-1] * int(n_words[i])
            for p, word in enumerate(ids):
                t = start + p - a
                if word >= 0 and first_token[word] == t:
                    labels[p] = int(tags[i][word])
                    if chosen[t] == k:
                        read_at[word] = p
            out["input_ids"].append(windows.input_ids[w])
            out["attention_mask"].append(windows.attention_mask[w])
            out["token_type_ids"].append(windows.token_type_ids[w])
            out["labels"].append(labels)
            out["word_ids"].append(ids)
            out["sample"].append(i)
            out["n_words"].append(int(n_words[i]))
            out["read_at"].append(read_at)
    return out


def tokenize_tagged_split(ds, tokenizer, max_length: int, with_length: bool = False, what: str = "teacher",
                          stride: int | None = None):
    """A split of a :class:`compress.tasks.token_classification.data.TokenTaskData` (``tokens``, ``tags``) tokenized into
    windows and aligned (:func:`window_rows`): ``input_ids``, ``attention_mask`` (``token_type_ids``),
    ``labels``, ``word_ids``, ``sample``, ``n_words``, ``read_at`` (and ``length`` for length-grouped
    batches). ``stride`` defaults to :func:`compress.core.windows.default_stride` of ``max_length``."""
    from datasets import Dataset

    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, int) and 0 < limit < max_length:
        print(f"warning: --max-length {max_length} exceeds the {what} tokenizer's limit {limit}; using {limit}",
              file=sys.stderr)
        max_length = limit
    stride = window_stride(stride, max_length)
    sentences = [list(words) for words in ds["tokens"]]
    windows = encode_windows(tokenizer, sentences, max_length=max_length, stride=stride, words=True)
    columns = window_rows(windows, ds["tags"], [len(words) for words in sentences])
    if "token_type_ids" not in getattr(tokenizer, "model_input_names", MODEL_COLUMNS):
        del columns["token_type_ids"]
    if with_length:
        columns["length"] = [len(ids) for ids in columns["input_ids"]]
    long = int(np.count_nonzero(np.bincount(windows.sample, minlength=len(sentences)) > 1)) if len(sentences) else 0
    if long:
        print(f"note: {long} of {len(sentences)} sentences are longer than {max_length} tokens for the {what} "
              f"tokenizer; each is read in windows overlapping by {stride} tokens ({len(windows)} rows in all).",
              file=sys.stderr)
    return Dataset.from_dict(columns)


def token_collator(tokenizer):
    """Pads the model's columns with the tokenizer and the labels with ``-100``; other columns are dropped."""
    from transformers import DataCollatorForTokenClassification

    inner = DataCollatorForTokenClassification(tokenizer, label_pad_token_id=IGNORE_INDEX, return_tensors="pt")

    def collate(features: list[dict[str, Any]]) -> dict[str, Any]:
        keep = (*MODEL_COLUMNS, "labels")
        return inner([{k: v for k, v in f.items() if k in keep} for f in features])

    return collate


def token_logits(model, tokenized, batch_size: int = 64, precision: str = "fp32", pad_id: int = 0) -> list[np.ndarray]:
    """Per-token logits ``(tokens, labels)`` of every row, padding trimmed, in the dataset's order.

    Rows run longest first in batches padded to their own length, as
    :func:`compress.runtime.modeling.predict_logits` runs a classifier."""
    import torch

    ids = tokenized["input_ids"]
    order = np.argsort([-len(x) for x in ids], kind="stable")
    cols = [c for c in MODEL_COLUMNS if c in tokenized.column_names]
    subset = tokenized.select_columns(cols)
    collate = DynamicPaddingCollator({"": pad_id})
    out: list[np.ndarray] = [np.zeros(0)] * len(ids)
    model.eval()
    types = accepts_token_types(model)
    device = model_device(model)
    with torch.inference_mode(), autocast(precision, device):
        for start in show_progress(range(0, len(order), batch_size), "tagging", unit="batches"):
            idx = order[start:start + batch_size]
            batch = collate([subset[int(i)] for i in idx])
            inputs = {k: v.to(device) for k, v in batch.items() if types or k != "token_type_ids"}
            logits = model(**inputs).logits.float().cpu().numpy()
            for row, i in enumerate(idx):
                out[int(i)] = logits[row, :len(ids[int(i)])]
    return out


def sentence_word_logits(logits: Sequence[np.ndarray], tokenized) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per sentence, ``(logits, present)``: each word's first-sub-token logit row ``(words, labels)``
    taken from the window :func:`window_rows` reads it from, and which words had a token at all.

    ``logits`` are the per-token logits of every row of ``tokenized`` (:func:`token_logits`)."""
    samples, read_at, n_words = tokenized["sample"], tokenized["read_at"], tokenized["n_words"]
    if len(logits) != len(samples):
        raise ValueError(f"{len(logits)} rows of logits for {len(samples)} windows")
    n = max(samples) + 1 if len(samples) else 0
    width = next((np.asarray(x).shape[-1] for x in logits), 0)
    out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * n
    for rows, sample, read, words in zip(logits, samples, read_at, n_words):
        if out[sample] is None:
            out[sample] = (np.zeros((words, width), dtype=np.asarray(rows).dtype), np.zeros(words, dtype=bool))
        per_word, present = out[sample]
        read = np.asarray(read, dtype=np.int64)
        has = read >= 0
        per_word[has] = np.asarray(rows)[read[has]]
        present |= has
    return [x if x is not None else (np.zeros((0, width)), np.zeros(0, dtype=bool)) for x in out]


def word_tags(logits: Sequence[np.ndarray], tokenized, label_names: Sequence[str]) -> list[list[str]]:
    """Each sentence's word tags: the argmax of each word's first sub-token logits
    (:func:`sentence_word_logits`); ``O`` for a word the tokenizer gave no token."""
    return [[label_names[int(b)] if p else "O" for b, p in zip(per_word.argmax(-1), present)]
            for per_word, present in sentence_word_logits(logits, tokenized)]


def evaluate_tagger(model, tokenized, gold: Sequence[Sequence[str]], label_names: Sequence[str],
                    batch_size: int = 64, precision: str = "fp32", pad_id: int = 0) -> dict[str, Any]:
    """Entity P/R/F1, per-type F1 and token accuracy of the model's word tags on a tokenized split."""
    return score_token_logits(token_logits(model, tokenized, batch_size, precision, pad_id), tokenized, gold,
                              label_names)


def score_token_logits(logits: Sequence[np.ndarray], tokenized, gold: Sequence[Sequence[str]],
                       label_names: Sequence[str]) -> dict[str, Any]:
    """:func:`evaluate_tagger` from per-token logits already computed (:func:`token_logits`)."""
    from compress.tasks import get_task

    predicted = word_tags(logits, tokenized, label_names)
    return get_task("token-classification").score(predicted, gold)


def word_tag_check(logits: Sequence[np.ndarray], tokenized, gold: Sequence[Sequence[str]],
                   label_names: Sequence[str]):
    """Is a tagger's head better than one that ignores its input? Its word tags' accuracy against always
    answering the commonest tag (:func:`compress.core.head_check.check_predictions`). A random head scores well
    below that (it spreads words over every tag) while still finding a few entities by luck, so entity F1
    alone cannot tell it from a trained one."""
    from compress.core.head_check import check_predictions

    index = {name: i for i, name in enumerate(label_names)}
    predicted = word_tags(logits, tokenized, label_names)
    pred = [index[t] for sentence in predicted for t in sentence]
    labels = [index.get(t, -1) for sentence in gold for t in sentence]
    keep = [i for i, label in enumerate(labels) if label >= 0]
    return check_predictions(np.asarray(pred)[keep] if keep else np.zeros(0), np.asarray(labels)[keep] if keep
                             else np.zeros(0), len(label_names), measure="word-tag accuracy")


def tagger_chance_check(logits: Sequence[np.ndarray], tokenized, gold: Sequence[Sequence[str]],
                        label_names: Sequence[str]):
    """The verdict distill refuses a tagger teacher on: :func:`compress.core.head_check.check_tagger` when it finds no
    entity (it collapsed into ``O``), else :func:`word_tag_check` (a random head finds a few by luck)."""
    from compress.core.head_check import check_tagger
    from compress.tasks import get_task

    entities = check_tagger(get_task("token-classification").score(word_tags(logits, tokenized, label_names), gold))
    return entities if entities.untrained else word_tag_check(logits, tokenized, gold, label_names)


def entity_f1_callback(tokenized, gold: Sequence[Sequence[str]], label_names: Sequence[str], pad_id: int = 0,
                       precision: str = "fp32", tagger: Any = None, keep_best: bool = False):
    """A Trainer callback: after every epoch, validation entity F1 in the log history and on stdout (and a
    warning at the end when the last epoch still lifted it a lot, :func:`compress.stages.training.still_learning`).
    ``tagger``: the model to score when the Trainer trains a wrapper around it (a student with projections);
    ``keep_best``: training ends with the weights of the epoch with the best entity F1
    (:func:`compress.stages.training.epoch_validation_callback`)."""

    def evaluate(model, batch_size: int) -> dict[str, float]:
        scores = evaluate_tagger(tagger if tagger is not None else model, tokenized, gold, label_names, batch_size,
                                 precision, pad_id)
        return {"validation_entity_f1": scores["entity_f1"], "validation_token_accuracy": scores["token_accuracy"]}

    return epoch_validation_callback(evaluate, lambda v: f"validation entity F1 {v['validation_entity_f1']:.4f} "
                                                         f"(token accuracy {v['validation_token_accuracy']:.4f})",
                                     keep_best, tagger)
