"""Sentence-vector distillation (``distill --alpha-pooled``): the student's mean-pooled sentence vector pulled
toward the teacher's through a learned projection.

The logit loss hands the student two numbers per sentence; the teacher's last layer holds a whole vector
that says how it reads the sentence. A term on ``pooled`` compares the two models' sentence vectors (the
mean of each model's last hidden states over its real tokens), the student's through a linear map to the
teacher's width that trains beside it (as TinyBERT's projections do; it is not part of the student
artifact). Unlike the intermediate losses it needs no position-by-position match of the tokenizations.

The teacher's vectors are computed in the same teacher forward that fills its soft labels and cached beside
them (:func:`vector_cache_path`, keyed like the soft-label file), so a second seed or a second lever on the same
rows runs no teacher at all, as with logits alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn


def mean_pool(hidden: "torch.Tensor", attention_mask: "torch.Tensor") -> "torch.Tensor":
    """The mean of ``hidden`` (``[batch, tokens, width]``) over each row's real tokens, in float32."""
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return ((hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)).float()


def make_pooled_projection(student_hidden: int, teacher_hidden: int) -> "nn.Linear":
    """The learned map from the student's sentence vector to the teacher's width, also when the widths are
    equal: the two models' spaces are not the same space even then."""
    from torch import nn

    return nn.Linear(student_hidden, teacher_hidden)


def vector_cache_path(soft_label_cache: Path) -> Path:
    """Where the teacher's sentence vectors for the rows of one soft-label cache file are kept: beside it, with
    the same key (the teacher's weights, the exact token ids, the precision)."""
    return soft_label_cache.with_name(soft_label_cache.stem + ".pooled.npy")
