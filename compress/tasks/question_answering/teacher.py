"""The teacher stage for question answering: fine-tune a span reader and score it on SQuAD's EM and F1.

:func:`compress.stages.teacher.train_teacher` hands over here when the data is question answering
(:func:`compress.tasks.task_choice.data_task`: the built-in ``squad-dev``, a SQuAD-format ``.json``
file or a folder of them). The model is ``AutoModelForQuestionAnswering`` through the registry's
task object (two scores per token: answer starts here, ends here). What users of transformers'
``run_qa.py`` know, built from :mod:`compress.tasks.question_answering.features`:

- **training features**: each question + passage pair cut into windows of ``--max-length`` tokens
  overlapping by ``--stride`` tokens (default a third of the window, ``run_qa.py``'s 128 of 384; recorded
  as ``stride``), only the passage windowed; each window's gold start and end positions from the tokenizer's offsets,
  ``[CLS]`` (position 0) for a window that does not hold the answer;
- **scoring**: every window's start and end logits, the n-best spans per window (at most 30 tokens
  long), the best span over all windows mapped back to the passage's characters, and the official
  SQuAD exact match and F1 (:mod:`compress.tasks.question_answering.metrics`); with SQuAD 2.0 data the null
  answer competes (``allow_null``), at the null threshold with the best validation F1 when its gain is told
  from noise, else ``run_qa.py``'s 0.0 (:func:`score_reader`, recorded as ``null_threshold``; docs/qa.md).

Training is the other teachers' machinery: the guarded Trainer (seeded batch order, NaN guard),
fingerprinted checkpoints and ``--resume``, Ctrl-C, validation F1 logged after every epoch and an
atomic artifact with ``"task": "question-answering"``. A model whose head is for another task is
refused in one line before transformers loads it. :func:`score_reader` is also how distill and prune
score the readers they write.
"""

from __future__ import annotations

import dataclasses

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from compress.core.artifact import read_meta
from compress.core.assets import resolve_model
from compress.config import TeacherConfig
from compress.core.head_check import judge_existing_head
from compress.core.hub import snapshot_origin
from compress.runtime.modeling import count_parameters, fit_max_length, load_classifier
from compress.tasks import get_task
from compress.tasks.question_answering.data import QATaskData
from compress.tasks.question_answering.features import (DEFAULT_NULL_THRESHOLD, NEVER_NULL, apply_null_threshold, decode_spans,
                                        encode_qa, null_margins, qa_features)
from compress.tasks.question_answering.metrics import best_null_threshold, question_scores
from compress.tasks.task_choice import QA, check_model_task
from compress.stages.training import (checkpoint_dir, checkpoint_fingerprint, freeze_bottom_layers, guarded_trainer,
                               interrupt_callback, is_main_process, resume_point, run_trainer, training_arguments,
                               write_trained_artifact, refuse_keep_best, start_stage)
from compress.core.assets import cache_dir
from compress.core.device import device_name
from compress.runtime.modeling import accepts_token_types, autocast, model_device
from compress.core.progress import progress as show_progress
from compress.stages.training import epoch_validation_callback
from compress.core.windows import length_sorted_batches, pad_rows

#: Columns a span reader takes (``token_type_ids`` only when the tokenizer makes them).
MODEL_COLUMNS = ("input_ids", "attention_mask", "token_type_ids")


def qa_stride(max_length: int, stride: int | None = None) -> int:
    """The passage overlap between windows: ``stride`` (``--stride`` / ``--doc-stride``) when given, else a third
    of the window, ``run_qa.py``'s 128 of 384 (an answer span must not be cut, so QA overlaps more than
    tagging's quarter)."""
    return max(0, int(max_length) // 3) if stride is None else int(stride)


def load_qa_task(cfg: TeacherConfig) -> QATaskData:
    """The teacher's QA data (``--data``, cut to ``--limit`` questions per split, seeded)."""
    return cfg.data.load_qa()


def qa_training_rows(split, tokenizer, max_length: int, stride: int):
    """A split's windows as a ``datasets.Dataset`` with ``start_positions`` / ``end_positions`` (and ``length``)."""
    from datasets import Dataset

    feats = qa_features(tokenizer, split["question"], split["context"], split["answers"], max_length=max_length,
                        doc_stride=stride)
    w = feats.windows
    columns: dict[str, list] = {"input_ids": w.input_ids, "attention_mask": w.attention_mask}
    if "token_type_ids" in getattr(tokenizer, "model_input_names", MODEL_COLUMNS):
        columns["token_type_ids"] = w.token_type_ids
    columns["start_positions"] = feats.start_positions.tolist()
    columns["end_positions"] = feats.end_positions.tolist()
    columns["length"] = [len(ids) for ids in w.input_ids]
    return Dataset.from_dict(columns)


def qa_collator(tokenizer):
    """Pads the model's columns with the tokenizer; start and end positions stay one integer per window."""
    from transformers import DataCollatorWithPadding

    inner = DataCollatorWithPadding(tokenizer, return_tensors="pt")
    keep = (*MODEL_COLUMNS, "start_positions", "end_positions")

    def collate(features: list[dict[str, Any]]) -> dict[str, Any]:
        return inner([{k: v for k, v in f.items() if k in keep} for f in features])

    return collate


def window_logits(model, windows, batch_size: int = 32, precision: str = "fp32",
                  pad_id: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Start and end logits of every window (padding trimmed), in the windows' order."""
    return span_logits(model, windows.input_ids, windows.token_type_ids, batch_size, precision, pad_id)


def span_logits(model, input_ids: Sequence[Sequence[int]], token_type_ids: Sequence[Sequence[int]] | None,
                batch_size: int = 32, precision: str = "fp32",
                pad_id: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Start and end logits of every row of ``input_ids`` (unpadded rows; padding trimmed from the results),
    run longest first in padded batches."""
    import torch

    device = model_device(model)
    starts: list[np.ndarray] = [np.zeros(0)] * len(input_ids)
    ends: list[np.ndarray] = [np.zeros(0)] * len(input_ids)
    need_types = accepts_token_types(model)
    model.eval()
    with torch.inference_mode(), autocast(precision, device):
        for rows in show_progress(length_sorted_batches([len(x) for x in input_ids], batch_size), "reading",
                                  unit="batches"):
            arrays = pad_rows([input_ids[w] for w in rows],
                              None if token_type_ids is None else [token_type_ids[w] for w in rows], pad_id, need_types)
            out = model(**{k: torch.as_tensor(v, device=device) for k, v in arrays.items()})
            s, e = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
            for r, w in enumerate(rows):
                n = len(input_ids[int(w)])
                starts[int(w)], ends[int(w)] = s[r, :n], e[r, :n]
    return starts, ends


#: What the answers cache keeps of a decoded answer: enough for :func:`apply_null_threshold` (not the n-best list).
CACHED_KEYS = ("answer", "start", "end", "score", "logit", "null_logit", "window", "null_score")


def _answers_path(weights: str, windows, allow_null: bool, precision: str) -> Path:
    """Where a reader's decoded answers to these exact windows are cached (keyed like soft labels)."""
    import hashlib

    digest = hashlib.sha256(f"{weights}|allow_null={allow_null}|{precision}|answers v2".encode())
    for ids in windows.input_ids:
        digest.update(np.asarray(ids, dtype=np.int64).tobytes())
        digest.update(b"\x1e")
    return cache_dir() / "qa-answers" / f"{digest.hexdigest()}.json"


def store_answers(weights: str, windows, allow_null: bool, precision: str, answers: list[dict[str, Any]]) -> None:
    """Cache a reader's answers at :data:`NEVER_NULL` (text, character span, and what another null threshold
    needs; written atomically) for :func:`read_answers`."""
    import json
    import tempfile

    path = _answers_path(weights, windows, allow_null, precision)
    path.parent.mkdir(parents=True, exist_ok=True)
    keep = [{k: a[k] for k in CACHED_KEYS} for a in answers]
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8") as handle:
        json.dump(keep, handle)
    os.replace(handle.name, path)


def reader_windows(tokenizer, split, max_length: int, stride: int):
    """The windows :func:`read_answers` reads a split in (what its answers cache is keyed on)."""
    return encode_qa(tokenizer, list(split["question"]), list(split["context"]), max_length=max_length,
                     doc_stride=stride)


def read_answers(model, tokenizer, split, max_length: int, stride: int, allow_null: bool = False,
                 batch_size: int = 32, precision: str = "fp32", pad_id: int = 0,
                 weights: str | None = None,
                 null_threshold: float = DEFAULT_NULL_THRESHOLD) -> tuple[list[dict[str, Any]], int]:
    """The model's decoded answer to every question of a split (windows, n-best spans, best over windows) at
    ``null_threshold`` (:data:`NEVER_NULL` for the best span of every question, which
    :func:`apply_null_threshold` turns into any threshold's answers), and the number of windows read. With
    ``weights`` (the reader's weights sha256), answers the teacher stage cached for the very same windows are
    reused instead of running the model again (distill scores its teacher on the splits the teacher stage has
    just read)."""
    import json

    contexts = list(split["context"])
    windows = reader_windows(tokenizer, split, max_length, stride)
    raw = None
    if weights:
        path = _answers_path(weights, windows, allow_null, precision)
        if path.exists():
            stored = json.loads(path.read_text(encoding="utf-8"))
            if len(stored) == len(contexts):
                raw = stored
    if raw is None:
        starts, ends = window_logits(model, windows, batch_size, precision, pad_id)
        raw = decode_spans(windows, starts, ends, contexts, allow_null=allow_null, null_threshold=NEVER_NULL)
    return apply_null_threshold(raw, null_threshold), len(windows)


def choose_null_threshold(answers: Sequence[dict[str, Any]], gold: Sequence[Sequence[str]]) -> dict[str, Any]:
    """The null threshold a SQuAD 2.0 reader answers at, from a :data:`NEVER_NULL` reading of validation.

    The threshold with the best F1 (:func:`compress.tasks.question_answering.metrics.best_null_threshold`) replaces 0.0
    (``run_qa.py``'s) only when its gain is told from noise: the paired 95% bootstrap interval over the
    questions of its F1 minus 0.0's lies above zero. Otherwise one or two questions of validation would move it,
    and the next split pays. The record: ``null_threshold`` (the one used) and its ``f1``, ``f1_at_default``,
    the sweep's ``best_threshold`` / ``best_f1``, ``gain_interval`` and ``chosen_on``."""
    from compress.core.stats import mean_drop_interval

    def per_question(threshold: float) -> np.ndarray:
        return question_scores([a["answer"] for a in apply_null_threshold(answers, threshold)], gold)["f1"]

    answered = question_scores([a["answer"] for a in answers], gold)["f1"]
    empty = question_scores([""] * len(answers), gold)["f1"]
    best, best_f1 = best_null_threshold(null_margins(answers), answered, empty, DEFAULT_NULL_THRESHOLD)
    at_default, at_best = per_question(DEFAULT_NULL_THRESHOLD), per_question(best)
    gain = mean_drop_interval(at_best, at_default)  # mean(best - default), paired over the questions
    used = best if gain.low > 0 else DEFAULT_NULL_THRESHOLD
    return {"null_threshold": round(used, 6), "f1": float((at_best if used == best else at_default).mean()),
            "f1_at_default": float(at_default.mean()), "best_threshold": round(best, 6), "best_f1": best_f1,
            "gain_interval": [round(gain.low, 6), round(gain.high, 6)], "chosen_on": "validation"}


@dataclass
class ReaderScores:
    """What :func:`score_reader` read: per split the SQuAD scores (``metrics``), the answers at the reader's null
    threshold (``answers``) and at :data:`NEVER_NULL` (``raw``, what the answers cache keeps), and how the
    threshold was set (``null``: ``None`` for SQuAD 1.1 data, where no answer is empty)."""

    metrics: dict[str, dict[str, Any]]
    answers: dict[str, list[dict[str, Any]]]
    raw: dict[str, list[dict[str, Any]]]
    null: dict[str, Any] | None

    @property
    def null_threshold(self) -> float:
        return self.null["null_threshold"] if self.null else DEFAULT_NULL_THRESHOLD

    def record(self) -> dict[str, Any]:
        """The artifact's ``null_threshold`` (a reading key: Predictor and every derived artifact answer with it)
        and ``null_threshold_choice``; nothing for SQuAD 1.1 data."""
        if self.null is None:
            return {}
        return {"null_threshold": self.null_threshold, "null_threshold_choice": self.null}


def score_reader(model, tokenizer, splits: dict[str, Any], golds: dict[str, Sequence[Sequence[str]]],
                 max_length: int, stride: int, allow_null: bool, *, precision: str = "fp32", pad_id: int = 0,
                 weights: str | None = None, null_threshold: float | None = None,
                 batch_size: int = 32) -> ReaderScores:
    """SQuAD scores and answers of a reader on each of ``splits`` (:class:`ReaderScores`).

    A reader of SQuAD 2.0 data (``allow_null``) answers at ``null_threshold`` when given (a teacher's recorded
    one), else at the threshold with the best F1 on validation (:func:`choose_null_threshold`; 0.0 without a
    validation split)."""
    read = {name: read_answers(model, tokenizer, split, max_length, stride, allow_null, batch_size, precision,
                               pad_id, weights, null_threshold=NEVER_NULL)
            for name, split in splits.items()}
    raw = {name: given for name, (given, _) in read.items()}
    null = None
    if allow_null:
        if null_threshold is not None:
            null = {"null_threshold": float(null_threshold), "chosen_on": "given"}
        elif "validation" in raw:
            null = choose_null_threshold(raw["validation"], golds["validation"])
        else:
            null = {"null_threshold": DEFAULT_NULL_THRESHOLD, "chosen_on": "default (no validation split)"}
    threshold = null["null_threshold"] if null else DEFAULT_NULL_THRESHOLD
    answers = {name: apply_null_threshold(given, threshold) for name, given in raw.items()}
    score = get_task(QA).score
    metrics = {name: {**score([a["answer"] for a in answers[name]], golds[name]), "questions": len(answers[name]),
                      "windows": read[name][1]} for name in splits}
    return ReaderScores(metrics, answers, raw, null)


def announce_null_threshold(who: str, null: dict[str, Any] | None) -> None:
    """One line on the threshold a SQuAD 2.0 reader answers at, when validation decided it."""
    if not null or null["chosen_on"] != "validation":
        return
    low, high = null["gain_interval"]
    if null["best_threshold"] == DEFAULT_NULL_THRESHOLD:
        print(f"{who}: null threshold {DEFAULT_NULL_THRESHOLD:g}, the best on validation too (F1 {null['f1']:.4f})")
    elif null["null_threshold"] == null["best_threshold"]:
        print(f"{who}: null threshold {null['null_threshold']:g}, chosen on validation (F1 {null['f1']:.4f} against "
              f"{null['f1_at_default']:.4f} at {DEFAULT_NULL_THRESHOLD:g}, gain [{low:+.4f}, {high:+.4f}]); Predictor "
              "and every artifact made from this one answer with it")
    else:
        print(f"{who}: null threshold {DEFAULT_NULL_THRESHOLD:g} kept: the best on validation "
              f"({null['best_threshold']:g}, F1 {null['best_f1']:.4f} against {null['f1_at_default']:.4f}) is not "
              f"told from noise (gain [{low:+.4f}, {high:+.4f}])")


def f1_callback(split, gold: Sequence[Sequence[str]], tokenizer, max_length: int, stride: int, allow_null: bool,
                pad_id: int, precision: str, keep_best: bool = False, reader: Any = None):
    """A Trainer callback: after every epoch, validation exact match and F1 in the log history and on stdout;
    ``keep_best``: training ends with the weights of the epoch with the best F1. ``reader``: the model to score
    (and keep) when the Trainer trains a wrapper around it (a student with projections)."""

    def evaluate(model, batch_size: int) -> dict[str, float]:
        # a SQuAD 2.0 reader is scored at its best null threshold on validation, the one it would be given
        scores = score_reader(reader if reader is not None else model, tokenizer, {"validation": split},
                              {"validation": gold}, max_length, stride, allow_null, precision=precision,
                              pad_id=pad_id, batch_size=batch_size).metrics["validation"]
        return {"validation_f1": scores["f1"], "validation_exact_match": scores["exact_match"]}

    return epoch_validation_callback(evaluate, lambda v: f"validation F1 {v['validation_f1']:.4f} "
                                                         f"(exact match {v['validation_exact_match']:.4f})", keep_best,
                                     reader)


def answer_start_check(model, tokenizer, split, max_length: int, stride: int, precision: str = "fp32",
                       pad_id: int = 0):
    """Is a reader's head better than one that ignores its input? Its answer-start position, per window, against
    always pointing at the commonest gold start (``[CLS]`` for the windows without the answer,
    :func:`compress.core.head_check.check_predictions`). A random head points anywhere, so it scores about
    ``1/length``; any trained reader, however weak, points at the answer's first token far more often."""
    from compress.core.head_check import check_predictions

    feats = qa_features(tokenizer, split["question"], split["context"], split["answers"], max_length=max_length,
                        doc_stride=stride)
    starts, _ = window_logits(model, feats.windows, precision=precision, pad_id=pad_id)
    pred = np.asarray([int(np.argmax(s)) for s in starts], dtype=np.int64)
    return check_predictions(pred, feats.start_positions, max_length, measure="answer-start accuracy (per window)")


def train_qa_teacher(cfg: TeacherConfig, out: str | os.PathLike) -> Path:
    """Fine-tune (if needed) and evaluate a span-reader teacher; write it as an artifact at ``out``."""

    stage = start_stage(cfg)
    device, precision, timings = stage.device, stage.precision, stage.timings
    data = load_qa_task(cfg)  # before the model: a bad file should not cost a model fetch
    refuse_keep_best(cfg.train, data.splits, cfg.data.data)
    source = resolve_model(cfg.model, revision=cfg.revision, allow_pickle=cfg.allow_pickle)
    check_model_task(source, QA, cfg.data.data, cfg.model)
    model, tokenizer, has_head = load_classifier(source, allow_pickle=cfg.allow_pickle, task=QA)
    cfg = dataclasses.replace(cfg, max_length=fit_max_length(cfg.max_length, model.config,
                                                             who=f"--model {cfg.model}"))
    model.to(device)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    stride = qa_stride(cfg.max_length, cfg.stride)
    allow_null = data.with_impossible
    # an existing head is tested on validation before it is trusted, as the other teachers do (compress.core.head_check)
    head_check, untrained_head = None, False
    if has_head and cfg.finetune is not True and "validation" in data.splits:
        head_check = answer_start_check(model, tokenizer, data.splits["validation"], cfg.max_length, stride,
                                        precision.precision, pad_id)
        untrained_head = judge_existing_head(head_check, cfg.finetune, cfg.model) == "fine-tune"
    finetune = (not has_head or untrained_head) if cfg.finetune is None else bool(cfg.finetune)
    train_log: dict[str, Any] = {}
    if finetune and cfg.train.epochs > 0:
        t0 = time.perf_counter()
        train_log = _fine_tune(model, tokenizer, data, cfg, out, device, precision.precision, pad_id, stride,
                               allow_null)
        timings["fine_tune_s"] = round(time.perf_counter() - t0, 1)
    elif not has_head or untrained_head:
        print("warning: the reader has no trained head and --epochs is 0: its answers are random", file=sys.stderr)
    fine_tuned = bool(finetune and cfg.train.epochs > 0)
    chance = head_check if head_check is not None and not fine_tuned else None
    if chance is None and "validation" in data.splits:
        chance = answer_start_check(model, tokenizer, data.splits["validation"], cfg.max_length, stride,
                                    precision.precision, pad_id)
    if chance is not None and chance.untrained:
        print(f"warning: the teacher is no better than chance ({chance.summary()}); distill will refuse it. Train "
              "longer or with another --lr.", file=sys.stderr)
    t0 = time.perf_counter()
    named = [name for name in ("validation", "test") if name in data.splits]
    scores = score_reader(model, tokenizer, {n: data.splits[n] for n in named}, {n: data.gold_answers(n) for n in named},
                          cfg.max_length, stride, allow_null, precision=precision.precision, pad_id=pad_id)
    metrics = scores.metrics
    timings["evaluate_s"] = round(time.perf_counter() - t0, 1)
    stage.total()
    meta = {
        "stage": "teacher", "kind": "pytorch", "task": QA, "model_type": model.config.model_type,
        "parameters": count_parameters(model),
        "parent": {"model": cfg.model, "path": str(source), **(snapshot_origin(source) or {})},
        "fine_tuned": fine_tuned,
        # the existing head tested before training, and the final reader; distill refuses an untrained verdict
        "head_check": None if head_check is None else {**head_check.to_dict(),
                                                       "decision": "fine-tuned" if fine_tuned else "kept"},
        "chance_check": None if chance is None else chance.to_dict(),
        "config": cfg.to_dict(),
        "stride": stride,  # the passage windows it was trained and scored in
        "allow_null": allow_null,
        **scores.record(),
        "device": device_name(device), "precision": precision.to_dict(), "data": data.describe(),
        "metrics": metrics, "training": train_log, "timings": timings,
    }
    if not is_main_process():
        return Path(out)
    path = write_trained_artifact(out, model, tokenizer, meta)
    weights = (read_meta(path) or {}).get("weights_sha256")
    for name, given in scores.raw.items():  # for distill, which scores this teacher on the same splits
        store_answers(weights, reader_windows(tokenizer, data.splits[name], cfg.max_length, stride), allow_null,
                      precision.precision, given)
    parts = [f"{split} F1 {m['f1']:.4f} (exact match {m['exact_match']:.4f}, {m['questions']} questions)"
             for split, m in metrics.items()]
    print("teacher: " + "; ".join(parts) + f" ({timings['total_s']:.0f} s)")
    announce_null_threshold("teacher", scores.null)
    return path


def _fine_tune(model, tokenizer, data: QATaskData, cfg: TeacherConfig, out, device, precision: str, pad_id: int,
               stride: int, allow_null: bool) -> dict[str, Any]:
    train_ds = qa_training_rows(data.splits["train"], tokenizer, cfg.max_length, stride)
    print(f"training windows: {len(train_ds)} for {len(data.splits['train'])} questions "
          f"({cfg.max_length} tokens, passages overlapping by {stride})")
    frozen = freeze_bottom_layers(model, cfg.freeze_layers)
    args = training_arguments(cfg.train, checkpoint_dir(out), len(train_ds), device=device, precision=precision)
    resume = resume_point(out, cfg.resume, checkpoint_fingerprint(cfg))
    stop = interrupt_callback()
    callbacks: list[Any] = [stop]
    scorer = None
    if "validation" in data.splits:
        scorer = f1_callback(data.splits["validation"], data.gold_answers("validation"), tokenizer, cfg.max_length,
                             stride, allow_null, pad_id, precision, keep_best=cfg.train.keep_best)
        callbacks.append(scorer)
    trainer = guarded_trainer(out, model=model, args=args, train_dataset=train_ds, data_collator=qa_collator(tokenizer),
                              callbacks=callbacks)
    result = run_trainer(trainer, resume, Path(out), stop)
    log: dict[str, Any] = {**frozen, "global_steps": result.global_step,
                           "train_loss": round(float(result.training_loss), 5),
                           "effective_batch_size": cfg.train.batch_size * cfg.train.grad_accum * args.world_size,
                           "training_windows": len(train_ds)}
    if scorer is not None:
        log.update(scorer.record())
    return log
