"""One dataclass per stage (teacher, distill, pretrain, prune, export, quantize, bench, gate, optimize)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Mapping

from compress.config.choices import (SOFT_LABEL_RUNTIMES, UNLABELED_SELECTIONS, SOFT_LABELS_HELP, UNLABELED_BALANCE_HELP, SCHEDULES, MENTION_POOLS, IMPORTANCES, SCOPES,
                                     TIMING_LENGTHS, TIMING_LENGTHS_HELP, QUANTIZE_METHODS, QUANTIZE_GRAPHS, AUGMENT_OPS, TRAIN_FLAGS, SELECTION_FLAGS, PRUNE_TRAIN_FLAGS,
                                     FULL, QUICK, MAX_TYPE_F1_DROP, MAX_TYPE_F1_DROP_HELP)
from compress.config.engine import (Problem, _choices, _Bad, _is_int, ConfigBase, _problem, _device_problems,
                                    _helped, _precision)
from compress.config.shared import DataOptions, ClassifierSettings, KDSettings, RunSettings, TrainSettings, StudentSpec, transfer_problems
from compress.core.errors import CompressError
from compress.core.windows import POOLINGS
from compress.stages.losses import check_terms
from compress.stages.losses import names as loss_names
from compress.core.machine import available_cpus
from compress.stages.losses import LossTerm


# ----------------------------------------------------------------------------- the stages


def _finetune(value: Any, name: str) -> bool | None:
    """``--finetune auto|yes|no`` (or true/false/null): ``None`` fine-tunes only a model without a head."""
    if value is None or isinstance(value, bool):
        return value
    if value in ("auto", "yes", "no"):
        return None if value == "auto" else value == "yes"
    raise _Bad(f"{name} must be one of auto, yes, no, got {value!r}")


def _registered(kind: str) -> dict[str, Any]:
    """Field metadata: the value must name a registered loss of ``kind`` (the registry is the one list)."""
    def parse(value: Any, name: str) -> str:
        known = loss_names(kind)
        if not isinstance(value, str) or value not in known:
            raise _Bad(f"{name} must be one of {', '.join(known)}, got {value!r}")
        return value
    return {"parse": parse}


def _loss_list(value: Any, name: str) -> list[dict] | None:
    """``losses``: a list of ``{loss, weight, on, name}`` mappings, or ``LOSS[@SIGNAL][:WEIGHT],...``
    (``soft_ce:1,hard_ce:0.5,hidden_nmse@hidden:1``). Each term is checked later against the registry."""
    if value is None:
        return None
    if isinstance(value, str):
        terms = []
        for item in (v.strip() for v in value.split(",")):
            if not item:
                continue
            spec, _, weight = item.partition(":")
            loss, _, on = spec.partition("@")
            term: dict[str, Any] = {"loss": loss.strip()}
            if on.strip():
                term["on"] = on.strip()
            if weight.strip():
                try:
                    term["weight"] = float(weight)
                except ValueError:
                    raise _Bad(f"{name}: weight of {item!r} must be a number (LOSS[@SIGNAL][:WEIGHT])") from None
            terms.append(term)
        value = terms
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, Mapping) for t in value):
        raise _Bad(f"{name} must be a list of loss terms such as [{{loss: soft_ce, weight: 1.0}}], got {value!r}")
    return [dict(t) for t in value]


@dataclass
class TeacherConfig(ConfigBase, ClassifierSettings):
    """Settings of the teacher stage (``bert-compress teacher``)."""

    FLAT: ClassVar[dict[str, tuple[str, str]]] = {k: ("train", k) for k in (*TRAIN_FLAGS, *SELECTION_FLAGS)}

    model: str = "mpnet-base"
    data: DataOptions = field(default_factory=DataOptions)
    train: TrainSettings = field(default_factory=lambda: TrainSettings(epochs=2.0, lr=2e-5))
    #: ``None``: fine-tune only when the model has no classifier head for the task yet.
    finetune: bool | None = field(default=None, metadata={"parse": _finetune})
    #: Branch, tag or commit of ``model`` when it is a Hugging Face Hub id (compress.core.hub).
    revision: str | None = None
    #: Keep the embeddings and the bottom N encoder layers fixed while fine-tuning: the backward pass stops
    #: above them, so each step costs less (compress.stages.training.freeze_bottom_layers; docs/lab/ner.md measures it).
    freeze_layers: int = field(default=0, metadata={"help": (
        "keep the embeddings and the bottom N encoder layers fixed while fine-tuning (0: train all); the backward "
        "pass skips them, so a step is cheaper")})

    def problems(self) -> list[Problem]:
        problems = self._nested_problems("train") + self.run_problems()
        if self.freeze_layers < 0:
            problems.append(_problem("freeze_layers", f"--freeze-layers must be 0 or more, got {self.freeze_layers}"))
        return problems


@dataclass
class DistillConfig(ConfigBase, KDSettings):
    """Settings of the distill stage (``bert-compress distill``)."""

    FLAT: ClassVar[dict[str, tuple[str, str]]] = {**{k: ("train", k) for k in (*TRAIN_FLAGS, *SELECTION_FLAGS)},
                                                  "init": ("student", "init")}

    teacher: str = ""
    data: DataOptions = field(default_factory=DataOptions)
    student: StudentSpec = field(default_factory=StudentSpec, metadata={"from_str": "shape"})
    train: TrainSettings = field(default_factory=lambda: TrainSettings(epochs=3.0, lr=5e-5))
    kd_loss: str = field(default="soft_ce", metadata=_registered("soft"))
    #: TinyBERT's intermediate losses. Off by default: logit distillation was 1.7 points better on
    #: 2,114 validation + test sentences (p = 0.0095) and 2.6x faster (docs/ablation.md).
    intermediate: bool = False
    alpha_embedding: float = 1.0
    alpha_hidden: float = 1.0
    alpha_attention: float = 1.0
    layer_map: str = "uniform"
    #: The states loss of the embedding and hidden-state terms the flags build (``--hidden-loss``).
    hidden_loss: str = field(default="hidden_mse", metadata=_registered("states"))
    #: Learning rate of the projections that bridge widths (``None``: the student's ``--lr``). Fresh
    #: projections start far from any useful map; at the student's small rate they barely move.
    projection_lr: float | None = None
    #: The objective as an explicit list of loss terms (``{loss, weight, on, name}`` mappings, or on
    #: the command line ``LOSS[@SIGNAL][:WEIGHT],...``). ``None``: the terms the ``alpha_*``,
    #: ``kd_loss``, ``hidden_loss`` and ``intermediate`` flags describe (:meth:`loss_terms`).
    losses: list[dict] | None = field(default=None, metadata={"parse": _loss_list})
    #: ``joint``: all losses together; ``two-stage``: intermediate losses alone for
    #: ``stage1_epochs``, then the prediction-layer losses alone (TinyBERT's schedule).
    schedule: str = field(default="joint", metadata=_choices(*SCHEDULES))
    stage1_epochs: float = 1.0
    keep_checkpoints: bool = False
    #: Transfer data (compress.stages.transfer): an unlabelled corpus the teacher labels, and augmented variants.
    unlabeled: str | None = None
    unlabeled_text_column: str = "text"
    unlabeled_text_pair_column: str | None = None
    unlabeled_weight: float = 1.0
    unlabeled_limit: int | None = None
    unlabeled_balance: str | None = field(default=None, metadata={"help": UNLABELED_BALANCE_HELP})
    unlabeled_select: str = field(default="random", metadata={**_choices(*UNLABELED_SELECTIONS), "help": (
        "which --unlabeled-limit texts to keep: random (a seeded sample) or similar (the texts with the highest TF-IDF "
        "cosine similarity to their nearest labelled training text)")})
    augment: int = 0
    augment_ops: str = ",".join(AUGMENT_OPS)
    #: Soft gold labels (compress.stages.gold_labels): a data column of label probabilities, or of a score that a
    #: two-label task turns into them, trained toward by soft CE at T=1 with weight ``alpha_gold``.
    gold_labels: str | None = field(default=None, metadata={
        "help": "data column of label probabilities (a list per row) or of a score (two labels: sigmoid(score / "
                "--gold-scale) is the second label's probability), trained toward beside the teacher; movie-reviews "
                "has 'rating', the mean of its raters' -4..+4 scores"})
    alpha_gold: float = field(default=1.0, metadata={"help": "weight of the gold-probability loss (with --gold-labels)"})
    #: A score of ``gold_scale`` means a probability of sigmoid(1) = 0.73. At 1, a movie-review sentence's mean rating
    #: of +1, +2, +3 gives 0.73, 0.88, 0.95: about the share of raters who would lean positive if each rater's score
    #: spread by ~1.7 around the mean (the logistic curve at scale 1 is close to the normal's at 1.7).
    gold_scale: float = field(default=1.0, metadata={"help": "scale of a score column: its probability is "
                                                             "sigmoid(score / scale)"})
    #: Sentence-vector distillation (compress.stages.distill.pooled): the student's mean-pooled last hidden states, through
    #: a learned projection, pulled toward the teacher's (cached with its soft labels) with weight ``alpha_pooled``.
    alpha_pooled: float = field(default=0.0, metadata={
        "help": "weight of a loss between the student's and the teacher's mean-pooled sentence vectors, the student's "
                "through a learned projection (0: off); the teacher's vectors are cached with its soft labels"})
    pooled_loss: str = field(default="pooled_cosine", metadata={**_registered("vectors"), "help": (
        "loss of --alpha-pooled: pooled_cosine (1 - cosine), pooled_nmse (squared error of standardised vectors) or "
        "pooled_relation (the in-batch matrices of cosine similarities between sentences)")})
    #: Tail averaging (compress.stages.distill.averaging): the student written is the mean of its weights over this last
    #: share of the optimiser steps (0: the last step's weights).
    average_tail: float = field(default=0.0, metadata={
        "help": "write the mean of the student's weights at 10 evenly spaced steps over this last share of training "
                "(for example 0.5) instead of the last step's weights; 0: off"})
    #: Teacher ensembles (compress.stages.distill.ensemble): more teachers whose logits are averaged with ``teacher``'s.
    ensemble: str | None = field(default=None, metadata={
        "help": "comma list of more teacher folders (other seeds, pooling or schedules): the soft labels are the mean "
                "of their and --teacher's logits; the student is scored against both the ensemble and --teacher"})
    #: Entity-word weighting (compress.tasks.token_classification.distill.entity_weights): nine words in ten of a tagging set are ``O``.
    entity_weight: float = field(default=1.0, metadata={
        "help": "tagging data: how much harder a word inside an entity (by its gold tag or the teacher's top tag) pulls "
                "in the soft and hard losses than an O word (1: every word alike)"})
    #: Mention-replaced variants (compress.stages.transfer.mentions): tagging transfer rows that keep their gold tags.
    mention_variants: int = field(default=0, metadata={
        "help": "tagging data: N variants of each training sentence with an entity, its mentions swapped for other "
                "training mentions of the same type; the gold tags follow and the teacher labels them (0: off)"})
    mention_pool: str = field(default="train", metadata={**_choices(*MENTION_POOLS), "help": (
        "where --mention-variants takes the replacement mentions: train (the training split's) or train+transfer "
        "(also the mentions the teacher tags with confidence in the --unlabeled text: names the gold data does not "
        "have)")})
    #: Branch, tag or commit of ``teacher`` when it is a Hugging Face Hub id (compress.core.hub).
    revision: str | None = None
    #: Distil even from a teacher no better than chance on validation (compress.core.head_check).
    allow_untrained_teacher: bool = False
    #: ``--soft-labels``: who labels the training rows and the transfer set (compress.stages.distill.teacher_copies).
    soft_labels: str = field(default="auto", metadata={**_choices(*SOFT_LABEL_RUNTIMES), "help": SOFT_LABELS_HELP})
    #: ``--soft-labels-min-agreement``: the INT8 teacher's labels are used only at or above this agreement
    #: with the PyTorch teacher on the validation split.
    soft_labels_min_agreement: float = field(default=0.995, metadata={
        "help": "use the INT8 teacher's labels only where its answers agree with the PyTorch teacher's on at least this "
                "share of the validation split (default 0.995)"})

    #: Sentence-encoder distillation (compress.tasks.sentence_embedding.distill): which loss learns the teacher's
    #: vectors (``None``: ``both``), and whether the projection that bridges widths is stored in the artifact.
    embedding_loss: str | None = field(default=None, metadata={
        "help": "a sentence encoder: mse (the teacher's vectors, through a learned projection when the widths "
                "differ), cosine (the batch's cosine matrix, no projection) or both (default both)"})
    keep_projection: bool = field(default=False, metadata={
        "help": "a sentence encoder: store the learned projection student -> teacher width (projection.safetensors) "
                "in the artifact"})

    #: Fields a config records only when set, so configs (and checkpoints' fingerprints) written before they existed
    #: keep their identity (:meth:`compress.config.ConfigBase.fingerprint`).
    WHEN_SET: ClassVar[dict[str, Any]] = {"embedding_loss": None, "keep_projection": False}

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        return {k: v for k, v in out.items() if k not in self.WHEN_SET or v != self.WHEN_SET[k]}

    #: The settings beyond logit distillation, each with the value that means "off": what the tagger's and the
    #: reader's distillation (soft CE over words or window positions, plus hard CE) do not apply yet.
    BEYOND_LOGITS: ClassVar[dict[str, Any]] = {"intermediate": False, "unlabeled": None, "augment": 0, "losses": None,
                                               "kd_loss": "soft_ce", "schedule": "joint"}
    #: Settings only a sentence classifier's distillation applies: what each is, and its value that means "off".
    CLASSIFIER_ONLY: ClassVar[dict[str, tuple[str, Any]]] = {
        "gold_labels": ("soft gold labels", None), "ensemble": ("teacher ensembles", None),
        "alpha_pooled": ("sentence-vector losses", 0.0), "average_tail": ("tail-averaged weights", 0.0)}
    #: Settings only a tagger's distillation applies: what each is, and its value that means "off".
    TAGGER_ONLY: ClassVar[dict[str, tuple[str, Any]]] = {"entity_weight": ("entity-word weights", 1.0),
                                                         "mention_variants": ("mention-replaced variants", 0),
                                                         "mention_pool": ("mention pools", "train")}
    #: Loss signals only a sentence classifier's distillation computes (the data's gold probabilities, sentence vectors).
    CLASSIFIER_ONLY_SIGNALS: ClassVar[tuple[str, ...]] = ("gold", "pooled")

    def refuse_beyond_logits(self, what: str, allowed: tuple[str, ...] = ()) -> None:
        """One line naming the first setting of :attr:`BEYOND_LOGITS` that is on, for a distillation that does not
        apply it (``what``: ``"a tagger uses soft CE over words plus hard CE only, for now; ... tagging data"``);
        the settings in ``allowed`` are the ones that distillation does apply. The :attr:`CLASSIFIER_ONLY` settings
        are refused first, each with its own line, and the sentence encoder's (:meth:`refuse_encoder_only`)."""
        self.refuse_encoder_only("tagging or QA data")
        for name, (kind, off) in self.CLASSIFIER_ONLY.items():
            if getattr(self, name) != off:
                raise CompressError(f"--{name.replace('_', '-')} {getattr(self, name)!r}: {kind} apply to sentence "
                                    "classification only, for now; leave it out for tagging or QA data")
        for term in self.loss_terms():  # a --losses list may name the classifier-only signals directly
            if term.on in self.CLASSIFIER_ONLY_SIGNALS and term.weight > 0:
                raise CompressError(f"--losses: the term {term.name!r} on {term.on} applies to sentence classification "
                                    "only, for now; leave it out for tagging or QA data")
        for name, off in self.BEYOND_LOGITS.items():
            if name not in allowed and getattr(self, name) != off:
                raise CompressError(f"--{name.replace('_', '-')} {getattr(self, name)!r}: distilling {what}")

    def refuse_encoder_only(self, task: str) -> None:
        """One line naming the first sentence-encoder setting (:attr:`WHEN_SET`) that is set, for the distillation
        of ``task``, which does not apply it."""
        for name, off in self.WHEN_SET.items():
            if getattr(self, name) != off:
                raise CompressError(f"--{name.replace('_', '-')} {getattr(self, name)!r}: applies to a sentence "
                                    f"encoder's distillation (a sentence-transformers teacher) only; leave it out for "
                                    f"{task}")

    def refuse_tagger_only(self, task: str) -> None:
        """One line naming the first :attr:`TAGGER_ONLY` setting that is on, for the distillation of ``task``
        (``"sentence classification"``, ``"question answering"``), which does not apply it; and the sentence
        encoder's settings (:meth:`refuse_encoder_only`)."""
        self.refuse_encoder_only(task)
        for name, (kind, off) in self.TAGGER_ONLY.items():
            if getattr(self, name) != off:
                raise CompressError(f"--{name.replace('_', '-')} {getattr(self, name)!r}: {kind} apply to token "
                                    f"classification (tagging data) only; leave it out for {task}")

    def problems(self) -> list[Problem]:
        problems = self._nested_problems("train") + self._nested_problems("student") + self.kd_problems()
        if not self.entity_weight > 0:
            problems.append(_problem("entity_weight", f"--entity-weight must be > 0, got {self.entity_weight}"))
        if self.mention_variants < 0:
            problems.append(_problem("mention_variants", f"--mention-variants must be >= 0, got {self.mention_variants}"))
        if self.mention_pool == "train+transfer" and not (self.mention_variants and self.unlabeled):
            problems.append(_problem("mention_pool", "--mention-pool train+transfer takes mentions from the transfer "
                                                     "text into the variants: give --mention-variants N and --unlabeled"))
        for name in ("alpha_embedding", "alpha_hidden", "alpha_attention"):
            if getattr(self, name) < 0:
                problems.append(_problem(name, f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}"))
        if self.losses is None and self.alpha_kd == 0 and self.alpha_hard == 0 and not self.intermediate \
                and not (self.gold_labels is not None and self.alpha_gold > 0):
            problems.append(_problem("alpha_kd", "every loss weight is 0: set --alpha-kd or --alpha-hard above 0"))
        if self.kd_loss not in loss_names("soft"):
            problems.append(_problem("kd_loss", f"--kd-loss must be one of {', '.join(loss_names('soft'))}, "
                                                f"got {self.kd_loss!r}"))
        if self.hidden_loss not in loss_names("states"):
            problems.append(_problem("hidden_loss", f"--hidden-loss must be one of {', '.join(loss_names('states'))}, "
                                                    f"got {self.hidden_loss!r}"))
        if self.alpha_gold < 0:
            problems.append(_problem("alpha_gold", f"--alpha-gold must be >= 0, got {self.alpha_gold}"))
        if not self.gold_scale > 0:
            problems.append(_problem("gold_scale", f"--gold-scale must be > 0, got {self.gold_scale}"))
        if self.gold_labels is None and any(t.on == "gold" for t in self.loss_terms()):
            problems.append(_problem("losses", "--losses has a term on gold: name the column of label probabilities "
                                               "with --gold-labels"))
        if not 0 <= self.average_tail <= 1:
            problems.append(_problem("average_tail", f"--average-tail is a share of the training steps, from 0 (off) "
                                                     f"to 1, got {self.average_tail}"))
        if self.average_tail > 0 and self.train.keep_best:
            problems.append(_problem("average_tail", "--average-tail and --keep-best both choose the weights written "
                                                     "(the mean of the last steps, the best epoch): give one"))
        if self.alpha_pooled < 0:
            problems.append(_problem("alpha_pooled", f"--alpha-pooled must be >= 0, got {self.alpha_pooled}"))
        if self.wants_pooled:
            if self.ensemble is not None:
                problems.append(_problem("alpha_pooled", "sentence-vector terms take --teacher's vectors and an "
                                                         "ensemble averages logits only: drop --ensemble or the "
                                                         "pooled term"))
            if self.soft_labels not in ("auto", "pytorch"):  # a copy of the teacher: logits only
                problems.append(_problem("soft_labels", f"--soft-labels {self.soft_labels} gives logits only and the "
                                                        "sentence-vector term needs the PyTorch teacher's vectors: use "
                                                        "--soft-labels pytorch (or auto)"))
        if self.projection_lr is not None and self.projection_lr <= 0:
            problems.append(_problem("projection_lr", f"--projection-lr must be > 0, got {self.projection_lr}"))
        if self.losses is not None:
            problems += [_problem("losses", f"--losses: {m}") for m in check_terms(self.loss_terms())]
        if self.schedule not in SCHEDULES:
            problems.append(_problem("schedule", f"--schedule must be joint or two-stage, got {self.schedule!r}"))
        if self.schedule == "two-stage" and not 0 < self.stage1_epochs < self.train.epochs:
            problems.append(_problem("stage1_epochs", f"--stage1-epochs must lie between 0 and --epochs "
                                                      f"({self.train.epochs}), got {self.stage1_epochs}"))
        if self.schedule == "two-stage" and not any(p.keys == ("losses",) for p in problems) \
                and not self.wants_intermediate:
            problems.append(_problem("schedule", "--schedule two-stage trains the intermediate losses first, and there "
                                                 "are none: add --intermediate (or intermediate terms to --losses), "
                                                 "or use --schedule joint"))
        problems += transfer_problems(self.augment, self.augment_ops, self.unlabeled, self.unlabeled_weight,
                                      self.unlabeled_limit, self.unlabeled_text_pair_column)
        if self.unlabeled_select == "similar":
            if self.unlabeled_limit is None:
                problems.append(_problem("unlabeled_select", "--unlabeled-select similar keeps the --unlabeled-limit "
                                                             "texts most like the task's: give --unlabeled-limit N"))
            if self.unlabeled_balance:
                problems.append(_problem("unlabeled_select", "--unlabeled-select similar and --unlabeled-balance pick "
                                                             "the sample two ways: choose one"))
        if self.unlabeled_balance and not self.unlabeled:
            problems.append(_problem("unlabeled_balance", "--unlabeled-balance needs --unlabeled (the corpus whose "
                                                          "column it names)"))
        if not 0 < self.soft_labels_min_agreement <= 1:
            problems.append(_problem("soft_labels_min_agreement", "--soft-labels-min-agreement must lie in (0, 1] "
                                     f"(0.995 = 99.5% of validation sentences), got {self.soft_labels_min_agreement}"))
        return problems

    def loss_terms(self) -> list[Any]:
        """The objective as a list of :class:`compress.stages.losses.LossTerm`: ``losses`` when given,
        else the terms the flags describe (soft labels, hard labels, with ``gold_labels`` the data's own label
        probabilities, and with ``intermediate`` the
        embedding, hidden-state and attention terms). Terms of weight 0 are kept, so ``compress.json``
        shows what was off."""

        if self.losses is not None:
            return [LossTerm.from_dict(t) for t in self.losses]
        terms = [LossTerm(self.kd_loss, self.alpha_kd), LossTerm("hard_ce", self.alpha_hard)]
        if self.gold_labels is not None:
            terms.append(LossTerm("soft_ce", self.alpha_gold, on="gold"))
        if self.alpha_pooled > 0:
            terms.append(LossTerm(self.pooled_loss, self.alpha_pooled, on="pooled"))
        if self.intermediate:
            terms += [LossTerm(self.hidden_loss, self.alpha_embedding, on="embeddings"),
                      LossTerm(self.hidden_loss, self.alpha_hidden, on="hidden"),
                      LossTerm("attention_mse", self.alpha_attention)]
        return terms

    @property
    def wants_pooled(self) -> bool:
        """Whether any term of positive weight compares sentence vectors (compress.stages.distill.pooled)."""
        return any(t.pooled and t.weight > 0 for t in self.loss_terms())

    @property
    def wants_intermediate(self) -> bool:
        """Whether any term of positive weight compares intermediate signals (embeddings, states, attention)."""
        return any(t.intermediate and t.weight > 0 for t in self.loss_terms())


@dataclass
class PretrainConfig(ConfigBase, RunSettings):
    """Settings of the pretrain stage (``bert-compress pretrain``): continued masked-LM training."""

    FLAT: ClassVar[dict[str, tuple[str, str]]] = {k: ("train", k) for k in TRAIN_FLAGS}

    model: str = "mpnet-base"
    #: Unlabelled text: a built-in corpus (movie-reviews-unlabeled) or a .txt/csv/tsv/jsonl/parquet file.
    unlabeled: str = "movie-reviews-unlabeled"
    unlabeled_text_column: str = "text"
    #: Task data, optional: its validation and test texts are removed from the corpus (they must stay
    #: unseen), and with ``task_text`` its training texts (without labels) are added to it.
    data: DataOptions | None = None
    task_text: bool = True
    train: TrainSettings = field(default_factory=lambda: TrainSettings(epochs=1.0, lr=5e-5))
    mlm_probability: float = 0.15
    whole_word: bool = True
    #: Share of the corpus held out to measure the masked-LM loss before and after (at most 2,000 texts).
    eval_share: float = 0.02
    #: A seeded sample of at most this many corpus texts.
    corpus_limit: int | None = None
    #: Draw that sample evenly across a column's values (its sources or channels).
    unlabeled_balance: str | None = field(default=None, metadata={"help": UNLABELED_BALANCE_HELP})

    def problems(self) -> list[Problem]:
        problems = self._nested_problems("train") + self.run_problems()
        if not 0 < self.mlm_probability < 1:
            problems.append(_problem("mlm_probability",
                                     f"--mlm-probability must lie in (0, 1), got {self.mlm_probability}"))
        if not 0 < self.eval_share < 0.5:
            problems.append(_problem("eval_share", f"--eval-share must lie in (0, 0.5), got {self.eval_share}"))
        if self.max_length < 8:
            problems.append(_problem("max_length", f"--max-length must be >= 8, got {self.max_length}"))
        if self.corpus_limit is not None and self.corpus_limit < 10:
            problems.append(_problem("corpus_limit", f"--corpus-limit must be >= 10, got {self.corpus_limit}"))
        return problems


@dataclass
class PruneConfig(ConfigBase, KDSettings):
    """Settings of the prune stage (``bert-compress prune``)."""

    FLAT: ClassVar[dict[str, tuple[str, str]]] = {k: ("train", k) for k in PRUNE_TRAIN_FLAGS}

    model: str = ""
    data: DataOptions = field(default_factory=DataOptions)
    #: Share of attention heads to remove, in [0, 1).
    heads: float = 0.0
    #: Share of FFN neurons to remove, in [0, 1).
    ffn: float = 0.0
    importance: str = field(default="magnitude", metadata=_choices(*IMPORTANCES))
    scope: str = field(default="uniform", metadata=_choices(*SCOPES))
    #: Batches of training data whose loss gradients feed the Taylor scores.
    importance_batches: int = 8
    #: Epochs of distillation from the unpruned model (or ``teacher``) after pruning; 0 = none.
    recover_epochs: float = 0.0
    teacher: str | None = None
    train: TrainSettings = field(default_factory=lambda: TrainSettings(epochs=0.0, lr=5e-5))
    #: Recovery's intermediate losses (on here: the pruned model keeps the teacher's widths).
    intermediate: bool = True

    def _after_from_dict(self, given: Mapping[str, Any]) -> None:
        # The command line trains recovery for --recover-epochs: the flat form says so once.
        train = given.get("train")
        if "recover_epochs" in given and not (isinstance(train, Mapping) and "epochs" in train):
            if isinstance(self.recover_epochs, (int, float)):
                self.train = replace(self.train, epochs=float(self.recover_epochs))

    def problems(self) -> list[Problem]:
        problems = []
        if not self.model:
            problems.append(_problem("model", "--model is required"))
        for name in ("heads", "ffn"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= float(value) < 1.0:
                problems.append(_problem(name, f"--{name} must be a share in [0, 1) (0.5 removes half), got {value!r}"))
        if self.importance not in IMPORTANCES:
            problems.append(_problem("importance", f"--importance must be one of {', '.join(IMPORTANCES)}, got "
                                                   f"{self.importance!r}"))
        if self.scope not in SCOPES:
            problems.append(_problem("scope", f"--scope must be one of {', '.join(SCOPES)}, got {self.scope!r}"))
        if self.importance_batches < 1:
            problems.append(_problem("importance_batches", f"--importance-batches must be >= 1, got "
                                                           f"{self.importance_batches}"))
        if not self.recover_epochs >= 0:
            problems.append(_problem("recover_epochs", f"--recover-epochs must be >= 0, got {self.recover_epochs}"))
        if self.teacher and not self.recover_epochs:
            problems.append(_problem("teacher", "--teacher is used only for recovery; give --recover-epochs N (> 0) "
                                                "or drop --teacher"))
        return problems + self.kd_problems() + self._nested_problems("train")


@dataclass
class ExportConfig(ConfigBase):
    """Settings of the export stage (``bert-compress export``): ONNX + ONNX Runtime fusions + parity check."""

    model: str = ""
    opset: int = 17
    optimize: bool = True
    #: Largest absolute logit difference from PyTorch a graph may have to be written.
    atol: float = 1e-4

    def problems(self) -> list[Problem]:
        problems = []
        if not self.model:
            problems.append(_problem("model", "--model is required"))
        if self.opset < 14:
            problems.append(_problem("opset", f"--opset {self.opset} is too old: these graphs need operators of "
                                              "opset 14 and later; use --opset 17."))
        if not self.atol > 0:
            problems.append(_problem("atol", f"atol must be > 0, got {self.atol}"))
        return problems


def _type_budget_problems(cfg: Any) -> list[Problem]:
    """``max_type_f1_drop``, shared by quantize and optimize: an F1 share in [0, 1]."""
    budget = cfg.max_type_f1_drop
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 <= budget <= 1:
        return [_problem("max_type_f1_drop", f"--max-type-f1-drop must be an F1 share in [0, 1] (0.03 = three points; "
                                             f"1 turns the per-type rule off), got {budget!r}.")]
    return []


@dataclass
class QuantizeConfig(ConfigBase):
    """Settings of the quantize stage (``bert-compress quantize``): INT8 or bf16 checked against fp32."""

    model: str = ""
    method: str = field(default="ort-dynamic", metadata=_choices(*QUANTIZE_METHODS))
    #: Data whose validation split checks the accuracy change (``None``: not measured, no fallbacks).
    data: DataOptions | None = None
    max_accuracy_drop: float = 0.01
    #: A tagger's per-type F1 budget on validation (compress.tasks.token_classification.scoring.types_over_budget;
    #: other tasks ignore it).
    max_type_f1_drop: float = field(default=MAX_TYPE_F1_DROP, metadata={"help": MAX_TYPE_F1_DROP_HELP})
    per_channel: bool = False
    reduce_range: bool = False
    #: ONNX graph quantized by ort-dynamic / ort-static: fused or unfused (``None``: fused for ort-dynamic,
    #: unfused for ort-static, or the graph an onnx-fp32 --model holds).
    graph: str | None = None
    #: Comma-separated ONNX operator types to quantize (``None``: the method's default).
    op_types: str | None = None
    #: Training texts that calibrate ort-static.
    calibration_size: int = 256
    #: ``--device`` of the accuracy check (the fp32 model and PyTorch candidates; ONNX Runtime's provider).
    device: str = "auto"
    precision: str = _precision()

    def problems(self) -> list[Problem]:
        problems = _device_problems(self)
        if not self.model:
            problems.append(_problem("model", "--model is required"))
        if self.graph is not None and self.graph not in QUANTIZE_GRAPHS:
            problems.append(_problem("graph", f"--graph {self.graph!r} is unknown; use {' or '.join(QUANTIZE_GRAPHS)}."))
        if self.calibration_size < 1:
            problems.append(_problem("calibration_size", f"--calibration-size must be at least 1, got "
                                                         f"{self.calibration_size}."))
        if self.method in ("torch-dynamic", "torch-bf16") and (self.graph is not None or self.op_types):
            problems.append(_problem("graph" if self.graph is not None else "op_types",
                                     f"--graph and --op-types choose an ONNX graph and its quantized operators; "
                                     f"--method {self.method} runs PyTorch. Drop them, or use ort-dynamic or ort-static."))
        if self.method not in QUANTIZE_METHODS:
            problems.append(_problem("method", f"--method {self.method!r} is unknown; use one of "
                                               f"{', '.join(QUANTIZE_METHODS)}."))
        drop = self.max_accuracy_drop
        if isinstance(drop, bool) or not isinstance(drop, (int, float)) or not math.isfinite(drop):
            problems.append(_problem("max_accuracy_drop", f"--max-accuracy-drop must be a finite number (0.01 = one "
                                                          f"point), got {drop!r}."))
        problems += _type_budget_problems(self)
        if self.method.startswith("openvino-") and (self.graph is not None or self.op_types or self.reduce_range):
            problems.append(_problem("graph" if self.graph is not None else "op_types" if self.op_types else
                                     "reduce_range", f"--method {self.method} converts the unfused fp32 graph and lets "
                                                     "NNCF choose the quantized operators; drop --graph, --op-types "
                                                     "and --reduce-range."))
        if self.method in ("torch-dynamic", "torch-bf16") and self.reduce_range:
            problems.append(_problem("reduce_range", "--reduce-range applies to the ONNX Runtime methods only: "
                                                     "PyTorch's dynamic INT8 kernels already reduce the activation "
                                                     "range. Drop the flag."))
        return problems


def _optional_choice(*values: str) -> dict[str, Any]:
    """Field metadata: ``None`` (not set) or one of ``values``."""
    def parse(value: Any, name: str) -> str | None:
        if value is None or value in values:
            return value
        raise _Bad(f"{name} must be one of {', '.join(values)}, got {value!r}")
    return {"parse": parse}


def _seed_groups(value: Any, name: str) -> dict[str, list[str]]:
    """``seeds``: ``{NAME: [DIR, ...]}``, or ``NAME=DIR,DIR`` strings / ``(NAME, [DIR, ...])`` pairs (the CLI's form)."""
    if value is None:
        return {}
    items = value.items() if isinstance(value, Mapping) else value
    if isinstance(items, str):
        items = [items]
    groups: dict[str, list[str]] = {}
    try:
        for item in items:
            if isinstance(item, str):
                group, _, dirs = item.partition("=")
                item = (group, [d for d in dirs.split(",") if d.strip()])
            group, dirs = item
            groups[str(group).strip()] = [str(d) for d in ([dirs] if isinstance(dirs, str) else dirs)]
    except (TypeError, ValueError):
        raise _Bad(f"{name} must map a group name to its artifact folders (NAME=DIR,DIR,...), got {value!r}") from None
    return groups


@dataclass
class BenchConfig(ConfigBase):
    """What to measure. ``None`` settings take the ``--quick`` or full defaults (see :meth:`resolved`)."""

    artifacts: list[str] = field(default_factory=list)
    reference: str = ""
    data: DataOptions = field(default_factory=DataOptions)
    split: str = "test"
    batch_sizes: list[int] | None = None
    seq_lens: list[int] | None = None
    threads: int | None = None
    warmup: int | None = None
    runs: int | None = None
    quick: bool = False
    memory: bool = True
    progress: bool = True
    #: ``bench --history FILE.jsonl``: append this run's summary line there (see :mod:`benchmarks.history`).
    history: str | None = None
    #: ``bench --seeds NAME=DIR,DIR,...``: students of one recipe trained with different seeds, gated on their
    #: mean. Every member's quality is measured; latency only for the first (same shape, same speed).
    seeds: dict = field(default_factory=dict, metadata={"parse": _seed_groups})
    #: ``--traffic SPLIT``: replay that split's texts at their real lengths (batch 1 per request, and batched).
    traffic: str | None = None
    #: ``--traffic-limit N``: replay only the first N texts of the split.
    traffic_limit: int | None = None
    #: ``--traffic-file FILE``: unlabelled texts (.txt, or a csv/jsonl/... text column) on which every artifact's
    #: agreement with the reference is measured (``benchmarks.traffic.measure_traffic_agreement``).
    traffic_file: str | None = None
    #: ``--load-clients 1,2,4``: client-thread counts of the load mode (``None``: no load mode).
    load_clients: list[int] | None = None
    #: ``--load-requests N``: requests per client-thread count.
    load_requests: int = 200
    #: ``--stride`` / ``--pooling``: how every artifact reads a text longer than its window, in place of what each
    #: recorded when it was trained (``None``: the recorded one), so window settings can be compared on the same
    #: models and examples; results.json records what each artifact used.
    stride: int | None = _helped(None, "tokens two neighbouring windows of a text longer than an artifact's window "
                                 "share, for every artifact (default: what each artifact recorded)")
    pooling: str | None = field(default=None, metadata={
        **_optional_choice(*POOLINGS), "choices": POOLINGS,
        "help": "how the windows' logits of a long text become one for every classifier: mean or max (default: "
                "what each artifact recorded)"})
    #: ``--device``: where every artifact runs (one device per bench run; results.json records it).
    device: str = "auto"
    precision: str = _precision()

    def resolved(self) -> "BenchConfig":
        """Fill unset settings from the quick or full preset and validate them all."""

        preset = QUICK if self.quick else FULL
        data = self.data
        if data.limit is None and preset["limit"]:
            data = replace(data, limit=preset["limit"])
        out = replace(
            self, data=data,
            batch_sizes=tuple(self.batch_sizes or preset["batch_sizes"]),
            seq_lens=tuple(self.seq_lens or preset["seq_lens"]),
            threads=self.threads if self.threads is not None else available_cpus(),
            warmup=self.warmup if self.warmup is not None else preset["warmup"],
            runs=self.runs if self.runs is not None else preset["runs"],
        )
        out.validate()
        return out

    def problems(self) -> list[Problem]:
        problems = _device_problems(self)
        if not self.artifacts:
            problems.append(_problem("artifacts", "bench: give at least one artifact folder to measure."))
        for key, name in (("batch_sizes", "--batch-sizes"), ("seq_lens", "--seq-lens")):
            values = getattr(self, key)
            if values is not None and (not values or any(not _is_int(v) or v < 1 for v in values)):
                problems.append(_problem(key, f"{name} must be positive integers such as 1,8,32; got {list(values)}."))
        if self.seq_lens and all(_is_int(v) for v in self.seq_lens) and min(self.seq_lens) < 2:
            problems.append(_problem("seq_lens", f"--seq-lens must be at least 2 (a [CLS] and a [SEP] token); got "
                                                 f"{list(self.seq_lens)}."))
        for key, low in (("threads", 1), ("runs", 1), ("warmup", 0)):
            value = getattr(self, key)
            if value is not None and value < low:
                more = "at least 1" if low else "0 or more"
                problems.append(_problem(key, f"--{key} must be {more}, got {value}."))
        for name, members in self.seeds.items():
            if len(members) < 2:
                problems.append(_problem("seeds", f"--seeds {name}=...: a seed group needs at least two artifact "
                                                  f"folders (got {len(members)}); give them comma-separated, e.g. "
                                                  f"{name}=runs/s0,runs/s1."))
        for key in ("traffic_limit", "load_requests"):
            value = getattr(self, key)
            if value is not None and value < 1:
                problems.append(_problem(key, f"--{key.replace('_', '-')} must be at least 1, got {value}."))
        if self.stride is not None and (not _is_int(self.stride) or self.stride < 0):
            problems.append(_problem("stride", f"--stride must be a whole number of tokens, 0 or more; got "
                                               f"{self.stride!r}. Whether it fits each artifact's window is "
                                               "checked when the artifact is opened."))
        if self.load_clients is not None and (not self.load_clients or any(not _is_int(v) or v < 1
                                                                           for v in self.load_clients)):
            problems.append(_problem("load_clients", f"--load-clients must be positive integers such as 1,2,4; got "
                                                     f"{list(self.load_clients)}."))
        return problems


def _rules(value: Any, name: str) -> str | dict[str, Any]:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, Mapping):
        return dict(value)
    raise _Bad(f"{name} must be a path to a TOML file or a mapping of rules, got {value!r}")


@dataclass
class GateConfig(ConfigBase):
    """Settings of the gate (``bert-compress gate``): rules checked against a benchmark's ``results.json``."""

    results: str = ""
    #: A gates TOML file, or (in a recipe) the rules inline as a mapping with the file's layout.
    rules: str | dict = field(default="", metadata={"parse": _rules})
    baseline: str | None = None
    junit: str | None = None
    #: What an inconclusive verdict (an interval that straddles a limit) exits with: ``None`` keeps its own
    #: exit code 4, ``pass`` turns it into 0, ``fail`` into 1.
    on_inconclusive: str | None = field(default=None, metadata=_optional_choice("pass", "fail"))
    #: A ``bench --history`` file: also flag results unlike the last ``window`` comparable runs.
    history: str | None = None
    window: int | None = None
    history_threshold: float | None = None
    history_test: str | None = field(default=None, metadata=_optional_choice("z", "t"))
    #: Compare with a ``baseline`` measured on another device (refused by default: the numbers differ in kind).
    allow_device_mismatch: bool = False

    def problems(self) -> list[Problem]:
        problems = []
        if self.window is not None and self.window < 2:
            problems.append(_problem("window", f"--window must be at least 2, got {self.window}"))
        if not self.rules or not isinstance(self.rules, (str, dict)):
            problems.append(Problem(("rules",), "gate.rules must be a path to a TOML file or a mapping of rules", True))
        return problems


#: The runtimes ``bert-compress optimize`` can build, in the order it builds them.
OPTIMIZE_CANDIDATES = ("onnx-fp32", "onnx-int8-fused", "onnx-int8-fp32-embeddings", "onnx-int8-unfused",
                       "onnx-static-unfused", "onnx-static-fused", "torch-bf16", "torch-int8",
                       # OpenVINO (optional extra): skipped with a message when it is not installed.
                       "openvino-fp32", "openvino-int8")


@dataclass
class OptimizeConfig(ConfigBase):
    """Settings of ``bert-compress optimize``: build the runtimes of one model, measure them, keep the fastest."""

    model: str = ""
    #: Validation split: the accuracy budget; train split: ort-static calibration. Required.
    data: DataOptions | None = None
    #: Comma-separated names from OPTIMIZE_CANDIDATES (``None``: all of them).
    candidates: str | None = None
    #: Choose among these existing artifacts of ``model`` instead of building candidates.
    artifacts: list[str] | None = None
    batch_sizes: list[int] = field(default_factory=lambda: [1, 32])
    seq_len: int = 128
    lengths: str = field(default="fixed", metadata={**_choices(*TIMING_LENGTHS), "help": TIMING_LENGTHS_HELP})
    threads: int | None = None
    warmup: int = 10
    runs: int = 60
    max_accuracy_drop: float = 0.01
    #: A tagger's per-type F1 budget on validation (compress.tasks.token_classification.scoring.types_over_budget;
    #: other tasks ignore it).
    max_type_f1_drop: float = field(default=MAX_TYPE_F1_DROP, metadata={"help": MAX_TYPE_F1_DROP_HELP})
    min_agreement: float | None = None
    calibration_size: int = 256
    #: ``--device``: where the candidates are measured (PyTorch ones on it; ONNX ones on its provider).
    device: str = "auto"

    def candidate_names(self) -> list[str]:
        if self.candidates is None:
            return list(OPTIMIZE_CANDIDATES)
        return [c.strip() for c in self.candidates.split(",") if c.strip()]

    def problems(self) -> list[Problem]:
        problems = []
        if not self.model:
            problems.append(_problem("model", "--model is required"))
        if self.data is None:
            problems.append(_problem("data", "--data is required: candidates are kept only within the accuracy budget, "
                                             "measured on the validation split"))
        if not self.batch_sizes or any(not _is_int(b) or b < 1 for b in self.batch_sizes):
            problems.append(_problem("batch_sizes", f"--batch-sizes must be positive integers such as 1,32; got "
                                                    f"{list(self.batch_sizes)}."))
        if self.seq_len < 2:
            problems.append(_problem("seq_len", f"--seq-len must be at least 2 (a [CLS] and a [SEP] token), got "
                                                f"{self.seq_len}."))
        for key, low in (("threads", 1), ("runs", 1), ("warmup", 0), ("calibration_size", 1)):
            value = getattr(self, key)
            if value is not None and value < low:
                problems.append(_problem(key, f"--{key.replace('_', '-')} must be "
                                              f"{'at least 1' if low else '0 or more'}, got {value}."))
        if not math.isfinite(self.max_accuracy_drop):
            problems.append(_problem("max_accuracy_drop", f"--max-accuracy-drop must be a finite number (0.01 = one "
                                                          f"point), got {self.max_accuracy_drop!r}."))
        if self.min_agreement is not None and not 0 <= self.min_agreement <= 1:
            problems.append(_problem("min_agreement", f"--min-agreement must be a share in [0, 1] (0.98 = 98%), got "
                                                      f"{self.min_agreement}."))
        problems += _type_budget_problems(self)
        problems += _device_problems(self)
        names = self.candidate_names()
        unknown = [c for c in names if c not in OPTIMIZE_CANDIDATES]
        if unknown:
            problems.append(_problem("candidates", f"--candidates {','.join(unknown)}: unknown; choose among "
                                                   f"{', '.join(OPTIMIZE_CANDIDATES)}."))
        if not names and not self.artifacts:
            problems.append(_problem("candidates", "--candidates is empty: name at least one runtime to compare with "
                                                   "the fp32 model."))
        return problems


__all__ = ['TeacherConfig', 'DistillConfig', 'PretrainConfig', 'PruneConfig', 'ExportConfig', 'QuantizeConfig', 'BenchConfig', 'GateConfig', 'OPTIMIZE_CANDIDATES', 'OptimizeConfig']
