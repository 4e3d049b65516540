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
