"""Question answering's ``training`` aspect (:mod:`compress.tasks.protocol.training`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from compress.runtime.modeling import load_classifier
from compress.tasks.protocol.training import PruningScorer
from compress.tasks.question_answering.distill import distill_stage
from compress.tasks.question_answering.teacher import (qa_collator, qa_stride, qa_training_rows, score_reader,
                                                       train_qa_teacher)
from compress.tasks.task_choice import QA, check_model_task


def train_teacher(cfg: Any, out: str | os.PathLike) -> Path:
    """The span-reader teacher (:func:`~compress.tasks.question_answering.teacher.train_qa_teacher`)."""
    return train_qa_teacher(cfg, out)


def distill(cfg: Any, out: str | os.PathLike) -> Path:
    """The reader student, trained on the teacher's window logits
    (:func:`~compress.tasks.question_answering.distill.distill_stage`)."""
    return distill_stage(cfg, out)


def load_for_pruning(cfg: Any, source: Path, data: Any) -> tuple[Any, Any, bool]:
    """The reader at ``source``; a model for another task refused in one line."""
    check_model_task(source, QA, cfg.data.data, str(source), None)
    return load_classifier(source, allow_pickle=cfg.allow_pickle, task=QA)


def pruning_scorer(cfg: Any, data: Any, tokenizer: Any, pad_id: int) -> PruningScorer:
    """SQuAD exact match and F1 per split, read in windows (as the teacher scores); with SQuAD 2.0 data at the null
    threshold chosen on validation for the very model scored, recorded in each split's scores and in the artifact.
    Importance batches are training windows with their gold start and end positions."""
    stride = qa_stride(cfg.max_length, cfg.stride)
    train = qa_training_rows(data.splits["train"], tokenizer, cfg.max_length, stride)
    splits = [name for name in ("validation", "test") if name in data.splits]

    def evaluate(m, reference: dict[str, Any] | None, desc: str) -> tuple[dict[str, Any], dict[str, Any]]:
        scores = score_reader(m, tokenizer, {name: data.splits[name] for name in splits},
                              {name: data.gold_answers(name) for name in splits}, cfg.max_length, stride,
                              data.with_impossible, pad_id=pad_id)
        if scores.null is not None:
            for metrics in scores.metrics.values():
                metrics["null_threshold"] = scores.null_threshold
        return scores.metrics, {}

    def record(final: dict[str, Any]) -> dict[str, Any]:
        first = final[splits[0]] if splits else {}
        return {"stride": stride, "allow_null": data.with_impossible,
                **({"null_threshold": first["null_threshold"]} if "null_threshold" in first else {})}

    return PruningScorer(train, qa_collator(tokenizer), evaluate, record)


def pretrain_data(data: Any) -> Any:
    """None: a reader's questions and passages are not pre-trained on; the classification loader's refusal says so
    in one line (``data.load()`` names the question-answering set)."""
    return data.load()
