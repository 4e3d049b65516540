"""The ``training``-aspect protocol: the teacher and distillation stages, pruning's scoring and recovery, and the
task data that pre-training reads.

The stage modules (``compress/stages/teacher.py``, ``compress/stages/distill/``, ``compress/stages/prune/``, ``compress/stages/pretrain.py``)
hold what every task shares (the config, the device and precision, the artifact folder); the task's ``training``
module does the rest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol


@dataclass(frozen=True)
class PruningScorer:
    """What the prune stage needs of a task to keep a model accurate while it removes heads and neurons.

    ``train_rows``: the tokenized training rows the importance batches are drawn from; ``collate``: pads a list of
    them into one batch of tensors (with the labels the ``taylor`` importance backpropagates). ``evaluate(model,
    reference, desc)`` scores ``model`` on validation and test and returns ``(metrics, outputs)`` per split, each
    split's metrics holding the task's primary metric; given the unpruned model's ``outputs`` as ``reference``, it
    adds how far the model moved from them where the task can say. ``record(final_metrics)`` is what the pruned
    artifact's ``compress.json`` says of how the task reads its texts (stride, windows, a null threshold).
    """

    train_rows: Any
    collate: Callable[[list[dict[str, Any]]], dict[str, Any]]
    evaluate: Callable[[Any, dict[str, Any] | None, str], tuple[dict[str, Any], dict[str, Any]]]
    record: Callable[[dict[str, Any]], dict[str, Any]]


class PROTOCOL(Protocol):
    """The members every task's ``training`` aspect provides."""

    def train_teacher(self, cfg: Any, out: str | os.PathLike) -> Path:
        """Fine-tune (or keep, when its head is trained) and evaluate a teacher of this task from ``cfg``
        (:class:`compress.config.TeacherConfig`); write it as an artifact at ``out`` and return that folder."""

    def distill(self, cfg: Any, out: str | os.PathLike) -> Path:
        """Distil ``cfg.teacher`` into ``cfg.student`` on this task's data (:class:`compress.config.DistillConfig`);
        write the student artifact at ``out`` and return that folder."""

    def load_for_pruning(self, cfg: Any, source: Path, data: Any) -> tuple[Any, Any, bool]:
        """``(model, tokenizer, has_head)`` of the artifact at ``source`` that ``bert-compress prune`` (``cfg``, a
        :class:`compress.config.PruneConfig`) is to prune, loaded for ``data`` (the task's data); a model for
        another task is refused in one line."""

    def pruning_scorer(self, cfg: Any, data: Any, tokenizer: Any, pad_id: int) -> PruningScorer:
        """How the prune stage scores and recovers a model of this task on ``data`` (:class:`PruningScorer`),
        the texts tokenized with ``tokenizer`` as ``cfg`` (a :class:`compress.config.PruneConfig`) says."""

    def pretrain_data(self, data: Any) -> Any:
        """The task's data (from ``data``, :class:`compress.config.DataOptions`) whose texts continued masked-LM
        pre-training reads (:func:`compress.stages.transfer.split_texts`); data it cannot read as running text is refused
        in one line."""
