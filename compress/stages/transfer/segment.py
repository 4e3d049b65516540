"""Word segmentation for augmentation: texts cut into words by the tokenizer's own pre-tokenizer.

A word that is a single whole-word piece of the vocabulary can be replaced by another such piece
(so replacement candidates fit the same vocabulary); every word can be masked, deleted or swapped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from compress.core.errors import CompressError

@dataclass
class Segmented:
    """A text cut into words (by the tokenizer's pre-tokenizer) and the gaps between them."""

    gaps: list[str]
    words: list[str]
    #: Per word: the token index of a replaceable whole word (one word piece), else ``None``.
    positions: list[int | None]
    input_ids: list[int]

    def render(self, words: Sequence[str | None]) -> str:
        """The text with ``words`` in place of the originals; ``None`` deletes a word together with
        the gap before it (after it, for the first word), so no stray space is left before punctuation."""
        gaps = list(self.gaps)
        for i, word in enumerate(words):
            if word is None:
                if i > 0 and any(w is not None for w in words[:i]):
                    gaps[i] = ""
                else:
                    gaps[i + 1] = gaps[i]
        out = [gaps[0]]
        for word, gap in zip(words, gaps[1:]):
            out += [word or "", gap]
        return " ".join("".join(out).split())


def whole_words(tokenizer) -> tuple[np.ndarray, list[str]]:
    """Which vocabulary ids are whole alphabetic words of two letters or more (no ``##``
    continuation, no special token), and each id's surface string. Computed once per tokenizer.

    Single letters are left out: most are fragments of contractions (the ``s`` of ``'s``, the ``t``
    of ``n't``), and replacing them makes noise rather than a new sentence."""
    cached = getattr(tokenizer, "_compress_whole_words", None)
    if cached is not None:
        return cached
    size = len(tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
    special = set(tokenizer.all_special_ids)
    ok = np.zeros(size, dtype=bool)
    strings = [""] * size
    for i, token in enumerate(tokens):
        if token is None or i in special or token.startswith("##"):
            continue
        text = tokenizer.convert_tokens_to_string([token]).strip()
        if len(text) >= 2 and text.isalpha():
            ok[i] = True
            strings[i] = text
    result = (ok, strings)
    try:
        tokenizer._compress_whole_words = result
    except AttributeError:  # pragma: no cover - a tokenizer that refuses attributes just recomputes
        pass
    return result


def segment(tokenizer, texts: Sequence[str], max_length: int = 512) -> list[Segmented]:
    """Split texts into words with character spans, marking single-piece whole words as replaceable.

    The tokenizer's own pre-tokenizer decides what a word is, so ``replace`` candidates (one word
    piece each) fit the same vocabulary; words past ``max_length`` pieces stay as they are.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise CompressError("augmentation needs a fast (Rust) tokenizer for word offsets; save the teacher with a "
                            "tokenizer.json (AutoTokenizer.from_pretrained(..., use_fast=True).save_pretrained(folder)).")
    whole, _ = whole_words(tokenizer)
    special = set(tokenizer.all_special_ids)
    limit = getattr(tokenizer, "model_max_length", None)
    if limit and limit < 100_000:  # a masked-LM pass must fit the model's positions
        max_length = min(max_length, limit)
    enc = tokenizer(list(texts), return_offsets_mapping=True, truncation=True, max_length=max_length)
    out = []
    for row, text in enumerate(texts):
        ids = enc["input_ids"][row]
        offsets = enc["offset_mapping"][row]
        groups: dict[int, list[int]] = {}
        for pos, word in enumerate(enc.word_ids(row)):
            if word is not None and ids[pos] not in special:
                groups.setdefault(word, []).append(pos)
        gaps, words, positions = [], [], []
        cursor = 0
        for word in sorted(groups):
            pieces = groups[word]
            start, end = offsets[pieces[0]][0], offsets[pieces[-1]][1]
            if start < cursor or end <= start:
                continue  # overlapping or empty spans (odd normalisers): leave that stretch untouched
            gaps.append(text[cursor:start])
            words.append(text[start:end])
            positions.append(pieces[0] if len(pieces) == 1 and whole[ids[pieces[0]]] else None)
            cursor = end
        gaps.append(text[cursor:])
        out.append(Segmented(gaps, words, positions, list(ids)))
    return out
