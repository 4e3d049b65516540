"""Sequence classification of texts longer than the model's window: one training row per window.

A classifier reads at most ``max_length`` tokens. :class:`compress.runtime.predictor.Predictor` already reads a
longer text in overlapping windows and pools their logits (:mod:`compress.core.windows`); the stages that
train and score a classifier (teacher, distill, prune) read it the same way through
:func:`window_texts`: each text past the window becomes one row per window, holding the text of
that window and every other column of its text (the label, gold probabilities), and the logits of a
text's rows are pooled back into one (:meth:`TextWindows.pool`) before anything is scored. A text
that fits stays one row, unchanged, so a split of short sentences is passed through as it is.

Why rows of text rather than rows of token ids: distillation tokenizes each row twice, once for the
student and once for the teacher, whose tokenizers may differ. Cutting the text, not the ids, lets
both read exactly the same words of a window, so the teacher's soft label for a row is its opinion
of the very passage the student is trained on. The windows are cut by the tokenizer the rows are
for (the student's in distillation) and a window's text starts and ends on whole words: a word the
window's edge splits is left to the neighbouring window when that one holds it whole in the overlap.
The text keeps the whitespace before its first word, so a byte-level BPE tokenizer (RoBERTa's) spells
that word as it did inside the text and the row re-tokenizes to the window's own tokens.

Training on every window of a long text with the text's label is the usual recipe for long-document
classification (each window a noisy view of the document's label); scoring pools like serving does,
so a teacher's and a student's recorded accuracy is what ``Predictor`` gives on the same texts.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from compress.core.errors import CompressError
from compress.core.windows import DEFAULT_POOLING, Windows, backend_of, encode_windows, pool_windows, window_stride


@dataclass
class TextWindows:
    """A split whose texts past the window are replaced by one row per window (``rows``).

    ``sample[r]`` is the index, in the original split, of the text row ``r`` comes from (rows of one
    text are consecutive and in reading order); ``n_texts`` the split's length.
    """

    rows: Any
    sample: np.ndarray
    n_texts: int

    @property
    def split_texts(self) -> int:
        """How many texts were read as more than one window."""
        return int((np.bincount(self.sample, minlength=self.n_texts) > 1).sum())

    def pool(self, logits: np.ndarray, pooling: str = DEFAULT_POOLING) -> np.ndarray:
        """One logit row per text from its rows' logits (``mean`` or ``max``); a split with no long text is
        returned as it is."""
        logits = np.asarray(logits)
        if len(logits) == self.n_texts and len(self.sample) == self.n_texts:
            return logits
        return pool_windows(logits, self.sample, self.n_texts, pooling)


def window_texts(split: Any, tokenizer: Any, max_length: int, is_pair: bool, stride: int | None = None,
                 what: str = "model") -> TextWindows:
    """``split`` (a ``datasets.Dataset`` with ``text``, and ``text_pair`` when ``is_pair``) with every text
    longer than ``max_length`` tokens of ``tokenizer`` replaced by the text of each of its windows.

    Windows overlap by ``stride`` tokens (``--stride``; default :func:`compress.core.windows.default_stride`, of
    ``max_length`` lowered to the tokenizer's limit where it is above it, as tokenization does); for a pair
    only the second text is cut, every window repeating the first. A tokenizer without a fast backend cannot
    be windowed: its long texts stay whole and :func:`compress.tasks.tables.tokenize_split` cuts them with its
    warning.
    """
    n = len(split)
    identity = TextWindows(split, np.arange(n, dtype=np.int64), n)
    if n == 0:
        return identity
    limit = getattr(tokenizer, "model_max_length", None)
    if limit and limit < 100_000:  # as compress.tasks.tables.tokenize_split clamps it (and says so)
        max_length = min(max_length, limit)
    column = "text_pair" if is_pair else "text"
    firsts = split["text"][:]
    seconds = split["text_pair"][:] if is_pair else None
    windowed = seconds if is_pair else firsts  # the texts that are cut (a pair's second)
    lengths = [len(ids) for ids in tokenizer(*((firsts, seconds) if is_pair else (firsts,)))["input_ids"]]
    long = [i for i, length in enumerate(lengths) if length > max_length]
    if not long:
        return identity
    try:
        backend_of(tokenizer)
    except CompressError:
        return identity
    stride = window_stride(stride, max_length)
    windows = encode_windows(tokenizer, [firsts[i] for i in long], [seconds[i] for i in long] if is_pair else None,
                             max_length=max_length, stride=stride)
    cut = {i: window_text_spans(windows, k, windowed[i]) for k, i in enumerate(long)}
    order: list[int] = []
    texts: list[str] = []
    for i in range(n):
        pieces = cut.get(i)
        if pieces is None:
            order.append(i)
            texts.append(windowed[i])
        else:
            order.extend([i] * len(pieces))
            texts.extend(pieces)
    # the window texts go in beside the old column before it leaves: a table is never left without columns
    rows = (split.select(order).flatten_indices().add_column(f"{column}__window", texts).remove_columns(column)
            .rename_column(f"{column}__window", column).select_columns(split.column_names))
    print(f"note: {len(long)} of {n} texts are longer than {max_length} tokens for the {what}; each is read in "
          f"windows overlapping by {windows.stride} tokens ({len(rows)} rows in all) and their logits are pooled",
          file=sys.stderr)
    return TextWindows(rows, np.asarray(order, dtype=np.int64), n)


def windows_record(windows: dict[str, TextWindows], max_length: int, stride: int | None,
                   pooling: str) -> dict[str, Any]:
    """What a classifier's ``compress.json`` records of how it read long texts: ``stride`` (``--stride``, else the
    default of ``max_length``) and ``pooling`` at the top level (``Predictor`` serves with them,
    :data:`compress.runtime.predictor.READING_KEYS`), and per split the texts read as several windows and the rows they
    made (``long_texts``, only where there were any)."""
    record: dict[str, Any] = {"stride": window_stride(stride, max_length), "pooling": pooling}
    long = {name: {"texts": w.split_texts, "rows": len(w.rows)} for name, w in windows.items() if w.split_texts}
    if long:
        record["long_texts"] = long
    return record


def window_text_spans(windows: Windows, k: int, text: str) -> list[str]:
    """The text of each window of windowed text ``k`` (``text`` itself), from the whitespace before its first word
    to the end of its last one. A word that a window's edge cuts is left out of that window when the
    neighbouring window on that side holds it whole (it does whenever the word has no more tokens than the
    overlap); a word no window holds whole keeps its cut pieces, so every word is read somewhere."""
    offsets = windows.document_offsets(k)
    word_ids = windows.document_word_ids(k)
    first_of, last_of = _word_bounds(word_ids)
    spans = [(begin, begin + length) for begin, length in windows.spans(k)]
    pieces = []
    for w, (begin, end) in enumerate(spans):
        first, last = begin, end - 1
        if first_of[first] < begin and _holds(spans[w - 1], first_of[first], last_of[first]):  # w > 0 here
            first = last_of[first] + 1
        if last_of[last] >= end and _holds(spans[w + 1], first_of[last], last_of[last]):  # w + 1 < len(spans)
            last = first_of[last] - 1
        if first > last:  # nothing whole is left: the window's own tokens
            first, last = begin, end - 1
        start = offsets[first - 1][1] if first > 0 else 0
        pieces.append(text[start:offsets[last][1]])
    return pieces


def _holds(span: tuple[int, int], first: int, last: int) -> bool:
    """Whether the window of token span ``[begin, end)`` holds tokens ``first`` to ``last`` (inclusive)."""
    return span[0] <= first and last < span[1]


def _word_bounds(word_ids: list[int | None]) -> tuple[list[int], list[int]]:
    """For every token, the positions of the first and the last token of its word (itself for a token of none)."""
    n = len(word_ids)
    first_of, last_of = list(range(n)), list(range(n))
    for t in range(1, n):
        if word_ids[t] is not None and word_ids[t] == word_ids[t - 1]:
            first_of[t] = first_of[t - 1]
    for t in range(n - 2, -1, -1):
        if word_ids[t] is not None and word_ids[t] == word_ids[t + 1]:
            last_of[t] = last_of[t + 1]
    return first_of, last_of


__all__ = ["TextWindows", "window_texts", "window_text_spans", "windows_record"]
