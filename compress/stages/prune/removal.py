"""Physical removal of the chosen heads and FFN neurons through torch-pruning's dependency groups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from compress.core.errors import CompressError
from compress.runtime.formats.layouts import head_size, layer_parts, structure, sync_attention_attributes
from compress.runtime.formats.pruned import patch_config
from compress.stages.prune.importance import (SCOPES, accumulate_task_gradients, check_group, importance_criterion,
                                       score_units, select_units)
from compress.runtime.modeling import accepts_token_types

@dataclass
class PrunePlan:
    """What :func:`prune_model` removed: head and FFN-neuron indices per layer (original numbering)."""

    heads: list[list[int]]
    ffn: list[list[int]]
    before: dict[str, Any]
    after: dict[str, Any] = field(default_factory=dict)


def remove_units(model, graph, heads: list[list[int]], ffn: list[list[int]]) -> None:
    """Physically remove the given heads and FFN neurons (in place) through torch-pruning's groups."""
    import torch_pruning as tp

    d = head_size(model)
    for parts, drop_heads, drop_ffn in zip(layer_parts(model), heads, ffn):
        if drop_heads:
            attn_out = model.get_submodule(parts.attn_out)
            dims = [h * d + j for h in drop_heads for j in range(d)]
            group = graph.get_pruning_group(attn_out, tp.prune_linear_in_channels, dims)
            check_group(model, group, {parts.query: "out", parts.key: "out", parts.value: "out", parts.attn_out: "in"},
                         f"the heads of {parts.attention}")
            group.prune()
        if drop_ffn:
            group = graph.get_pruning_group(model.get_submodule(parts.ffn_in), tp.prune_linear_out_channels, list(drop_ffn))
            check_group(model, group, {parts.ffn_in: "out", parts.ffn_out: "in"}, f"the FFN neurons of {parts.ffn_in}")
            group.prune()
    sync_attention_attributes(model)


def prune_model(model, heads: float = 0.0, ffn: float = 0.0, importance: str = "magnitude", scope: str = "uniform",
                example_inputs: dict[str, Any] | None = None,
                gradient_batches: list[dict[str, Any]] | None = None) -> PrunePlan:
    """Remove the least important share ``heads`` of attention heads and ``ffn`` of FFN neurons.

    In place; the config is patched (see :func:`patch_config`) so ``save_pretrained`` writes a
    folder that reloads. ``example_inputs`` (a padded batch of model inputs) lets torch-pruning
    trace the model; ``gradient_batches`` (batches with ``labels``) are needed for ``taylor``.
    """
    import torch

    for name, value in (("--heads", heads), ("--ffn", ffn)):
        if not isinstance(value, (int, float)) or not 0.0 <= float(value) < 1.0:
            raise CompressError(f"{name} must be a share in [0, 1) (0.5 removes half), got {value!r}.")
    if scope not in SCOPES:
        raise CompressError(f"--scope {scope!r} is unknown; use one of {', '.join(SCOPES)}.")
    importance_criterion(importance)
    before = structure(model)
    if example_inputs is None:
        example_inputs = _synthetic_inputs(model)
    if importance == "taylor":
        if not gradient_batches:
            raise CompressError("--importance taylor needs batches of the task data to compute gradients; give --data.")
        accumulate_task_gradients(model, gradient_batches)
    try:
        graph, scores = score_units(model, example_inputs, importance)
    finally:
        if importance == "taylor":
            model.zero_grad(set_to_none=True)
    drop_heads = select_units(scores.heads, float(heads), scope)
    drop_ffn = select_units(scores.ffn, float(ffn), scope)
    with torch.no_grad():
        remove_units(model, graph, drop_heads, drop_ffn)
    plan = PrunePlan(drop_heads, drop_ffn, before, structure(model))
    patch_config(model)
    return plan


def _synthetic_inputs(model) -> dict[str, Any]:
    """A padded two-row batch of valid ids: enough for torch-pruning to trace the graph."""
    import torch

    vocab = int(model.config.vocab_size)
    ids = torch.tensor([[min(101, vocab - 1)] + [min(1000 + i, vocab - 1) for i in range(6)],
                        [min(101, vocab - 1)] + [min(2000 + i, vocab - 1) for i in range(3)] + [0, 0, 0]])
    mask = (torch.arange(ids.shape[1])[None, :] < torch.tensor([[7], [4]])).long()
    inputs = {"input_ids": ids, "attention_mask": mask}

    if accepts_token_types(model):
        inputs["token_type_ids"] = torch.zeros_like(ids)
    return inputs
