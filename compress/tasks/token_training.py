"""Token classification on the training side: words to aligned token labels, batches, word-level scoring.

What a tagger stage (the teacher today) needs beyond what a sentence classifier needs:

- :func:`tokenize_tagged_split`: each sentence's words tokenized as pre-split words
  (``is_split_into_words``), each word's tag on its **first** sub-token and ``-100`` on the rest
  and on special tokens (:mod:`compress.tasks.alignment`), as a ``datasets.Dataset`` with the
  ``word_ids`` kept so predictions can be read back per word;
- :func:`token_collator`: ``DataCollatorForTokenClassification`` (labels padded with ``-100``)
  fed only the model's columns;
- :func:`word_tags` / :func:`evaluate_tagger`: the model's per-token logits read per word (first
  sub-token, the same rule as the labels) and scored with entity-level F1
  (:mod:`compress.tasks.ner_metrics`, seqeval's default rules) through the registry's task;
- :func:`entity_f1_callback`: a Trainer callback that scores validation after every epoch, so the
  training log shows entity F1, not only the loss.

A sentence longer than ``max_length`` tokens is cut there, and its words past the cut are
predicted ``O`` in scoring; the count is printed (windows for training are :mod:`compress.windows`'
concern). Imports transformers and datasets only inside the functions that need them.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

import numpy as np

from compress.errors import CompressError, first_line
from compress.tasks.alignment import IGNORE_INDEX, label_positions, word_logits

#: Columns a token-classification model takes (``token_type_ids`` only when the tokenizer makes them).
MODEL_COLUMNS = ("input_ids", "attention_mask", "token_type_ids")
NO_WORD = -1


def encode_words(tokenizer, sentences: Sequence[Sequence[str]], max_length: int) -> dict[str, list]:
    """Tokenize sentences given as word lists; adds ``word_ids`` (``-1`` for special tokens)."""
    try:
        enc = tokenizer([list(s) for s in sentences], is_split_into_words=True, truncation=True,
                        max_length=max_length)
    except ValueError as exc:  # e.g. a byte-level BPE tokenizer saved without add_prefix_space
        raise CompressError(f"the tokenizer cannot take pre-split words ({first_line(exc, 200)}). For a "
                            "RoBERTa-style tokenizer, save it with add_prefix_space=True "
                            "(AutoTokenizer.from_pretrained(DIR, add_prefix_space=True).save_pretrained(DIR)).") from exc
    out = {k: list(v) for k, v in enc.items() if k in MODEL_COLUMNS}
    out["word_ids"] = [[NO_WORD if w is None else int(w) for w in enc.word_ids(i)] for i in range(len(sentences))]
    return out


def tokenize_tagged_split(ds, tokenizer, max_length: int, with_length: bool = False, what: str = "teacher"):
    """A split of a :class:`compress.tasks.token_data.TokenTaskData` (``tokens``, ``tags``) tokenized and
    aligned: ``input_ids``, ``attention_mask`` (``token_type_ids``), ``labels``, ``word_ids``, ``n_words``
    (and ``length`` for length-grouped batches)."""
    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, int) and 0 < limit < max_length:
        print(f"warning: --max-length {max_length} exceeds the {what} tokenizer's limit {limit}; using {limit}",
              file=sys.stderr)
        max_length = limit

    def encode(batch: dict[str, list]) -> dict[str, list]:
        out = encode_words(tokenizer, batch["tokens"], max_length)
        out["labels"] = [label_positions([None if w == NO_WORD else w for w in ids], tags)
                         for ids, tags in zip(out["word_ids"], batch["tags"])]
        out["n_words"] = [len(t) for t in batch["tokens"]]
        out["cut_words"] = [len(t) - len({w for w in ids if w != NO_WORD}) for ids, t in zip(out["word_ids"],
                                                                                             batch["tokens"])]
        if with_length:
            out["length"] = [len(ids) for ids in out["input_ids"]]
        return out

    tokenized = ds.map(encode, batched=True, desc=f"tokenizing ({what})", load_from_cache_file=False)
    cut = [c for c in tokenized["cut_words"] if c]
    if cut:
        print(f"warning: {len(cut)} of {len(tokenized)} sentences are longer than {max_length} tokens for the {what} "
              f"tokenizer; their last {sum(cut)} words in all get no label in training and are predicted O in "
              "scoring. Raise --max-length to keep them.", file=sys.stderr)
    return tokenized.remove_columns(["cut_words"])


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
    :func:`compress.modeling.predict_logits` runs a classifier."""
    import torch

    from compress.data import DynamicPaddingCollator
    from compress.modeling import accepts_token_types, autocast, model_device

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
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            batch = collate([subset[int(i)] for i in idx])
            inputs = {k: v.to(device) for k, v in batch.items() if types or k != "token_type_ids"}
            logits = model(**inputs).logits.float().cpu().numpy()
            for row, i in enumerate(idx):
                out[int(i)] = logits[row, :len(ids[int(i)])]
    return out


def word_tags(logits: Sequence[np.ndarray], word_ids: Sequence[Sequence[int]], n_words: Sequence[int],
              label_names: Sequence[str]) -> list[list[str]]:
    """Each word's tag: the argmax of its first sub-token's logits; ``O`` for a word cut off by truncation."""
    out = []
    for rows, ids, n in zip(logits, word_ids, n_words):
        per_word, present = word_logits(rows, [None if w == NO_WORD else w for w in ids], n)
        best = per_word.argmax(-1)
        out.append([label_names[int(b)] if p else "O" for b, p in zip(best, present)])
    return out


def evaluate_tagger(model, tokenized, gold: Sequence[Sequence[str]], label_names: Sequence[str],
                    batch_size: int = 64, precision: str = "fp32", pad_id: int = 0) -> dict[str, Any]:
    """Entity P/R/F1, per-type F1 and token accuracy of the model's word tags on a tokenized split."""
    return score_token_logits(token_logits(model, tokenized, batch_size, precision, pad_id), tokenized, gold,
                              label_names)


def score_token_logits(logits: Sequence[np.ndarray], tokenized, gold: Sequence[Sequence[str]],
                       label_names: Sequence[str]) -> dict[str, Any]:
    """:func:`evaluate_tagger` from per-token logits already computed (:func:`token_logits`)."""
    from compress.tasks import get_task

    predicted = word_tags(logits, tokenized["word_ids"], tokenized["n_words"], label_names)
    return get_task("token-classification").score(predicted, gold)


def entity_f1_callback(tokenized, gold: Sequence[Sequence[str]], label_names: Sequence[str], pad_id: int = 0,
                       precision: str = "fp32"):
    """A Trainer callback: after every epoch, validation entity F1 in the log history and on stdout."""
    from transformers import TrainerCallback

    class EntityF1(TrainerCallback):
        def __init__(self) -> None:
            self.history: list[dict[str, float]] = []

        def on_epoch_end(self, args, state, control, model=None, **kwargs):
            if model is None or not state.is_world_process_zero:
                return control
            was_training = model.training
            scores = evaluate_tagger(model, tokenized, gold, label_names, args.per_device_eval_batch_size, precision,
                                     pad_id)
            if was_training:
                model.train()
            entry = {"epoch": round(float(state.epoch or 0), 3), "step": int(state.global_step),
                     "validation_entity_f1": round(scores["entity_f1"], 5),
                     "validation_token_accuracy": round(scores["token_accuracy"], 5)}
            self.history.append(entry)
            state.log_history.append(dict(entry))
            print(f"epoch {entry['epoch']:g}: validation entity F1 {scores['entity_f1']:.4f} "
                  f"(token accuracy {scores['token_accuracy']:.4f})")
            return control

    return EntityF1()
