"""Distilling a span reader: the teacher's start and end logits, read on the student's own windows.

A reader's soft label belongs to a *window* position: "the answer starts here" is a distribution
over the window's tokens. For the student to learn it, the teacher's distribution must be over
the student's positions, so the teacher is run on the student's windows:

- every student window (question + one stretch of the passage, :mod:`compress.tasks.question_answering.features`)
  is re-spelled in the teacher's vocabulary: the same word pieces, the teacher's ids, wrapped in
  the teacher's own pair template (``[CLS] q [SEP] p [SEP]`` for BERT, ``<s> q </s></s> p </s>``
  for MPNet, read off the tokenizer by :func:`pair_template`);
- the teacher's start and end logits are mapped back position for position (question piece to
  question piece, passage piece to passage piece, first/last special token to first/last), giving
  one ``(window length,)`` row each, cached on disk under the teacher's weights and the exact ids.

That is exact when both tokenizers split text into the same word pieces, which is checked on every
question and passage first (:func:`check_same_pieces`): a BERT-uncased student (MiniLM) and an MPNet
teacher qualify (MPNet's vocabulary is BERT's shifted by four ids), as does a student that keeps the
teacher's tokenizer (``--init teacher-layers``/``random``). Other pairs are refused in one line naming
a text they split apart: positions of two tokenizations do not line up, and a soft label over the
wrong positions teaches the wrong span.

The loss over each window, both for the start and the end scores (averaged):

    loss = alpha_kd * T^2 * CE(softmax(z_T / T), softmax(z_S / T))   over the window's positions
         + alpha_hard * CE(gold position, z_S)

Padding positions are masked out of both. Training is the stages' Trainer machinery (seeded batch
order, NaN guard, fingerprinted checkpoints and ``--resume``, Ctrl-C, an atomic artifact);
every loss term of a config applies (``--kd-loss``, ``--losses``, ``--schedule``), TinyBERT's intermediate terms
included: the teacher runs on its spelling of each window and its states and attention maps are read back at
the student's positions (:func:`compress.stages.distill.intermediate.at_student_positions`).

Transfer questions (``--unlabeled``: questions about passages, without answers;
:mod:`compress.stages.transfer.questions`) are windowed like the labelled ones and soft-labelled by the teacher
the same way; their windows carry no gold position (-100), so only the soft terms see them, weighted by
``--unlabeled-weight`` against a labelled window (:func:`compress.stages.losses.row_weighted`), and the hard term
is the labelled windows' mean scaled by their share of the batch, so a labelled window pulls as hard as
without transfer windows. Augmentation (word edits) is not applied to readers: an edit can move or break
the answer span.
"""

from __future__ import annotations

import dataclasses

import hashlib
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from compress.core.artifact import read_meta, weights_sha256
from compress.core.assets import cache_dir
from compress.core.errors import CompressError
from compress.runtime.modeling import count_parameters, fit_max_length, load_classifier
from compress.core.quiet import quiet_transformers
from compress.core.head_check import HeadCheck, refuse_untrained_teacher
from compress.tasks.question_answering.teacher import (MODEL_COLUMNS, announce_null_threshold, answer_start_check, f1_callback, qa_stride,
                                 score_reader, span_logits)
from compress.tasks import get_task
from compress.tasks.question_answering.data import QATaskData
from compress.tasks.question_answering.features import DEFAULT_NULL_THRESHOLD, qa_features
from compress.tasks.task_choice import QA, model_head
from compress.stages.training import (checkpoint_dir, checkpoint_fingerprint, interrupt_callback, is_main_process,
                               resume_point, run_trainer, training_arguments, write_trained_artifact, refuse_keep_best)
from compress.core.device import resolve_precision, training_device
from compress.stages.distill.pair import ModelPair
from compress.stages.distill.intermediate import (active_terms, at_student_positions, head_distillation_trainer,
                                           make_projections, teacher_states, terms_record, with_projections)
from compress.stages.losses import LOSSES, LossTerm, row_weighted
from compress.stages.transfer.questions import transfer_questions
from students.factory import build_student, teacher_shape
from students.layer_map import format_layer_map, parse_layer_map

#: Stands in for -inf where a position is padding: finite, so ``0 * log q`` stays 0 in the soft CE.
MASKED = -1.0e4
#: The gold position of a transfer window (no answer known): the hard term skips it.
NO_GOLD = -100


@dataclass(frozen=True)
class ReaderTransfer:
    """Transfer questions for a reader (:func:`compress.stages.transfer.questions.transfer_questions`) and the weight of
    their windows' soft terms against a labelled window's."""

    questions: list[str]
    passages: list[str]
    info: dict[str, Any]
    weight: float = 1.0


@dataclass(frozen=True)
class PairTemplate:
    """A tokenizer's special tokens around a (question, passage) pair, and their token types."""

    prefix: tuple[int, ...]
    middle: tuple[int, ...]
    suffix: tuple[int, ...]
    types: tuple[tuple[int, ...], int, tuple[int, ...], int, tuple[int, ...]]  # prefix, q, middle, p, suffix

    def build(self, question: Sequence[int],
              passage: Sequence[int]) -> tuple[list[int], list[int], list[int], list[int]]:
        """``(input_ids, token_type_ids, question positions, passage positions)`` of one pair."""
        ids = [*self.prefix, *question, *self.middle, *passage, *self.suffix]
        t_pre, t_q, t_mid, t_p, t_suf = self.types
        types = [*t_pre, *[t_q] * len(question), *t_mid, *[t_p] * len(passage), *t_suf]
        q0 = len(self.prefix)
        p0 = q0 + len(question) + len(self.middle)
        return ids, types, list(range(q0, q0 + len(question))), list(range(p0, p0 + len(passage)))

    def special_positions(self, n_question: int, n_passage: int) -> list[int]:
        p_end = len(self.prefix) + n_question + len(self.middle) + n_passage
        return [*range(len(self.prefix)),
                *range(len(self.prefix) + n_question, len(self.prefix) + n_question + len(self.middle)),
                *range(p_end, p_end + len(self.suffix))]


def pair_template(tokenizer: Any) -> PairTemplate:
    """The tokenizer's pair template, read off its encoding of a two-word pair (any fast tokenizer)."""
    q = tokenizer("question", add_special_tokens=False)["input_ids"]
    p = tokenizer("passage", add_special_tokens=False)["input_ids"]
    enc = tokenizer("question", "passage", return_token_type_ids=True)
    ids, types = list(enc["input_ids"]), list(enc.get("token_type_ids") or [0] * len(enc["input_ids"]))
    for i in range(len(ids) - len(q) + 1):
        if ids[i:i + len(q)] == q:
            for j in range(i + len(q), len(ids) - len(p) + 1):
                if ids[j:j + len(p)] == p:
                    a, b, c = i, i + len(q), j
                    d = j + len(p)
                    return PairTemplate(tuple(ids[:a]), tuple(ids[b:c]), tuple(ids[d:]),
                                        (tuple(types[:a]), types[a], tuple(types[b:c]), types[c], tuple(types[d:])))
    raise CompressError(f"{type(tokenizer).__name__}: cannot read its (question, passage) template; distilling a "
                        "reader needs a fast tokenizer that encodes pairs.")


def check_same_pieces(teacher_tok: Any, student_tok: Any, texts: Sequence[str], where: str) -> None:
    """Refuse, in one line, a teacher and student whose tokenizers split any of ``texts`` apart."""
    unique = list(dict.fromkeys(t for t in texts if t))
    for start in range(0, len(unique), 256):
        chunk = unique[start:start + 256]
        # Whole passages on purpose: compared piece by piece, never run through a model, so transformers'
        # "longer than the specified maximum ... will result in indexing errors" warning is not this case.
        with quiet_transformers():
            t_ids = teacher_tok(chunk, add_special_tokens=False)["input_ids"]
            s_ids = student_tok(chunk, add_special_tokens=False)["input_ids"]
        for text, t, s in zip(chunk, t_ids, s_ids):
            t_pieces = teacher_tok.convert_ids_to_tokens(t)
            s_pieces = student_tok.convert_ids_to_tokens(s)
            if t_pieces != s_pieces:
                k = next((i for i, (a, b) in enumerate(zip(t_pieces, s_pieces)) if a != b),
                         min(len(t_pieces), len(s_pieces)))
                raise CompressError(
                    f"{where}: the teacher and the student tokenize the text {text[:60]!r} differently (teacher "
                    f"{t_pieces[k:k + 3]} against student {s_pieces[k:k + 3]}). Distilling a reader compares "
                    "start/end scores position by position, so both must split text into the same word pieces: use a "
                    "student with the teacher's tokenizer (--init teacher-layers or random) or one of the same "
                    "vocabulary (MiniLM with a BERT-uncased or MPNet teacher).")


def _role_map(offsets: Sequence[tuple[int, int]], segment: tuple[int, int]) -> tuple[list[int], list[int], list[int]]:
    """Positions of a student window's special tokens (empty character spans; an ``[UNK]`` piece has a real
    one), question pieces (before the passage) and passage pieces (``segment``)."""
    a, b = segment
    special, question, passage = [], [], []
    for position, (first, last) in enumerate(offsets):
        if a <= position < b:
            passage.append(position)
        elif position >= b or first == last:
            special.append(position)
        else:
            question.append(position)
    return special, question, passage


def teacher_windows(windows, student_tok: Any,
                    teacher_tok: Any) -> tuple[list[list[int]], list[list[int]], list[np.ndarray]]:
    """The student's windows spelled in the teacher's vocabulary: ``(input_ids, token_type_ids, index)``
    per window, where ``index[p]`` is the teacher position that student position ``p`` reads from."""
    template = pair_template(teacher_tok)
    unk = teacher_tok.unk_token_id
    ids_out, types_out, maps = [], [], []
    for w, ids in enumerate(windows.input_ids):
        special, question, passage = _role_map(windows.offsets[w], tuple(int(x) for x in windows.segment[w]))
        pieces = student_tok.convert_ids_to_tokens(list(ids))
        t_q = teacher_tok.convert_tokens_to_ids([pieces[p] for p in question])
        t_p = teacher_tok.convert_tokens_to_ids([pieces[p] for p in passage])
        if unk is not None and any(t == unk and pieces[p] != teacher_tok.unk_token
                                   for t, p in zip([*t_q, *t_p], [*question, *passage])):
            raise CompressError(f"window {w}: a word piece of the student is not in the teacher's vocabulary; "
                                "distilling a reader needs both to share one (see compress.tasks.question_answering.distill).")
        t_ids, t_types, t_qpos, t_ppos = template.build(t_q, t_p)
        t_special = template.special_positions(len(t_q), len(t_p))
        index = np.zeros(len(ids), dtype=np.int64)
        index[question], index[passage] = t_qpos, t_ppos
        for k, position in enumerate(special):  # first to first, last to last, the ones between in order
            index[position] = (t_special[0] if k == 0 else t_special[-1] if k == len(special) - 1
                               else t_special[min(k, len(t_special) - 2)])
        ids_out.append(t_ids)
        types_out.append(t_types)
        maps.append(index)
    return ids_out, types_out, maps


def _windows_digest(windows, max_length: int, stride: int) -> str:
    digest = hashlib.sha256(f"max_length={max_length} stride={stride}".encode())
    for ids in windows.input_ids:
        digest.update(np.asarray(ids, dtype=np.int64).tobytes())
        digest.update(b"\x1e")
    return digest.hexdigest()


def window_soft_labels(t_model, t_tok: Any, s_tok: Any, windows, weights: str, max_length: int, stride: int,
                       precision: str = "fp32") -> tuple[list[np.ndarray], list[np.ndarray], bool]:
    """The teacher's start and end logits at every position of every student window, ``(starts, ends,
    reused)``; cached under the teacher's weights hash, the windows' exact ids and the precision."""
    key = hashlib.sha256(f"{weights}|{_windows_digest(windows, max_length, stride)}|{precision}|qa-windows v1"
                         .encode()).hexdigest()
    path = cache_dir() / "soft-labels" / f"{key}.npz"
    lengths = [len(x) for x in windows.input_ids]
    if path.exists():
        with np.load(path, allow_pickle=False) as stored:
            if stored["lengths"].tolist() == lengths:
                cuts = np.cumsum(lengths)[:-1]
                return np.split(stored["start"], cuts), np.split(stored["end"], cuts), True
    t_ids, t_types, maps = teacher_windows(windows, s_tok, t_tok)
    limit = getattr(t_model.config, "max_position_embeddings", None)
    longest = max((len(x) for x in t_ids), default=0)
    if isinstance(limit, int) and longest > limit - (2 if t_model.config.model_type in ("mpnet", "roberta") else 0):
        raise CompressError(f"--max-length {max_length}: in the teacher's template a window is {longest} tokens, more "
                            f"than its {limit} positions allow; give a smaller --max-length.")
    pad = t_tok.pad_token_id if t_tok.pad_token_id is not None else 0
    t_start, t_end = span_logits(t_model, t_ids, t_types, precision=precision, pad_id=pad)
    starts = [s[m].astype(np.float32) for s, m in zip(t_start, maps)]
    ends = [e[m].astype(np.float32) for e, m in zip(t_end, maps)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npz.tmp", delete=False) as handle:
        np.savez(handle, start=np.concatenate(starts) if starts else np.zeros(0, np.float32),
                 end=np.concatenate(ends) if ends else np.zeros(0, np.float32),
                 lengths=np.asarray(lengths, dtype=np.int64))
    os.replace(handle.name, path)
    return starts, ends, False


def span_term_values(terms: Sequence[LossTerm], start_logits, end_logits, attention_mask, soft_start, soft_end,
                     start_positions, end_positions, temperature: float, weight=None) -> dict[str, Any]:
    """The value of each head term of positive weight in ``terms`` (by term name) for one batch of windows
    (module docstring): a term on ``logits`` compares the student's start and end rows with the teacher's at
    ``temperature`` (each window weighted by ``weight``, ``None``: all 1), a term on ``labels`` them with the
    gold positions of the windows that have one (``NO_GOLD``: a transfer window), scaled by their share of the
    batch; each the mean of its start and end values. Padding positions are masked out of both."""
    real = attention_mask.bool()
    student = [x.float().masked_fill(~real, MASKED) for x in (start_logits, end_logits)]
    teacher = None
    values: dict[str, Any] = {}
    for term in terms:
        if term.weight <= 0 or term.intermediate:
            continue
        fn = LOSSES[term.loss]
        if term.on == "logits":
            if teacher is None:
                teacher = [t.to(start_logits.device).nan_to_num(MASKED).masked_fill(~real, MASKED)
                           for t in (soft_start, soft_end)]
            values[term.name] = (row_weighted(fn, weight, student[0], teacher[0], temperature)
                                 + row_weighted(fn, weight, student[1], teacher[1], temperature)) / 2
        elif term.on == "labels":
            gold = start_positions != NO_GOLD
            if not bool(gold.any()):
                continue
            share = gold.sum() / len(gold)
            values[term.name] = (fn(student[0][gold], start_positions[gold])
                                 + fn(student[1][gold], end_positions[gold])) / 2 * share
    return values


def span_distillation_loss(start_logits, end_logits, attention_mask, soft_start, soft_end, start_positions,
                           end_positions, temperature: float, alpha_kd: float, alpha_hard: float) -> dict[str, Any]:
    """:func:`span_term_values` of soft CE (weight ``alpha_kd``, named ``soft_ce``) and hard CE (``alpha_hard``,
    ``hard_ce``), with their weighted sum under ``loss``: the default objective, as one call."""
    terms = [LossTerm("soft_ce", alpha_kd, name="soft_ce"), LossTerm("hard_ce", alpha_hard, name="hard_ce")]
    values = span_term_values(terms, start_logits, end_logits, attention_mask, soft_start, soft_end, start_positions,
                              end_positions, temperature)
    total = sum((t.weight * values[t.name] for t in terms if t.name in values), start_logits.new_zeros(()))
    return {"loss": total, **values}


def _span_head_values(terms, output, attention_mask, temperature, start_positions, end_positions, soft_start,
                      soft_end, weight=None):
    """:func:`span_term_values` as :func:`compress.stages.distill.intermediate.with_projections` asks for it."""
    return span_term_values(terms, output.start_logits, output.end_logits, attention_mask, soft_start, soft_end,
                            start_positions, end_positions, temperature, weight)


def _collator(tokenizer: Any, teacher_pad_id: int = 0):
    """The model columns padded by the tokenizer, the gold positions, and the soft rows padded with NaN; with the
    intermediate terms, the teacher's windows (``t_input_ids`` padded with ``teacher_pad_id``, their attention
    mask, token types) and ``t_index`` (the teacher position of each student position) padded to the batch."""
    import torch
    from transformers import DataCollatorWithPadding

    inner = DataCollatorWithPadding(tokenizer, return_tensors="pt")
    keep = (*MODEL_COLUMNS, "start_positions", "end_positions")

    def padded(features, name: str, width: int, fill, dtype):
        rows = torch.full((len(features), width), fill, dtype=dtype)
        for i, f in enumerate(features):
            rows[i, :len(f[name])] = torch.tensor(f[name], dtype=dtype)
        return rows

    def collate(features: list[dict[str, Any]]) -> dict[str, Any]:
        batch = inner([{k: v for k, v in f.items() if k in keep} for f in features])
        width = batch["input_ids"].shape[1]
        for name in ("soft_start", "soft_end"):
            batch[name] = padded(features, name, width, float("nan"), torch.float32)
        batch["weight"] = torch.tensor([float(f.get("weight", 1.0)) for f in features])
        if "t_input_ids" in features[0]:
            t_width = max(len(f["t_input_ids"]) for f in features)
            batch["t_input_ids"] = padded(features, "t_input_ids", t_width, teacher_pad_id, torch.long)
            batch["t_attention_mask"] = padded([{"m": [1] * len(f["t_input_ids"])} for f in features], "m", t_width, 0,
                                               torch.long)
            if "t_token_type_ids" in features[0]:
                batch["t_token_type_ids"] = padded(features, "t_token_type_ids", t_width, 0, torch.long)
            batch["t_index"] = padded(features, "t_index", width, 0, torch.long)
        return batch

    return collate


def _load_teacher(teacher: str | os.PathLike, eager_attention: bool = False):
    head, _, names = model_head(teacher)
    if head is None or head.name != QA:
        raise CompressError(f"--teacher {teacher}: not a trained span reader (its config names no "
                            "...ForQuestionAnswering head). Train one first: bert-compress teacher --data SQUAD.json "
                            "--out TEACHER_DIR")
    t_model, t_tok, _ = load_classifier(teacher, eager_attention=eager_attention, task=QA)
    t_model.eval()
    for p in t_model.parameters():
        p.requires_grad_(False)
    meta = read_meta(teacher) or {}
    return t_model, t_tok, meta.get("weights_sha256") or weights_sha256(teacher), meta, names


def distill_stage(cfg: Any, out: str | os.PathLike) -> Path:
    """``bert-compress distill`` on question-answering data: the student built by the student factory
    from ``--student``/``--init`` as a reader, then distilled on the teacher's window logits."""

    cfg.validate()
    cfg.refuse_tagger_only("question answering")
    cfg.refuse_beyond_logits("a span reader is not augmented (a word edit can move or break the answer span); "
                             "leave --augment out for QA data, or give transfer questions with --unlabeled.",
                             allowed=("unlabeled", "intermediate", "losses", "kd_loss", "schedule"))
    if cfg.unlabeled_text_pair_column or cfg.unlabeled_text_column != "text":
        raise CompressError("--unlabeled-text-column/--unlabeled-text-pair-column: transfer questions for a reader are "
                            "read from a QA source or a table with question and context columns; leave them out.")
    if cfg.unlabeled_balance:
        raise CompressError(f"--unlabeled-balance {cfg.unlabeled_balance}: transfer questions for a reader are sampled "
                            "as they come, not balanced over a column; leave it out for QA data.")
    if cfg.unlabeled_select != "random":
        raise CompressError(f"--unlabeled-select {cfg.unlabeled_select}: transfer questions for a reader are sampled "
                            "as they come, not selected by similarity; leave it out for QA data.")
    device = training_device(cfg.device)
    precision = resolve_precision(cfg.precision, device).precision
    full = cfg.data.load_qa(whole=True)
    data = full.subset(cfg.data.checked_limit(), seed=cfg.data.split_seed)
    refuse_keep_best(cfg.train, data.splits, cfg.data.data)
    transfer = None
    if cfg.unlabeled:
        questions, passages, stats = transfer_questions(cfg.unlabeled, full, data, cfg.unlabeled_limit, cfg.train.seed)
        transfer = ReaderTransfer(questions, passages, stats, cfg.unlabeled_weight)
        print(f"transfer questions ({cfg.unlabeled}): {len(questions)} kept of {stats.get('rows', 0)} "
              f"({stats['about_validation_or_test_passages']} about validation/test passages, "
              f"{stats.get('in_training', 0)} labelled, {stats.get('duplicates', 0)} duplicates dropped)")
        if not questions:
            print(f"note: --unlabeled {cfg.unlabeled}: no question left after removing duplicates, labelled questions "
                  "and questions about validation/test passages; distilling on the labelled questions alone")
    eager = cfg.wants_intermediate
    t_model, t_tok, weights, t_meta, names = _load_teacher(cfg.teacher, eager_attention=eager)
    cfg = dataclasses.replace(cfg, max_length=fit_max_length(cfg.max_length, t_model.config, who="the teacher"))
    pad = t_tok.pad_token_id if t_tok.pad_token_id is not None else 0
    recorded = HeadCheck.from_dict(t_meta.get("chance_check"))  # a reader from outside is tested here, once
    if recorded is None and "validation" in data.splits:
        recorded = answer_start_check(t_model, t_tok, data.splits["validation"], cfg.max_length,
                                      qa_stride(cfg.max_length, cfg.stride), precision, pad)
    if recorded is not None:
        refuse_untrained_teacher(recorded, cfg.teacher, cfg.allow_untrained_teacher)
    s_model, s_tok, info = build_student(cfg.student, t_model, t_tok, names or ["start", "end"], cfg.layer_map,
                                         cfg.train.seed, eager_attention=eager, task=QA)
    cfg = dataclasses.replace(cfg, max_length=fit_max_length(cfg.max_length, s_model.config, who="the student"))
    t_model.to(device)
    allow_null = bool(t_meta.get("allow_null", data.with_impossible))
    pair = ModelPair(t_model, t_tok, weights, str(cfg.teacher), s_model, s_tok, info)
    return distill_reader(pair, data, out, cfg, precision, allow_null, transfer,
                          t_meta.get("null_threshold", DEFAULT_NULL_THRESHOLD))


def _training_windows(pair: ModelPair, data: QATaskData, cfg: Any, precision: str,
                      transfer: ReaderTransfer | None) -> tuple[Any, dict[str, bool], int]:
    """``(rows, reused, transfer windows)``: the student's training windows of the labelled questions (with their
    gold positions) and of ``transfer``'s (without), each with the teacher's start and end logits at every position
    (and, for the intermediate terms, the teacher's spelling of the window); ``reused`` says per part whether those
    logits came from the cache."""
    from datasets import Dataset

    t_model, t_tok, weights, s_tok = pair.t_model, pair.t_tok, pair.weights, pair.s_tok
    max_length, stride = cfg.max_length, qa_stride(cfg.max_length, cfg.stride)
    want_inter = cfg.wants_intermediate
    split = data.splits["train"]
    parts = [("train", split["question"][:], split["context"][:], split["answers"][:], 1.0)]
    if transfer is not None and transfer.questions:
        parts.append(("transfer", transfer.questions, transfer.passages,
                      [{"text": [], "answer_start": []}] * len(transfer.questions), transfer.weight))
    check_same_pieces(t_tok, s_tok, [text for part in parts for text in (*part[1], *part[2])], f"--data {data.source}")
    use_types = "token_type_ids" in getattr(s_tok, "model_input_names", MODEL_COLUMNS)
    t_types_wanted = "token_type_ids" in getattr(t_tok, "model_input_names", MODEL_COLUMNS)
    columns: dict[str, list] = {}
    reused_by: dict[str, bool] = {}
    transfer_windows = 0
    for name, questions, passages, answers, row_weight in parts:
        feats = qa_features(s_tok, questions, passages, answers, max_length=max_length, doc_stride=stride)
        w = feats.windows
        soft_start, soft_end, reused_by[name] = window_soft_labels(t_model, t_tok, s_tok, w, weights, max_length,
                                                                   stride, precision)
        print(f"soft labels ({name}, {len(w)} windows of {len(questions)} questions, start and end per position): "
              f"{'reused from the cache' if reused_by[name] else 'computed'}")
        gold = name == "train"
        part: dict[str, list] = {
            "input_ids": w.input_ids, "attention_mask": w.attention_mask,
            "start_positions": feats.start_positions.tolist() if gold else [NO_GOLD] * len(w),
            "end_positions": feats.end_positions.tolist() if gold else [NO_GOLD] * len(w),
            "soft_start": [x.tolist() for x in soft_start], "soft_end": [x.tolist() for x in soft_end],
            "length": [len(x) for x in w.input_ids], "weight": [float(row_weight)] * len(w)}
        if use_types:
            part["token_type_ids"] = w.token_type_ids
        # The intermediate terms read the teacher's states on its spelling of each window, mapped back to the
        # student's positions (check_same_pieces above makes the two windows hold the same pieces).
        if want_inter:
            t_ids, t_types, maps = teacher_windows(w, s_tok, t_tok)
            part.update(t_input_ids=t_ids, t_index=[m.tolist() for m in maps])
            if t_types_wanted:
                part["t_token_type_ids"] = t_types
        if name == "transfer":
            transfer_windows = len(w)
        for key, values in part.items():
            columns.setdefault(key, []).extend(values)
    return Dataset.from_dict(columns), reused_by, transfer_windows


def distill_reader(pair: ModelPair, data: QATaskData, out: str | os.PathLike, cfg: Any, precision: str,
                   allow_null: bool, transfer: ReaderTransfer | None = None,
                   teacher_null_threshold: float = DEFAULT_NULL_THRESHOLD) -> Path:
    """Train the student on the loss terms of ``cfg`` (:func:`span_term_values` for the start/end scores, the
    intermediate ones on the teacher's windows read at the student's positions) over the labelled questions and
    ``transfer``'s, score it and the teacher on validation and test (EM, F1, and both against the teacher's
    answers), write the student artifact. With SQuAD 2.0 data the teacher answers at its recorded null threshold
    (``teacher_null_threshold``) and the student at the one with its best validation F1."""
    import torch

    started = time.perf_counter()
    if cfg.temperature <= 0:
        raise CompressError(f"--temperature must be > 0, got {cfg.temperature}")
    t_model, t_tok, weights, s_model, s_tok = pair.t_model, pair.t_tok, pair.weights, pair.s_model, pair.s_tok
    max_length, stride = cfg.max_length, qa_stride(cfg.max_length, cfg.stride)
    want_inter = cfg.wants_intermediate
    train_ds, reused_by, transfer_windows = _training_windows(pair, data, cfg, precision, transfer)
    reused = all(reused_by.values())
    t_shape, s_shape = teacher_shape(t_model.config), teacher_shape(s_model.config)
    pairs = parse_layer_map(cfg.layer_map, t_shape.layers, s_shape.layers) if want_inter else {}
    projections = make_projections(s_shape.hidden, t_shape.hidden, pairs) if want_inter else torch.nn.ModuleDict()
    module = with_projections(s_model, projections, pairs, _span_head_values)
    train = cfg.train
    args = training_arguments(train, checkpoint_dir(out), len(train_ds), precision=precision)
    fingerprint = checkpoint_fingerprint(cfg)
    stop = interrupt_callback()
    temperature = cfg.temperature

    def read_teacher(inputs: dict[str, Any], terms: list[LossTerm]):
        """The teacher on its spelling of the windows, its states read back at the student's positions."""
        teacher_inputs = {k[2:]: inputs.pop(k) for k in ("t_input_ids", "t_attention_mask", "t_token_type_ids")
                          if k in inputs}
        index = inputs.pop("t_index", None)
        if index is None:
            return None, None
        return at_student_positions(*teacher_states(t_model, teacher_inputs, terms, precision), index)

    trainer_class = head_distillation_trainer(lambda epoch: active_terms(cfg, epoch, want_inter), read_teacher,
                                              temperature, train.seed, projections, cfg.projection_lr, out)
    t_pad = t_tok.pad_token_id if t_tok.pad_token_id is not None else 0
    scorer = None
    if train.keep_best:  # the student's validation F1 after every epoch, its best epoch kept
        scorer = f1_callback(data.splits["validation"], data.gold_answers("validation"), s_tok, max_length, stride,
                             allow_null, s_tok.pad_token_id or 0, precision,
                             keep_best=True, reader=s_model)
    trainer = trainer_class(model=module, args=args, train_dataset=train_ds,
                            callbacks=[stop] + ([scorer] if scorer is not None else []),
                            data_collator=_collator(s_tok, t_pad))
    result = run_trainer(trainer, resume_point(out, cfg.resume, fingerprint), Path(out), stop)

    named = [name for name in ("validation", "test") if name in data.splits]
    splits, golds = {n: data.splits[n] for n in named}, {n: data.gold_answers(n) for n in named}
    read = {}
    for who, model, tok in (("teacher", t_model, t_tok), ("student", s_model, s_tok)):
        # the teacher answers at the null threshold its own stage chose; the student's is chosen on validation
        read[who] = score_reader(model, tok, splits, golds, max_length, stride, allow_null, precision=precision,
                                 pad_id=tok.pad_token_id if tok.pad_token_id is not None else 0,
                                 weights=weights if who == "teacher" else None,
                                 null_threshold=teacher_null_threshold if who == "teacher" else None)
    score = get_task(QA).score
    metrics: dict[str, Any] = {}
    for name in named:
        teacher_scores = read["teacher"].metrics[name]
        metrics[name] = {**score([a["answer"] for a in read["student"].answers[name]], golds[name],
                                 [a["answer"] for a in read["teacher"].answers[name]]),
                         "teacher_f1": teacher_scores["f1"], "teacher_exact_match": teacher_scores["exact_match"],
                         "questions": len(golds[name]), "windows": read["student"].metrics[name]["windows"]}
    meta = {
        "stage": "distill", "kind": "pytorch", "task": QA, "model_type": s_model.config.model_type,
        "parameters": count_parameters(s_model),
        "parent": {"teacher": pair.teacher, "teacher_weights_sha256": weights},
        "student": pair.student_info,
        "config": {**cfg.to_dict(), "soft_labels": "teacher start/end logits on the student's windows"},
        "distillation": {"loss_terms": terms_record(lambda epoch: active_terms(cfg, epoch, want_inter),
                                                   train.epochs), "temperature": temperature,
                         "intermediate": want_inter, "layer_map": format_layer_map(pairs) if want_inter else None},
        "stride": stride, "allow_null": allow_null,  # the windows it was trained and scored in; Predictor reads them
        **read["student"].record(),
        "data": data.describe(), "metrics": metrics,
        "training": {"global_steps": result.global_step, "train_loss": round(float(result.training_loss), 5),
                     "rows": len(train_ds), "soft_labels_reused": reused,
                     **(scorer.record() if scorer is not None else {})},
        "transfer": None if transfer is None else {**transfer.info, "windows": transfer_windows,
                                                   "weight": transfer.weight,
                                                   "soft_labels_reused": reused_by.get("transfer", False)},
        "timings": {"total_s": round(time.perf_counter() - started, 1)},
    }
    if not is_main_process():
        return Path(out)
    path = write_trained_artifact(out, s_model, s_tok, meta)
    parts = [f"{n} F1 {m['f1']:.4f} (teacher {m['teacher_f1']:.4f}; exact match {m['exact_match']:.4f}, "
             f"F1 against the teacher's answers {m['reference_f1']:.4f})" for n, m in metrics.items()]
    print("student: " + "; ".join(parts))
    announce_null_threshold("student", read["student"].null)
    return path
