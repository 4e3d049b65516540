"""Sequence classification (one label per text or text pair): the task every stage handles today.

This entry describes what the stages do now, so they can move to the registry one by one: a
classifier on ``[CLS]`` (``AutoModelForSequenceClassification``), logits ``(batch, labels)``, one
soft-label vector per example, accuracy / macro-F1 / agreement, and ``Predictor.predict`` giving
the label name and the probabilities.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from compress.tasks.registry import BATCH, ENCODER_INPUTS, LABELS, Task, register_task

NAME = "sequence-classification"


def score(logits: np.ndarray, labels: np.ndarray, reference_logits: np.ndarray | None = None) -> dict[str, Any]:
    """Accuracy, macro-F1 (over the classes in labels or predictions) and, with a reference model's
    logits, agreement of the argmax predictions; the numbers of ``compress.runtime.modeling.classification_metrics``."""
    pred = np.asarray(logits).argmax(-1)
    labels = np.asarray(labels)
    f1s = []
    for c in np.union1d(np.unique(labels), np.unique(pred)):
        tp = float(np.sum((pred == c) & (labels == c)))
        denom = 2 * tp + float(np.sum((pred == c) & (labels != c))) + float(np.sum((pred != c) & (labels == c)))
        f1s.append(2 * tp / denom if denom else 0.0)
    out: dict[str, Any] = {"accuracy": float((pred == labels).mean()), "macro_f1": float(np.mean(f1s)) if f1s else 0.0,
                           "n": int(len(labels))}
    if reference_logits is not None:
        out["agreement"] = float((pred == np.asarray(reference_logits).argmax(-1)).mean())
    return out


TASK = register_task(Task(
    name=NAME,
    package=__name__,
    description="one label per text (or text pair): sentiment, topic, intent, entailment",
    auto_model="AutoModelForSequenceClassification",
    head_suffix="ForSequenceClassification",
    inputs=ENCODER_INPUTS,
    outputs={"logits": (BATCH, LABELS)},
    label_unit="example",
    soft_labels=("examples", LABELS),
    metrics=("accuracy", "macro_f1", "agreement"),
    primary_metric="accuracy",
    predictor_returns=("label", "probabilities"),
    score=score,
    aliases=("text-classification", "sequence_classification"),
))
