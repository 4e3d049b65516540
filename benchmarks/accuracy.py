"""Quality on a held-out split: accuracy, macro-F1 and agreement with the reference.

Agreement (the share of inputs where an artifact's argmax equals the reference's) says how
faithfully a compressed model reproduces the one it replaces, which accuracy alone hides: two
models at 85% can disagree on a quarter of the inputs. The texts go through the same
``Predictor.logits`` path serving uses (dynamic padding; a text longer than the artifact's window is
read in overlapping windows whose logits are pooled, never cut), not the fixed-shape benchmark
inputs, so the numbers are those of real use.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from benchmarks.answers import Answers, answer_each
from compress.errors import CompressError
from compress.modeling import classification_metrics
from benchmarks.stats import accuracy_drop_interval, detectable_drop, proportion_interval


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


def evaluate_quality(predictors: Mapping[str, Any], reference: str, texts: Sequence[Any], labels: np.ndarray,
                     batch_size: int | Mapping[str, int] = 32, progress: bool = True,
                     memo: Answers | None = None) -> dict[str, dict[str, Any]]:
    """``{name: {accuracy, macro_f1, agreement, n, predictions, ...intervals}}`` for every predictor; the
    reference agrees with itself. ``batch_size``: one for all, or one per name; ``memo``: answers already made
    in this run (:mod:`benchmarks.answers`)."""
    logits: dict[str, np.ndarray] = answer_each(predictors, reference, batch_size,
                                                lambda p, b: p.logits(texts, batch_size=b), progress, memo)
    out = {}
    ref_correct = logits[reference].argmax(-1) == labels
    for name in predictors:
        out[name] = classification_metrics(logits[name], labels, reference_logits=logits[reference])
        if name != reference:
            out[name]["mcnemar_p"] = mcnemar_p(logits[name].argmax(-1) == labels, ref_correct)
        out[name].update(quality_intervals(logits[name].argmax(-1), logits[reference].argmax(-1), labels,
                                           is_reference=name == reference))
    return out


def quality_intervals(predictions: np.ndarray, reference_predictions: np.ndarray, labels: np.ndarray,
                      is_reference: bool = False, confidence: float = 0.95) -> dict[str, Any]:
    """The per-example predictions (what the gate's paired statistics need) and 95% intervals for the report.

    ``accuracy_ci`` and ``agreement_ci`` are Clopper-Pearson; ``accuracy_drop`` is the paired-bootstrap
    interval of ``reference accuracy - this accuracy`` on the same examples, and ``detectable_drop``
    the smallest true drop this test set finds with 80% power (see :mod:`benchmarks.stats`).
    """

    pred = np.asarray(predictions)
    ref_pred = np.asarray(reference_predictions)
    labels = np.asarray(labels)
    correct, ref_correct = pred == labels, ref_pred == labels
    acc = proportion_interval(int(correct.sum()), len(labels), confidence)
    out: dict[str, Any] = {"predictions": [int(p) for p in pred], "accuracy_ci": [acc.low, acc.high]}
    if not is_reference:
        agree = proportion_interval(int((pred == ref_pred).sum()), len(labels), confidence)
        out["agreement_ci"] = [agree.low, agree.high]
        out["accuracy_drop"] = accuracy_drop_interval(ref_correct, correct, confidence).as_dict()
        out["detectable_drop"] = detectable_drop(ref_correct, correct, confidence)
    return out


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
