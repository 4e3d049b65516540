"""Sentence similarity by a cross-encoder (STS): both sentences read together, one score out.

A regression head on ``[CLS]`` (``AutoModelForSequenceClassification`` with ``num_labels=1`` and ``problem_type``
``regression``, trained with MSE), logits ``(batch, 1)``: the pair's predicted similarity on the data's scale (STS
Benchmark: 0 to 5). A soft label is the teacher's score of a pair. Quality is the correlation of predicted with
gold scores over a split, Pearson and Spearman times 100 (Spearman primary: the STS convention, blind to a
monotone rescaling of the scores); with a reference model's scores, the same correlations against them.
``Predictor.predict([(a, b), ...])`` gives each pair's ``score``. Data: :mod:`.data`.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from compress.tasks.registry import BATCH, ENCODER_INPUTS, LABELS, Task, register_task

NAME = "sentence-similarity"


def ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks, ties given their mean rank (``scipy.stats.rankdata``'s default), in float64."""
    x = np.asarray(values, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    starts = np.r_[True, sorted_x[1:] != sorted_x[:-1]]  # where each run of equal values begins
    run = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    last = np.r_[first[1:], len(x)] - 1
    out = np.empty(len(x))
    out[order] = (first[run] + last[run]) / 2.0 + 1.0
    return out


def pearson(a: Sequence[float], b: Sequence[float]) -> float:
    """Pearson's r of two equal-length series; 0.0 where either is constant (no correlation is defined)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(x) < 2:
        return 0.0
    x, y = x - x.mean(), y - y.mean()
    denom = float(np.sqrt((x * x).sum() * (y * y).sum()))
    return float((x * y).sum() / denom) if denom > 0 else 0.0


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rho: Pearson's r of the ranks (ties at their mean rank)."""
    return pearson(ranks(a), ranks(b))


def score(predicted: Sequence[float], gold: Sequence[float], reference: Sequence[float] | None = None) -> dict[str, Any]:
    """Pearson and Spearman (x100) of predicted against gold scores; with a reference model's scores (the
    teacher's), the same against them (``reference_*``: how closely a student or a quantized model follows)."""
    predicted = np.asarray(predicted, dtype=np.float64).reshape(-1)
    out: dict[str, Any] = {"spearman": 100.0 * spearman(predicted, gold), "pearson": 100.0 * pearson(predicted, gold),
                           "n": int(len(predicted))}
    if reference is not None:
        reference = np.asarray(reference, dtype=np.float64).reshape(-1)
        out["reference_spearman"] = 100.0 * spearman(predicted, reference)
        out["reference_pearson"] = 100.0 * pearson(predicted, reference)
    return out


TASK = register_task(Task(
    name=NAME,
    package=__name__,
    description="one similarity score per sentence pair (a cross-encoder, STS), scored on Spearman and Pearson x100",
    auto_model="AutoModelForSequenceClassification",
    head_suffix="ForSequenceClassification",
    inputs=ENCODER_INPUTS,
    outputs={"logits": (BATCH, LABELS)},
    label_unit="example",
    soft_labels=("examples", LABELS),
    metrics=("spearman", "pearson", "reference_spearman", "reference_pearson"),
    primary_metric="spearman",
    metric_label="Spearman",
    predictor_returns=("score",),
    score=score,
    aliases=("cross-encoder", "sentence_similarity"),
))
