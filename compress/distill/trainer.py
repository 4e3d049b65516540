"""The distillation stage: teacher + data + student spec -> a student artifact.

Built on transformers' ``Trainer``: the trainable module is the student together with the
projections of the intermediate losses (so DDP wraps exactly those, and checkpoints resume both),
while the teacher stays outside it, frozen, run under ``no_grad`` on every rank. The teacher's
logits come from the soft-label cache; its hidden states and attention maps are computed on the fly
only while intermediate losses are active.

Teacher and student tokenize the text separately. Intermediate losses need the two tokenizations to
line up position by position; this is checked on the training data and, when they do not, the
stage falls back to logit distillation and says so.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from compress.artifact import weights_sha256, write_artifact
from compress.config import DistillConfig
from compress.data import DynamicPaddingCollator, tokenize_split
from compress.distill.layer_map import format_layer_map, parse_layer_map
from compress.distill.losses import LOSSES
from compress.modeling import accepts_token_types, autocast, classification_metrics, count_parameters, predict_logits
from compress.teacher import load_teacher, teacher_logits
from compress.transfer import TransferOptions, build_transfer
from compress.training import (check_finite, checkpoint_dir, checkpoint_fingerprint, epoch_seeded_sampler,
                               interrupt_callback, is_main_process, resume_point, run_trainer, training_arguments)
from students.factory import build_student, teacher_shape


class DistillationModule(nn.Module):
    """The trainable part of distillation: the student plus the width-bridging projections.

    ``forward`` takes the student's inputs and the teacher's (already computed) signals and returns
    every loss term; which terms count is decided by the weights passed in.
    """

    def __init__(self, student: nn.Module, student_hidden: int, teacher_hidden: int, pairs: dict[int, int],
                 intermediate: bool):
        super().__init__()
        self.student = student
        self.pairs = dict(pairs)
        self.intermediate = intermediate
        self.projections = nn.ModuleDict()
        if intermediate and student_hidden != teacher_hidden:
            self.projections["emb"] = nn.Linear(student_hidden, teacher_hidden)
            for s in self.pairs:
                self.projections[f"h{s}"] = nn.Linear(student_hidden, teacher_hidden)
        self._types = accepts_token_types(student)

    def _project(self, name: str, hidden: torch.Tensor) -> torch.Tensor:
        return self.projections[name](hidden) if name in self.projections else hidden

    def forward(self, s_input_ids, s_attention_mask, s_token_type_ids=None, labels=None, soft_labels=None,
                teacher_hidden=None, teacher_attentions=None, weights=None, temperature=1.0, kd_loss="soft_ce",
                sample_weight=None, **_: Any) -> dict[str, torch.Tensor]:
        weights = weights or {}
        want_inter = self.intermediate and teacher_hidden is not None
        inputs = {"input_ids": s_input_ids, "attention_mask": s_attention_mask}
        if self._types and s_token_type_ids is not None:
            inputs["token_type_ids"] = s_token_type_ids
        out = self.student(**inputs, output_hidden_states=want_inter, output_attentions=want_inter)
        terms: dict[str, torch.Tensor] = {}
        zero = out.logits.sum() * 0.0
        if weights.get("kd", 0) > 0 and soft_labels is not None:
            terms["kd"] = _row_weighted(LOSSES[kd_loss], sample_weight, out.logits, soft_labels, temperature)
        if weights.get("hard", 0) > 0 and labels is not None:
            if sample_weight is None:  # labelled rows only: exactly the plain loss
                terms["hard"] = LOSSES["hard_ce"](out.logits, labels)
            else:
                # Transfer rows carry label -100: the hard loss sums over the labelled rows and divides by
                # the whole batch, so a labelled example pulls as hard as in a labelled-only run.
                gold = labels != -100
                terms["hard"] = (LOSSES["hard_ce"](out.logits[gold], labels[gold]) * (gold.sum() / len(labels))
                                 if bool(gold.any()) else zero)
        if want_inter:
            mask = s_attention_mask
            if weights.get("embedding", 0) > 0:
                terms["embedding"] = LOSSES["hidden_mse"](self._project("emb", out.hidden_states[0]), teacher_hidden[0], mask)
            if weights.get("hidden", 0) > 0:
                terms["hidden"] = sum(
                    LOSSES["hidden_mse"](self._project(f"h{s}", out.hidden_states[s + 1]), teacher_hidden[t + 1], mask)
                    for s, t in self.pairs.items()) / len(self.pairs)
            if weights.get("attention", 0) > 0:
                terms["attention"] = sum(
                    LOSSES["attention_mse"](out.attentions[s], teacher_attentions[t], mask)
                    for s, t in self.pairs.items()) / len(self.pairs)
        total = zero
        for name, value in terms.items():
            total = total + weights.get(name, 0.0) * value
        terms["loss"] = total
        # Keep every projection in the graph so DDP never waits on an unused parameter.
        if len(self.projections):
            terms["loss"] = terms["loss"] + sum(p.sum() for p in self.projections.parameters()) * 0.0
        return terms


def _row_weighted(loss, sample_weight: torch.Tensor | None, student_logits: torch.Tensor, target: torch.Tensor,
                  *args: Any) -> torch.Tensor:
    """``sum_i w_i * loss_i / batch`` for a batch-mean ``loss``, exactly, without per-row loss functions.

    Rows are grouped by weight (labelled and augmented rows weigh 1, unlabelled rows
    ``--unlabeled-weight``), and each group's mean is scaled by ``weight * rows / batch``. Without
    weights, or with every weight 1, this is the plain batch mean.
    """
    if sample_weight is None:
        return loss(student_logits, target, *args)
    total = student_logits.sum() * 0.0
    n = len(sample_weight)
    for value in torch.unique(sample_weight):
        rows = sample_weight == value
        if float(value) != 0.0:
            total = total + value * (rows.sum() / n) * loss(student_logits[rows], target[rows], *args)
    return total


def tokenizations_align(teacher_tok, student_tok, t_ids: list[list[int]], s_ids: list[list[int]]) -> tuple[bool, str]:
    """Whether teacher and student token sequences match position by position.

    Special tokens may differ (``<s>`` against ``[CLS]``); every other token must be the same
    word piece. Returns ``(aligned, reason)`` with the first mismatch when not aligned.
    """
    if teacher_tok is student_tok:
        return True, "same tokenizer"
    t_special, s_special = set(teacher_tok.all_special_ids), set(student_tok.all_special_ids)
    for row, (t, s) in enumerate(zip(t_ids, s_ids)):
        if len(t) != len(s):
            return False, f"example {row}: teacher has {len(t)} tokens, student {len(s)}"
        t_tokens = teacher_tok.convert_ids_to_tokens(list(t))
        s_tokens = student_tok.convert_ids_to_tokens(list(s))
        for pos, (ti, si, tt, st) in enumerate(zip(t, s, t_tokens, s_tokens)):
            if (ti in t_special) != (si in s_special) or (ti not in t_special and tt != st):
                return False, f"example {row}, position {pos}: teacher {tt!r} against student {st!r}"
    return True, f"{len(t_ids)} examples checked"


def _stage_weights(cfg: DistillConfig, epoch: float, intermediate: bool) -> dict[str, float]:
    pred = {"kd": cfg.alpha_kd, "hard": cfg.alpha_hard}
    inter = {"embedding": cfg.alpha_embedding, "hidden": cfg.alpha_hidden, "attention": cfg.alpha_attention}
    if not intermediate:
        return pred
    if cfg.schedule == "two-stage":
        return inter if epoch < cfg.stage1_epochs else pred
    return {**pred, **inter}


def distill(cfg: DistillConfig, out: str | os.PathLike) -> Path:
    """Distil a student from a teacher artifact on the task data and write the student artifact."""
    cfg.validate()
    started = time.perf_counter()
    timings: dict[str, float] = {}
    task = cfg.data.load()
    want_inter = cfg.intermediate
    teacher = load_teacher(cfg.teacher, task, cfg.allow_pickle, eager_attention=want_inter)
    t_shape = teacher_shape(teacher.model.config)
    student, s_tok, student_info = build_student(cfg.student, teacher.model, teacher.tokenizer, task.label_names,
                                                 cfg.layer_map, cfg.train.seed, eager_attention=want_inter)
    s_shape = teacher_shape(student.config)
    pairs = parse_layer_map(cfg.layer_map, t_shape.layers, s_shape.layers)

    # Each model tokenizes the text its own way; the teacher's ids feed its cached logits.
    tokenized = {}
    for name, split in task.splits.items():
        ds = tokenize_split(split, s_tok, cfg.max_length, task.is_pair, prefix="s_", with_length=(name == "train"),
                            what="student")
        t_ds = tokenize_split(split, teacher.tokenizer, cfg.max_length, task.is_pair, prefix="t_", what="teacher")
        for col in t_ds.column_names:
            if col.startswith("t_"):
                ds = ds.add_column(col, t_ds[col][:])
        tokenized[name] = ds

    # Augmented variants and unlabelled text, tokenized and soft-labelled by the teacher (None if neither).
    transfer = build_transfer(TransferOptions.from_config(cfg), task, teacher, s_tok)
    if transfer is not None:
        timings["transfer_s"] = transfer.info["seconds"]

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
    for name, ds in tokenized.items():
        soft[name], reused[name] = teacher_logits(teacher, ds, prefix="t_", bf16=cfg.train.bf16, what=name)
    timings["soft_labels_s"] = round(time.perf_counter() - t0, 1)
    train_ds = tokenized["train"].add_column("soft_labels", [row.tolist() for row in soft["train"]])
    keep = [c for c in train_ds.column_names if c.startswith(("s_", "t_")) or c in ("label", "length", "soft_labels")]
    if not want_inter:
        keep = [c for c in keep if not c.startswith("t_")]
    train_ds = train_ds.select_columns(keep)
    if transfer is not None:
        train_ds = transfer.extend(train_ds)

    module = DistillationModule(student, s_shape.hidden, t_shape.hidden, pairs, want_inter)
    t0 = time.perf_counter()
    train_log = _train(module, teacher, train_ds, cfg, want_inter, out, s_tok.pad_token_id)
    timings["train_s"] = round(time.perf_counter() - t0, 1)

    t0 = time.perf_counter()
    metrics = {}
    for name in ("validation", "test"):
        if name in tokenized:
            logits = predict_logits(student, tokenized[name], prefix="s_", pad_id=s_tok.pad_token_id,
                                    desc=f"evaluating student ({name})")
            labels = np.asarray(task.splits[name]["label"])
            metrics[name] = classification_metrics(logits, labels, soft[name])
            metrics[name]["teacher_accuracy"] = classification_metrics(soft[name], labels)["accuracy"]
    timings["evaluate_s"] = round(time.perf_counter() - t0, 1)
    timings["total_s"] = round(time.perf_counter() - started, 1)

    weights = _stage_weights(cfg, 0.0, want_inter) if cfg.schedule == "joint" else {
        "stage1": _stage_weights(cfg, 0.0, want_inter), "stage2": _stage_weights(cfg, cfg.stage1_epochs, want_inter)}
    meta = {
        "stage": "distill",
        "kind": "pytorch",
        "model_type": student.config.model_type,
        "parameters": count_parameters(student),
        "parent": {"teacher": str(teacher.path), "teacher_weights_sha256": teacher.weights_sha256,
                   "teacher_parameters": count_parameters(teacher.model)},
        "student": student_info,
        "distillation": {
            "losses": weights, "kd_loss": cfg.kd_loss, "temperature": cfg.temperature,
            "intermediate": want_inter, "layer_map": format_layer_map(pairs) if want_inter else None,
            "schedule": cfg.schedule, "soft_labels_reused": reused,
        },
        "config": asdict(cfg),
        "data": task.describe(),
        "transfer": transfer.describe() if transfer is not None else None,
        "metrics": metrics,
        "training": train_log,
        "timings": timings,
        "notes": notes,
    }
    if not is_main_process():
        return Path(out)

    def fill(tmp: Path) -> None:
        student.save_pretrained(tmp, safe_serialization=True)
        s_tok.save_pretrained(tmp)
        meta["weights_sha256"] = weights_sha256(tmp)

    path = write_artifact(out, fill, meta)
    if not cfg.keep_checkpoints:
        import shutil

        shutil.rmtree(checkpoint_dir(out), ignore_errors=True)
    from compress.training import print_metrics

    print_metrics("student", metrics, timings)
    return path


def _train(module: DistillationModule, teacher, train_ds, cfg: DistillConfig, want_inter: bool, out,
           pad_id: int) -> dict[str, Any]:
    from transformers import Trainer, TrainerCallback

    teacher_model = teacher.model
    t_types = accepts_token_types(teacher_model)
    out_path = Path(out)
    running: dict[str, list[float]] = {}

    class DistillTrainer(Trainer):
        """Trainer whose loss runs the frozen teacher (for intermediate losses) and the student."""

        def _get_train_sampler(self, train_dataset=None):
            return epoch_seeded_sampler(super()._get_train_sampler(train_dataset), self.args.data_seed or 0)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            epoch = float(self.state.epoch or 0.0)
            weights = _stage_weights(cfg, epoch, want_inter)
            inter_now = want_inter and any(weights.get(k, 0) > 0 for k in ("embedding", "hidden", "attention"))
            t_hidden = t_attn = None
            if inter_now:
                t_inputs = {"input_ids": inputs["t_input_ids"], "attention_mask": inputs["t_attention_mask"]}
                if t_types and "t_token_type_ids" in inputs:
                    t_inputs["token_type_ids"] = inputs["t_token_type_ids"]
                with torch.no_grad(), autocast(cfg.train.bf16):
                    t_out = teacher_model(**t_inputs, output_hidden_states=True, output_attentions=True)
                t_hidden, t_attn = t_out.hidden_states, t_out.attentions
            student_inputs = {k: v for k, v in inputs.items() if not k.startswith("t_")}
            terms = model(**student_inputs, teacher_hidden=t_hidden, teacher_attentions=t_attn, weights=weights,
                          temperature=cfg.temperature, kd_loss=cfg.kd_loss)
            check_finite(terms, self.state.global_step, out_path)
            for name, value in terms.items():
                running.setdefault(name, []).append(float(value.detach()))
            return (terms["loss"], terms) if return_outputs else terms["loss"]

    class TermLogger(TrainerCallback):
        """Adds the mean of each loss term since the last log line to the Trainer's logs."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs is not None:
                for name, values in running.items():
                    if name != "loss" and values:
                        logs[f"loss_{name}"] = round(float(np.mean(values)), 5)
                running.clear()

    args = training_arguments(cfg.train, checkpoint_dir(out), len(train_ds))
    resume = resume_point(out, cfg.resume, checkpoint_fingerprint(cfg))
    pads = {"s_": pad_id, "t_": teacher.tokenizer.pad_token_id}
    stop = interrupt_callback()
    trainer = DistillTrainer(model=module, args=args, train_dataset=train_ds, data_collator=DynamicPaddingCollator(pads),
                             callbacks=[TermLogger(), stop])
    result = run_trainer(trainer, resume, out_path, stop)
    history = [h for h in trainer.state.log_history if "loss" in h]
    return {
        "global_steps": result.global_step,
        "train_loss": round(float(result.training_loss), 5),
        "effective_batch_size": cfg.train.batch_size * cfg.train.grad_accum * args.world_size,
        "last_log": history[-1] if history else {},
        "step_time_s": round(float(result.metrics.get("train_runtime", 0)) / max(result.global_step, 1), 4),
    }
