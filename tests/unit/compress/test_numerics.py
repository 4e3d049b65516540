"""The numpy softmax and log-softmax every torch-free module uses (compress/core/numerics.py)."""

from __future__ import annotations

import numpy as np

from compress.core.numerics import log_softmax, softmax


def test_softmax_is_stable_and_sums_to_one():
    p = softmax(np.array([[1000.0, 1001.0], [0.0, 0.0]]))
    assert np.allclose(p, [[1 / (1 + np.e), np.e / (1 + np.e)], [0.5, 0.5]])
    p = softmax(np.log(np.array([[1.0, 2.0, 7.0]])))
    assert np.allclose(p, [[0.1, 0.2, 0.7]])
    assert np.allclose(softmax(np.log(np.array([0.25, 0.75]))), [0.25, 0.75])  # one row alone: over its last axis


def test_log_softmax_is_the_log_of_softmax_in_float64_even_for_large_logits():
    x = np.array([[1000.0, 1001.0, 990.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    out = log_softmax(x)
    assert out.dtype == np.float64
    assert np.allclose(np.exp(out).sum(-1), 1.0)
    assert np.allclose(out, np.log(softmax(x.astype(np.float64))))
    assert np.allclose(out[1], np.log(1 / 3))
