"""Extractive question answering (a span of the passage answers the question: SQuAD v1.1 / 2.0).

Two scores per token (``AutoModelForQuestionAnswering``): ``start_logits`` and ``end_logits``,
each ``(batch, sequence)``, over question + passage windows (:mod:`compress.tasks.question_answering.features`).
Labels and soft labels belong to *windows*: a window's gold start/end positions (``[CLS]`` when it
does not hold the answer), and the teacher's start and end logits over the window's positions,
cached as ``(windows, sequence)`` per question for each of the two. Because those positions are
a tokenizer's, a teacher and a student must share the tokenization for logit distillation.
Quality is SQuAD's exact match and F1 (:mod:`compress.tasks.question_answering.metrics`, the official
normalisation), F1 the primary metric; ``Predictor.predict(question, context)`` gives the
answer text, its character start and end in the passage, and a score.
"""

from __future__ import annotations

from typing import Any, Sequence

from compress.tasks.question_answering.metrics import squad_scores
from compress.tasks.registry import BATCH, ENCODER_INPUTS, SEQUENCE, Task, register_task

NAME = "question-answering"
#: The axis of a question's windows in a cached soft-label entry.
WINDOWS = "windows"


def score(predicted: Sequence[str], gold: Sequence[Sequence[str]],
          reference: Sequence[str] | None = None) -> dict[str, Any]:
    """Exact match and F1 of predicted answer texts against each question's gold answers (empty: no answer);
    with the teacher's answers as ``reference``, the same scores against them."""
    return squad_scores(predicted, gold, reference)


TASK = register_task(Task(
    name=NAME,
    package=__name__,
    description="the span of a passage that answers a question (SQuAD v1.1 / 2.0), scored on exact match and F1",
    auto_model="AutoModelForQuestionAnswering",
    head_suffix="ForQuestionAnswering",
    inputs=ENCODER_INPUTS,
    outputs={"start_logits": (BATCH, SEQUENCE), "end_logits": (BATCH, SEQUENCE)},
    label_unit="window",
    soft_labels=(WINDOWS, SEQUENCE),
    metrics=("exact_match", "f1", "has_answer_exact_match", "has_answer_f1", "no_answer_exact_match", "no_answer_f1",
             "reference_exact_match", "reference_f1"),
    primary_metric="f1",
    metric_label="F1",
    predictor_returns=("answer", "start", "end", "score"),
    score=score,
    aliases=("extractive-qa", "question_answering"),
    # ORT dynamic INT8 of 3 SQuAD students (recipes/qa.yaml's flags, one teacher), validation F1 against the fp32
    # student: per-channel weight scales lost 1.2, 2.0 and 2.1 points, per-tensor ones 3.4, 3.5 and 4.0 (all
    # over the recipe's 2-point budget), so the per-tensor rung failed for every reader measured (docs/lab/qa.md).
    int8_per_channel=True,
))
