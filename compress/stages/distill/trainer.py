"""The distillation stage, and the distillation of one output per example that a classifier's student trains with.

:func:`distill` hands the stage to the data's task (its ``training`` aspect, :mod:`compress.tasks.protocol.training`);
the sentence classifier's (:mod:`compress.tasks.sequence_classification.distill`) trains with what is here.

Built on transformers' ``Trainer``: the trainable module is the student together with the
projections of the intermediate losses (so DDP wraps exactly those, and checkpoints resume both),
while the teacher stays outside it, frozen, run under ``no_grad`` on every rank. The objective is
a list of loss terms (``compress.stages.losses.LossTerm``), each a registered loss on one signal
(logits, labels, embeddings, hidden states, attention maps), so the trainer never names a loss.

The teacher's logits for the training rows come from the soft-label cache when it has them; the rest
are filled while training when the teacher runs on every batch anyway (intermediate losses, the
sentence-vector term), else labelled in one length-sorted pass before training
(``compress.stages.distill.soft_labels``). Its hidden states and attention maps are computed on the fly while
intermediate terms are active.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from compress.config import DistillConfig
from compress.tasks.tables import DynamicPaddingCollator
from compress.stages.distill.averaging import tail_average_callback
from compress.stages.distill.intermediate import (active_terms, intermediate_values, make_projections, projection_optimizer,
                                           wanted_outputs)
from compress.stages.distill.pooled import make_pooled_projection, mean_pool
from compress.stages.distill.soft_labels import Part, SoftLabelStore
from compress.stages.losses import LOSSES, LossTerm, row_weighted
from compress.runtime.modeling import accepts_token_types, autocast, model_device, predict_logits
from compress.tasks import get_task
from compress.stages.teacher import soft_label_cache_path
from compress.stages.training import (check_finite, checkpoint_dir, checkpoint_fingerprint, epoch_seeded_sampler,
                               interrupt_callback, resume_point, run_trainer, training_arguments)


def distill(cfg: DistillConfig, out: str | os.PathLike) -> Path:
    """Distil a student from a teacher artifact on the data's task (its ``training`` aspect) and write the
    student artifact."""
    return get_task(cfg.data.task(cfg.teacher)).aspect("training").distill(cfg, out)


class DistillationModule(nn.Module):
    """The trainable part of distillation: the student plus the width-bridging projections.

    ``forward`` takes the student's inputs and the teacher's (already computed) signals and returns
    every loss term; which terms count is decided by the weights passed in. With ``pooled`` it also holds the
    projection of the student's sentence vector to the teacher's width (``compress.stages.distill.pooled``).
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
        data's label probabilities per row (``compress.stages.gold_labels``; rows without them hold ``ABSENT``).
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


def label_parts(teacher, train, transfer, precision: str) -> list[tuple[str, Any, Path]]:
    """``(name, rows, cache file)`` of the labelled training rows and then every non-empty transfer part,
    in ``transfer.extend`` order, each with the cache file ``teacher_logits`` would use for it."""
    parts = [("train", train, soft_label_cache_path(teacher, train, "t_", precision))]
    if transfer is not None:
        parts += [(name, ds, soft_label_cache_path(teacher, ds, "t_", precision))
                  for name, ds in transfer.parts.items() if len(ds)]
    return parts


def soft_label_store(teacher, train, transfer, precision: str, num_labels: int,
                      vector_width: int | None = None) -> SoftLabelStore:
    """A store over :func:`label_parts`, rows numbered in that order; with ``vector_width`` it also keeps the
    teacher's sentence vectors (``--alpha-pooled``)."""
    parts: list[Part] = []
    for name, ds, path in label_parts(teacher, train, transfer, precision):
        start = parts[-1].stop if parts else 0
        parts.append(Part(name, start, start + len(ds), path))
    return SoftLabelStore(parts, num_labels, vector_width)


def label_up_front(store: SoftLabelStore, teacher, train_ds, precision: str) -> int:
    """Fill the store's missing logits in one pass before training; returns how many rows it labelled.

    For logit terms alone (no intermediate or sentence-vector term, whose teacher forward would give the
    logits for free). In training the teacher runs on every batch holding a row not labelled yet, on the
    whole batch: with a seed's own transfer rows new, that is nearly every batch of the first epoch, cached
    rows included. :func:`compress.runtime.modeling.predict_logits` runs only the missing rows. With nothing cached
    the two cost the same (measured, docs/ablation.md); the rows are cached at the end as before.
    """
    missing = np.flatnonzero(~store.known)
    if len(missing):
        logits = predict_logits(teacher.model, train_ds.select(missing), precision=precision, prefix="t_",
                                pad_id=teacher.tokenizer.pad_token_id, desc="soft labels (rows not in the cache)")
        store.put(missing, logits)
    return int(len(missing))


def train_distillation(module: DistillationModule, teacher, train_ds, cfg: DistillConfig, want_inter: bool, out,
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
        # the steps whose weights were averaged into the student (compress.stages.distill.averaging), when asked
        "weight_average": averager.record() if averager is not None else None,
        **(scorer.record() if scorer is not None else {}),
    }
