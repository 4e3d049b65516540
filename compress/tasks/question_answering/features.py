"""Extractive QA features: question + passage windows, gold spans as token positions, and n-best decoding.

The conventions are those users know from transformers' ``run_qa.py`` / ``utils_qa.py``:

- **Windows.** The question is the first text, the passage the second; only the passage is cut,
  into windows of ``max_length`` tokens that overlap by ``doc_stride`` tokens (every window
  repeats the whole question). :func:`compress.core.windows.encode_windows` does the cutting (the fast
  tokenizer's own overflow, ``truncation="only_second"``); the question's leading whitespace is
  stripped first, as ``run_qa.py`` does (it only costs tokens).
- **Gold positions** (:func:`answer_positions`). The answer's characters ``[start, end)`` are
  found in a window through the offset mapping: the start token is the last passage token that
  begins at or before ``start``, the end token the first that ends at or after ``end``. A window
  that does not hold the whole answer, and a question without an answer, point both positions
  at index 0 (``[CLS]``, BERT's "no answer here").
- **Decoding** (:func:`decode_spans`). In each window the ``n_best`` highest start logits and
  the ``n_best`` highest end logits are paired; a pair counts when both tokens are passage tokens
  (never the question's or a special token), ``end >= start`` and it spans at most
  ``max_answer_length`` tokens; its score is ``start_logit + end_logit``. The best pair over all
  windows of a question is the answer, mapped back to the passage's characters through the
  offsets. SQuAD 2.0's null score is ``start_logits[0] + end_logits[0]``, the smallest over the
  question's windows (the window most sure there *is* an answer, as ``utils_qa`` takes it); with
  ``allow_null`` the answer is empty when ``null - best > null_threshold``. Decoded once with
  ``null_threshold=math.inf`` (the best span whenever there is one), :func:`apply_null_threshold` gives
  any other threshold's answers without reading the windows again: what choosing it on validation needs.

numpy and a ``tokenizers`` backend only (no torch), so the torch-free runtime can decode too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from compress.core.errors import CompressError
from compress.core.numerics import softmax
from compress.core.windows import Windows, encode_windows

#: The position a window points at when it does not hold the answer (``[CLS]``, the first token).
NULL_INDEX = 0
#: ``utils_qa.postprocess_qa_predictions``'s defaults.
DEFAULT_N_BEST, DEFAULT_MAX_ANSWER_LENGTH, DEFAULT_NULL_THRESHOLD = 20, 30, 0.0
#: Decode with this threshold to keep the best span of every question that has one (the null answer never wins).
NEVER_NULL = math.inf
#: ``run_qa.py``'s defaults (a third of the window overlaps).
DEFAULT_MAX_LENGTH, DEFAULT_DOC_STRIDE = 384, 128


def encode_qa(tokenizer: Any, questions: Sequence[str], contexts: Sequence[str], *, max_length: int,
              doc_stride: int) -> Windows:
    """Question + passage pairs cut into windows; ``windows.sample[w]`` is the question of window ``w``."""
    if len(questions) != len(contexts):
        raise CompressError(f"{len(questions)} questions but {len(contexts)} passages; give one passage per question.")
    return encode_windows(tokenizer, [q.lstrip() for q in questions], list(contexts), max_length=max_length,
                          stride=doc_stride)


def answer_positions(windows: Windows, spans: Sequence[tuple[int, int] | None]) -> tuple[np.ndarray, np.ndarray]:
    """Start and end token positions of each window's gold answer, ``spans[i] = (start char, end char)``
    of question ``i`` (end exclusive; ``None`` for no answer); ``NULL_INDEX`` where the window lacks it."""
    if len(spans) != windows.n_samples:
        raise ValueError(f"{len(spans)} answers for {windows.n_samples} questions")
    starts = np.full(len(windows), NULL_INDEX, dtype=np.int64)
    ends = np.full(len(windows), NULL_INDEX, dtype=np.int64)
    for w in range(len(windows)):
        span = spans[int(windows.sample[w])]
        a, b = (int(x) for x in windows.segment[w])
        if span is None or b <= a:
            continue
        first, last = span
        offsets = windows.offsets[w]
        if not (offsets[a][0] <= first and offsets[b - 1][1] >= last):
            continue  # the answer is not (wholly) in this window
        s = a
        while s + 1 < b and offsets[s + 1][0] <= first:
            s += 1
        e = b - 1
        while e - 1 >= a and offsets[e - 1][1] >= last:
            e -= 1
        starts[w], ends[w] = s, e
    return starts, ends


def first_answer_spans(answers: Sequence[Any]) -> list[tuple[int, int] | None]:
    """``(start, end)`` characters of each question's first gold answer (what training points at), from
    the hub's ``{"text": [...], "answer_start": [...]}``; ``None`` for a question without one."""
    out: list[tuple[int, int] | None] = []
    for a in answers:
        if not a["text"]:
            out.append(None)
        else:
            start = int(a["answer_start"][0])
            out.append((start, start + len(a["text"][0])))
    return out


@dataclass
class QAFeatures:
    """Windows of question + passage pairs and, for training, each window's gold start/end position."""

    windows: Windows
    start_positions: np.ndarray
    end_positions: np.ndarray

    def __len__(self) -> int:
        return len(self.windows)


def qa_features(tokenizer: Any, questions: Sequence[str], contexts: Sequence[str], answers: Sequence[Any], *,
                max_length: int = DEFAULT_MAX_LENGTH, doc_stride: int = DEFAULT_DOC_STRIDE) -> QAFeatures:
    """Training features: windows plus gold positions of each question's first answer."""
    windows = encode_qa(tokenizer, questions, contexts, max_length=max_length, doc_stride=doc_stride)
    starts, ends = answer_positions(windows, first_answer_spans(answers))
    return QAFeatures(windows, starts, ends)


def span_chars(windows: Windows, w: int, start: int, end: int) -> tuple[int, int]:
    """Character ``[start, end)`` in the passage of the token span ``start..end`` (inclusive) of window ``w``."""
    return int(windows.offsets[w][start][0]), int(windows.offsets[w][end][1])


def _top(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest values, largest first (ties: the earlier index first)."""
    order = np.argsort(-x, kind="stable")
    return order[:k]


def _check_decoding(n_best: int, max_answer_length: int) -> None:
    for value, option in ((n_best, "--n-best"), (max_answer_length, "--max-answer-length")):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise CompressError(f"{option} must be a whole number of at least 1, got {value!r}.")


def decode_spans(windows: Windows, start_logits: Sequence[np.ndarray], end_logits: Sequence[np.ndarray],
                 contexts: Sequence[str], *, n_best: int = DEFAULT_N_BEST,
                 max_answer_length: int = DEFAULT_MAX_ANSWER_LENGTH, allow_null: bool = False,
                 null_threshold: float = DEFAULT_NULL_THRESHOLD) -> list[dict[str, Any]]:
    """The answer of every question from its windows' start and end logits (module docstring).

    ``start_logits[w]`` / ``end_logits[w]``: one value per position of window ``w`` (rows of a padded
    batch are fine: positions past the window are never looked at). Per question: ``answer`` (text),
    ``start`` / ``end`` (characters in the passage, ``context[start:end] == answer``; ``0, 0`` for no
    answer), ``score`` (the answer's probability among the n-best, as ``utils_qa`` computes it),
    ``logit`` (start + end logit), ``null_logit``, ``window`` (the answer's window, -1 for the empty answer),
    ``null_score`` (the null answer's probability among the n-best; ``None`` without ``allow_null``) and the
    ``n_best`` list of candidates.
    """
    _check_decoding(n_best, max_answer_length)
    if len(start_logits) != len(windows) or len(end_logits) != len(windows):
        raise ValueError(f"{len(start_logits)} start and {len(end_logits)} end rows for {len(windows)} windows")
    if len(contexts) != windows.n_samples:
        raise ValueError(f"{len(contexts)} passages for {windows.n_samples} questions")
    out = []
    for i in range(windows.n_samples):
        candidates: list[dict[str, Any]] = []
        null = np.inf
        for w in windows.windows_of(i):
            w = int(w)
            n = len(windows.input_ids[w])
            s_log = np.asarray(start_logits[w], dtype=np.float64)[:n]
            e_log = np.asarray(end_logits[w], dtype=np.float64)[:n]
            if len(s_log) < n or len(e_log) < n:
                raise ValueError(f"window {w} has {n} tokens but {len(s_log)} start / {len(e_log)} end logits")
            null = min(null, s_log[NULL_INDEX] + e_log[NULL_INDEX])
            a, b = (int(x) for x in windows.segment[w])
            for s in _top(s_log, n_best):
                if not a <= s < b:
                    continue
                for e in _top(e_log, n_best):
                    if not (a <= e < b and s <= e < s + max_answer_length):
                        continue
                    first, last = span_chars(windows, w, int(s), int(e))
                    candidates.append({"answer": contexts[i][first:last], "start": first, "end": last,
                                       "logit": float(s_log[s] + e_log[e]), "window": w})
        unique: dict[tuple[int, int], dict[str, Any]] = {}
        for c in sorted(candidates, key=lambda c: -c["logit"]):  # a span two windows share: its best reading
            unique.setdefault((c["start"], c["end"]), c)
        candidates = list(unique.values())[:n_best]
        best = candidates[0] if candidates else None
        empty = {"answer": "", "start": 0, "end": 0, "logit": float(null), "window": -1}
        if allow_null:  # utils_qa adds the null candidate to the n-best list, then normalises over all
            candidates = sorted(candidates + [empty], key=lambda c: -c["logit"])
        for c, p in zip(candidates, softmax(np.array([c["logit"] for c in candidates])) if candidates else []):
            c["probability"] = float(p)
        if best is None or (allow_null and float(null) - best["logit"] > null_threshold):
            chosen = empty  # no valid span at all (or the null score wins): the empty answer
        else:
            chosen = best
        out.append({"answer": chosen["answer"], "start": chosen["start"], "end": chosen["end"],
                    "score": chosen.get("probability", 0.0), "logit": chosen["logit"], "null_logit": float(null),
                    "window": chosen["window"], "null_score": empty.get("probability") if allow_null else None,
                    "n_best": candidates})
    return out


def null_margins(decoded: Sequence[dict[str, Any]]) -> np.ndarray:
    """Per question of a :data:`NEVER_NULL` decoding, ``null - best``: the answer is empty at a threshold below it
    (``inf`` where no span was valid: empty at every threshold)."""
    return np.array([np.inf if d["window"] < 0 else d["null_logit"] - d["logit"] for d in decoded], dtype=np.float64)


def apply_null_threshold(decoded: Sequence[dict[str, Any]], null_threshold: float) -> list[dict[str, Any]]:
    """The answers :func:`decode_spans` gives at ``null_threshold``, from its answers at :data:`NEVER_NULL`
    (with ``allow_null``): a question whose ``null - best`` exceeds the threshold gets the empty answer, scored
    with the null answer's probability (``null_score``). Answers decoded without ``allow_null`` have no null
    answer and come back as they are."""
    out = []
    for d, margin in zip(decoded, null_margins(decoded)):
        if d["null_score"] is not None and d["window"] >= 0 and margin > null_threshold:
            d = {**d, "answer": "", "start": 0, "end": 0, "score": d["null_score"], "logit": d["null_logit"],
                 "window": -1}
        out.append(d)
    return out
