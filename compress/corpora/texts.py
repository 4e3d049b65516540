"""Text identity for transfer data: when two texts (or pairs) count as the same, and small file helpers.

Deduplication, leak checks against held-out splits and cache keys all compare texts through
:func:`normalize_text`, so every part of the transfer set agrees on what "the same text" means.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable


def normalize_text(text: str) -> str:
    """The form in which two texts count as the same: case-folded word characters, single spaces.

    Punctuation and spacing are dropped as well as case because corpora tokenise differently
    (``it's`` against ``it 's``); a held-out sentence must not leak back in under another spelling.
    """
    return " ".join(re.findall(r"\w+", unicodedata.normalize("NFKC", text).casefold()))


def text_key(text: str, pair: str | None = None) -> str:
    """Identity of one example (a text, or a sentence pair) for deduplication and leak checks."""
    return normalize_text(text) if pair is None else f"{normalize_text(text)}\x1f{normalize_text(pair)}"


def split_keys(task, splits: Iterable[str]) -> set[str]:
    """The :func:`text_key` of every example in the given splits of a task."""
    keys: set[str] = set()
    for name in splits:
        if name not in task.splits:
            continue
        ds = task.splits[name]
        pairs = ds["text_pair"][:] if task.is_pair else [None] * len(ds)
        keys.update(text_key(t, p) for t, p in zip(ds["text"][:], pairs))
    return keys


def joined_texts(task, split: str) -> list[str]:
    """A classifier split's texts, each pair as its two texts joined by a space: what ``--unlabeled-select
    similar`` compares corpus rows with (:mod:`compress.corpora.similarity`)."""
    ds = task.splits[split]
    if not task.is_pair:
        return list(ds["text"][:])
    return [f"{t} {p}" for t, p in zip(ds["text"][:], ds["text_pair"][:])]


def tagged_texts(task, split: str) -> list[str]:
    """A tagging task's sentences of ``split`` as running text (words joined by spaces); none when it has no such split."""
    return [" ".join(words) for words in task.splits[split]["tokens"]] if split in task.splits else []


def split_texts(task, splits: Iterable[str]) -> list[str]:
    """Every text of the given splits as running text: a classifier's texts (and pair texts), a tagger's
    sentences (:func:`tagged_texts`); what :class:`HeldOutRuns` is built from."""
    out: list[str] = []
    for name in splits:
        if name not in task.splits:
            continue
        columns = task.splits[name].column_names
        if "tokens" in columns:
            out += tagged_texts(task, name)
            continue
        out += list(task.splits[name]["text"][:])
        if "text_pair" in columns:
            out += list(task.splits[name]["text_pair"][:])
    return out


def digest_keys(keys: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for key in sorted(keys):
        digest.update(key.encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, suffix=".tmp", delete=False) as handle:
        handle.write(text)
    os.replace(handle.name, path)



@dataclass(frozen=True)
class HeldOutRuns:
    """The word runs of held-out texts that a corpus line must not repeat (:meth:`repeats`).

    Exact matching misses a held-out sentence that sits inside a longer corpus line (a test sentence
    cut from a Reddit comment whose whole text is in the raw corpus). So a line is held out when it
    shares a run of ``n`` words with a held-out text, or holds the whole of a shorter held-out text of
    at least ``min_words`` words; held-out texts shorter than that match only a line equal to them
    (two common words in a row are no evidence of a leak).
    """

    n: int
    runs: frozenset[str]
    short_lengths: frozenset[int]
    whole: frozenset[str]

    @classmethod
    def of(cls, texts: Iterable[str], n: int = 6, min_words: int = 3) -> "HeldOutRuns":
        runs: set[str] = set()
        lengths: set[int] = set()
        whole: set[str] = set()
        for text in texts:
            words = normalize_text(text).split()
            whole.add(" ".join(words))
            if len(words) >= n:
                runs.update(" ".join(words[i:i + n]) for i in range(len(words) - n + 1))
            elif len(words) >= min_words:
                runs.add(" ".join(words))
                lengths.add(len(words))
        return cls(n, frozenset(runs), frozenset(lengths), frozenset(whole))

    def repeats(self, text: str) -> bool:
        words = normalize_text(text).split()
        if " ".join(words) in self.whole:
            return True
        for k in (self.n, *self.short_lengths):
            if any(" ".join(words[i:i + k]) in self.runs for i in range(len(words) - k + 1)):
                return True
        return False
