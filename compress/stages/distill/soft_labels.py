"""The teacher's logits for every training row: from the cache, from the teacher forward training runs
anyway, or from one pass before training.

A distillation run needs the teacher's logits (soft labels) for every row it trains on.
:class:`SoftLabelStore` holds one row per training example: rows found in the on-disk cache
(``compress.stages.teacher.soft_label_cache_path``, the same files ``teacher_logits`` writes) are filled at
the start. With intermediate losses on, training runs the teacher on every batch anyway, so the rest
are filled the first time a batch needs them, for free; with logit terms alone the distill stage
labels the missing rows in one length-sorted pass before training (``label_up_front`` in
``compress.stages.distill.trainer``: only those rows, where a training batch would run the cached ones too). Every part
whose rows are all known is written back to the cache at the end, so the next run (another seed,
another student) starts complete.

With a sentence-vector term on (:mod:`compress.stages.distill.pooled`) the store also holds the teacher's
mean-pooled sentence vector of every row, filled by the same teacher forward in training and cached
beside the logits; a row counts as known only when both are.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compress.stages.distill.pooled import vector_cache_path


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


def _cached(path: Path, shape: tuple[int, int]) -> np.ndarray | None:
    """The array in ``path`` when it exists with exactly ``shape``, else ``None`` (stale or foreign: refilled)."""
    if not path.exists():
        return None
    array = np.load(path, allow_pickle=False)
    return array if array.shape == shape else None


class SoftLabelStore:
    """Teacher logits (and, with ``vector_width``, sentence vectors) for ``n`` rows, some known, the rest filled
    during training."""

    def __init__(self, parts: list[Part], num_labels: int, vector_width: int | None = None):
        self.parts = parts
        n = parts[-1].stop if parts else 0
        self.logits = np.zeros((n, num_labels), dtype=np.float32)
        self.known = np.zeros(n, dtype=bool)
        self.vectors = np.zeros((n, vector_width), dtype=np.float32) if vector_width else None
        self.vectors_known = np.zeros(n, dtype=bool) if vector_width else None
        self.loaded: dict[str, bool] = {}
        self.vectors_loaded: dict[str, bool] = {}
        for part in parts:
            size = part.stop - part.start
            cached = _cached(part.cache, (size, num_labels))
            self.loaded[part.name] = cached is not None
            if cached is not None:
                self.logits[part.start:part.stop] = cached
                self.known[part.start:part.stop] = True
            if self.vectors is not None:
                vectors = _cached(vector_cache_path(part.cache), (size, vector_width))
                self.vectors_loaded[part.name] = vectors is not None
                if vectors is not None:
                    self.vectors[part.start:part.stop] = vectors
                    self.vectors_known[part.start:part.stop] = True

    def _all_known(self, rows) -> np.ndarray:
        known = self.known[rows]
        return known if self.vectors_known is None else known & self.vectors_known[rows]

    @property
    def complete(self) -> bool:
        return bool(self._all_known(slice(None)).all())

    def missing(self, rows: np.ndarray) -> bool:
        return not bool(self._all_known(rows).all())

    def unknown_rows(self, rows: np.ndarray) -> int:
        """How many of ``rows`` still lack their logits or (when kept) their vector."""
        return int((~self._all_known(rows)).sum())

    def get(self, rows: np.ndarray) -> np.ndarray:
        return self.logits[rows]

    def get_vectors(self, rows: np.ndarray) -> np.ndarray:
        return self.vectors[rows]

    def put(self, rows: np.ndarray, logits: np.ndarray, vectors: np.ndarray | None = None) -> None:
        """Record the teacher's outputs for ``rows``; a store that keeps vectors needs them too."""
        if self.vectors is not None:
            if vectors is None:
                raise ValueError("this store keeps the teacher's sentence vectors: pass them with the logits")
            self.vectors[rows] = vectors
            self.vectors_known[rows] = True
        self.logits[rows] = logits
        self.known[rows] = True

    def save(self) -> dict[str, str]:
        """Write every complete part's logits that were not loaded from its cache; returns ``{part: path}``."""
        return self._save(self.logits, self.known, self.loaded, lambda part: part.cache)

    def save_vectors(self) -> dict[str, str]:
        """The same for the sentence vectors, beside each part's logits (none when the store keeps none)."""
        if self.vectors is None:
            return {}
        return self._save(self.vectors, self.vectors_known, self.vectors_loaded, lambda part: vector_cache_path(part.cache))

    def _save(self, values: np.ndarray, known: np.ndarray, loaded: dict[str, bool], path_of) -> dict[str, str]:
        written = {}
        for part in self.parts:
            if loaded.get(part.name) or not known[part.start:part.stop].all():
                continue
            save_logits(path_of(part), values[part.start:part.stop])
            written[part.name] = str(path_of(part))
        return written
