"""The distill stage for sentence classification: a student trained on the teacher's logits per example.

:func:`compress.distill.trainer.distill` hands over here (through the task's ``training`` aspect) when the data is
classification data; the training itself is :func:`compress.distill.trainer.train_distillation`.

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
from pathlib import Path
from typing import Any

import numpy as np

from compress.artifact import write_model_artifact
from compress.config import DistillConfig
from compress.data import tokenize_split
from compress.device import device_name, resolve_precision, training_device
from compress.distill.ensemble import averaged, describe as describe_ensemble, load_members
from compress.distill.intermediate import active_terms, tokenizations_align
from compress.distill.teacher_copies import LabelRuntime, choose_label_runtime, fill_copy_cache
from compress.distill.trainer import (DistillationModule, label_parts, label_up_front, soft_label_store,
                                      train_distillation)
from compress.errors import CompressError
from compress.gold_labels import ABSENT, COLUMN as GOLD_COLUMN, with_gold
from compress.head_check import HeadCheck, check_head, refuse_untrained_teacher
from compress.long_texts import window_texts, windows_record
from compress.losses import LossTerm
from compress.modeling import classification_metrics, count_parameters, fit_max_length, predict_logits
from compress.tasks.sequence_classification.teacher import accuracy_callback
from compress.teacher import load_teacher, teacher_logits
from compress.training import checkpoint_dir, is_main_process, print_metrics, refuse_keep_best, world
from compress.transfer import TransferOptions, build_transfer
from students.factory import build_student, teacher_shape
from students.layer_map import format_layer_map, parse_layer_map


def _weights(terms: list[LossTerm]) -> dict[str, float]:
    return {t.name: t.weight for t in terms}


def distill_classifier(cfg: DistillConfig, out: str | os.PathLike) -> Path:
    """Distil a classifier student from a teacher artifact on classification data and write the student artifact."""

    cfg.refuse_tagger_only("sentence classification")
    cfg.validate()
    device = training_device(cfg.device)
    precision = resolve_precision(cfg.precision, device)
    started = time.perf_counter()
    timings: dict[str, float] = {}
    task = cfg.data.load(keep_columns=(cfg.gold_labels,) if cfg.gold_labels else ())
    refuse_keep_best(cfg.train, task.splits, cfg.data.data)
    if cfg.gold_labels:
        task = with_gold(task, cfg.gold_labels, cfg.gold_scale)
    want_inter = cfg.wants_intermediate
    teacher = load_teacher(cfg.teacher, task, cfg.allow_pickle, eager_attention=want_inter, revision=cfg.revision)
    task = teacher.task or task  # its classes in the teacher's order
    recorded = HeadCheck.from_dict(teacher.meta.get("chance_check"))
    if recorded and (teacher.meta.get("data") or {}).get("fingerprint") == task.fingerprint:
        # the teacher stage measured this teacher on this very data: refuse before any work
        refuse_untrained_teacher(recorded, cfg.teacher, cfg.allow_untrained_teacher)
    t_shape = teacher_shape(teacher.model.config)
    student, s_tok, student_info = build_student(cfg.student, teacher.model, teacher.tokenizer, task.label_names,
                                                 cfg.layer_map, cfg.train.seed, eager_attention=want_inter)
    cfg = dataclasses.replace(cfg, max_length=fit_max_length(cfg.max_length, teacher.model.config, student.config,
                                                             who="the teacher or the student"))
    s_shape = teacher_shape(student.config)
    pairs = parse_layer_map(cfg.layer_map, t_shape.layers, s_shape.layers)
    # The soft labels (and, in training, the intermediate states) come from the teacher on the
    # training device; the Trainer puts the student there too (``_train`` checks the teacher follows).
    teacher.model.to(device)
    # Teachers averaged with --teacher for the soft labels (compress.distill.ensemble); labelled up front.
    members = load_members(cfg.ensemble, teacher, task, cfg.allow_pickle, cfg.revision) if cfg.ensemble else []

    # Each model tokenizes the text its own way; the teacher's ids feed its cached logits. A text past
    # --max-length is one row per student window, the teacher reading the same words (compress.long_texts).
    windows = {name: window_texts(split, s_tok, cfg.max_length, task.is_pair, cfg.stride, what=f"student ({name})")
               for name, split in task.splits.items()}
    tokenized = {}
    for name in task.splits:
        rows = windows[name].rows
        ds = tokenize_split(rows, s_tok, cfg.max_length, task.is_pair, prefix="s_", with_length=(name == "train"),
                            what="student")
        t_ds = tokenize_split(rows, teacher.tokenizer, cfg.max_length, task.is_pair, prefix="t_", what="teacher")
        for col in t_ds.column_names:
            if col.startswith("t_"):
                ds = ds.add_column(col, t_ds[col][:])
        tokenized[name] = ds

    # One process fills the training rows' soft labels while it trains; a distributed run labels them
    # up front, sharded over the ranks, since each rank sees only its own rows.
    _, world_size = world()
    during_training = world_size == 1 and not members
    want_pooled = cfg.wants_pooled
    if want_pooled and not during_training:
        raise CompressError("--alpha-pooled: the teacher's sentence vectors are filled while one process trains; "
                            "run it in a single process (or drop the pooled term)")
    # Augmented variants and unlabelled text, tokenized (and soft-labelled up front when distributed).
    transfer = build_transfer(TransferOptions.from_config(cfg, precision.precision), task, teacher, s_tok,
                              label=not during_training)
    if transfer is not None:
        timings["transfer_s"] = transfer.info["seconds"]
    if members and transfer is not None:
        for name, part in list(transfer.parts.items()):
            if len(part):
                mean = averaged(np.asarray(part["soft_labels"][:]), members, part, cfg.max_length, task.is_pair,
                                precision.precision, name)
                transfer.parts[name] = part.remove_columns("soft_labels").add_column("soft_labels", mean.tolist())

    notes = []
    if want_inter:
        t_ids, s_ids = tokenized["train"]["t_input_ids"][:], tokenized["train"]["s_input_ids"][:]
        if transfer is not None and len(transfer):
            t_ids, s_ids = t_ids + transfer.rows("t_input_ids"), s_ids + transfer.rows("s_input_ids")
        aligned, reason = tokenizations_align(teacher.tokenizer, s_tok, t_ids, s_ids)
        if not aligned:
            want_inter = False
            notes.append(f"intermediate losses disabled: teacher and student tokenizations do not line up ({reason})")
            print(f"note: {notes[-1]}; distilling logits only", file=sys.stderr)

    t0 = time.perf_counter()
    soft = {}
    reused = {}
    single = {}  # --teacher's own logits, when an ensemble's mean is the target
    for name in sorted(tokenized, key=lambda n: n != "validation"):  # validation first: it decides the check below
        if name == "train" and during_training:
            continue
        soft[name], reused[name] = teacher_logits(teacher, tokenized[name], prefix="t_",
                                                      precision=precision.precision, what=name)
        if members:
            single[name] = soft[name]
            soft[name] = averaged(soft[name], members, windows[name].rows, cfg.max_length, task.is_pair,
                                  precision.precision, name)
        if name == "validation":
            check = check_head(windows[name].pool(soft[name], cfg.pooling), np.asarray(task.splits[name]["label"]),
                               task.num_labels)
            refuse_untrained_teacher(check, cfg.teacher, cfg.allow_untrained_teacher)
    reused = {name: reused[name] for name in tokenized if name in reused}
    timings["soft_labels_s"] = round(time.perf_counter() - t0, 1)
    train_ds = tokenized["train"]
    if not during_training:
        train_ds = train_ds.add_column("soft_labels", [row.tolist() for row in soft["train"]])
    keep = [c for c in train_ds.column_names if c.startswith(("s_", "t_"))
            or c in ("label", "length", "soft_labels", GOLD_COLUMN)]
    train_ds = train_ds.select_columns(keep)
    if transfer is not None:
        train_ds = transfer.extend(train_ds, {GOLD_COLUMN: [ABSENT] * task.num_labels} if cfg.gold_labels else None)

    store = None
    label_runtime = None
    needs_soft = any(t.on == "logits" and t.weight > 0 for t in active_terms(cfg, cfg.train.epochs, want_inter)
                     + active_terms(cfg, 0.0, want_inter))
    if during_training and (needs_soft or want_pooled):
        store = soft_label_store(teacher, tokenized["train"], transfer, precision.precision, task.num_labels,
                                  t_shape.hidden if want_pooled else None)
        if want_pooled:  # the PyTorch teacher runs for the vectors; a copy's logits would save nothing
            label_runtime = LabelRuntime("pytorch", "the sentence-vector term runs the PyTorch teacher for its "
                                                    "vectors; its logits come with them")
        else:  # the rows still unlabelled may go to a faster copy of the teacher, where it agrees with the teacher
            label_runtime = choose_label_runtime(cfg.soft_labels, cfg.soft_labels_min_agreement, teacher,
                                                 tokenized.get("validation"), soft.get("validation"),
                                                 device_name(device), want_inter, world_size,
                                                 int((~store.known).sum()), precision.precision)
        if label_runtime.runtime != "pytorch":
            tag = label_runtime.runtime
            parts = label_parts(teacher, tokenized["train"], transfer, tag)
            timings["copy_labels_s"] = round(fill_copy_cache(label_runtime, [(ds, path) for _, ds, path in parts]), 1)
            store = soft_label_store(teacher, tokenized["train"], transfer, tag, task.num_labels)
            label_runtime.predictor = None  # its session's memory goes before training starts
        reused["train"] = store.loaded.get("train", False) and store.vectors_loaded.get("train", True)
        for part in store.parts:
            if store.loaded[part.name]:
                print(f"soft labels ({part.name}, {part.stop - part.start} examples): reusing the cache {part.cache}")
            if store.vectors_loaded.get(part.name):
                print(f"teacher sentence vectors ({part.name}): reusing the cache beside it")
        train_ds = train_ds.add_column("row", list(range(len(train_ds))))
    labelled_up_front = 0
    if store is not None and not want_inter and not want_pooled and not store.complete:
        t0 = time.perf_counter()
        labelled_up_front = label_up_front(store, teacher, train_ds, precision.precision)
        timings["soft_labels_up_front_s"] = round(time.perf_counter() - t0, 1)
    teacher_needed = want_inter or (store is not None and not store.complete)
    if not teacher_needed:
        train_ds = train_ds.remove_columns([c for c in train_ds.column_names if c.startswith("t_")])

    module = DistillationModule(student, s_shape.hidden, t_shape.hidden, pairs, want_inter, want_pooled)
    t0 = time.perf_counter()
    scorer = accuracy_callback(tokenized["validation"], windows["validation"], task.splits["validation"]["label"],
                               cfg.pooling, s_tok.pad_token_id, precision.precision, prefix="s_", keep_best=True,
                               kept_model=student) if cfg.train.keep_best else None
    train_log = train_distillation(module, teacher, train_ds, cfg, want_inter, out, s_tok.pad_token_id, store, device,
                       precision.precision, scorer)
    timings["train_s"] = round(time.perf_counter() - t0, 1)
    # the rows it trained on, labelled + transfer (a long text's windows one each), as every distiller records them
    train_log["rows"] = len(train_ds)
    if store is not None:
        train_log["soft_labels"] = {"filled_during_training": not all(store.loaded.values()) and not labelled_up_front,
                                    "labelled_before_training": labelled_up_front,
                                    "cached_parts": dict(store.loaded)}
        if want_pooled:
            train_log["teacher_vectors"] = {"filled_during_training": not all(store.vectors_loaded.values()),
                                            "cached_parts": dict(store.vectors_loaded)}
        if is_main_process():
            sizes = {p.name: p.stop - p.start for p in store.parts}
            when = "labelled before training" if labelled_up_front else "filled while training"
            for part, path in store.save().items():
                print(f"soft labels ({part}, {sizes[part]} examples): {when}, cached at {path}")
            for part, path in store.save_vectors().items():
                print(f"teacher sentence vectors ({part}, {sizes[part]} examples): filled while training, cached at "
                      f"{path}")

    t0 = time.perf_counter()
    metrics = {}
    for name in ("validation", "test"):
        if name in tokenized:
            logits = predict_logits(student, tokenized[name], prefix="s_", pad_id=s_tok.pad_token_id,
                                    desc=f"evaluating student ({name})")
            # one row per text: a long text's windows pooled, as Predictor serves it
            logits, reference = (windows[name].pool(x, cfg.pooling) for x in (logits, soft[name]))
            labels = np.asarray(task.splits[name]["label"])
            metrics[name] = classification_metrics(logits, labels, reference)
            metrics[name]["teacher_accuracy"] = classification_metrics(reference, labels)["accuracy"]
            if members:  # soft[name] is the ensemble's mean; the single teacher a user would deploy, beside it
                single_pooled = windows[name].pool(single[name], cfg.pooling)
                metrics[name]["single_teacher_accuracy"] = classification_metrics(single_pooled, labels)["accuracy"]
                metrics[name]["agreement_with_single_teacher"] = classification_metrics(logits, labels,
                                                                                        single_pooled)["agreement"]
    timings["evaluate_s"] = round(time.perf_counter() - t0, 1)
    timings["total_s"] = round(time.perf_counter() - started, 1)

    if cfg.schedule == "joint" or not want_inter:
        weights: dict[str, Any] = _weights(active_terms(cfg, 0.0, want_inter))
        terms: Any = [t.to_dict() for t in active_terms(cfg, 0.0, want_inter)]
    else:
        stage1, stage2 = active_terms(cfg, 0.0, want_inter), active_terms(cfg, cfg.stage1_epochs, want_inter)
        weights = {"stage1": _weights(stage1), "stage2": _weights(stage2)}
        terms = {"stage1": [t.to_dict() for t in stage1], "stage2": [t.to_dict() for t in stage2]}
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
            # the data's own label probabilities, when a term trains toward them (compress.gold_labels)
            "gold_labels": _gold_record(cfg, tokenized["train"]) if cfg.gold_labels else None,
            # the teachers whose mean logits were the soft labels (compress.distill.ensemble)
            "ensemble": describe_ensemble(teacher, members) if members else None,
            # the sentence-vector term's vectors (compress.distill.pooled), when one is on
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


def _gold_record(cfg: DistillConfig, train) -> dict[str, Any]:
    """What ``compress.json`` says about the gold-probability target: its column, scale, weight and coverage."""
    has = sum(1 for row in train[GOLD_COLUMN][:] if row[0] >= 0)
    return {"column": cfg.gold_labels, "scale": cfg.gold_scale, "weight": cfg.alpha_gold,
            "training_rows_with_gold": has, "training_rows": len(train)}
