"""Distilling a tagger: soft labels cached per *word*, so the teacher and student may tokenize apart.

A tagger's soft label for a sentence is one logit vector per word: the teacher's logits at each
word's first sub-token (:func:`compress.tasks.token_classification.alignment.word_logits`, the rule its labels were
trained on). Because the unit is the word, a BERT teacher (``gu ##re ##z``, ``[CLS] ... [SEP]``)
and an MPNet student (``<s> ... </s>``, other ids) give arrays of the same shape, row for row,
and the student is trained on its own tokenization: at each word's first sub-token of *its*
tokenization, soft cross-entropy at temperature T against the teacher's word row, plus hard
cross-entropy on the gold tags (:func:`compress.stages.losses.soft_cross_entropy`,
:func:`compress.stages.losses.hard_cross_entropy`):

    loss = alpha_kd * T^2 * CE(softmax(z_T / T), softmax(z_S / T))  over words
         + alpha_hard * CE(gold, z_S)                                over words

A sentence longer than the window is read in overlapping windows (:mod:`compress.core.windows`), each word's
soft label from the teacher window where it has the most context; a word the tokenizer gives no token
has no soft label (its row is NaN) and only the hard term.
The soft labels are cached on disk keyed by the teacher's weights and the exact words, so a second
student reuses them. Training is the stages' Trainer machinery (seeded batch order, NaN guard,
checkpoints and resume, atomic artifact).

Every loss term of a config applies (:class:`WordObjective`): the head terms above with any registered soft
or hard loss, and TinyBERT's intermediate terms (:mod:`compress.stages.distill.intermediate`) where the two
tokenizers read every training sentence into the same word pieces at the same positions (MPNet and
BERT-uncased do): the student's rows then carry the teacher's ids (``t_input_ids``) and the frozen teacher
runs on each batch for its states. Where the pieces differ the word logits alone are distilled, with a note.

Transfer data (``--unlabeled``, e.g. the built-in ``wnut17-unlabeled``): unlabelled texts, filtered
against the tagging splits like any transfer corpus (:func:`compress.stages.transfer.filter_unlabeled`) and
split into words **by whitespace**, the rule :class:`compress.runtime.predictor.Predictor` reads running text
with, so the student learns the words it will be served. The teacher labels each word as above; those
rows carry the soft term only (no gold tags), weighted by ``--unlabeled-weight`` against the labelled
words. Mention-replaced variants of the training sentences (``--mention-variants``,
:mod:`compress.stages.transfer.mentions`) keep their gold tags: they carry both terms, like a labelled row.
"""

from __future__ import annotations

import dataclasses

import hashlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from compress.core.artifact import read_meta, weights_sha256
from compress.core.assets import cache_dir
from compress.config import DataOptions, TrainSettings
from compress.core.errors import CompressError
from compress.core.head_check import refuse_untrained_teacher
from compress.runtime.modeling import count_parameters, fit_max_length, load_classifier
from compress.tasks import get_task
from compress.tasks.token_classification.alignment import IGNORE_INDEX
from compress.tasks.task_choice import TOKEN, check_model_task, model_head
from compress.tasks.token_classification.data import TokenTaskData
from compress.tasks.token_classification.words import (entity_f1_callback, sentence_word_logits, tagger_chance_check,
                                           token_collator, token_logits, tokenize_tagged_split, word_tags)
from compress.stages.training import (checkpoint_dir, interrupt_callback, is_main_process, resume_point, run_trainer,
                               training_arguments, write_trained_artifact, refuse_keep_best)
from compress.core.windows import window_stride
from compress.config import canonical_sha256
from compress.core.device import resolve_precision, training_device
from compress.stages.distill.pair import ModelPair
from compress.stages.distill.intermediate import (active_terms, head_distillation_trainer, make_projections, teacher_states,
                                           terms_record, tokenizations_align, with_projections)
from compress.stages.losses import LOSSES, LossTerm, row_weighted
from compress.stages.transfer import (BUILTIN_CORPUS_STATS, TransferOptions, filter_unlabeled, held_out_overlap,
                               load_unlabeled, text_key)
from compress.stages.transfer.mentions import Mention, mention_variants, teacher_mentions
from compress.corpora.texts import split_texts
from students.factory import build_student, teacher_shape
from students.layer_map import format_layer_map, parse_layer_map


def _words_digest(sentences: Sequence[Sequence[str]], max_length: int) -> str:
    digest = hashlib.sha256(f"max_length={max_length}".encode())
    for words in sentences:
        digest.update("\x1f".join(words).encode("utf-8"))
        digest.update(b"\x1e")
    return digest.hexdigest()


def word_soft_labels(model, tokenizer, sentences: Sequence[Sequence[str]], tags: Sequence[Sequence[int]],
                     max_length: int, weights: str, precision: str = "fp32", stride: int | None = None,
                     ) -> tuple[list[np.ndarray], bool]:
    """The teacher's logits per word of every sentence, ``(words, labels)`` each (NaN rows for words with no
    token), read through windows overlapping by ``stride``; ``(arrays, reused)``, cached under the teacher's
    weights hash, the words and the windows."""
    from datasets import Dataset

    # "windowed": a long sentence's words come from overlapping windows (before, from one cut window)
    key = hashlib.sha256(f"{weights}|{_words_digest(sentences, max_length)}|{precision}|words|windowed stride="
                         f"{window_stride(stride, max_length)}".encode()).hexdigest()
    path = cache_dir() / "soft-labels" / f"{key}.npz"
    lengths = [len(s) for s in sentences]
    if path.exists():
        with np.load(path, allow_pickle=False) as stored:
            flat, stored_lengths = stored["logits"], stored["lengths"]
        if stored_lengths.tolist() == lengths:
            return np.split(flat, np.cumsum(lengths)[:-1]), True
    ds = Dataset.from_dict({"tokens": [list(s) for s in sentences], "tags": [list(t) for t in tags]})
    tokenized = tokenize_tagged_split(ds, tokenizer, max_length, what="teacher", stride=stride)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    out = []
    for per_word, present in sentence_word_logits(token_logits(model, tokenized, precision=precision, pad_id=pad_id),
                                                  tokenized):
        per_word = per_word.astype(np.float32)
        per_word[~present] = np.nan
        out.append(per_word)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npz.tmp", delete=False) as handle:
        np.savez(handle, logits=np.concatenate(out) if out else np.zeros((0, model.config.num_labels), np.float32),
                 lengths=np.asarray(lengths, dtype=np.int64))
    os.replace(handle.name, path)
    return out, False


def _student_rows(tokenized, soft: list[np.ndarray]):
    """The student's tokenized windows with, per row, each word's first sub-token in that window (``first``,
    -1 when the word's first sub-token is in another window) and its sentence's teacher word logits
    flattened (``soft``): a word in two windows' overlap is distilled in both, as it is labelled in both."""
    firsts = []
    for labels, ids, n in zip(tokenized["labels"], tokenized["word_ids"], tokenized["n_words"]):
        first = np.full(n, -1, dtype=np.int64)
        for position, (label, word) in enumerate(zip(labels, ids)):
            if label != IGNORE_INDEX:  # labelled exactly at each word's first sub-token (window_rows)
                first[word] = position
        firsts.append(first.tolist())
    tokenized = tokenized.add_column("first", firsts)
    return tokenized.add_column("soft", [soft[i].reshape(-1).tolist() for i in tokenized["sample"]])


def transfer_sentences(options: TransferOptions, task: TokenTaskData) -> tuple[list[list[str]], dict[str, Any]]:
    """The unlabelled corpus of ``options`` as whitespace-split sentences, without any text of the task's splits
    (validation/test: a leak; train: counted twice), a seeded ``unlabeled_limit`` of them (drawn evenly across the
    ``unlabeled_balance`` column's values when set, or the ones most like the training sentences with
    ``unlabeled_select`` similar); ``(sentences, stats)``."""

    held_out = split_texts(task, ("validation", "test"))
    corpus = load_unlabeled(options.unlabeled, options.unlabeled_text_column, balance_column=options.unlabeled_balance)
    texts, _, stats = filter_unlabeled(corpus, {text_key(t) for t in held_out},
                                       {text_key(t) for t in split_texts(task, ("train",))}, options.unlabeled_limit,
                                       options.seed, held_out_overlap(options.unlabeled, held_out),
                                       similar_to=split_texts(task, ("train",))
                                       if options.unlabeled_select == "similar" else None)
    if options.unlabeled in BUILTIN_CORPUS_STATS:
        stats["built_in"] = BUILTIN_CORPUS_STATS[options.unlabeled]()
    return [text.split() for text in texts], {"source": options.unlabeled, **stats}


def _transfer_rows(t_model, t_tok, s_tok, weights: str, sentences: list[list[str]], max_length: int,
                   precision: str, weight: float, stride: int | None = None):
    """The student's rows for unlabelled sentences: the teacher's word soft labels, no gold tags (-100 at every
    position, so only the soft term sees them), ``weight`` on each row; ``(rows, soft labels reused, soft labels)``."""
    from datasets import Dataset

    placeholder = [[0] * len(words) for words in sentences]  # marks each word's first sub-token; never a target
    soft, reused = word_soft_labels(t_model, t_tok, sentences, placeholder, max_length, weights, precision, stride)
    ds = Dataset.from_dict({"tokens": sentences, "tags": placeholder})
    rows = _student_rows(tokenize_tagged_split(ds, s_tok, max_length, with_length=True, what="student", stride=stride),
                         soft)
    rows = rows.map(lambda row: {"labels": [IGNORE_INDEX] * len(row["labels"])}, desc="transfer rows")
    return rows.add_column("weight", [float(weight)] * len(rows)), reused, soft


def _variant_rows(t_model, t_tok, s_tok, weights: str, task: TokenTaskData, n: int, seed: int, max_length: int,
                  precision: str, extra: dict[str, list[Mention]] | None = None, stride: int | None = None,
                  ) -> tuple[Any, list[list[str]], dict[str, Any]]:
    """The student's rows for ``n`` mention-replaced variants of each training sentence with an entity
    (:func:`compress.stages.transfer.mentions.mention_variants`, ``extra`` mentions beside the training ones): the
    teacher's word soft labels and the variants' gold tags, weight 1 like a labelled row; ``(rows, variant
    sentences, stats)``, the stats with ``training_rows``; ``rows`` is ``None`` when no variant could be made
    (no two mentions of one type)."""
    from datasets import Dataset

    split = task.splits["train"]
    seen = {text_key(text) for text in split_texts(task, ("validation", "test"))}  # training keys: added there
    words, tags, stats = mention_variants(split["tokens"], split["tags"], task.label_names, n, seed, seen, extra)
    if not words:
        return None, words, {**stats, "training_rows": 0, "soft_labels_reused": False}
    soft, reused = word_soft_labels(t_model, t_tok, words, tags, max_length, weights, precision, stride)
    ds = Dataset.from_dict({"tokens": words, "tags": tags})
    rows = _student_rows(tokenize_tagged_split(ds, s_tok, max_length, with_length=True, what="student", stride=stride),
                         soft)
    rows = rows.add_column("weight", [1.0] * len(rows))
    return rows, words, {**stats, "training_rows": len(rows), "soft_labels_reused": reused}


def _collator(tokenizer, num_labels: int, teacher_pad_id: int = 0):
    """Model columns and labels as :func:`token_collator` pads them; ``first`` padded with -1 and ``soft``
    with NaN to ``(batch, words, labels)``; ``weight`` (per row) stacked; the teacher's ids of aligned rows
    (``t_input_ids``, intermediate terms) padded with ``teacher_pad_id`` to the student's width."""
    import torch

    inner = token_collator(tokenizer)

    def collate(features: list[dict[str, Any]]) -> dict[str, Any]:
        batch = inner(features)
        if "t_input_ids" in features[0]:
            t_ids = torch.full(batch["input_ids"].shape, teacher_pad_id, dtype=torch.long)
            for i, f in enumerate(features):
                t_ids[i, :len(f["t_input_ids"])] = torch.tensor(f["t_input_ids"], dtype=torch.long)
            batch["t_input_ids"] = t_ids
        words = max(len(f["first"]) for f in features)
        first = torch.full((len(features), words), -1, dtype=torch.long)
        soft = torch.full((len(features), words, num_labels), float("nan"))
        for i, f in enumerate(features):
            n = len(f["first"])
            first[i, :n] = torch.tensor(f["first"], dtype=torch.long)
            soft[i, :n] = torch.tensor(f["soft"], dtype=torch.float32).view(n, num_labels)
        batch["first"], batch["soft"] = first, soft
        batch["weight"] = torch.tensor([float(f.get("weight", 1.0)) for f in features])
        return batch

    return collate


def entity_weights(labels, first, soft, has, outside: int, factor: float, weight=None):
    """Per position of the student's rows, how hard the word there pulls: ``factor`` at an *entity word* (its gold
    tag, or where it has no gold tag the teacher's top tag, is not ``outside``; either one being an entity is
    enough), 1 at the other words, times the row's ``weight``; ``(batch, positions)``.

    Why: nine words in ten are ``O``, so a plain mean over words spends most of the loss on words the student
    already tags right, while entity F1 counts only the entity words (docs/lab/ner.md: the student agrees with its
    teacher on ~70% of the entities of its own training sentences against 98% of the words)."""
    import torch

    entity = (labels != IGNORE_INDEX) & (labels != outside)
    rows = torch.arange(labels.shape[0], device=labels.device).unsqueeze(1).expand_as(first)
    where = (rows[has], first[has])
    entity[where] = entity[where] | (soft[has].to(labels.device).argmax(-1) != outside)
    scale = torch.where(entity, torch.tensor(float(factor), device=labels.device),
                        torch.tensor(1.0, device=labels.device))
    return scale if weight is None else scale * weight.to(labels.device).unsqueeze(1)


def word_term_values(terms: Sequence[LossTerm], logits, labels, first, soft, temperature: float,
                     weight=None, entity_weight: float = 1.0, outside: int | None = None) -> dict[str, Any]:
    """The value of each head term of positive weight in ``terms`` (by term name) for one batch: a term on
    ``logits`` compares the student's first-sub-token rows with the teacher's word rows (words both have) at
    ``temperature``, a term on ``labels`` the student's rows with the gold tags (first sub-tokens).

    ``weight`` (one per row, ``None``: all 1) weighs each row's words in the soft terms: their mean over the
    batch's ``N`` words becomes ``sum(w * loss) / N`` (:func:`compress.stages.losses.row_weighted`), so a word of a
    transfer row at ``--unlabeled-weight`` w pulls w times as hard as a labelled one, and a labelled word as hard
    as without transfer rows (the meaning the flag has for sentence classifiers). ``entity_weight`` (with
    ``outside``, the index of the ``O`` tag) multiplies the weight of the entity words (:func:`entity_weights`)
    in every head term, soft and hard; at 1 the terms are the plain means."""
    import torch

    has = (first >= 0) & torch.isfinite(soft).all(-1)
    rows = torch.arange(logits.shape[0], device=logits.device).unsqueeze(1).expand_as(first)
    student_words = logits[rows[has], first[has]]
    teacher_words = soft[has].to(logits.device)
    word_weight = None if weight is None else weight.to(logits.device)[rows[has]]
    gold = labels.view(-1) >= 0
    gold_weight = None
    if entity_weight != 1.0:
        if outside is None:
            raise CompressError("an entity weight needs the index of the O tag")
        position_weight = entity_weights(labels, first, soft, has, outside, entity_weight, weight)
        word_weight, gold_weight = position_weight[rows[has], first[has]], position_weight.view(-1)[gold]
    values: dict[str, Any] = {}
    for term in terms:
        if term.weight <= 0 or term.intermediate:
            continue
        fn = LOSSES[term.loss]
        if term.on == "logits" and student_words.shape[0]:
            values[term.name] = row_weighted(fn, word_weight, student_words, teacher_words, temperature)
        elif term.on == "labels" and bool(gold.any()):
            values[term.name] = row_weighted(fn, gold_weight, logits.view(-1, logits.shape[-1])[gold],
                                             labels.view(-1)[gold])
    return values


def word_distillation_loss(logits, labels, first, soft, temperature: float, alpha_kd: float,
                           alpha_hard: float, weight=None, entity_weight: float = 1.0,
                           outside: int | None = None) -> dict[str, Any]:
    """:func:`word_term_values` of soft CE (weight ``alpha_kd``, named ``soft_ce``) and hard CE (``alpha_hard``,
    ``hard_ce``), with their weighted sum under ``loss``: the default objective, as one call."""
    terms = [LossTerm("soft_ce", alpha_kd, name="soft_ce"), LossTerm("hard_ce", alpha_hard, name="hard_ce")]
    values = word_term_values(terms, logits, labels, first, soft, temperature, weight, entity_weight, outside)
    return {"loss": sum((t.weight * values[t.name] for t in terms if t.name in values), logits.new_zeros(())), **values}


@dataclass
class WordObjective:
    """What a tagger is distilled on: the loss terms at each epoch (``terms(epoch, intermediate)``, as
    :func:`compress.stages.distill.intermediate.active_terms` gives them for a config), the temperature, and for the
    intermediate terms the layer map and the projections' learning rate; ``entity_weight``, how much harder an
    entity word pulls than an ``O`` word in the head terms (:func:`entity_weights`)."""

    terms: Callable[[float, bool], list[LossTerm]]
    temperature: float = 2.0
    layer_map: str = "uniform"
    projection_lr: float | None = None
    entity_weight: float = 1.0

    @classmethod
    def logits_only(cls, temperature: float, alpha_kd: float, alpha_hard: float) -> "WordObjective":
        terms = [LossTerm("soft_ce", alpha_kd), LossTerm("hard_ce", alpha_hard)]
        return cls(lambda epoch, intermediate: terms, temperature)

    @classmethod
    def from_config(cls, cfg: Any) -> "WordObjective":
        return cls(lambda epoch, intermediate: active_terms(cfg, epoch, intermediate), cfg.temperature,
                   cfg.layer_map, cfg.projection_lr, cfg.entity_weight)

    def wants_intermediate(self, epochs: float) -> bool:
        """Whether a term of positive weight on an intermediate signal counts at the start or the end."""
        return any(t.intermediate and t.weight > 0 for e in (0.0, float(epochs)) for t in self.terms(e, True))

    def describe(self, epochs: float, intermediate: bool) -> dict[str, Any]:
        """The terms as ``compress.json`` records them (:func:`compress.stages.distill.intermediate.terms_record`)."""
        return {"loss_terms": terms_record(lambda epoch: self.terms(epoch, intermediate), epochs),
                "entity_weight": self.entity_weight}

    def head_values(self, outside: int | None) -> Callable[..., dict[str, Any]]:
        """:func:`word_term_values` as :func:`compress.stages.distill.intermediate.with_projections` asks for it, with
        this objective's entity weight and ``outside``, the index of the data's ``O`` tag."""

        def values(terms, output, attention_mask, temperature, labels, first, soft, weight=None):
            return word_term_values(terms, output.logits, labels, first, soft, temperature, weight,
                                    self.entity_weight, outside)

        return values


def _outside_index(task: TokenTaskData, objective: WordObjective) -> int | None:
    """The index of the ``O`` tag, which an entity weight other than 1 needs (one line when the tags have none)."""
    if "O" in task.label_names:
        return task.label_names.index("O")
    if objective.entity_weight != 1.0:
        raise CompressError(f"--entity-weight {objective.entity_weight}: the data's tags ({', '.join(task.label_names)}) "
                            "have no O tag, so no word is outside an entity; leave --entity-weight at 1")
    return None


@dataclass(frozen=True)
class WordRun:
    """How one tagger distillation runs: the optimisation, the per-word ``objective``, the windows
    (``max_length``, ``stride``: a sentence past ``max_length`` tokens is read by both models in windows overlapping
    by ``stride``), the precision, and the training sentences beyond the labelled ones: ``n_variants``
    mention-replaced variants of each (``mention_pool`` train+transfer: the teacher's confident transfer mentions join
    the replacements) and ``transfer``'s unlabelled sentences. ``settings``: the config ``compress.json`` records
    (and the checkpoints' fingerprint); ``allow_untrained``: a teacher no better than chance is not refused."""

    train: TrainSettings
    objective: WordObjective
    max_length: int
    precision: str
    settings: dict[str, Any]
    resume: bool = False
    transfer: TransferOptions | None = None
    n_variants: int = 0
    mention_pool: str = "train"
    allow_untrained: bool = False
    stride: int | None = None


def _load_teacher(teacher: str | os.PathLike, data: DataOptions, eager_attention: bool = False):
    """``(model, tokenizer, weights sha256, tagging data in the teacher's tag order)``; one line when the
    folder is not a tagger. ``data`` is read as the teacher stage reads it (``--split-seed``, ``--limit``).
    ``eager_attention``: attention maps can be read (the attention term needs them)."""
    head, _, names = model_head(teacher)
    if head is None or head.name != TOKEN:
        raise CompressError(f"--teacher {teacher}: not a trained tagger (its config names no ...ForTokenClassification "
                            "head). Train one first: bert-compress teacher --data TAGGED.conll --out TEACHER_DIR")
    task = data.load_tagging(names)
    t_model, t_tok, _ = load_classifier(teacher, len(names), names, eager_attention=eager_attention, task=TOKEN)
    t_model.eval()
    for p in t_model.parameters():
        p.requires_grad_(False)
    weights = (read_meta(teacher) or {}).get("weights_sha256") or weights_sha256(teacher)
    return t_model, t_tok, weights, task


def distill_tagger(teacher: str | os.PathLike, student: str | os.PathLike, data: str, out: str | os.PathLike,
                   train: TrainSettings | None = None, temperature: float = 2.0, alpha_kd: float = 0.5,
                   alpha_hard: float = 0.5, max_length: int = 128, resume: bool = False,
                   precision: str = "fp32", stride: int | None = None) -> Path:
    """Distil the tagger ``teacher`` into ``student`` (an encoder folder, any tokenizer) on tagging ``data``; a
    sentence past ``max_length`` tokens is read in windows overlapping by ``stride`` (default a quarter)."""
    t_model, t_tok, weights, task = _load_teacher(teacher, DataOptions(data=data))
    check_model_task(student, TOKEN, data, str(student), task.num_labels)
    s_model, s_tok, _ = load_classifier(student, task.num_labels, task.label_names, task=TOKEN)
    settings = {"temperature": temperature, "alpha_kd": alpha_kd, "alpha_hard": alpha_hard, "max_length": max_length,
                "stride": stride, "train": (train or TrainSettings()).to_dict(), "student": str(student)}
    pair = ModelPair(t_model, t_tok, weights, str(teacher), s_model, s_tok, {"from": str(student)})
    return _distill(pair, task, out, WordRun(train or TrainSettings(),
                                             WordObjective.logits_only(temperature, alpha_kd, alpha_hard), max_length,
                                             precision, settings, resume=resume, stride=stride))


def distill_stage(cfg: Any, out: str | os.PathLike) -> Path:
    """``bert-compress distill`` on tagging data: the student built by the student factory from
    ``--student``/``--init`` as a tagger, then distilled per word (:func:`_distill`), with every loss term the
    config names (``--kd-loss``, ``--losses``, ``--intermediate`` where the tokenizations align, ``--schedule``)."""

    cfg.validate()
    cfg.refuse_beyond_logits("a tagger's sentences are not edited word by word (the tags would not follow); leave "
                             "--augment out for tagging data and use --mention-variants or --unlabeled text.",
                             allowed=("unlabeled", "intermediate", "losses", "kd_loss", "schedule"))
    precision = resolve_precision(cfg.precision, training_device(cfg.device)).precision
    eager = cfg.wants_intermediate
    t_model, t_tok, weights, task = _load_teacher(cfg.teacher, cfg.data, eager_attention=eager)
    refuse_keep_best(cfg.train, task.splits, cfg.data.data)
    s_model, s_tok, info = build_student(cfg.student, t_model, t_tok, task.label_names, cfg.layer_map, cfg.train.seed,
                                         eager_attention=eager, task=TOKEN)
    cfg = dataclasses.replace(cfg, max_length=fit_max_length(cfg.max_length, t_model.config, s_model.config,
                                                             who="the teacher or the student"))
    run = WordRun(cfg.train, WordObjective.from_config(cfg), cfg.max_length, precision, cfg.to_dict(),
                  resume=cfg.resume, transfer=TransferOptions.from_config(cfg, precision),
                  n_variants=cfg.mention_variants, mention_pool=cfg.mention_pool,
                  allow_untrained=cfg.allow_untrained_teacher, stride=cfg.stride)
    return _distill(ModelPair(t_model, t_tok, weights, cfg.teacher, s_model, s_tok, info), task, out, run)


def _teacher_ids(t_tok, s_tok, sentences: Sequence[Sequence[str]], s_ids: list[list[int]], max_length: int,
                 stride: int | None = None) -> tuple[list[list[int]] | None, str]:
    """The teacher's ids of the student's rows, position for position, when both tokenizers read the sentences
    into the same word pieces (:func:`compress.stages.distill.intermediate.tokenizations_align`); ``(None, why)``
    otherwise."""
    from datasets import Dataset

    ds = Dataset.from_dict({"tokens": [list(w) for w in sentences], "tags": [[0] * len(w) for w in sentences]})
    t_ids = tokenize_tagged_split(ds, t_tok, max_length, what="teacher", stride=stride)["input_ids"]
    aligned, reason = tokenizations_align(t_tok, s_tok, t_ids, s_ids)
    return (t_ids if aligned else None), reason


def _training_rows(pair: ModelPair, task: TokenTaskData,
                   run: WordRun) -> tuple[Any, list[list[str]], bool, dict[str, Any] | None, dict[str, Any] | None]:
    """``(rows, sentences, reused, transfer record, variants record)``: the student's training rows with the
    teacher's soft labels per word, the labelled sentences first, then ``run.n_variants`` mention-replaced variants of
    each (:func:`_variant_rows`), then the transfer sentences; ``sentences`` the words of each row, in row order."""
    from datasets import concatenate_datasets

    t_model, t_tok, s_tok, weights = pair.t_model, pair.t_tok, pair.s_tok, pair.weights
    max_length, precision, stride = run.max_length, run.precision, run.stride
    transfer, n_variants = run.transfer, run.n_variants
    split = task.splits["train"]
    soft, reused = word_soft_labels(t_model, t_tok, split["tokens"], split["tags"], max_length, weights, precision,
                                    stride)
    print(f"soft labels (train, {len(soft)} sentences, per word): {'reused from the cache' if reused else 'computed'}")
    s_train = _student_rows(tokenize_tagged_split(split, s_tok, max_length, with_length=True, what="student",
                                                  stride=stride), soft)
    s_train = s_train.add_column("weight", [1.0] * len(s_train))
    transfer_info: dict[str, Any] | None = None
    read = [list(words) for words in split["tokens"]]  # the sentences of the rows, in row order
    extra, sentences, transfer_soft = None, [], []  # the transfer rows: labelled first (their mentions can
    if transfer is not None and transfer.unlabeled:  # join the variants' pool), placed last
        sentences, transfer_info = transfer_sentences(transfer, task)
        if sentences:
            t0 = time.perf_counter()
            extra, extra_reused, transfer_soft = _transfer_rows(t_model, t_tok, s_tok, weights, sentences, max_length,
                                                                precision, transfer.unlabeled_weight, stride)
            print(f"soft labels (unlabelled {transfer.unlabeled}, {len(sentences)} sentences, per word): "
                  f"{'reused from the cache' if extra_reused else 'computed'} in {time.perf_counter() - t0:.1f} s")
            transfer_info.update(weight=transfer.unlabeled_weight, training_rows=len(extra),
                                 soft_labels_reused=extra_reused)
        else:
            print(f"note: --unlabeled {transfer.unlabeled}: no text left after removing duplicates and texts that are "
                  "in the task's splits", file=sys.stderr)
    variants_info: dict[str, Any] | None = None
    if n_variants:
        t0 = time.perf_counter()
        pool = (teacher_mentions(sentences, transfer_soft, task.label_names) if run.mention_pool == "train+transfer"
                else None)
        rows, variant_words, variants_info = _variant_rows(t_model, t_tok, s_tok, weights, task, n_variants,
                                                           run.train.seed, max_length, precision, pool, stride)
        if rows is None:
            print(f"note: --mention-variants {n_variants}: no variant could be made (a variant needs a training "
                  "sentence with an entity whose type has another mention)", file=sys.stderr)
        else:
            print(f"soft labels (mention-replaced variants, {len(variant_words)} sentences, per word): "
                  f"{'reused from the cache' if variants_info['soft_labels_reused'] else 'computed'} in "
                  f"{time.perf_counter() - t0:.1f} s")
            s_train = concatenate_datasets([s_train, rows.select_columns(s_train.column_names)])
            read += variant_words
    if extra is not None:
        columns = [c for c in s_train.column_names if c in extra.column_names]
        s_train = concatenate_datasets([s_train.select_columns(columns), extra.select_columns(columns)])
        read += sentences
    return s_train, read, reused, transfer_info, variants_info


class _ScoredSplits:
    """The validation and test sentences of one tagger distillation, each model's rows tokenized once and the
    teacher's word tags computed once, for the chance check, the epoch callback and the final scores."""

    def __init__(self, task: TokenTaskData, max_length: int, stride: int | None):
        self.task, self.max_length, self.stride = task, max_length, stride
        self._rows: dict[tuple[str, str], Any] = {}  # (who, split)
        self.teacher_tags: dict[str, list[list[str]]] = {}  # split

    def rows(self, who: str, tok: Any, name: str) -> Any:
        """Split ``name`` as ``who``'s tokenizer reads it (in windows past ``max_length``)."""
        if (who, name) not in self._rows:
            self._rows[who, name] = tokenize_tagged_split(self.task.splits[name], tok, self.max_length, what=who,
                                                          stride=self.stride)
        return self._rows[who, name]

    def tags(self, model: Any, tok: Any, who: str, name: str) -> list[list[str]]:
        """The word tags ``model`` gives split ``name``."""
        import torch

        rows = self.rows(who, tok, name)
        with torch.inference_mode():
            return word_tags(token_logits(model, rows, pad_id=tok.pad_token_id or 0), rows, self.task.label_names)

    def metrics(self, pair: ModelPair) -> dict[str, Any]:
        """The student's entity scores on validation and test, its word agreement with the teacher and the
        teacher's entity F1 beside them."""
        metrics: dict[str, Any] = {}
        score = get_task(TOKEN).score
        for name in ("validation", "test"):
            if name not in self.task.splits:
                continue
            if name not in self.teacher_tags:
                self.teacher_tags[name] = self.tags(pair.t_model, pair.t_tok, "teacher", name)
            student_tags, gold = self.tags(pair.s_model, pair.s_tok, "student", name), self.task.tags(name)
            metrics[name] = {**score(student_tags, gold, self.teacher_tags[name]),
                             "teacher_entity_f1": score(self.teacher_tags[name], gold)["entity_f1"]}
        return metrics


def _distill(pair: ModelPair, task: TokenTaskData, out: str | os.PathLike, run: WordRun) -> Path:
    """Train the student on the per-word terms of ``run.objective`` (:func:`word_term_values`, and the intermediate
    ones where the tokenizations align) over the labelled sentences and the extra ones ``run`` asks for
    (:func:`_training_rows`), score it and the teacher on validation and test (entity F1, word agreement with the
    teacher), write the student artifact. A teacher no better than chance on validation is refused first
    (:func:`compress.tasks.token_classification.words.tagger_chance_check`) unless ``run.allow_untrained``."""
    import torch

    started = time.perf_counter()
    t_model, t_tok, weights, teacher = pair.t_model, pair.t_tok, pair.weights, pair.teacher
    s_model, s_tok = pair.s_model, pair.s_tok
    train, objective, max_length, precision, stride = run.train, run.objective, run.max_length, run.precision, run.stride
    temperature = objective.temperature
    if temperature <= 0:
        raise CompressError(f"--temperature must be > 0, got {temperature}")
    outside = _outside_index(task, objective)  # before any work: an entity weight needs an O tag
    scored = _ScoredSplits(task, max_length, stride)
    if "validation" in task.splits:  # a teacher that finds no entity would teach the O tag: refuse before any work
        rows = scored.rows("teacher", t_tok, "validation")
        with torch.inference_mode():
            logits = token_logits(t_model, rows, pad_id=t_tok.pad_token_id or 0)
        scored.teacher_tags["validation"] = word_tags(logits, rows, task.label_names)
        refuse_untrained_teacher(tagger_chance_check(logits, rows, task.tags("validation"), task.label_names),
                                 teacher, run.allow_untrained)
    s_train, read, reused, transfer_info, variants_info = _training_rows(pair, task, run)
    # Intermediate terms compare states position by position: only where both models read the same pieces.
    want_inter, notes = objective.wants_intermediate(train.epochs), []
    if want_inter:
        t_ids, reason = _teacher_ids(t_tok, s_tok, read, s_train["input_ids"], max_length, stride)
        if t_ids is None:
            want_inter = False
            notes.append(f"intermediate losses disabled: teacher and student tokenizations do not line up ({reason})")
            print(f"note: {notes[-1]}; distilling the word logits only", file=sys.stderr)
        else:
            s_train = s_train.add_column("t_input_ids", t_ids)
    t_shape, s_shape = teacher_shape(t_model.config), teacher_shape(s_model.config)
    pairs = parse_layer_map(objective.layer_map, t_shape.layers, s_shape.layers) if want_inter else {}
    projections = make_projections(s_shape.hidden, t_shape.hidden, pairs) if want_inter else torch.nn.ModuleDict()
    module = with_projections(s_model, projections, pairs, objective.head_values(outside))
    s_train = s_train.select_columns([c for c in ("input_ids", "attention_mask", "token_type_ids", "labels", "length",
                                                  "first", "soft", "weight", "t_input_ids")
                                      if c in s_train.column_names])
    args = training_arguments(train, checkpoint_dir(out), len(s_train), precision=precision)
    fingerprint = canonical_sha256({"teacher": weights, "data": task.fingerprint, "settings": run.settings})
    stop = interrupt_callback()

    def read_teacher(inputs: dict[str, Any], terms: list[LossTerm]):
        """Aligned rows carry the teacher's ids: its states at the student's very positions."""
        t_ids = inputs.pop("t_input_ids", None)
        if t_ids is None:
            return None, None
        return teacher_states(t_model, {"input_ids": t_ids, "attention_mask": inputs["attention_mask"]}, terms,
                              precision)

    trainer_class = head_distillation_trainer(lambda epoch: objective.terms(epoch, want_inter), read_teacher,
                                              temperature, train.seed, projections, objective.projection_lr, out)
    t_pad = t_tok.pad_token_id if t_tok.pad_token_id is not None else 0
    callbacks: list[Any] = [stop]
    scorer = None
    if "validation" in task.splits:  # the student's entity F1 after each epoch, and a warning if still climbing
        s_pad = s_tok.pad_token_id if s_tok.pad_token_id is not None else 0
        scorer = entity_f1_callback(scored.rows("student", s_tok, "validation"), task.tags("validation"),
                                    task.label_names, s_pad, precision, tagger=s_model, keep_best=train.keep_best)
        callbacks.append(scorer)
    trainer = trainer_class(model=module, args=args, train_dataset=s_train, callbacks=callbacks,
                            data_collator=_collator(s_tok, task.num_labels, t_pad))
    result = run_trainer(trainer, resume_point(out, run.resume, fingerprint), Path(out), stop)

    metrics = scored.metrics(pair)
    meta = {
        "stage": "distill", "kind": "pytorch", "task": TOKEN, "model_type": s_model.config.model_type,
        "parameters": count_parameters(s_model), "label_names": task.label_names,
        "parent": {"teacher": teacher, "teacher_weights_sha256": weights},
        "student": pair.student_info,
        "config": {**run.settings, "max_length": max_length, "soft_labels": "per word (first sub-token)"},
        "distillation": {**objective.describe(train.epochs, want_inter), "temperature": temperature,
                         "intermediate": want_inter, "layer_map": format_layer_map(pairs) if want_inter else None},
        "notes": notes,
        "stride": window_stride(stride, max_length),  # the windows it was trained and scored in; Predictor reads them
        "data": task.describe(), "metrics": metrics,
        "training": {"global_steps": result.global_step, "train_loss": round(float(result.training_loss), 5),
                     "soft_labels_reused": reused, "rows": len(s_train),
                     **(scorer.record() if scorer is not None else {})},
        "transfer": transfer_info,
        "mention_variants": variants_info,
        "timings": {"total_s": round(time.perf_counter() - started, 1)},
    }
    if not is_main_process():
        return Path(out)
    path = write_trained_artifact(out, s_model, s_tok, meta)
    parts = [f"{n} entity F1 {m['entity_f1']:.4f} (teacher {m['teacher_entity_f1']:.4f}, word agreement "
             f"{m['token_agreement']:.4f})" for n, m in metrics.items()]
    print("student: " + "; ".join(parts))
    return path
