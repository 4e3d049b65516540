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

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from compress.losses import LOSSES, LossTerm

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
