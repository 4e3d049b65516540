"""A held-out split's texts (and a classifier's labels), and the exact McNemar test of two accuracies.

What bench, the traffic replay and the study tools share; a classifier's quality section itself is its task's
(:mod:`compress.tasks.sequence_classification.scoring`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from compress.core.errors import CompressError


def split_texts(task, split: str) -> list[Any]:
    """The texts (or text pairs; a tagger's sentences as space-joined words) of one split, refusing a
    missing or empty split."""
    if split not in task.splits:
        raise CompressError(f"--split {split}: {task.source} has no {split!r} split (it has "
                            f"{', '.join(task.splits)}). Pick one of those.")
    texts = list(task.texts(split))
    if not texts:
        raise CompressError(f"--split {split}: the {split} split of {task.source} is empty; give data with rows there.")
    return texts


def split_texts_and_labels(task, split: str) -> tuple[list[Any], np.ndarray]:
    """Texts (or text pairs) and integer labels of one split of classification data (:func:`split_texts`)."""
    texts = split_texts(task, split)
    return texts, np.asarray(task.splits[split]["label"], dtype=np.int64)


def mcnemar_p(correct_a: np.ndarray, correct_b: np.ndarray) -> float:
    """Two-sided exact McNemar p-value: could two models' accuracies on the same examples differ by chance?

    Only the examples where exactly one model is right count; under the null hypothesis each of
    those is a fair coin. Comparing accuracies measured on the same sentences this way is far more
    sensitive than comparing two independent confidence intervals.
    """
    from math import comb

    a = np.asarray(correct_a, dtype=bool)
    b = np.asarray(correct_b, dtype=bool)
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(comb(n, k) for k in range(0, min(only_a, only_b) + 1)) / 2 ** n
    return float(min(1.0, 2 * tail))
