"""Intermediate-layer distillation, shared by every task: the terms on embeddings, hidden states and
attention maps, the projections that bridge widths, and the check that makes them meaningful.

TinyBERT's intermediate losses compare the student's and the teacher's states *position by position*,
so they apply only where both models read the same word pieces at the same positions
(:func:`tokenizations_align`; special tokens may differ, ``<s>`` against ``[CLS]``). What differs by task
is only the head: a sentence classifier's logits are one row per text, a tagger's one row per word, a
reader's one per window position. Each task's distillation computes its own head terms and adds
:func:`intermediate_values` for the rest, with the projections of :func:`make_projections` trained
beside the student, so a term on ``hidden`` means the same thing for every task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from compress.stages.losses import LOSSES, LossTerm

if TYPE_CHECKING:
    import torch
    from torch import nn


def tokenizations_align(teacher_tok, student_tok, t_ids: Sequence[Sequence[int]],
                        s_ids: Sequence[Sequence[int]]) -> tuple[bool, str]:
    """Whether teacher and student token sequences match position by position.

    Special tokens may differ (``<s>`` against ``[CLS]``); every other token must be the same
    word piece. Returns ``(aligned, reason)`` with the first mismatch when not aligned.
    """
    if teacher_tok is student_tok:
        return True, "same tokenizer"
    t_special, s_special = set(teacher_tok.all_special_ids), set(student_tok.all_special_ids)
    if len(t_ids) != len(s_ids):
        return False, f"teacher has {len(t_ids)} rows, student {len(s_ids)}"
    for row, (t, s) in enumerate(zip(t_ids, s_ids)):
        if len(t) != len(s):
            return False, f"example {row}: teacher has {len(t)} tokens, student {len(s)}"
        t_tokens = teacher_tok.convert_ids_to_tokens(list(t))
        s_tokens = student_tok.convert_ids_to_tokens(list(s))
        for pos, (ti, si, tt, st) in enumerate(zip(t, s, t_tokens, s_tokens)):
            if (ti in t_special) != (si in s_special) or (ti not in t_special and tt != st):
                return False, f"example {row}, position {pos}: teacher {tt!r} against student {st!r}"
    return True, f"{len(t_ids)} examples checked"


def active_terms(cfg: Any, epoch: float, intermediate: bool) -> list[LossTerm]:
    """The terms of ``cfg`` (a :class:`compress.config.DistillConfig`) that count at ``epoch``: intermediate
    ones only when the tokenizations align, and under the two-stage schedule the intermediate terms first,
    then the prediction-layer terms."""
    terms = [t for t in cfg.loss_terms() if intermediate or not t.intermediate]
    if intermediate and cfg.schedule == "two-stage":
        first = epoch < cfg.stage1_epochs
        terms = [t for t in terms if t.intermediate == first]
    return terms


def terms_record(terms_at: Callable[[float], list[LossTerm]], epochs: float) -> Any:
    """The loss terms as ``compress.json`` records them (``terms_at(epoch)``: the terms that count then): one
    list, or ``{"stage1": [...], "stage2": [...]}`` when the last epoch's terms are not the first's (two-stage)."""
    first, last = terms_at(0.0), terms_at(float(epochs))
    if [t.to_dict() for t in first] == [t.to_dict() for t in last]:
        return [t.to_dict() for t in first]
    return {"stage1": [t.to_dict() for t in first], "stage2": [t.to_dict() for t in last]}


def make_projections(student_hidden: int, teacher_hidden: int, pairs: Mapping[int, int]) -> "nn.ModuleDict":
    """One linear map from the student's width to the teacher's for the embeddings (``emb``) and for each
    mapped student layer (``h{s}``); none when the widths are equal (the states compare as they are)."""
    from torch import nn

    projections = nn.ModuleDict()
    if student_hidden != teacher_hidden:
        projections["emb"] = nn.Linear(student_hidden, teacher_hidden)
        for s in pairs:
            projections[f"h{s}"] = nn.Linear(student_hidden, teacher_hidden)
    return projections


def wanted_outputs(terms: Sequence[LossTerm]) -> tuple[bool, bool]:
    """``(hidden states, attention maps)``: which intermediate outputs the active ``terms`` read."""
    live = [t.on for t in terms if t.intermediate and t.weight > 0]
    return any(on != "attention" for on in live), "attention" in live


def intermediate_values(terms: Sequence[LossTerm], projections: "nn.ModuleDict", pairs: Mapping[int, int],
                        student_out: Any, teacher_hidden: Any, teacher_attentions: Any,
                        attention_mask: "torch.Tensor") -> dict[str, "torch.Tensor"]:
    """The value of every intermediate term of positive weight in ``terms`` (by term name): the registered
    loss on the embedding output, on each mapped layer pair (averaged over pairs) or on their attention maps.
    Terms whose teacher signal was not computed are left out."""

    def project(name: str, hidden):
        return projections[name](hidden) if name in projections else hidden

    values: dict[str, torch.Tensor] = {}
    for term in terms:
        if not term.intermediate or term.weight <= 0:
            continue
        fn = LOSSES[term.loss]
        if term.on == "attention":
            if teacher_attentions is None:
                continue
            values[term.name] = sum(fn(student_out.attentions[s], teacher_attentions[t], attention_mask)
                                    for s, t in pairs.items()) / len(pairs)
        elif teacher_hidden is None:
            continue
        elif term.on == "embeddings":
            values[term.name] = fn(project("emb", student_out.hidden_states[0]), teacher_hidden[0], attention_mask)
        elif term.on == "hidden":
            values[term.name] = sum(fn(project(f"h{s}", student_out.hidden_states[s + 1]), teacher_hidden[t + 1],
                                       attention_mask) for s, t in pairs.items()) / len(pairs)
    return values


def projection_optimizer(trainer: Any, model: "nn.Module", projection_lr: float):
    """The Trainer's own optimizer (its class, betas, weight-decay split) with the projections (parameters under
    ``projections.``) in param groups at ``projection_lr``: fresh projections start far from any useful map, and
    at the student's small rate they barely move (``--projection-lr``)."""
    decay = set(trainer.get_decay_parameter_names(model))
    groups = []
    for is_projection, lr in ((False, trainer.args.learning_rate), (True, projection_lr)):
        for decayed in (True, False):
            params = [p for n, p in model.named_parameters()
                      if p.requires_grad and ("projections." in n) == is_projection and (n in decay) == decayed]
            if params:
                groups.append({"params": params, "lr": lr, "weight_decay": trainer.args.weight_decay if decayed else 0.0})
    optimizer_cls, optimizer_kwargs = trainer.get_optimizer_cls_and_kwargs(trainer.args, model)
    return optimizer_cls(groups, **optimizer_kwargs)


#: The columns a student model takes; every other batch column goes to the task's head terms.
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_MODULE_CLASS: list[type] = []


def with_projections(student: "nn.Module", projections: "nn.ModuleDict", pairs: Mapping[int, int],
                     head_values: Callable[..., dict[str, "torch.Tensor"]]) -> "nn.Module":
    """The trainable part of a task's distillation: ``student`` with the projections that bridge its width to
    the teacher's (trained and checkpointed together, so ``--resume`` restores both).

    Its ``forward(teacher_hidden=None, teacher_attentions=None, terms=(), temperature=1.0, **batch)`` runs the
    student on the batch's model columns, asks ``head_values(terms, output, attention_mask, temperature,
    **other columns)`` for the task's head terms (logits against soft labels, gold labels), adds
    :func:`intermediate_values`, and returns every value by term name with their weighted sum under ``loss``.
    """
    if not _MODULE_CLASS:
        from torch import nn

        class StudentWithProjections(nn.Module):
            def __init__(self, student, projections, pairs, head_values):
                super().__init__()
                self.student, self.projections, self.pairs = student, projections, dict(pairs)
                self.head_values = head_values

            def forward(self, teacher_hidden=None, teacher_attentions=None, terms=(), temperature=1.0, **batch):
                inputs = {k: batch.pop(k) for k in MODEL_INPUTS if batch.get(k) is not None}
                states, attentions = wanted_outputs(terms)
                out = self.student(**inputs, output_hidden_states=states and teacher_hidden is not None,
                                   output_attentions=attentions and teacher_attentions is not None)
                mask = inputs["attention_mask"]
                values = self.head_values(terms, out, mask, temperature, **batch)
                values.update(intermediate_values(terms, self.projections, self.pairs, out, teacher_hidden,
                                                  teacher_attentions, mask))
                weights = {t.name: t.weight for t in terms}
                total = out[0].sum() * 0.0
                for name, value in values.items():
                    total = total + weights[name] * value
                if len(self.projections):  # every projection in the graph, so DDP never waits on an unused one
                    total = total + sum(p.sum() for p in self.projections.parameters()) * 0.0
                return {"loss": total, **values}

        _MODULE_CLASS.append(StudentWithProjections)
    return _MODULE_CLASS[0](student, projections, pairs, head_values)


def at_student_positions(hidden_states: Any, attentions: Any, index: "torch.Tensor") -> tuple[Any, Any]:
    """The teacher's states and attention maps read at the student's positions: ``index[b, p]`` is the
    teacher position that student position ``p`` of row ``b`` stands for (a reader's windows put the same
    pieces at positions shifted by the two templates' special tokens). Hidden states ``[b, t, h]`` become
    ``[b, p, h]``; attention maps ``[b, heads, t, t]`` become ``[b, heads, p, p]`` (queries and keys both
    mapped; the weight a teacher query puts on a special token the student has no counterpart of is left out)."""
    mapped_states = None
    if hidden_states is not None:
        idx = index.unsqueeze(-1)
        mapped_states = tuple(h.gather(1, idx.expand(-1, -1, h.shape[-1])) for h in hidden_states)
    mapped_attentions = None
    if attentions is not None:
        batch, positions = index.shape
        mapped_attentions = []
        for a in attentions:
            heads, keys = a.shape[1], a.shape[-1]
            rows = a.gather(2, index[:, None, :, None].expand(batch, heads, positions, keys))
            mapped_attentions.append(rows.gather(3, index[:, None, None, :].expand(batch, heads, positions, positions)))
        mapped_attentions = tuple(mapped_attentions)
    return mapped_states, mapped_attentions


def teacher_states(teacher_model: Any, inputs: Mapping[str, Any], terms: Sequence[LossTerm],
                   precision: str) -> tuple[Any, Any]:
    """``(hidden states, attention maps)`` of the frozen teacher on ``inputs`` (its own ids and masks), each
    ``None`` unless a term of positive weight in ``terms`` reads it; the teacher follows the batch's device."""
    import torch

    from compress.runtime.modeling import autocast, model_device

    states, attentions = wanted_outputs(terms)
    if not (states or attentions):
        return None, None
    device = inputs["input_ids"].device
    if model_device(teacher_model) != device:
        teacher_model.to(device)
    with torch.no_grad(), autocast(precision, device):
        out = teacher_model(**inputs, output_hidden_states=states, output_attentions=attentions)
    return out.hidden_states, out.attentions


def head_distillation_trainer(terms_at: Callable[[float], list[LossTerm]],
                              read_teacher: Callable[[dict[str, Any], list[LossTerm]], tuple[Any, Any]],
                              temperature: float, seed: int, projections: "nn.ModuleDict", projection_lr: float | None,
                              out: Any) -> type:
    """The Trainer class of a tagger's and a reader's distillation (the model: :func:`with_projections`).

    Each step takes the terms that count at its epoch (``terms_at``, the soft ones at ``temperature``), lets ``read_teacher(inputs, terms)`` pop
    the teacher's columns from the batch and return its states and attention maps at the student's positions
    (``(None, None)`` when no intermediate term is on), and runs the module on the rest; the NaN guard, the
    seeded batch order and the projections' own learning rate (``--projection-lr``) are the stages' own.
    """
    from pathlib import Path

    from transformers import Trainer

    from compress.stages.training import check_finite, epoch_seeded_sampler

    class HeadDistillationTrainer(Trainer):
        def _get_train_sampler(self, train_dataset=None):
            return epoch_seeded_sampler(super()._get_train_sampler(train_dataset), seed)

        def create_optimizer(self, model=None):
            if self.optimizer is None and projection_lr is not None and len(projections):
                self.optimizer = projection_optimizer(self, self.model if model is None else model, projection_lr)
                return self.optimizer
            return super().create_optimizer(model)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            terms = terms_at(float(self.state.epoch or 0.0))
            t_hidden, t_attn = read_teacher(inputs, terms)
            values = model(**inputs, teacher_hidden=t_hidden, teacher_attentions=t_attn, terms=terms,
                           temperature=temperature)
            check_finite(values, self.state.global_step, Path(out))
            return (values["loss"], values) if return_outputs else values["loss"]

    return HeadDistillationTrainer
