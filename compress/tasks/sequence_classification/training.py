"""Sentence classification's ``training`` aspect (:mod:`compress.tasks.protocol.training`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from compress.tasks.tables import DynamicPaddingCollator, tokenize_split
from compress.core.errors import CompressError
from compress.stages.long_texts import window_texts, windows_record
from compress.runtime.modeling import classification_metrics, load_classifier, predict_logits
from compress.stages.prune.stage import kl_divergence
from compress.tasks.protocol.training import PruningScorer
from compress.tasks.sequence_classification import NAME
from compress.tasks.sequence_classification.distill import distill_classifier
from compress.tasks.sequence_classification.teacher import train_classifier_teacher


def train_teacher(cfg: Any, out: str | os.PathLike) -> Path:
    """The classifier teacher (:func:`~compress.tasks.sequence_classification.teacher.train_classifier_teacher`)."""
    return train_classifier_teacher(cfg, out)


def distill(cfg: Any, out: str | os.PathLike) -> Path:
    """The classifier student (:func:`~compress.tasks.sequence_classification.distill.distill_classifier`)."""
    return distill_classifier(cfg, out)


def load_for_pruning(cfg: Any, source: Path, data: Any) -> tuple[Any, Any, bool]:
    """The classifier at ``source``, its head sized and named for ``data``'s classes."""
    return load_classifier(source, data.num_labels, data.label_names, cfg.allow_pickle, task=NAME)


def pruning_scorer(cfg: Any, data: Any, tokenizer: Any, pad_id: int) -> PruningScorer:
    """Accuracy and macro-F1 per split, a text past ``--max-length`` read in windows and its windows' logits pooled
    (:mod:`compress.stages.long_texts`), as it is served; against the unpruned model's pooled logits, the agreement and
    ``kl_to_unpruned``."""
    windows = {name: window_texts(split, tokenizer, cfg.max_length, data.is_pair, cfg.stride, what=name)
               for name, split in data.splits.items()}
    tokenized = {name: tokenize_split(windows[name].rows, tokenizer, cfg.max_length, data.is_pair, what=name)
                 for name in data.splits}
    splits = [name for name in ("validation", "test") if name in tokenized]
    labels = {name: np.asarray(data.splits[name]["label"]) for name in splits}

    def evaluate(m, reference: dict[str, np.ndarray] | None, desc: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        logits = {name: windows[name].pool(predict_logits(m, tokenized[name], batch_size=64, pad_id=pad_id,
                                                          desc=f"{desc} ({name})"), cfg.pooling)
                  for name in splits}
        metrics = {name: classification_metrics(logits[name], labels[name],
                                                reference[name] if reference else None) for name in splits}
        if reference:
            for name in splits:
                metrics[name]["kl_to_unpruned"] = kl_divergence(reference[name], logits[name])
        return metrics, logits

    return PruningScorer(tokenized["train"], DynamicPaddingCollator({"": pad_id}), evaluate,
                         lambda final: windows_record(windows, cfg.max_length, cfg.stride, cfg.pooling))


def pretrain_data(data: Any) -> Any:
    """The classification data, its texts read as they are; a pair task's is refused (its two texts are one
    example, not running text)."""
    task = data.load()
    if task.is_pair:
        raise CompressError("pretrain reads single texts; a sentence-pair task's corpus is not supported yet")
    return task
