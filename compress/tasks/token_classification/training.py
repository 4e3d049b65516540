"""Token classification's ``training`` aspect (:mod:`compress.tasks.protocol.training`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from compress.runtime.modeling import load_classifier
from compress.stages.prune.stage import kl_divergence
from compress.tasks.protocol.training import PruningScorer
from compress.tasks.task_choice import TOKEN, check_model_task
from compress.tasks.token_classification.distill import distill_stage
from compress.tasks.token_classification.teacher import train_token_teacher
from compress.tasks.token_classification.words import (score_token_logits, token_collator, token_logits,
                                                        tokenize_tagged_split)
from compress.core.windows import window_stride


def train_teacher(cfg: Any, out: str | os.PathLike) -> Path:
    """The tagger teacher (:func:`~compress.tasks.token_classification.teacher.train_token_teacher`)."""
    return train_token_teacher(cfg, out)


def distill(cfg: Any, out: str | os.PathLike) -> Path:
    """The tagger student, distilled per word (:func:`~compress.tasks.token_classification.distill.distill_stage`)."""
    return distill_stage(cfg, out)


def load_for_pruning(cfg: Any, source: Path, data: Any) -> tuple[Any, Any, bool]:
    """The tagger at ``source``; a model for another task, or for another number of tags, refused in one line."""
    check_model_task(source, TOKEN, cfg.data.data, str(source), data.num_labels)
    return load_classifier(source, data.num_labels, data.label_names, cfg.allow_pickle, task=TOKEN)


def pruning_scorer(cfg: Any, data: Any, tokenizer: Any, pad_id: int) -> PruningScorer:
    """Entity F1, per-type F1 and token accuracy per split (first sub-token per word, as the teacher scores), and,
    against the unpruned model's per-token logits, ``kl_to_unpruned`` over the labelled tokens."""
    tokenized = {name: tokenize_tagged_split(split, tokenizer, cfg.max_length, what=name, stride=cfg.stride)
                 for name, split in data.splits.items()}
    splits = [name for name in ("validation", "test") if name in tokenized]

    def evaluate(m, reference: dict[str, list[np.ndarray]] | None, desc: str) -> tuple[dict[str, Any], dict[str, Any]]:
        logits = {name: token_logits(m, tokenized[name], 64, pad_id=pad_id) for name in splits}
        metrics = {}
        for name in splits:
            metrics[name] = score_token_logits(logits[name], tokenized[name], data.tags(name), data.label_names)
            if reference:
                labelled = [np.asarray(lab) != -100 for lab in tokenized[name]["labels"]]
                metrics[name]["kl_to_unpruned"] = kl_divergence(
                    np.concatenate([r[k] for r, k in zip(reference[name], labelled)]),
                    np.concatenate([x[k] for x, k in zip(logits[name], labelled)]))
        return metrics, logits

    return PruningScorer(tokenized["train"], token_collator(tokenizer), evaluate,
                         lambda final: {"stride": window_stride(cfg.stride, cfg.max_length)})


def pretrain_data(data: Any) -> Any:
    """The tagging data; its sentences are read as running text (:func:`compress.stages.transfer.split_texts`)."""
    return data.load_tagging()
