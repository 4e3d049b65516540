"""The toy task's ``training`` aspect: a next-sentence head fine-tuned on the order labels (cross-entropy), and a
student distilled on the teacher's softened logits beside the gold labels.

The machinery is the project's, reached as any task reaches it: :func:`compress.stages.training.start_stage`,
:func:`~compress.stages.training.guarded_trainer` and its schedule and checkpoints, the shared tokenizer and
collator (:mod:`compress.tasks.tables`), the soft-label cache (:func:`compress.stages.teacher.teacher_logits`),
:func:`students.factory.build_student` and :func:`compress.runtime.modeling.load_classifier` (which build this
task's head from ``Task.auto_model``). Pruning and pre-training are refused in one line.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from compress.core.artifact import read_meta, weights_sha256
from compress.core.assets import resolve_model
from compress.core.device import device_name
from compress.core.errors import CompressError
from compress.runtime.modeling import count_parameters, fit_max_length, load_classifier, predict_logits
from compress.stages.teacher import LoadedTeacher, teacher_logits
from compress.stages.training import (checkpoint_dir, checkpoint_fingerprint, guarded_trainer, interrupt_callback,
                                      resume_point, run_trainer, start_stage, training_arguments,
                                      write_trained_artifact)
from compress.tasks.tables import DynamicPaddingCollator, tokenize_split
from compress.tasks.task_choice import check_model_task
from tests.support.toy_task import LABEL_NAMES, NAME, score
from tests.support.toy_task.data import load

#: The columns a training row keeps (``s_``: a student's inputs; ``soft``: the teacher's logits).
TRAIN_COLUMNS = tuple(f"{p}{n}" for p in ("", "s_") for n in ("input_ids", "attention_mask", "token_type_ids")) + (
    "label", "soft", "length")


def _tokenize(data: Any, tokenizer: Any, max_length: int, prefix: str = "") -> dict[str, Any]:
    return {name: tokenize_split(split, tokenizer, max_length, True, prefix=prefix, with_length=name == "train")
            for name, split in data.splits.items()}


def _train(model: Any, rows: Any, cfg: Any, out: Any, device: Any, precision: str, pad_id: int) -> dict[str, Any]:
    rows = rows.select_columns([c for c in TRAIN_COLUMNS if c in rows.column_names])
    args = training_arguments(cfg.train, checkpoint_dir(out), len(rows), device=device, precision=precision)
    stop = interrupt_callback()
    prefix = "" if "input_ids" in rows.column_names else "s_"
    trainer = guarded_trainer(out, model=model, args=args, train_dataset=rows,
                              data_collator=DynamicPaddingCollator({prefix: pad_id}), callbacks=[stop])
    result = run_trainer(trainer, resume_point(out, cfg.resume, checkpoint_fingerprint(cfg)), Path(out), stop)
    return {"global_steps": result.global_step, "train_loss": round(float(result.training_loss), 5)}


def _evaluate(model: Any, tokenized: dict[str, Any], data: Any, precision: str, pad_id: int, prefix: str = "",
              reference: dict[str, np.ndarray] | None = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    metrics, logits = {}, {}
    for name in ("validation", "test"):
        logits[name] = predict_logits(model, tokenized[name], precision=precision, prefix=prefix, pad_id=pad_id,
                                      progress=False)
        metrics[name] = score(logits[name], data.labels(name), reference[name] if reference else None)
    return metrics, logits


def _meta(stage: str, model: Any, cfg: Any, start: Any, data: Any, metrics: dict[str, Any], **more: Any) -> dict:
    return {"stage": stage, "kind": "pytorch", "task": NAME, "model_type": model.config.model_type,
            "parameters": count_parameters(model), "config": cfg.to_dict(), "device": device_name(start.device),
            "precision": start.precision.to_dict(), "data": data.describe(), "max_length": cfg.max_length,
            "metrics": metrics, "timings": start.total(), **more}


def train_teacher(cfg: Any, out: str | os.PathLike) -> Path:
    """Fine-tune a next-sentence head on the order labels and score it on validation and test."""
    start = start_stage(cfg)
    source = resolve_model(cfg.model, revision=cfg.revision, allow_pickle=cfg.allow_pickle)
    check_model_task(source, NAME, cfg.data.data, cfg.model, 2)
    data = load(cfg.data)
    model, tokenizer, _ = load_classifier(source, 2, LABEL_NAMES, cfg.allow_pickle, task=NAME)
    cfg = dataclasses.replace(cfg, max_length=fit_max_length(cfg.max_length, model.config, who=f"--model {cfg.model}"))
    model.to(start.device)
    tokenized = _tokenize(data, tokenizer, cfg.max_length)
    log = _train(model, tokenized["train"], cfg, out, start.device, start.precision.precision,
                 tokenizer.pad_token_id) if cfg.train.epochs > 0 else {}
    metrics, _ = _evaluate(model, tokenized, data, start.precision.precision, tokenizer.pad_token_id)
    meta = _meta("teacher", model, cfg, start, data, metrics, parent={"model": cfg.model, "path": str(source)},
                 fine_tuned=cfg.train.epochs > 0, training=log)
    print(f"teacher: validation order accuracy {metrics['validation']['order_accuracy']:.3f}")
    return write_trained_artifact(out, model, tokenizer, meta)


def _teacher(folder: str, data: Any, allow_pickle: bool) -> LoadedTeacher:
    path = Path(resolve_model(folder, allow_pickle=allow_pickle))
    check_model_task(path, NAME, data.source, folder, 2)
    model, tokenizer, has_head = load_classifier(path, 2, LABEL_NAMES, allow_pickle, task=NAME)
    if not has_head:
        raise CompressError(f"--teacher {folder}: no trained next-sentence head; train it with bert-compress teacher.")
    model.eval().requires_grad_(False)
    meta = read_meta(path) or {}
    return LoadedTeacher(path, model, tokenizer, meta.get("weights_sha256") or weights_sha256(path), meta)


def _distillation_module(student: Any, temperature: float, alpha_kd: float, alpha_hard: float) -> Any:
    """The student inside a module whose ``loss`` is ``alpha_kd * T^2 KL(teacher || student at T) + alpha_hard *
    CE(gold)``; its inputs carry the ``s_`` prefix, the teacher's logits come as ``soft``."""
    import torch
    from torch import nn

    class OrderDistillation(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.student = student

        def forward(self, s_input_ids, s_attention_mask, s_token_type_ids=None, labels=None, soft=None, **_: Any):
            logits = self.student(input_ids=s_input_ids, attention_mask=s_attention_mask,
                                  token_type_ids=s_token_type_ids).logits.float()
            loss = logits.sum() * 0.0
            if soft is not None and alpha_kd > 0:
                loss = loss + alpha_kd * temperature ** 2 * nn.functional.kl_div(
                    torch.log_softmax(logits / temperature, -1), torch.softmax(soft / temperature, -1),
                    reduction="batchmean")
            if labels is not None and alpha_hard > 0:
                loss = loss + alpha_hard * nn.functional.cross_entropy(logits, labels)
            return {"loss": loss, "logits": logits}

    return OrderDistillation()


def distill(cfg: Any, out: str | os.PathLike) -> Path:
    """Distil the teacher's order logits (cached as every soft label) into ``cfg.student``."""
    from students.factory import build_student

    start = start_stage(cfg)
    data = load(cfg.data)
    teacher = _teacher(cfg.teacher, data, cfg.allow_pickle)
    student, s_tok, info = build_student(cfg.student, teacher.model, teacher.tokenizer, LABEL_NAMES, cfg.layer_map,
                                         cfg.train.seed, task=NAME)
    cfg = dataclasses.replace(cfg, max_length=fit_max_length(cfg.max_length, teacher.model.config, student.config,
                                                             who="the teacher or the student"))
    teacher.model.to(start.device)
    t_rows = _tokenize(data, teacher.tokenizer, cfg.max_length, prefix="t_")
    soft = {name: teacher_logits(teacher, rows, "t_", start.precision.precision, what=name)[0]
            for name, rows in t_rows.items()}
    rows = _tokenize(data, s_tok, cfg.max_length, prefix="s_")
    train = rows["train"].add_column("soft", soft["train"].astype(float).tolist())
    module = _distillation_module(student, cfg.temperature, cfg.alpha_kd, cfg.alpha_hard)
    log = _train(module, train, cfg, out, start.device, start.precision.precision, s_tok.pad_token_id)
    metrics, _ = _evaluate(student, rows, data, start.precision.precision, s_tok.pad_token_id, "s_", soft)
    meta = _meta("distill", student, cfg, start, data, metrics, student=info, training=log,
                 parent={"teacher": str(teacher.path), "teacher_weights_sha256": teacher.weights_sha256},
                 distillation={"losses": {"teacher_kl": cfg.alpha_kd, "gold_ce": cfg.alpha_hard}})
    print(f"student: validation order accuracy {metrics['validation']['order_accuracy']:.3f}")
    return write_trained_artifact(out, student, s_tok, meta)


def load_for_pruning(cfg: Any, source: Path, data: Any) -> tuple[Any, Any, bool]:
    raise CompressError("a sentence-order model is not pruned by this toy task.")


def pruning_scorer(cfg: Any, data: Any, tokenizer: Any, pad_id: int) -> Any:
    raise CompressError("a sentence-order model is not pruned by this toy task.")


def pretrain_data(data: Any) -> Any:
    raise CompressError("sentence-order data holds sentence pairs, not running text; pre-train on other text.")
