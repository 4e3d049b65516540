"""The teacher's logits for every training row, filled while training instead of in a separate pass.

A distillation run needs the teacher's logits (soft labels) for every row it trains on. Computing
them in a pass of their own before training costs a full teacher forward over the training set; but
whenever intermediate losses are on, training runs the teacher on every batch anyway, and then the
logits come for free. :class:`SoftLabelStore` holds one row per training example: rows found in the
on-disk cache (``compress.teacher.soft_label_cache_path``, the same files ``teacher_logits``
writes) are filled at the start, the rest are filled the first time a batch needs them (from the
intermediate-loss teacher forward when there is one, else from a logits-only teacher forward of that
batch), and every part whose rows are all known is written back to the cache at the end, so the
next run (another seed, another student) starts complete.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np


def save_logits(path: Path, logits: np.ndarray) -> None:
    """Write a soft-label cache file atomically: a reader finds the whole array or no file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npy.tmp", delete=False) as handle:
        np.save(handle, logits, allow_pickle=False)
    os.replace(handle.name, path)


@dataclass
class Part:
    """A contiguous block of store rows that has one cache file (the labelled split, or one transfer part)."""

    name: str
    start: int
    stop: int
    cache: Path


class SoftLabelStore:
    """Teacher logits for ``n`` rows, some known, the rest filled during training."""

    def __init__(self, parts: list[Part], num_labels: int):
        self.parts = parts
        n = parts[-1].stop if parts else 0
        self.logits = np.zeros((n, num_labels), dtype=np.float32)
        self.known = np.zeros(n, dtype=bool)
        self.loaded: dict[str, bool] = {}
        for part in parts:
            cached = None
            if part.cache.exists():
                cached = np.load(part.cache, allow_pickle=False)
            if cached is not None and cached.shape == (part.stop - part.start, num_labels):
                self.logits[part.start:part.stop] = cached
                self.known[part.start:part.stop] = True
                self.loaded[part.name] = True
            else:
                self.loaded[part.name] = False

    @property
    def complete(self) -> bool:
        return bool(self.known.all())

    def missing(self, rows: np.ndarray) -> bool:
        return not bool(self.known[rows].all())

    def get(self, rows: np.ndarray) -> np.ndarray:
        return self.logits[rows]

    def put(self, rows: np.ndarray, logits: np.ndarray) -> None:
        self.logits[rows] = logits
        self.known[rows] = True

    def save(self) -> dict[str, str]:
        """Write every complete part that was not loaded from its cache; returns ``{part: path}``."""
        written = {}
        for part in self.parts:
            if self.loaded.get(part.name) or not self.known[part.start:part.stop].all():
                continue
            save_logits(part.cache, self.logits[part.start:part.stop])
            written[part.name] = str(part.cache)
        return written
