"""A toy task registered from outside ``compress/``: which of two sentences of a story comes first.

``sentence-order``: a story's two consecutive sentences, read together (``[CLS] a [SEP] b [SEP]``), are either in
the story's order (``in-order``) or swapped (``swapped``). The model is BERT's next-sentence-prediction head
(``AutoModelForNextSentencePrediction``, logits ``(batch, 2)``), a head class no built-in task uses, so the stages
can only learn what it is from this package. Its data is a ``.stories`` file (one story per line, its sentences
separated by `` / ``), its metric ``order_accuracy``, and ``Predictor.predict(pairs)`` answers ``in-order`` or
``swapped`` per pair.

Importing this module registers nothing: :func:`register` does (a test's fixture calls it, and
:func:`unregister` after), so the task exists only while a test asks for it. Every aspect is a module here
(:mod:`.data`, :mod:`.training`, :mod:`.scoring`, :mod:`.decoding`); numpy only at this level.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from compress.tasks.registry import BATCH, LABELS, SEQUENCE, Task, register_task, unregister_task

NAME = "sentence-order"
#: Class 0 is the next-sentence head's "B follows A", as BERT was pre-trained.
LABEL_NAMES = ["in-order", "swapped"]


def score(logits: np.ndarray, labels: Sequence[int], reference_logits: np.ndarray | None = None) -> dict[str, Any]:
    """``order_accuracy`` (the share of pairs whose order is told right) and, with a reference model's logits,
    ``order_agreement`` (the share of pairs where the two models answer alike)."""
    predicted = np.asarray(logits).argmax(-1)
    out: dict[str, Any] = {"order_accuracy": float((predicted == np.asarray(labels)).mean()), "n": int(len(predicted))}
    if reference_logits is not None:
        out["order_agreement"] = float((predicted == np.asarray(reference_logits).argmax(-1)).mean())
    return out


TASK = Task(
    name=NAME,
    package=__name__,
    description="which of two sentences comes first in a story (a next-sentence-prediction head)",
    auto_model="AutoModelForNextSentencePrediction",
    head_suffix="ForNextSentencePrediction",
    inputs={"input_ids": (BATCH, SEQUENCE), "attention_mask": (BATCH, SEQUENCE), "token_type_ids": (BATCH, SEQUENCE)},
    outputs={"logits": (BATCH, LABELS)},
    label_unit="example",
    soft_labels=("examples", LABELS),
    metrics=("order_accuracy", "order_agreement"),
    primary_metric="order_accuracy",
    predictor_returns=("order", "probabilities"),
    score=score,
)


def register() -> Task:
    """Put the toy task in the registry (replacing a stale one of a test that failed before unregistering)."""
    return register_task(TASK, replace=True)


def unregister() -> None:
    unregister_task(NAME)
