"""Softmax and log-softmax over the last axis, in numpy: the one copy for every module that turns logits into
probabilities outside torch (the torch-free serving path, entity scores, QA span scores, the teacher's transfer
mentions, the pruning report's KL). Each subtracts the row maximum first, so large logits do not overflow."""

from __future__ import annotations

import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities over the last axis, in the input's float type."""
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities over the last axis, in float64 (a KL of near-equal distributions needs the digits)."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
