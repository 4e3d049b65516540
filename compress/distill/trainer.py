"""The distillation stage: teacher + data + student spec -> a student artifact.

Built on transformers' ``Trainer``: the trainable module is the student together with the
projections of the intermediate losses (so DDP wraps exactly those, and checkpoints resume both),
while the teacher stays outside it, frozen, run under ``no_grad`` on every rank. The objective is
a list of loss terms (``compress.losses.LossTerm``), each a registered loss on one signal
(logits, labels, embeddings, hidden states, attention maps), so the trainer never names a loss.

The teacher's logits for the training rows come from the soft-label cache when it has them; the rest
are filled while training when the teacher runs on every batch anyway (intermediate losses, the
sentence-vector term), else labelled in one length-sorted pass before training
(``compress.distill.soft_labels``). Its hidden states and attention maps are computed on the fly while
intermediate terms are active.

Teacher and student tokenize the text separately. Intermediate losses need the two tokenizations to
line up position by position; this is checked on the training data and, when they do not, the
stage falls back to logit distillation and says so.
"""

from __future__ import annotations

import dataclasses

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from compress.artifact import write_model_artifact
from compress.config import DistillConfig
from compress.data import DynamicPaddingCollator, tokenize_split
from compress.long_texts import window_texts, windows_record
from compress.errors import CompressError
from students.layer_map import format_layer_map, parse_layer_map
from compress.losses import LOSSES, LossTerm, row_weighted
from compress.distill.intermediate import (active_terms, intermediate_values, make_projections,
                                           projection_optimizer, tokenizations_align, wanted_outputs)
from compress.distill.ensemble import averaged, describe as describe_ensemble, load_members
from compress.distill.averaging import tail_average_callback
from compress.distill.pooled import make_pooled_projection, mean_pool
from compress.distill.soft_labels import Part, SoftLabelStore
from compress.gold_labels import ABSENT, COLUMN as GOLD_COLUMN, with_gold
from compress.head_check import HeadCheck, check_head, refuse_untrained_teacher
from compress.modeling import (accepts_token_types, autocast, classification_metrics, count_parameters, fit_max_length,
                               model_device, predict_logits)
from compress.distill.teacher_copies import LabelRuntime, choose_label_runtime, fill_copy_cache
from compress.teacher import accuracy_callback, load_teacher, soft_label_cache_path, teacher_logits
from compress.transfer import TransferOptions, build_transfer
from compress.training import (check_finite, checkpoint_dir, checkpoint_fingerprint, epoch_seeded_sampler,
                               interrupt_callback, is_main_process, resume_point, run_trainer, training_arguments,
                               world, refuse_keep_best)
from students.factory import build_student, teacher_shape
from compress.device import device_name, resolve_precision, training_device
from compress.tasks.question_answering.distill import distill_stage as distill_reader_stage
from compress.tasks.task_choice import QA, TOKEN
from compress.tasks.token_classification.distill import distill_stage
from compress.training import print_metrics


class DistillationModule(nn.Module):
    """The trainable part of distillation: the student plus the width-bridging projections.

    ``forward`` takes the student's inputs and the teacher's (already computed) signals and returns
    every loss term; which terms count is decided by the weights passed in. With ``pooled`` it also holds the
    projection of the student's sentence vector to the teacher's width (``compress.distill.pooled``).
    """

    def __init__(self, student: nn.Module, student_hidden: int, teacher_hidden: int, pairs: dict[int, int],
                 intermediate: bool, pooled: bool = False):
        super().__init__()
        self.student = student
        self.pairs = dict(pairs)
        self.intermediate = intermediate
        self.projections = make_projections(student_hidden, teacher_hidden, self.pairs) if intermediate \
            else nn.ModuleDict()
        self.pooled_projection = make_pooled_projection(student_hidden, teacher_hidden) if pooled else None
        self._types = accepts_token_types(student)

    def forward(self, s_input_ids, s_attention_mask, s_token_type_ids=None, labels=None, soft_labels=None,
                teacher_hidden=None, teacher_attentions=None, terms: list[LossTerm] | tuple = (), temperature=1.0,
                sample_weight=None, gold=None, teacher_vectors=None, **_: Any) -> dict[str, torch.Tensor]:
        """Every active term's value (by term name) and their weighted sum under ``"loss"``.

        Terms on intermediate signals are skipped when the teacher's states were not passed in, terms on ``pooled``
        when its sentence vectors were not (``teacher_vectors``, ``[batch, teacher width]``). ``gold``: the
        data's label probabilities per row (``compress.gold_labels``; rows without them hold ``ABSENT``).
        """
        def present(term: LossTerm) -> bool:
            if term.pooled:
                return self.pooled_projection is not None and teacher_vectors is not None
            if not term.intermediate:
                return True
            signal = teacher_attentions if term.on == "attention" else teacher_hidden
            return self.intermediate and signal is not None

        active = [t for t in terms if t.weight > 0 and present(t)]
        want_states, want_attn = wanted_outputs(active)
        want_states = want_states or any(t.pooled for t in active)
        inputs = {"input_ids": s_input_ids, "attention_mask": s_attention_mask}
        if self._types and s_token_type_ids is not None:
            inputs["token_type_ids"] = s_token_type_ids
        out = self.student(**inputs, output_hidden_states=want_states, output_attentions=want_attn)
        values: dict[str, torch.Tensor] = {}
        zero = out.logits.sum() * 0.0
        mask = s_attention_mask
        for term in active:
            fn = LOSSES[term.loss]
            if term.on == "logits":
                if soft_labels is None:
                    continue
                values[term.name] = row_weighted(fn, sample_weight, out.logits, soft_labels, temperature)
            elif term.on == "labels":
                if labels is None:
                    continue
                if sample_weight is None:  # labelled rows only: exactly the plain loss
                    values[term.name] = fn(out.logits, labels)
                else:
                    # Transfer rows carry label -100: the hard loss sums over the labelled rows and divides by
                    # the whole batch, so a labelled example pulls as hard as in a labelled-only run.
                    values[term.name] = _on_rows(fn, labels != -100, out.logits, labels, zero=zero)
            elif term.on == "gold":
                if gold is None:
                    continue
                # Rows with gold probabilities only (transfer rows have none), as for the hard term; the
                # probabilities enter as logits at T=1, so soft_ce is the cross-entropy with them.
                values[term.name] = _on_rows(fn, gold[:, 0] >= 0, out.logits, torch.log(gold.clamp_min(1e-8)), 1.0,
                                             zero=zero)
            elif term.pooled:
                # Every row has the teacher's vector, and every row weighs alike (a relation spans the batch).
                vectors = self.pooled_projection(mean_pool(out.hidden_states[-1], mask))
                values[term.name] = fn(vectors, teacher_vectors.to(vectors.dtype))
        values.update(intermediate_values(active, self.projections, self.pairs, out, teacher_hidden,
                                          teacher_attentions, mask))
        weight = {t.name: t.weight for t in active}
        total = zero
        for name, value in values.items():
            total = total + weight[name] * value
        values["loss"] = total
        # Keep every projection in the graph so DDP never waits on an unused parameter.
        if len(self.projections):
            values["loss"] = values["loss"] + sum(p.sum() for p in self.projections.parameters()) * 0.0
        return values


def _on_rows(fn, rows: torch.Tensor, student: torch.Tensor, target: torch.Tensor, *args: Any,
             zero: torch.Tensor) -> torch.Tensor:
    """A batch-mean loss over the selected ``rows`` only, scaled by their share of the batch (the sum over those rows
    divided by the whole batch), so a labelled row pulls as hard as in a labelled-only run; ``zero`` when none."""
    return fn(student[rows], target[rows], *args) * (rows.sum() / len(rows)) if bool(rows.any()) else zero


def _weights(terms: list[LossTerm]) -> dict[str, float]:
    return {t.name: t.weight for t in terms}


def distill(cfg: DistillConfig, out: str | os.PathLike) -> Path:
    """Distil a student from a teacher artifact on the task data and write the student artifact."""

    if cfg.data.task() == TOKEN:  # tagging data: soft labels per word (compress.tasks.token_classification.distill)

        return distill_stage(cfg, out)
    if cfg.data.task() == QA:  # SQuAD-format data: the teacher's logits on the student's windows

        return distill_reader_stage(cfg, out)
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
        store = _soft_label_store(teacher, tokenized["train"], transfer, precision.precision, task.num_labels,
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
            parts = _label_parts(teacher, tokenized["train"], transfer, tag)
            timings["copy_labels_s"] = round(fill_copy_cache(label_runtime, [(ds, path) for _, ds, path in parts]), 1)
            store = _soft_label_store(teacher, tokenized["train"], transfer, tag, task.num_labels)
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
        labelled_up_front = _label_up_front(store, teacher, train_ds, precision.precision)
        timings["soft_labels_up_front_s"] = round(time.perf_counter() - t0, 1)
    teacher_needed = want_inter or (store is not None and not store.complete)
    if not teacher_needed:
        train_ds = train_ds.remove_columns([c for c in train_ds.column_names if c.startswith("t_")])

    module = DistillationModule(student, s_shape.hidden, t_shape.hidden, pairs, want_inter, want_pooled)
    t0 = time.perf_counter()
    scorer = accuracy_callback(tokenized["validation"], windows["validation"], task.splits["validation"]["label"],
                               cfg.pooling, s_tok.pad_token_id, precision.precision, prefix="s_", keep_best=True,
                               kept_model=student) if cfg.train.keep_best else None
    train_log = _train(module, teacher, train_ds, cfg, want_inter, out, s_tok.pad_token_id, store, device,
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
        import shutil

        shutil.rmtree(checkpoint_dir(out), ignore_errors=True)

    print_metrics("student", metrics, timings)
    return path


def _gold_record(cfg: DistillConfig, train) -> dict[str, Any]:
    """What ``compress.json`` says about the gold-probability target: its column, scale, weight and coverage."""
    has = sum(1 for row in train[GOLD_COLUMN][:] if row[0] >= 0)
    return {"column": cfg.gold_labels, "scale": cfg.gold_scale, "weight": cfg.alpha_gold,
            "training_rows_with_gold": has, "training_rows": len(train)}


def _label_parts(teacher, train, transfer, precision: str) -> list[tuple[str, Any, Path]]:
    """``(name, rows, cache file)`` of the labelled training rows and then every non-empty transfer part,
    in ``transfer.extend`` order, each with the cache file ``teacher_logits`` would use for it."""
    parts = [("train", train, soft_label_cache_path(teacher, train, "t_", precision))]
    if transfer is not None:
        parts += [(name, ds, soft_label_cache_path(teacher, ds, "t_", precision))
                  for name, ds in transfer.parts.items() if len(ds)]
    return parts


def _soft_label_store(teacher, train, transfer, precision: str, num_labels: int,
                      vector_width: int | None = None) -> SoftLabelStore:
    """A store over :func:`_label_parts`, rows numbered in that order; with ``vector_width`` it also keeps the
    teacher's sentence vectors (``--alpha-pooled``)."""
    parts: list[Part] = []
    for name, ds, path in _label_parts(teacher, train, transfer, precision):
        start = parts[-1].stop if parts else 0
        parts.append(Part(name, start, start + len(ds), path))
    return SoftLabelStore(parts, num_labels, vector_width)


def _label_up_front(store: SoftLabelStore, teacher, train_ds, precision: str) -> int:
    """Fill the store's missing logits in one pass before training; returns how many rows it labelled.

    For logit terms alone (no intermediate or sentence-vector term, whose teacher forward would give the
    logits for free). In training the teacher runs on every batch holding a row not labelled yet, on the
    whole batch: with a seed's own transfer rows new, that is nearly every batch of the first epoch, cached
    rows included. :func:`compress.modeling.predict_logits` runs only the missing rows. With nothing cached
    the two cost the same (measured, docs/ablation.md); the rows are cached at the end as before.
    """
    missing = np.flatnonzero(~store.known)
    if len(missing):
        logits = predict_logits(teacher.model, train_ds.select(missing), precision=precision, prefix="t_",
                                pad_id=teacher.tokenizer.pad_token_id, desc="soft labels (rows not in the cache)")
        store.put(missing, logits)
    return int(len(missing))


def _train(module: DistillationModule, teacher, train_ds, cfg: DistillConfig, want_inter: bool, out,
           pad_id: int, store: SoftLabelStore | None, device=None, precision: str = "fp32",
           scorer: Any = None) -> dict[str, Any]:
    from transformers import Trainer, TrainerCallback

    teacher_model = teacher.model
    t_types = accepts_token_types(teacher_model)
    out_path = Path(out)
    running: dict[str, list[float]] = {}
    filled = {"rows": 0}

    class DistillTrainer(Trainer):
        """Trainer whose loss runs the frozen teacher (for intermediate losses and missing soft labels)
        and the student."""

        def _get_train_sampler(self, train_dataset=None):
            return epoch_seeded_sampler(super()._get_train_sampler(train_dataset), self.args.data_seed or 0)

        def create_optimizer(self, model=None):
            """The Trainer's AdamW, with the projections in param groups of their own learning rate."""
            if self.optimizer is None and cfg.projection_lr is not None and len(module.projections):
                self.optimizer = projection_optimizer(self, self.model if model is None else model, cfg.projection_lr)
                return self.optimizer
            return super().create_optimizer(model)

        def _teacher(self, inputs, states: bool, attentions: bool):
            t_inputs = {"input_ids": inputs["t_input_ids"], "attention_mask": inputs["t_attention_mask"]}
            if t_types and "t_token_type_ids" in inputs:
                t_inputs["token_type_ids"] = inputs["t_token_type_ids"]
            device = t_inputs["input_ids"].device
            if model_device(teacher_model) != device:
                teacher_model.to(device)  # the Trainer moved the student; the teacher follows it
            with torch.no_grad(), autocast(precision, device):
                return teacher_model(**t_inputs, output_hidden_states=states, output_attentions=attentions)

        def _fill(self, inputs, idx, t_out=None) -> None:
            """Put the teacher's logits (and sentence vectors, when the store keeps them) of the batch's rows
            ``idx`` into the store, from ``t_out`` when the teacher already ran on the batch."""
            if not store.missing(idx):
                return
            keep_vectors = store.vectors is not None
            if t_out is None or (keep_vectors and t_out.hidden_states is None):
                t_out = self._teacher(inputs, states=keep_vectors, attentions=False)
            vectors = mean_pool(t_out.hidden_states[-1], inputs["t_attention_mask"]).cpu().numpy() \
                if keep_vectors else None
            filled["rows"] += store.unknown_rows(idx)
            store.put(idx, t_out.logits.float().cpu().numpy(), vectors)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            epoch = float(self.state.epoch or 0.0)
            terms = active_terms(cfg, epoch, want_inter)
            inter_now = want_inter and any(t.intermediate and t.weight > 0 for t in terms)
            soft_now = any(t.on == "logits" and t.weight > 0 for t in terms)
            pooled_now = any(t.pooled and t.weight > 0 for t in terms)
            rows = inputs.pop("row", None)
            idx = rows.cpu().numpy() if rows is not None else None
            t_hidden = t_attn = t_vectors = None
            soft = inputs.pop("soft_labels", None)
            device = inputs["s_input_ids"].device
            if inter_now:
                states, attentions = wanted_outputs(terms)
                t_out = self._teacher(inputs, states=states, attentions=attentions)
                t_hidden, t_attn = t_out.hidden_states, t_out.attentions
                if store is not None:
                    soft = t_out.logits.float()
                    self._fill(inputs, idx, t_out)
            elif store is not None and (soft_now or pooled_now):
                self._fill(inputs, idx)
                soft = torch.from_numpy(store.get(idx)).to(device)
            if pooled_now and store is not None:
                t_vectors = torch.from_numpy(store.get_vectors(idx)).to(device)
            student_inputs = {k: v for k, v in inputs.items() if not k.startswith("t_")}
            values = model(**student_inputs, soft_labels=soft, teacher_hidden=t_hidden, teacher_attentions=t_attn,
                           terms=terms, temperature=cfg.temperature, teacher_vectors=t_vectors)
            check_finite(values, self.state.global_step, out_path)
            for name, value in values.items():
                running.setdefault(name, []).append(float(value.detach()))
            return (values["loss"], values) if return_outputs else values["loss"]

    class TermLogger(TrainerCallback):
        """Adds the mean of each loss term since the last log line to the Trainer's logs."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs is not None:
                for name, values in running.items():
                    if name != "loss" and values:
                        logs[f"loss_{name}"] = round(float(np.mean(values)), 5)
                running.clear()

    args = training_arguments(cfg.train, checkpoint_dir(out), len(train_ds), device=device, precision=precision)
    resume = resume_point(out, cfg.resume, checkpoint_fingerprint(cfg))
    pads = {"s_": pad_id, "t_": teacher.tokenizer.pad_token_id}
    stop = interrupt_callback()
    callbacks = [TermLogger(), stop]
    averager = tail_average_callback(module.student, cfg.average_tail) if cfg.average_tail > 0 else None
    if averager is not None:
        callbacks.append(averager)
    if scorer is not None:  # --keep-best: the student scored after every epoch, its best epoch kept
        callbacks.append(scorer)
    trainer = DistillTrainer(model=module, args=args, train_dataset=train_ds, data_collator=DynamicPaddingCollator(pads),
                             callbacks=callbacks)
    teacher_model.to(args.device)  # the Trainer moves the student; the teacher must sit where its inputs arrive
    result = run_trainer(trainer, resume, out_path, stop)
    history = [h for h in trainer.state.log_history if "loss" in h]
    return {
        "global_steps": result.global_step,
        "train_loss": round(float(result.training_loss), 5),
        "effective_batch_size": cfg.train.batch_size * cfg.train.grad_accum * args.world_size,
        "last_log": history[-1] if history else {},
        "step_time_s": round(float(result.metrics.get("train_runtime", 0)) / max(result.global_step, 1), 4),
        "soft_label_rows_filled": filled["rows"],
        # the steps whose weights were averaged into the student (compress.distill.averaging), when asked
        "weight_average": averager.record() if averager is not None else None,
        **(scorer.record() if scorer is not None else {}),
    }
