"""The teacher stage for sentence classification: fine-tune a classifier and score it on accuracy.

:func:`compress.stages.teacher.train_teacher` hands over here (through the task's ``training`` aspect) when the data is
classification data. Any local encoder folder (or the built-in ``minilm``/``mpnet-base``) becomes a sequence
classifier artifact. A folder that already holds a classifier for the task is first tested on validation
(:mod:`compress.core.head_check`): a head that does better than chance is packaged without training; one that does not
is fine-tuned, with a note (or refused under ``--finetune no``). The validation and test logits measured at the end
go into the soft-label cache (:func:`compress.stages.teacher.soft_label_cache_path`), where distill looks for them.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from compress.core.artifact import read_meta, weights_sha256
from compress.core.assets import resolve_model
from compress.config import TeacherConfig
from compress.tasks.tables import DynamicPaddingCollator, align_labels, tokenize_split
from compress.core.device import device_name
from compress.stages.distill.soft_labels import save_logits
from compress.core.head_check import check_head, judge_existing_head
from compress.core.hub import snapshot_origin
from compress.stages.long_texts import window_texts, windows_record
from compress.runtime.modeling import classification_metrics, count_parameters, fit_max_length, load_classifier, predict_logits
from compress.tasks.task_choice import SEQUENCE, check_model_task
from compress.stages.teacher import LoadedTeacher, soft_label_cache_path
from compress.stages.training import (checkpoint_dir, checkpoint_fingerprint, epoch_validation_callback, freeze_bottom_layers,
                               guarded_trainer, interrupt_callback, is_main_process, print_metrics, refuse_keep_best,
                               resume_point, run_trainer, start_stage, training_arguments, write_trained_artifact)


def train_classifier_teacher(cfg: TeacherConfig, out: str | os.PathLike) -> Path:
    """Fine-tune (if needed) and evaluate a classifier teacher; write it as an artifact at ``out``."""

    stage = start_stage(cfg)
    device, precision, timings = stage.device, stage.precision, stage.timings
    source = resolve_model(cfg.model, revision=cfg.revision, allow_pickle=cfg.allow_pickle)
    # a tagger given classification data: one line
    _, head_names = check_model_task(source, SEQUENCE, cfg.data.data, cfg.model)
    task = align_labels(cfg.data.load(), head_names, f"--model {cfg.model}", retrain=cfg.finetune is True,
                        fix="pass --finetune yes to train its head anew on them")
    refuse_keep_best(cfg.train, task.splits, cfg.data.data)
    model, tokenizer, has_head = load_classifier(source, task.num_labels, task.label_names, cfg.allow_pickle)
    cfg = dataclasses.replace(cfg, max_length=fit_max_length(cfg.max_length, model.config,
                                                             who=f"--model {cfg.model}"))
    model.to(device)  # the head check and evaluation run where training does

    # a text past --max-length is one row per window; scores pool the windows' logits (compress.stages.long_texts)
    windows = {name: window_texts(split, tokenizer, cfg.max_length, task.is_pair, cfg.stride, what=f"teacher ({name})")
               for name, split in task.splits.items()}
    tokenized = {name: tokenize_split(windows[name].rows, tokenizer, cfg.max_length, task.is_pair,
                                      with_length=(name == "train"), what="teacher")
                 for name in task.splits}
    # A head that came with the model may never have been trained (a base model loaded into a
    # classification class): test it on validation before trusting it (compress.core.head_check).
    head_check, head_logits = None, None
    if has_head and cfg.finetune is not True and "validation" in tokenized:
        head_logits = predict_logits(model, tokenized["validation"], precision=precision.precision,
                                     pad_id=tokenizer.pad_token_id,
                                     desc="checking the existing head (validation)")
        head_check = check_head(windows["validation"].pool(head_logits, cfg.pooling),
                                np.asarray(task.splits["validation"]["label"]), task.num_labels)
        untrained_head = judge_existing_head(head_check, cfg.finetune, cfg.model) == "fine-tune"
    else:
        untrained_head = False
    finetune = (not has_head or untrained_head) if cfg.finetune is None else cfg.finetune
    train_log: dict[str, Any] = {}
    if finetune and cfg.train.epochs > 0:
        t0 = time.perf_counter()
        scorer = accuracy_callback(tokenized["validation"], windows["validation"], task.splits["validation"]["label"],
                                   cfg.pooling, tokenizer.pad_token_id, precision.precision,
                                   keep_best=True) if cfg.train.keep_best else None
        train_log = _fine_tune(model, tokenizer, tokenized["train"], cfg, out, device, precision.precision, scorer)
        timings["fine_tune_s"] = round(time.perf_counter() - t0, 1)
    elif not has_head or untrained_head:
        print("warning: the teacher has no trained classifier head and --epochs is 0: its predictions are random",
              file=sys.stderr)

    fine_tuned = bool(finetune and cfg.train.epochs > 0)
    chance = None
    t0 = time.perf_counter()
    metrics = {}
    eval_logits: dict[str, np.ndarray] = {}
    for name in ("validation", "test"):
        if name in tokenized:
            if name == "validation" and head_logits is not None and not fine_tuned:
                logits = head_logits  # the head check ran this very model on this split
            else:
                logits = predict_logits(model, tokenized[name], precision=precision.precision,
                                        pad_id=tokenizer.pad_token_id,
                                        desc=f"evaluating teacher ({name})")
            eval_logits[name] = logits  # per row, as distill's soft-label cache keys them
            logits = windows[name].pool(logits, cfg.pooling)
            metrics[name] = classification_metrics(logits, np.asarray(task.splits[name]["label"]))
            if name == "validation":
                chance = check_head(logits, np.asarray(task.splits[name]["label"]), task.num_labels)
    timings["evaluate_s"] = round(time.perf_counter() - t0, 1)
    stage.total()
    if chance is not None and chance.untrained:
        print(f"warning: the teacher is no better than chance ({chance.summary()}); distill will refuse it. Train "
              "longer or with another --lr.", file=sys.stderr)

    meta = {
        "stage": "teacher",
        "kind": "pytorch",
        "model_type": model.config.model_type,
        "parameters": count_parameters(model),
        "parent": {"model": cfg.model, "path": str(source), **(snapshot_origin(source) or {})},
        "fine_tuned": fine_tuned,
        # the existing head tested before training (null when the model had none or --finetune yes),
        # and the final model tested the same way; distill refuses a teacher whose chance_check says untrained
        "head_check": None if head_check is None else {**head_check.to_dict(),
                                                       "decision": "fine-tuned" if fine_tuned else "kept"},
        "chance_check": None if chance is None else chance.to_dict(),
        "config": cfg.to_dict(),
        "device": device_name(device),
        "precision": precision.to_dict(),
        "data": task.describe(),
        **windows_record(windows, cfg.max_length, cfg.stride, cfg.pooling),
        "metrics": metrics,
        "training": train_log,
        "timings": timings,
    }
    if not is_main_process():
        return Path(out)

    path = write_trained_artifact(out, model, tokenizer, meta)
    _cache_evaluation_logits(path, tokenized, eval_logits, precision.precision)
    print_metrics("teacher", metrics, timings)
    return path


def _cache_evaluation_logits(path: Path, tokenized: dict[str, Any], logits: dict[str, np.ndarray], precision: str) -> None:
    """The validation and test logits just measured, put where ``distill`` looks for this teacher's soft labels.

    They are keyed like any soft labels (weights, exact token ids, precision), so distillation at the
    same ``--max-length`` and precision reuses them instead of running the teacher over both splits
    again (84 s for MPNet-base in fp32 on the AVX2-only EPYC, docs/results.md); anything else misses and recomputes.
    """
    sha = (read_meta(path) or {}).get("weights_sha256") or weights_sha256(path)
    keyed = LoadedTeacher(Path(path), None, None, sha, {})
    for name, values in logits.items():
        save_logits(soft_label_cache_path(keyed, tokenized[name], prefix="", precision=precision), values)


def accuracy_callback(rows, windows, labels, pooling: str, pad_id: int, precision: str, prefix: str = "",
                      keep_best: bool = False, kept_model: Any = None):
    """A Trainer callback scoring a sentence classifier on validation (accuracy, then macro-F1; a long text's
    windows pooled as it is served) after every epoch, for ``--keep-best``
    (:func:`compress.stages.training.epoch_validation_callback`). Only then: the pass costs time, and a classifier's
    run without it keeps its timings. ``rows``: the validation rows tokenized with ``prefix``; ``kept_model``:
    the classifier when the Trainer trains a wrapper around it (a student)."""
    labels = np.asarray(labels)

    def evaluate(model, batch_size: int) -> dict[str, float]:
        logits = predict_logits(kept_model if kept_model is not None else model, rows, batch_size, precision, prefix,
                                pad_id if pad_id is not None else 0, progress=False)
        scores = classification_metrics(windows.pool(logits, pooling), labels)
        return {"validation_accuracy": scores["accuracy"], "validation_macro_f1": scores["macro_f1"]}

    return epoch_validation_callback(evaluate, lambda v: f"validation accuracy {v['validation_accuracy']:.4f} "
                                                         f"(macro-F1 {v['validation_macro_f1']:.4f})",
                                     keep_best, kept_model)


def _fine_tune(model, tokenizer, train_ds, cfg: TeacherConfig, out, device=None,
               precision: str = "fp32", scorer: Any = None) -> dict[str, Any]:
    keep = [c for c in ("input_ids", "attention_mask", "token_type_ids", "label", "length") if c in train_ds.column_names]
    train_ds = train_ds.select_columns(keep)
    frozen = freeze_bottom_layers(model, cfg.freeze_layers)
    args = training_arguments(cfg.train, checkpoint_dir(out), len(train_ds), device=device, precision=precision)
    resume = resume_point(out, cfg.resume, checkpoint_fingerprint(cfg))
    stop = interrupt_callback()
    trainer = guarded_trainer(out, model=model, args=args, train_dataset=train_ds,
                              data_collator=DynamicPaddingCollator({"": tokenizer.pad_token_id}),
                              callbacks=[stop] + ([scorer] if scorer is not None else []))
    result = run_trainer(trainer, resume, Path(out), stop)
    log = {**frozen, "global_steps": result.global_step, "train_loss": round(float(result.training_loss), 5),
           "effective_batch_size": cfg.train.batch_size * cfg.train.grad_accum * args.world_size}
    if scorer is not None:
        log.update(scorer.record())
    return log
