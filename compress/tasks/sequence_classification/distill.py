"""The distill stage for sentence classification: a student trained on the teacher's logits per example.

:func:`compress.stages.distill.trainer.distill` hands over here (through the task's ``training`` aspect) when the data is
classification data; the training itself is :func:`compress.stages.distill.trainer.train_distillation`.

Teacher and student tokenize the text separately. Intermediate losses need the two tokenizations to
line up position by position; this is checked on the training data and, when they do not, the
stage falls back to logit distillation and says so.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from compress.core.artifact import write_model_artifact
from compress.config import DistillConfig
from compress.tasks.tables import tokenize_split
from compress.core.device import device_name
from compress.stages.distill.ensemble import averaged, describe as describe_ensemble, load_members
from compress.stages.distill.intermediate import active_terms, tokenizations_align
from compress.stages.distill.teacher_copies import LabelRuntime, choose_label_runtime, fill_copy_cache
from compress.stages.distill.trainer import (DistillationModule, label_parts, label_up_front, soft_label_store,
                                      train_distillation)
from compress.core.errors import CompressError
from compress.stages.gold_labels import ABSENT, COLUMN as GOLD_COLUMN, with_gold
from compress.core.head_check import HeadCheck, check_head, refuse_untrained_teacher
from compress.stages.long_texts import window_texts, windows_record
from compress.stages.losses import LossTerm
from compress.runtime.modeling import classification_metrics, count_parameters, fit_max_length, predict_logits
from compress.tasks.sequence_classification.teacher import accuracy_callback
from compress.stages.teacher import load_teacher, teacher_logits
from compress.stages.training import checkpoint_dir, is_main_process, print_metrics, refuse_keep_best, start_stage, world
from compress.stages.transfer import TransferOptions, build_transfer
from students.factory import build_student, teacher_shape
from students.layer_map import format_layer_map, parse_layer_map


@dataclass
class _Run:
    """What the steps of one classifier distillation share: the config (its ``max_length`` fitted to both models),
    the data in the teacher's class order, both models, each split in windows and tokenized for both."""

    cfg: DistillConfig
    task: Any
    teacher: Any
    student: Any
    s_tok: Any
    precision: str
    members: list[Any]
    windows: dict[str, Any]
    tokenized: dict[str, Any]
    timings: dict[str, float]


def distill_classifier(cfg: DistillConfig, out: str | os.PathLike) -> Path:
    """Distil a classifier student from a teacher artifact on classification data and write the student artifact."""

    cfg.refuse_tagger_only("sentence classification")
    stage = start_stage(cfg)
    device, precision = stage.device, stage.precision
    task, teacher = _data_and_teacher(cfg)
    t_shape = teacher_shape(teacher.model.config)
    student, s_tok, student_info = build_student(cfg.student, teacher.model, teacher.tokenizer, task.label_names,
                                                 cfg.layer_map, cfg.train.seed, eager_attention=cfg.wants_intermediate)
    cfg = dataclasses.replace(cfg, max_length=fit_max_length(cfg.max_length, teacher.model.config, student.config,
                                                             who="the teacher or the student"))
    s_shape = teacher_shape(student.config)
    pairs = parse_layer_map(cfg.layer_map, t_shape.layers, s_shape.layers)
    # The soft labels (and, in training, the intermediate states) come from the teacher on the
    # training device; the Trainer puts the student there too (``train_distillation`` checks the teacher follows).
    teacher.model.to(device)
    # Teachers averaged with --teacher for the soft labels (compress.stages.distill.ensemble); labelled up front.
    members = load_members(cfg.ensemble, teacher, task, cfg.allow_pickle, cfg.revision) if cfg.ensemble else []
    # Each model tokenizes the text its own way; the teacher's ids feed its cached logits. A text past
    # --max-length is one row per student window, the teacher reading the same words (compress.stages.long_texts).
    windows = {name: window_texts(split, s_tok, cfg.max_length, task.is_pair, cfg.stride, what=f"student ({name})")
               for name, split in task.splits.items()}
    run = _Run(cfg, task, teacher, student, s_tok, precision.precision, members, windows,
               _tokenize(task, windows, s_tok, teacher.tokenizer, cfg.max_length), stage.timings)

    # One process fills the training rows' soft labels while it trains; a distributed run labels them
    # up front, sharded over the ranks, since each rank sees only its own rows.
    _, world_size = world()
    during_training = world_size == 1 and not members
    want_pooled = cfg.wants_pooled
    if want_pooled and not during_training:
        raise CompressError("--alpha-pooled: the teacher's sentence vectors are filled while one process trains; "
                            "run it in a single process (or drop the pooled term)")
    transfer = _transfer(run, during_training)
    notes: list[str] = []
    want_inter = cfg.wants_intermediate and _tokenizations_align(run, transfer, notes)
    soft, reused, single = _split_soft_labels(run, during_training)
    train_ds = _training_rows(run, soft, transfer, during_training)

    store = label_runtime = None
    needs_soft = any(t.on == "logits" and t.weight > 0 for t in active_terms(cfg, cfg.train.epochs, want_inter)
                     + active_terms(cfg, 0.0, want_inter))
    if during_training and (needs_soft or want_pooled):
        store, label_runtime = _training_store(run, transfer, soft, t_shape.hidden if want_pooled else None,
                                               device_name(device), want_inter, world_size)
        reused["train"] = store.loaded.get("train", False) and store.vectors_loaded.get("train", True)
        train_ds = train_ds.add_column("row", list(range(len(train_ds))))
    labelled_up_front = 0
    if store is not None and not want_inter and not want_pooled and not store.complete:
        t0 = time.perf_counter()
        labelled_up_front = label_up_front(store, teacher, train_ds, run.precision)
        stage.timings["soft_labels_up_front_s"] = round(time.perf_counter() - t0, 1)
    teacher_needed = want_inter or (store is not None and not store.complete)
    if not teacher_needed:
        train_ds = train_ds.remove_columns([c for c in train_ds.column_names if c.startswith("t_")])

    module = DistillationModule(student, s_shape.hidden, t_shape.hidden, pairs, want_inter, want_pooled)
    t0 = time.perf_counter()
    scorer = accuracy_callback(run.tokenized["validation"], windows["validation"], task.splits["validation"]["label"],
                               cfg.pooling, s_tok.pad_token_id, run.precision, prefix="s_", keep_best=True,
                               kept_model=student) if cfg.train.keep_best else None
    train_log = train_distillation(module, teacher, train_ds, cfg, want_inter, out, s_tok.pad_token_id, store,
                                   device, run.precision, scorer)
    stage.timings["train_s"] = round(time.perf_counter() - t0, 1)
    # the rows it trained on, labelled + transfer (a long text's windows one each), as every distiller records them
    train_log["rows"] = len(train_ds)
    if store is not None:
        train_log.update(_store_record(store, labelled_up_front, want_pooled))
    metrics = _evaluate(run, soft, single)
    timings = stage.total()

    weights, terms = _loss_record(cfg, want_inter)
    meta = {
        "stage": "distill",
        "kind": "pytorch",
        "model_type": student.config.model_type,
        "parameters": count_parameters(student),
        "parent": {"teacher": str(teacher.path), "teacher_weights_sha256": teacher.weights_sha256,
                   "teacher_parameters": count_parameters(teacher.model)},
        "student": student_info,
        "distillation": {
            "losses": weights, "loss_terms": terms, "kd_loss": cfg.kd_loss, "temperature": cfg.temperature,
            "intermediate": want_inter, "layer_map": format_layer_map(pairs) if want_inter else None,
            "projection_lr": cfg.projection_lr if want_inter and len(module.projections) else None,
            "schedule": cfg.schedule, "soft_labels_reused": reused,
            # the data's own label probabilities, when a term trains toward them (compress.stages.gold_labels)
            "gold_labels": _gold_record(cfg, run.tokenized["train"]) if cfg.gold_labels else None,
            # the teachers whose mean logits were the soft labels (compress.stages.distill.ensemble)
            "ensemble": describe_ensemble(teacher, members) if members else None,
            # the sentence-vector term's vectors (compress.stages.distill.pooled), when one is on
            "pooled": {"vectors": "mean of the last hidden states over real tokens", "teacher_width": t_shape.hidden,
                       "projection": f"linear {s_shape.hidden} -> {t_shape.hidden}, trained beside the student, "
                                     "not saved"} if want_pooled else None,
            # who labelled the training rows (PyTorch or the INT8 copy) and the agreement check behind it
            "soft_labels": label_runtime.to_dict() if label_runtime is not None else None,
        },
        "config": cfg.to_dict(),
        "device": device_name(device),
        "precision": precision.to_dict(),
        "data": task.describe(),
        **windows_record(windows, cfg.max_length, cfg.stride, cfg.pooling),
        "transfer": transfer.describe() if transfer is not None else None,
        "metrics": metrics,
        "training": train_log,
        "timings": timings,
        "notes": notes,
    }
    if not is_main_process():
        return Path(out)

    path = write_model_artifact(out, student, s_tok, meta)
    if not cfg.keep_checkpoints:
        shutil.rmtree(checkpoint_dir(out), ignore_errors=True)

    print_metrics("student", metrics, timings)
    return path


def _data_and_teacher(cfg: DistillConfig) -> tuple[Any, Any]:
    """The classification data (with its gold probabilities, ``--gold-labels``) in the teacher's class order, and
    the teacher; a teacher the teacher stage found untrained on this very data is refused before any work."""
    task = cfg.data.load(keep_columns=(cfg.gold_labels,) if cfg.gold_labels else ())
    refuse_keep_best(cfg.train, task.splits, cfg.data.data)
    if cfg.gold_labels:
        task = with_gold(task, cfg.gold_labels, cfg.gold_scale)
    teacher = load_teacher(cfg.teacher, task, cfg.allow_pickle, eager_attention=cfg.wants_intermediate,
                           revision=cfg.revision)
    task = teacher.task or task  # its classes in the teacher's order
    recorded = HeadCheck.from_dict(teacher.meta.get("chance_check"))
    if recorded and (teacher.meta.get("data") or {}).get("fingerprint") == task.fingerprint:
        refuse_untrained_teacher(recorded, cfg.teacher, cfg.allow_untrained_teacher)
    return task, teacher


def _tokenize(task: Any, windows: dict[str, Any], s_tok: Any, t_tok: Any, max_length: int) -> dict[str, Any]:
    """Each split's window rows tokenized by the student (``s_`` columns) and by the teacher (``t_`` columns)."""
    tokenized = {}
    for name in task.splits:
        rows = windows[name].rows
        ds = tokenize_split(rows, s_tok, max_length, task.is_pair, prefix="s_", with_length=(name == "train"),
                            what="student")
        t_ds = tokenize_split(rows, t_tok, max_length, task.is_pair, prefix="t_", what="teacher")
        for col in t_ds.column_names:
            if col.startswith("t_"):
                ds = ds.add_column(col, t_ds[col][:])
        tokenized[name] = ds
    return tokenized


def _transfer(run: _Run, during_training: bool) -> Any:
    """Augmented variants and unlabelled text, tokenized (and soft-labelled up front when not ``during_training``;
    an ensemble's mean logits in place of the teacher's)."""
    cfg, task = run.cfg, run.task
    transfer = build_transfer(TransferOptions.from_config(cfg, run.precision), task, run.teacher, run.s_tok,
                              label=not during_training)
    if transfer is not None:
        run.timings["transfer_s"] = transfer.info["seconds"]
    if run.members and transfer is not None:
        for name, part in list(transfer.parts.items()):
            if len(part):
                mean = averaged(np.asarray(part["soft_labels"][:]), run.members, part, cfg.max_length, task.is_pair,
                                run.precision, name)
                transfer.parts[name] = part.remove_columns("soft_labels").add_column("soft_labels", mean.tolist())
    return transfer


def _tokenizations_align(run: _Run, transfer: Any, notes: list[str]) -> bool:
    """Whether teacher and student tokenize the training rows (and the transfer rows) position by position alike,
    as the intermediate losses need; when not, a note says so and the distillation is of logits only."""
    train = run.tokenized["train"]
    t_ids, s_ids = train["t_input_ids"][:], train["s_input_ids"][:]
    if transfer is not None and len(transfer):
        t_ids, s_ids = t_ids + transfer.rows("t_input_ids"), s_ids + transfer.rows("s_input_ids")
    aligned, reason = tokenizations_align(run.teacher.tokenizer, run.s_tok, t_ids, s_ids)
    if not aligned:
        notes.append(f"intermediate losses disabled: teacher and student tokenizations do not line up ({reason})")
        print(f"note: {notes[-1]}; distilling logits only", file=sys.stderr)
    return aligned


def _split_soft_labels(run: _Run, during_training: bool) -> tuple[dict[str, Any], dict[str, bool], dict[str, Any]]:
    """``(soft, reused, single)``: the teacher's (an ensemble's mean) logits per split, whether each came from the
    cache, and ``--teacher``'s own beside an ensemble's mean. Validation first: a teacher no better than chance on it
    is refused before the rest is labelled. The training rows are left out when they are filled while training."""
    cfg, task = run.cfg, run.task
    t0 = time.perf_counter()
    soft, reused, single = {}, {}, {}
    for name in sorted(run.tokenized, key=lambda n: n != "validation"):
        if name == "train" and during_training:
            continue
        soft[name], reused[name] = teacher_logits(run.teacher, run.tokenized[name], prefix="t_",
                                                  precision=run.precision, what=name)
        if run.members:
            single[name] = soft[name]
            soft[name] = averaged(soft[name], run.members, run.windows[name].rows, cfg.max_length, task.is_pair,
                                  run.precision, name)
        if name == "validation":
            check = check_head(run.windows[name].pool(soft[name], cfg.pooling),
                               np.asarray(task.splits[name]["label"]), task.num_labels)
            refuse_untrained_teacher(check, cfg.teacher, cfg.allow_untrained_teacher)
    reused = {name: reused[name] for name in run.tokenized if name in reused}
    run.timings["soft_labels_s"] = round(time.perf_counter() - t0, 1)
    return soft, reused, single


def _training_rows(run: _Run, soft: dict[str, Any], transfer: Any, during_training: bool) -> Any:
    """The rows the student trains on: the labelled training rows (their soft labels, when labelled up front),
    then the transfer rows (without gold probabilities)."""
    train_ds = run.tokenized["train"]
    if not during_training:
        train_ds = train_ds.add_column("soft_labels", [row.tolist() for row in soft["train"]])
    keep = [c for c in train_ds.column_names if c.startswith(("s_", "t_"))
            or c in ("label", "length", "soft_labels", GOLD_COLUMN)]
    train_ds = train_ds.select_columns(keep)
    if transfer is not None:
        gold = {GOLD_COLUMN: [ABSENT] * run.task.num_labels} if run.cfg.gold_labels else None
        train_ds = transfer.extend(train_ds, gold)
    return train_ds


def _training_store(run: _Run, transfer: Any, soft: dict[str, Any], vector_width: int | None, device: str,
                    want_inter: bool, world_size: int) -> tuple[Any, LabelRuntime]:
    """The soft-label store of the training rows filled while training, and who labels the rows still missing:
    the PyTorch teacher, or a faster copy of it where it agrees with the teacher (its labels written first)."""
    cfg, teacher, train = run.cfg, run.teacher, run.tokenized["train"]
    store = soft_label_store(teacher, train, transfer, run.precision, run.task.num_labels, vector_width)
    if vector_width is not None:  # the PyTorch teacher runs for the vectors; a copy's logits would save nothing
        label_runtime = LabelRuntime("pytorch", "the sentence-vector term runs the PyTorch teacher for its "
                                                "vectors; its logits come with them")
    else:
        label_runtime = choose_label_runtime(cfg.soft_labels, cfg.soft_labels_min_agreement, teacher,
                                             run.tokenized.get("validation"), soft.get("validation"), device,
                                             want_inter, world_size, int((~store.known).sum()), run.precision)
    if label_runtime.runtime != "pytorch":
        tag = label_runtime.runtime
        parts = label_parts(teacher, train, transfer, tag)
        run.timings["copy_labels_s"] = round(fill_copy_cache(label_runtime, [(ds, path) for _, ds, path in parts]), 1)
        store = soft_label_store(teacher, train, transfer, tag, run.task.num_labels)
        label_runtime.predictor = None  # its session's memory goes before training starts
    for part in store.parts:
        if store.loaded[part.name]:
            print(f"soft labels ({part.name}, {part.stop - part.start} examples): reusing the cache {part.cache}")
        if store.vectors_loaded.get(part.name):
            print(f"teacher sentence vectors ({part.name}): reusing the cache beside it")
    return store, label_runtime


def _store_record(store: Any, labelled_up_front: int, want_pooled: bool) -> dict[str, Any]:
    """What the training log says of the soft labels (and sentence vectors) filled for training; the main process
    caches the new ones."""
    record: dict[str, Any] = {
        "soft_labels": {"filled_during_training": not all(store.loaded.values()) and not labelled_up_front,
                        "labelled_before_training": labelled_up_front, "cached_parts": dict(store.loaded)}}
    if want_pooled:
        record["teacher_vectors"] = {"filled_during_training": not all(store.vectors_loaded.values()),
                                     "cached_parts": dict(store.vectors_loaded)}
    if is_main_process():
        sizes = {p.name: p.stop - p.start for p in store.parts}
        when = "labelled before training" if labelled_up_front else "filled while training"
        for part, path in store.save().items():
            print(f"soft labels ({part}, {sizes[part]} examples): {when}, cached at {path}")
        for part, path in store.save_vectors().items():
            print(f"teacher sentence vectors ({part}, {sizes[part]} examples): filled while training, cached at "
                  f"{path}")
    return record


def _evaluate(run: _Run, soft: dict[str, Any], single: dict[str, Any]) -> dict[str, Any]:
    """The student's accuracy, macro-F1 and agreement with the teacher on validation and test, one row per text
    (a long text's windows pooled, as Predictor serves it); with an ensemble, the single teacher's beside them."""
    cfg, task, windows = run.cfg, run.task, run.windows
    t0 = time.perf_counter()
    metrics = {}
    for name in ("validation", "test"):
        if name in run.tokenized:
            logits = predict_logits(run.student, run.tokenized[name], prefix="s_", pad_id=run.s_tok.pad_token_id,
                                    desc=f"evaluating student ({name})")
            logits, reference = (windows[name].pool(x, cfg.pooling) for x in (logits, soft[name]))
            labels = np.asarray(task.splits[name]["label"])
            metrics[name] = classification_metrics(logits, labels, reference)
            metrics[name]["teacher_accuracy"] = classification_metrics(reference, labels)["accuracy"]
            if run.members:  # soft[name] is the ensemble's mean; the single teacher a user would deploy, beside it
                single_pooled = windows[name].pool(single[name], cfg.pooling)
                metrics[name]["single_teacher_accuracy"] = classification_metrics(single_pooled, labels)["accuracy"]
                metrics[name]["agreement_with_single_teacher"] = classification_metrics(logits, labels,
                                                                                        single_pooled)["agreement"]
    run.timings["evaluate_s"] = round(time.perf_counter() - t0, 1)
    return metrics


def _loss_record(cfg: DistillConfig, want_inter: bool) -> tuple[Any, Any]:
    """The loss terms' weights and settings as ``compress.json`` records them, per stage of a two-stage schedule."""
    def weights(terms: list[LossTerm]) -> dict[str, float]:
        return {t.name: t.weight for t in terms}

    if cfg.schedule == "joint" or not want_inter:
        first = active_terms(cfg, 0.0, want_inter)
        return weights(first), [t.to_dict() for t in first]
    stage1, stage2 = active_terms(cfg, 0.0, want_inter), active_terms(cfg, cfg.stage1_epochs, want_inter)
    return ({"stage1": weights(stage1), "stage2": weights(stage2)},
            {"stage1": [t.to_dict() for t in stage1], "stage2": [t.to_dict() for t in stage2]})


def _gold_record(cfg: DistillConfig, train) -> dict[str, Any]:
    """What ``compress.json`` says about the gold-probability target: its column, scale, weight and coverage."""
    has = sum(1 for row in train[GOLD_COLUMN][:] if row[0] >= 0)
    return {"column": cfg.gold_labels, "scale": cfg.gold_scale, "weight": cfg.alpha_gold,
            "training_rows_with_gold": has, "training_rows": len(train)}
