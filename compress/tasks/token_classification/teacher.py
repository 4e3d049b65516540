"""The teacher stage for tagging data: fine-tune a token classifier and score it on entities.

:func:`compress.stages.teacher.train_teacher` hands over here when the data is tagging data
(:func:`compress.tasks.task_choice.data_task`: the built-in ``wnut17`` or ``wikigold``, a CoNLL file, a JSONL file
of ``tokens``/``tags``). The model is built through the registry's task object
(``AutoModelForTokenClassification``: BERT, MPNet, RoBERTa, DistilBERT), with the label list of
the data as ``config.id2label``/``label2id``; each word's tag sits on its first sub-token
(:mod:`compress.tasks.token_classification.words`). Training is the sentence teacher's machinery, unchanged:
the guarded Trainer (seeded batch order, NaN guard), fingerprinted checkpoints and ``--resume``,
Ctrl-C and full-disk handling, and an atomic artifact write. Validation entity F1 is logged after
every epoch; the final validation and test scores (entity P/R/F1, per type, token accuracy) go to
``compress.json`` beside ``"task": "token-classification"`` and the label list, with ``chance_check``:
a teacher that finds no validation entity (its training collapsed into the ``O`` tag) is written with a
warning, and distill refuses it (:class:`compress.core.head_check.TaggerCheck`).

A model folder whose head is for another task, or for another number of tags, is refused in one
line before transformers loads it (:func:`compress.tasks.task_choice.check_model_task`). An
existing tagging head is kept without training unless ``--finetune yes`` (scored either way).
"""

from __future__ import annotations

import dataclasses

import os
import sys
import time
from pathlib import Path
from typing import Any

from compress.core.assets import resolve_model
from compress.config import TeacherConfig
from compress.core.errors import CompressError
from compress.core.head_check import judge_existing_head
from compress.core.hub import snapshot_origin
from compress.runtime.modeling import count_parameters, fit_max_length, load_classifier
from compress.tasks.task_choice import TOKEN, check_model_task
from compress.tasks.token_classification.data import TokenTaskData
from compress.tasks.token_classification.words import (entity_f1_callback, score_token_logits, tagger_chance_check, token_collator,
                                          token_logits, tokenize_tagged_split, word_tag_check)
from compress.stages.training import (checkpoint_dir, checkpoint_fingerprint, freeze_bottom_layers, guarded_trainer,
                               interrupt_callback, is_main_process, refuse_keep_best, resume_point, run_trainer,
                               start_stage, training_arguments, write_trained_artifact)
from compress.core.windows import window_stride
from compress.core.device import device_name


def _generic(names: list[str] | None) -> bool:
    """transformers' placeholder names (``LABEL_0``...), which say nothing about the tags."""
    return not names or all(n == f"LABEL_{i}" for i, n in enumerate(names))


def train_token_teacher(cfg: TeacherConfig, out: str | os.PathLike) -> Path:
    """Fine-tune (if needed) and evaluate a tagger teacher; write it as an artifact at ``out``."""

    stage = start_stage(cfg)
    device, precision, timings = stage.device, stage.precision, stage.timings
    data = cfg.data.load_tagging()  # before the model: a bad file should not cost a model fetch
    refuse_keep_best(cfg.train, data.splits, cfg.data.data)
    source = resolve_model(cfg.model, revision=cfg.revision, allow_pickle=cfg.allow_pickle)
    head, head_names = check_model_task(source, TOKEN, cfg.data.data, cfg.model, data.num_labels)
    if head is not None and not _generic(head_names) and head_names != data.label_names:
        if sorted(head_names) != sorted(data.label_names):
            raise CompressError(f"--model {cfg.model}: the tagger's tags ({', '.join(head_names)}) are not the tags of "
                                f"--data {cfg.data.data} ({', '.join(data.label_names)}). Use a tagger trained on this "
                                "tag set, or a model without a head.")
        data = cfg.data.load_tagging(head_names)  # the head's order, so its rows keep their meaning
    model, tokenizer, has_head = load_classifier(source, data.num_labels, data.label_names, cfg.allow_pickle, task=TOKEN)
    cfg = dataclasses.replace(cfg, max_length=fit_max_length(cfg.max_length, model.config,
                                                             who=f"--model {cfg.model}"))
    model.to(device)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    tokenized = {name: tokenize_tagged_split(split, tokenizer, cfg.max_length, with_length=(name == "train"),
                                             stride=cfg.stride)
                 for name, split in data.splits.items()}
    # A head that came with the model may never have been trained (a tagger saved straight after it was built):
    # test it on validation before trusting it, as the sentence teacher does (compress.core.head_check).
    head_check, head_logits, untrained_head = None, None, False
    if has_head and cfg.finetune is not True and "validation" in tokenized:
        head_logits = token_logits(model, tokenized["validation"], precision=precision.precision, pad_id=pad_id)
        head_check = word_tag_check(head_logits, tokenized["validation"], data.tags("validation"), data.label_names)
        untrained_head = judge_existing_head(head_check, cfg.finetune, cfg.model) == "fine-tune"
    finetune = (not has_head or untrained_head) if cfg.finetune is None else bool(cfg.finetune)
    train_log: dict[str, Any] = {}
    if finetune and cfg.train.epochs > 0:
        t0 = time.perf_counter()
        train_log = _fine_tune(model, tokenizer, tokenized, data, cfg, out, device, precision.precision, pad_id)
        timings["fine_tune_s"] = round(time.perf_counter() - t0, 1)
    elif not has_head or untrained_head:
        print("warning: the tagger has no trained head and --epochs is 0: its predictions are random", file=sys.stderr)
    fine_tuned = bool(finetune and cfg.train.epochs > 0)

    t0 = time.perf_counter()
    logits = {name: head_logits if name == "validation" and head_logits is not None and not fine_tuned
              else token_logits(model, tokenized[name], precision=precision.precision, pad_id=pad_id)
              for name in ("validation", "test") if name in tokenized}
    metrics = {name: score_token_logits(rows, tokenized[name], data.tags(name), data.label_names)
               for name, rows in logits.items()}
    timings["evaluate_s"] = round(time.perf_counter() - t0, 1)
    stage.total()
    chance = (tagger_chance_check(logits["validation"], tokenized["validation"], data.tags("validation"),
                                  data.label_names) if "validation" in logits else None)
    if chance is not None and chance.untrained:
        if fine_tuned:
            how = ("training left it there (too few steps, or it collapsed into the O tag)",
                   f"train it longer, or with another --lr (this run: {cfg.train.lr:g}) or --seed")
        else:  # kept as given (--finetune no, or --epochs 0): another seed or lr would change nothing
            how = ("its head was not trained for these tags", "fine-tune it: --finetune yes with --epochs 1 or more")
        print(f"warning: the teacher is no better than chance ({chance.summary()}): {how[0]}, and distill will refuse it; "
              f"{how[1]}.", file=sys.stderr)
    meta = {
        "stage": "teacher",
        "kind": "pytorch",
        "task": TOKEN,
        "model_type": model.config.model_type,
        "parameters": count_parameters(model),
        "parent": {"model": cfg.model, "path": str(source), **(snapshot_origin(source) or {})},
        "fine_tuned": fine_tuned,
        # the existing head tested before training (null when the model had none or --finetune yes)
        "head_check": None if head_check is None else {**head_check.to_dict(),
                                                       "decision": "fine-tuned" if fine_tuned else "kept"},
        "label_names": data.label_names,
        "config": cfg.to_dict(),
        # the windows it was trained and scored in; Predictor reads them
        "stride": window_stride(cfg.stride, cfg.max_length),
        "device": device_name(device),
        "precision": precision.to_dict(),
        "data": data.describe(),
        "metrics": metrics,
        "chance_check": None if chance is None else chance.to_dict(),  # distill refuses an untrained verdict
        "training": train_log,
        "timings": timings,
    }
    if not is_main_process():
        return Path(out)
    path = write_trained_artifact(out, model, tokenizer, meta)
    parts = [f"{split} entity F1 {m['entity_f1']:.4f} (P {m['entity_precision']:.4f} R {m['entity_recall']:.4f}, "
             f"token accuracy {m['token_accuracy']:.4f})" for split, m in metrics.items()]
    print("teacher: " + "; ".join(parts) + f" ({timings['total_s']:.0f} s)")
    return path


def _fine_tune(model, tokenizer, tokenized, data: TokenTaskData, cfg: TeacherConfig, out, device, precision: str,
               pad_id: int) -> dict[str, Any]:
    train_ds = tokenized["train"]
    keep = [c for c in ("input_ids", "attention_mask", "token_type_ids", "labels", "length") if c in train_ds.column_names]
    train_ds = train_ds.select_columns(keep)
    frozen = freeze_bottom_layers(model, cfg.freeze_layers)
    args = training_arguments(cfg.train, checkpoint_dir(out), len(train_ds), device=device, precision=precision)
    resume = resume_point(out, cfg.resume, checkpoint_fingerprint(cfg))
    stop = interrupt_callback()
    callbacks: list[Any] = [stop]
    scorer = None
    if "validation" in tokenized:
        scorer = entity_f1_callback(tokenized["validation"], data.tags("validation"), data.label_names, pad_id, precision,
                                    keep_best=cfg.train.keep_best)
        callbacks.append(scorer)
    trainer = guarded_trainer(out, model=model, args=args, train_dataset=train_ds,
                              data_collator=token_collator(tokenizer), callbacks=callbacks)
    result = run_trainer(trainer, resume, Path(out), stop)
    log: dict[str, Any] = {**frozen, "global_steps": result.global_step,
                           "train_loss": round(float(result.training_loss), 5),
                           "effective_batch_size": cfg.train.batch_size * cfg.train.grad_accum * args.world_size}
    if scorer is not None:
        log.update(scorer.record())
    return log
