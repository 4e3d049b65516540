"""Distillation losses, each a plain function registered by name.

A distillation setup is then a list of ``(loss name, weight)`` pairs, which is what recipes and
``compress.json`` record. Every loss returns a scalar tensor averaged over real (unpadded) items.

- ``soft_ce``: cross-entropy between the teacher's and the student's distributions at temperature
  T, scaled by T² so its gradients keep their size as T changes (Hinton et al.).
- ``kl``: the same comparison as a KL divergence (equal to ``soft_ce`` minus the teacher's entropy,
  so the same gradients; its value is 0 when the two agree, which reads better in logs).
- ``hard_ce``: ordinary cross-entropy with the gold labels.
- ``hidden_mse``: TinyBERT's hidden-state (and embedding) loss, mean squared error over real
  tokens, after the student's states went through a learned projection when widths differ.
- ``attention_mse``: TinyBERT's attention loss: squared error between attention maps, summed over
  the real keys of each query row and averaged over real queries and heads (a per-element mean
  would be ~1/length as large and vanish beside the hidden-state loss); when head counts differ,
  maps are averaged over heads first.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

LOSSES: dict[str, Callable[..., torch.Tensor]] = {}


def register(name: str):
    def wrap(fn):
        LOSSES[name] = fn
        return fn
    return wrap


@register("soft_ce")
def soft_cross_entropy(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """-sum p_T * log q_S at temperature T, times T², averaged over the batch."""
    t = float(temperature)
    target = F.softmax(teacher_logits.float() / t, dim=-1)
    log_q = F.log_softmax(student_logits.float() / t, dim=-1)
    return -(target * log_q).sum(-1).mean() * (t * t)


@register("kl")
def kl_divergence(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(p_T || q_S) at temperature T, times T², averaged over the batch."""
    t = float(temperature)
    log_p = F.log_softmax(teacher_logits.float() / t, dim=-1)
    log_q = F.log_softmax(student_logits.float() / t, dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1).mean() * (t * t)


@register("hard_ce")
def hard_cross_entropy(student_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(student_logits.float(), labels)


def _token_mask(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.to(like.dtype).unsqueeze(-1)


@register("hidden_mse")
def hidden_mse(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error per hidden unit over the real tokens (padding excluded).

    ``student_hidden`` must already be projected to the teacher's width.
    """
    s, t = student_hidden.float(), teacher_hidden.float()
    mask = _token_mask(attention_mask, s)
    sq = ((s - t) ** 2) * mask
    return sq.sum() / (mask.sum() * s.shape[-1]).clamp_min(1.0)


@register("attention_mse")
def attention_mse(student_attn: torch.Tensor, teacher_attn: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Squared error of attention maps ``[batch, heads, query, key]``: summed over real keys, averaged
    over real query rows and heads."""
    s, t = student_attn.float(), teacher_attn.float()
    if s.shape[1] != t.shape[1]:
        s, t = s.mean(1, keepdim=True), t.mean(1, keepdim=True)
    m = attention_mask.to(s.dtype)
    pair = (m[:, :, None] * m[:, None, :]).unsqueeze(1)  # [batch, 1, query, key]
    sq = ((s - t) ** 2) * pair
    return sq.sum() / (m.sum() * s.shape[1]).clamp_min(1.0)
