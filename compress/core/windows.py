"""Inputs longer than the model's window: overlapping windows, and their outputs merged back.

A BERT-family model sees at most ``max_length`` tokens (its position table, and the length it was
trained on). Cutting a longer text there drops what comes after, silently changing the answer, so
a long text is split into windows of ``max_length`` tokens (special tokens included) where two
neighbours share ``stride`` tokens, every window is run like any other input, and the outputs are
merged:

- **per token** (tagging, QA spans): each token's output comes from the window where it has the
  most context, i.e. where it is farthest from that window's edges (:func:`max_context_windows`);
- **per text** (sequence classification of a long document): the windows' logits are pooled,
  ``mean`` (default) or ``max`` (:func:`pool_windows`).

The windows are cut by the fast tokenizer's own overflow support (the ``tokenizers`` backend's
``enable_truncation(max_length, stride=...)`` with its ``overflowing`` encodings: exactly what
transformers' ``tokenizer(..., return_overflowing_tokens=True, stride=S, truncation="only_second")``
returns, as its ``run_qa.py``/``run_ner.py`` examples use it), so the special-token template is the
tokenizer's. For a pair only the second text is windowed and every window repeats the whole first
one (``truncation="only_second"``): the question of a QA pair, the premise of an NLI pair. The
result keeps ``overflow_to_sample_mapping`` (:attr:`Windows.sample`), the character offsets and
word ids of every token, and where each window starts in its text's token sequence, which is what
merging needs; each window's placement is checked against its neighbours (they must share exactly
``stride`` tokens) and their number against :func:`window_starts`, so a tokenizer whose overflow
behaves differently fails loudly, not silently.

Needs numpy and a ``tokenizers.Tokenizer`` backend only (a transformers fast tokenizer, or
:class:`compress.runtime.tokenization.ArtifactTokenizer` on the torch-free serving path); never torch.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from compress.core.errors import CompressError

#: Held while a backend's truncation is set, used and put back: a Predictor serves several threads at once
#: (the load benchmark, a web server's workers), and one thread's settings must not leak into another's
#: encoding (nor its restore land mid-call: the tokenizers bindings refuse a change while encoding).
_BACKEND_LOCK = threading.Lock()

#: How the windows' logits of one text become that text's logits (sequence classification).
POOLINGS = ("mean", "max")
DEFAULT_POOLING = "mean"


def default_stride(max_length: int) -> int:
    """The overlap used when none is given: a quarter of the window.

    With the max-context merge every token is read from a window where it has at least
    ``stride // 2`` tokens of context on each side (text edges apart), so a quarter of a 128-token
    window gives every token at least 16 neighbours each way, at a cost of about 1 / (1 - 1/4) =
    1.33x the tokens of cutting the text into disjoint pieces. (transformers' QA examples use 128 of 384, a third, for answer spans that
    must not be cut.)
    """
    return max(0, int(max_length) // 4)


def window_stride(stride: int | None, max_length: int) -> int:
    """The overlap a stage reads long texts with: ``stride`` as given (``--stride``), else :func:`default_stride`."""
    return default_stride(max_length) if stride is None else int(stride)


def check_pooling(pooling: str) -> str:
    """``pooling`` if it is one of :data:`POOLINGS`, else one clear error naming the choices."""
    if pooling not in POOLINGS:
        raise CompressError(f"--pooling {pooling!r} is not one of {', '.join(POOLINGS)}: mean averages the windows' "
                            "logits of a long text, max takes each label's largest.")
    return pooling


def check_stride(stride: int, max_length: int, special_tokens: int = 2) -> int:
    """``stride`` if windows of ``max_length`` (``special_tokens`` of them added) can overlap by it."""
    room = max_length - special_tokens
    if room < 1:
        raise CompressError(f"--max-length {max_length}: a window that short holds no text beside its "
                            f"{special_tokens} special tokens; give at least {special_tokens + 1}.")
    if not isinstance(stride, (int, np.integer)) or isinstance(stride, bool) or stride < 0 or stride >= room:
        raise CompressError(f"--stride {stride!r}: the overlap between windows must be a whole number from 0 to "
                            f"{room - 1} (below the {room} text tokens a {max_length}-token window holds); the "
                            f"default is {default_stride(max_length)}.")
    return int(stride)


def window_starts(n_tokens: int, capacity: int, stride: int) -> list[int]:
    """Where each window begins in a segment of ``n_tokens``, for windows of ``capacity`` segment tokens
    that overlap by ``stride``: ``0, step, 2*step, ...`` (``step = capacity - stride``) until one
    reaches the end. This is the ``tokenizers`` library's rule (``Encoding.truncate``), written out
    so the windows it returns can be placed and checked.
    """
    if capacity < 1 or not 0 <= stride < capacity:
        raise ValueError(f"windows of {capacity} tokens cannot overlap by {stride}")
    starts = [0]
    while starts[-1] + capacity < n_tokens:
        starts.append(starts[-1] + capacity - stride)
    return starts


@dataclass
class Windows:
    """A batch of texts cut into windows: window ``w`` belongs to text ``sample[w]``.

    Per window: ``input_ids``, ``token_type_ids``, ``attention_mask`` are what the model takes
    (unpadded); ``offsets`` are character spans in the windowed text (``(0, 0)`` for special tokens;
    for a pair, in the second text, as transformers gives them); ``word_ids`` the word index of each
    token in the windowed text (``None`` for special tokens and the pair's first text);
    ``segment[w] = (a, b)`` the positions in the window that hold the windowed text's tokens, and
    ``start[w]`` the index in that text's token sequence of position ``a``. Windows of one text are
    consecutive and in reading order. ``stride`` is the overlap asked for; a pair whose first text
    leaves little room overlaps less (``start`` says where each window really begins).
    """

    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    attention_mask: list[list[int]]
    offsets: list[list[tuple[int, int]]]
    word_ids: list[list[int | None]]
    sample: np.ndarray
    segment: np.ndarray
    start: np.ndarray
    doc_lengths: np.ndarray
    max_length: int
    stride: int
    pair: bool

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def n_samples(self) -> int:
        return len(self.doc_lengths)

    def windows_of(self, i: int) -> np.ndarray:
        """Indices of text ``i``'s windows, in reading order (a text's windows are consecutive)."""
        return np.arange(np.searchsorted(self.sample, i, "left"), np.searchsorted(self.sample, i, "right"))

    def spans(self, i: int) -> list[tuple[int, int]]:
        """``(start, length)`` in text ``i``'s token sequence of each of its windows."""
        return [(int(self.start[w]), int(self.segment[w, 1] - self.segment[w, 0])) for w in self.windows_of(i)]

    def document_offsets(self, i: int) -> list[tuple[int, int]]:
        """Character span of every token of text ``i`` (the windowed one of a pair), read off its windows."""
        return [self.offsets[w][p] for w, p in _token_sources(self, i)]

    def document_word_ids(self, i: int) -> list[int | None]:
        """Word index of every token of text ``i`` (what first-sub-token labelling needs)."""
        return [self.word_ids[w][p] for w, p in _token_sources(self, i)]

    def batches(self, batch_size: int, pad_id: int, need_token_types: bool) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """Windows sorted by length, ``batch_size`` to a batch, each padded to its longest: ``(rows, arrays)``."""
        return [(rows, pad_rows([self.input_ids[w] for w in rows], [self.token_type_ids[w] for w in rows], pad_id,
                                need_token_types))
                for rows in length_sorted_batches([len(x) for x in self.input_ids], batch_size)]


def backend_of(tokenizer: Any) -> Any:
    """The ``tokenizers.Tokenizer`` behind a fast tokenizer (or the backend itself)."""
    if hasattr(tokenizer, "encode_batch") and hasattr(tokenizer, "enable_truncation"):
        return tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise CompressError(f"windowing long texts needs a fast tokenizer (a tokenizer.json), but "
                            f"{type(tokenizer).__name__} is a slow one. Save the model's tokenizer with "
                            "AutoTokenizer.from_pretrained(DIR, use_fast=True).save_pretrained(DIR).")
    return backend


def encode_windows(tokenizer: Any, texts: Sequence[str] | Sequence[Sequence[str]], pairs: Sequence[str] | None = None,
                   *, max_length: int, stride: int, words: bool = False) -> Windows:
    """Tokenize ``texts`` (or ``(texts[i], pairs[i])`` pairs) into windows of at most ``max_length`` tokens.

    A text that fits is one window, identical to ``tokenizer(text, truncation=True, max_length=...)``;
    a longer one becomes several that overlap by ``stride`` tokens. For a pair, only the second text
    is windowed; when the first leaves room for fewer than ``2 * stride`` of the second's tokens in a
    window, that pair's overlap is lowered to half the room (so its windows still advance by at least
    half their length), and a first text that leaves no room at all is refused with the input's index.

    ``words=True``: each text is a list of pre-split words (a tagger's training sentences), encoded as
    ``tokenizer(words, is_split_into_words=True)`` encodes them; ``word_ids`` then index those words.
    """
    backend = backend_of(tokenizer)
    if pairs is not None and len(pairs) != len(texts):
        raise CompressError(f"{len(texts)} texts but {len(pairs)} second texts; give one pair per text.")
    if words and pairs is not None:
        raise ValueError("pre-split words are windowed one sentence at a time, not as pairs")
    is_pair = pairs is not None
    specials = backend.num_special_tokens_to_add(is_pair)
    stride = check_stride(stride, max_length, backend.num_special_tokens_to_add(False))  # a pair's may be lowered
    encodings: list[Any] = [None] * len(texts)
    with _BACKEND_LOCK:
        saved_truncation, saved_padding = backend.truncation, backend.padding
        try:
            backend.no_padding()
            groups = _stride_groups(backend, texts, max_length, stride, specials) if is_pair else {stride: range(len(texts))}
            for group_stride, members in groups.items():
                backend.enable_truncation(max_length, stride=group_stride,
                                          strategy="only_second" if is_pair else "longest_first", direction="right")
                inputs = ([(texts[i], pairs[i]) for i in members] if is_pair
                          else [list(texts[i]) for i in members] if words else [texts[i] for i in members])
                for i, enc in zip(members, backend.encode_batch(inputs, is_pretokenized=words, add_special_tokens=True)):
                    encodings[i] = (enc, group_stride)
        finally:
            _restore(backend, saved_truncation, saved_padding)
    return _assemble(encodings, max_length, stride, is_pair)


def _stride_groups(backend: Any, firsts: Sequence[str], max_length: int, stride: int,
                   specials: int) -> dict[int, list[int]]:
    """Pairs grouped by the overlap their windows can have, given the room the first text leaves."""
    backend.no_truncation()
    groups: dict[int, list[int]] = {}
    for i, enc in enumerate(backend.encode_batch(list(firsts), add_special_tokens=False)):
        room = max_length - specials - len(enc.ids)
        if room < 1:
            raise CompressError(f"input {i}: the first text of the pair is {len(enc.ids)} tokens, which leaves no room "
                                f"for the second in a {max_length}-token window (only the second text is split into "
                                "windows). Shorten the first text or raise --max-length.")
        groups.setdefault(min(stride, room // 2), []).append(i)
    return groups


def _restore(backend: Any, truncation: dict[str, Any] | None, padding: dict[str, Any] | None) -> None:
    """Put back the backend's truncation and padding (a transformers tokenizer shares its backend)."""
    if truncation:
        backend.enable_truncation(**truncation)
    else:
        backend.no_truncation()
    if padding:
        backend.enable_padding(**padding)
    else:
        backend.no_padding()


def _assemble(encodings: list[tuple[Any, int]], max_length: int, stride: int, is_pair: bool) -> Windows:
    target = 1 if is_pair else 0
    ids, types, masks, offsets, words, sample, segment, start, lengths = [], [], [], [], [], [], [], [], []
    for i, (first, overlap) in enumerate(encodings):
        parts = [first] + list(first.overflowing)
        spans = [_segment(enc.sequence_ids, target, i) for enc in parts]
        step = (spans[0][1] - spans[0][0]) - overlap
        for k, (enc, (a, b)) in enumerate(zip(parts, spans)):
            if k and not _overlap_matches(parts[k - 1], spans[k - 1], enc, (a, b), overlap):
                raise CompressError(f"input {i}: the tokenizer's overflowing windows do not overlap by {overlap} tokens, "
                                    "so their outputs cannot be placed in the text. Report this with the tokenizer's "
                                    "tokenizers version.")
            ids.append(list(enc.ids))
            types.append(list(enc.type_ids))
            masks.append(list(enc.attention_mask))
            offsets.append([tuple(o) for o in enc.offsets])
            words.append([w if s == target else None for w, s in zip(enc.word_ids, enc.sequence_ids)])
            sample.append(i)
            segment.append((a, b))
            start.append(k * step)
        lengths.append(start[-1] + segment[-1][1] - segment[-1][0])
        if len(parts) > 1 and window_starts(lengths[-1], step + overlap, overlap) != start[-len(parts):]:
            raise CompressError(f"input {i}: the tokenizer cut {len(parts)} windows where {lengths[-1]} tokens in windows "
                                f"of {step + overlap} overlapping by {overlap} make "
                                f"{len(window_starts(lengths[-1], step + overlap, overlap))}. Report this with the "
                                "tokenizers version.")
    return Windows(ids, types, masks, offsets, words, np.asarray(sample, dtype=np.int64),
                   np.asarray(segment, dtype=np.int64).reshape(-1, 2), np.asarray(start, dtype=np.int64),
                   np.asarray(lengths, dtype=np.int64), max_length, stride, is_pair)


def _overlap_matches(before: Any, before_span: tuple[int, int], after: Any, span: tuple[int, int], overlap: int) -> bool:
    """Whether window ``after`` begins with the last ``overlap`` tokens of ``before`` (same ids, same
    character spans, so repetitive text cannot pass by chance) and then goes on past them."""
    end, a = before_span[1], span[0]
    same = (before.ids[end - overlap:end] == after.ids[a:a + overlap]
            and before.offsets[end - overlap:end] == after.offsets[a:a + overlap])
    return same and span[1] - a > overlap


def _segment(sequence_ids: Sequence[int | None], target: int, i: int) -> tuple[int, int]:
    """``[a, b)``: the positions that hold sequence ``target``'s tokens (an empty text: an empty range)."""
    where = [p for p, s in enumerate(sequence_ids) if s == target]
    if not where:
        at = len(sequence_ids) - 1 if sequence_ids else 0
        return at, at
    a, b = where[0], where[-1] + 1
    if b - a != len(where):
        raise CompressError(f"input {i}: the tokenizer interleaves the two texts of a pair; windows need each text's "
                            "tokens in one run.")
    return a, b


def max_context_windows(spans: Sequence[tuple[int, int]], n_tokens: int) -> np.ndarray:
    """For each of a text's ``n_tokens`` tokens, the window (index into ``spans``) it is read from.

    ``spans`` holds each window's ``(start, length)`` in the text's tokens. A token is taken from the
    window where ``min(tokens before it, tokens after it)`` inside the window is largest: the "max
    context" rule of BERT's SQuAD code (``_check_is_max_context``), so the token is read with as
    much context on both sides as any window gives it. Ties go to the earlier window. BERT's code
    breaks ties by ``+ 0.01 * window length`` instead; since every window of a text is full except
    possibly the last, the earlier of two tied windows is also the longer (or equal) one, so both
    rules choose the same window (BERT's term can also override a whole token of context when
    windows differ by 100 tokens or more, which ours never does).
    """
    best = np.full(n_tokens, -1, dtype=np.int64)
    score = np.full(n_tokens, -1, dtype=np.int64)
    for k, (begin, length) in enumerate(spans):
        t = np.arange(begin, min(begin + length, n_tokens))
        context = np.minimum(t - begin, begin + length - 1 - t)
        better = context > score[t]  # strictly: an equal score keeps the earlier window
        best[t[better]] = k
        score[t[better]] = context[better]
    if n_tokens and (best < 0).any():
        raise ValueError(f"tokens {np.flatnonzero(best < 0).tolist()[:5]} are in no window")
    return best


def _token_sources(windows: Windows, i: int) -> list[tuple[int, int]]:
    """``(window, position in it)`` that each token of text ``i`` is read from, by the max-context rule."""
    rows = windows.windows_of(i)
    chosen = max_context_windows(windows.spans(i), int(windows.doc_lengths[i]))
    return [(int(rows[k]), int(windows.segment[rows[k], 0] + t - windows.start[rows[k]])) for t, k in enumerate(chosen)]


def merge_token_outputs(windows: Windows, outputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per-token outputs of every window (``outputs[w]``: one row per position of window ``w``, padded
    or not) merged into one array per text: ``(tokens of the windowed text, ...)``, each token's row
    from the window :func:`max_context_windows` picks. Rows of special tokens and of a pair's first
    text are left out (they repeat in every window); :meth:`Windows.document_offsets` and
    :meth:`Windows.document_word_ids` give the matching character spans and words.
    """
    if len(outputs) != len(windows):
        raise ValueError(f"{len(outputs)} outputs for {len(windows)} windows")
    merged = []
    for i in range(windows.n_samples):
        sources = _token_sources(windows, i)
        first = np.asarray(outputs[int(windows.windows_of(i)[0])])
        merged.append(np.stack([np.asarray(outputs[w])[p] for w, p in sources]) if sources
                      else np.zeros((0, *first.shape[1:]), dtype=first.dtype))
    return merged


def pool_windows(logits: np.ndarray, sample: np.ndarray, n_samples: int, pooling: str = DEFAULT_POOLING) -> np.ndarray:
    """One logit row per text from its windows' rows: their ``mean`` or elementwise ``max``.

    A text that fit in one window keeps its row exactly. ``mean`` suits a label carried by the
    document as a whole (its topic, its overall sentiment); ``max`` one that a single passage
    decides (does any part mention X).
    """
    check_pooling(pooling)
    logits = np.asarray(logits)
    sample = np.asarray(sample, dtype=np.int64)
    if len(logits) != len(sample):
        raise ValueError(f"{len(logits)} logit rows for {len(sample)} windows")
    counts = np.bincount(sample, minlength=n_samples)
    if (counts == 0).any():
        raise ValueError(f"texts {np.flatnonzero(counts == 0).tolist()[:5]} have no window")
    if pooling == "mean":
        out = np.zeros((n_samples, *logits.shape[1:]), dtype=np.float64)
        np.add.at(out, sample, logits)
        out /= counts.reshape(-1, *([1] * (logits.ndim - 1)))
    else:
        out = np.full((n_samples, *logits.shape[1:]), -np.inf, dtype=np.float64)
        np.maximum.at(out, sample, logits)
    return out.astype(np.float32)


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[np.ndarray]:
    """Row indices, longest first, ``batch_size`` to a batch: padding (wasted compute) stays small when
    lengths vary, as they do in real traffic."""
    if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
        raise CompressError(f"--batch-size must be a whole number of at least 1, got {batch_size!r}.")
    order = np.argsort([-n for n in lengths], kind="stable")
    return [order[s:s + batch_size] for s in range(0, len(order), batch_size)]


def pad_rows(ids: Sequence[Sequence[int]], types: Sequence[Sequence[int]] | None, pad_id: int,
             need_token_types: bool) -> dict[str, np.ndarray]:
    """``input_ids``, ``attention_mask`` (and ``token_type_ids``) of rows right-padded to the longest."""
    width = max((len(x) for x in ids), default=0)
    input_ids = np.full((len(ids), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(ids), width), dtype=np.int64)
    token_types = np.zeros((len(ids), width), dtype=np.int64)
    for row, x in enumerate(ids):
        input_ids[row, :len(x)] = x
        mask[row, :len(x)] = 1
        if types is not None and types[row] is not None:
            token_types[row, :len(x)] = types[row]
    arrays = {"input_ids": input_ids, "attention_mask": mask}
    if need_token_types:
        arrays["token_type_ids"] = token_types
    return arrays
