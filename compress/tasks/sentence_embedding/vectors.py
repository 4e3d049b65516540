"""Sentence vectors with numpy only: unit length, cosine, and one vector per long text from its windows.

The torch-free runtime imports this (a Predictor's ``encode`` pools windows of a long text here), so nothing
of torch or transformers.
"""

from __future__ import annotations

import numpy as np

#: sentence-transformers' (and ``torch.nn.functional.normalize``'s) floor on the norm.
EPS = 1e-12


def normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 length (a zero row stays zero)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), EPS)


def cosine_matrix(a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """``(len(a), len(b))`` cosine similarities (``b`` defaults to ``a``)."""
    ua = normalize(a)
    return ua @ (ua if b is None else normalize(b)).T


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``cos(a[i], b[i])`` for every row ``i``."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"vectors {a.shape} against {b.shape}: row cosines need equal shapes")
    return np.sum(normalize(a) * normalize(b), axis=-1)


def pool_window_vectors(vectors: np.ndarray, sample: np.ndarray, tokens: np.ndarray, n_texts: int,
                        unit: bool) -> np.ndarray:
    """One ``float32`` vector per text: the mean of its windows' pooled vectors weighted by each window's tokens,
    then normalised when ``unit``.

    Weighting by tokens makes mean pooling over windows the mean over the windows' tokens, as if the text had
    been read at once (the overlap, read twice, counts twice); a text that fits in one window keeps its vector.
    """
    vectors = np.asarray(vectors, dtype=np.float64)
    sample = np.asarray(sample, dtype=np.int64)
    weights = np.asarray(tokens, dtype=np.float64)
    if not len(vectors) == len(sample) == len(weights):
        raise ValueError(f"{len(vectors)} vectors, {len(sample)} window owners and {len(weights)} token counts")
    totals = np.bincount(sample, weights=weights, minlength=n_texts)
    if (totals <= 0).any():
        raise ValueError(f"texts {np.flatnonzero(totals <= 0).tolist()[:5]} have no window")
    out = np.zeros((n_texts, vectors.shape[1]), dtype=np.float64)
    np.add.at(out, sample, vectors * weights[:, None])
    out /= totals[:, None]
    return (normalize(out) if unit else out).astype(np.float32)
