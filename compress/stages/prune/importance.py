"""Importance of attention heads and FFN neurons (torch-pruning's group criteria), and the selection."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from compress.config import IMPORTANCES, SCOPES
from compress.core.errors import CompressError
from compress.runtime.formats.layouts import head_size, layer_parts



def importance_criterion(name: str):
    """torch-pruning's group criterion by name.

    ``normalizer="mean"`` divides each group's scores by their mean, which is what makes scores of
    different layers comparable under ``--scope global`` (a layer of larger weights does not win
    by scale alone); under ``uniform`` it changes nothing since each layer is ranked on its own.
    """
    import torch_pruning as tp

    if name == "magnitude":
        return tp.importance.GroupMagnitudeImportance(p=2, group_reduction="mean", normalizer="mean")
    if name == "taylor":
        return tp.importance.GroupTaylorImportance(group_reduction="mean", normalizer="mean")
    raise CompressError(f"--importance {name!r} is unknown; use one of {', '.join(IMPORTANCES)}.")


def check_group(model, group, expected: dict[str, str], what: str) -> None:
    """Refuse a dependency group that couples anything but the expected Linear layers.

    ``expected`` maps module path -> "out" / "in". Should a torch-pruning or transformers change
    ever couple a LayerNorm or the embeddings (the hidden width) into a head or neuron group, the
    run stops here instead of silently shrinking the residual stream.
    """
    import torch

    names = {m: n for n, m in model.named_modules()}
    found: dict[str, str] = {}
    for dep, _ in group:
        module = dep.target.module
        if not isinstance(module, torch.nn.Module) or not any(True for _ in module.parameters(recurse=False)):
            continue  # reshape / elementwise nodes of the traced graph carry no weights
        found[names.get(module, type(module).__name__)] = "out" if "out_channels" in dep.handler.__name__ else "in"
    if found != expected:
        raise CompressError(
            f"internal: torch-pruning grouped {what} with {sorted(found.items())}, expected {sorted(expected.items())}; "
            "nothing was removed. Report this with your torch-pruning and transformers versions.")


@dataclass
class UnitScores:
    """Importance of every head and FFN neuron, per layer (higher = more important)."""

    heads: list[np.ndarray]
    ffn: list[np.ndarray]


def score_units(model, example_inputs: dict[str, Any], importance: str = "magnitude") -> tuple[Any, UnitScores]:
    """Build torch-pruning's dependency graph and score every head and FFN neuron.

    For ``taylor`` the parameters must already hold gradients of the task loss (see
    :func:`accumulate_task_gradients`). Returns ``(dependency_graph, scores)``; the graph is the
    one :func:`remove_units` prunes with.
    """
    import torch_pruning as tp

    model.eval()
    graph = tp.DependencyGraph().build_dependency(model, example_inputs=example_inputs,
                                                  output_transform=_output_sum)
    criterion = importance_criterion(importance)
    d = head_size(model)
    heads, ffn = [], []
    for parts in layer_parts(model):
        attn_out = model.get_submodule(parts.attn_out)
        group = graph.get_pruning_group(attn_out, tp.prune_linear_in_channels, list(range(attn_out.in_features)))
        check_group(model, group, {parts.query: "out", parts.key: "out", parts.value: "out", parts.attn_out: "in"},
                     f"the heads of {parts.attention}")
        dims = _finite(criterion(group))
        heads.append(dims.view(-1, d).mean(1).cpu().numpy())
        ffn_in = model.get_submodule(parts.ffn_in)
        group = graph.get_pruning_group(ffn_in, tp.prune_linear_out_channels, list(range(ffn_in.out_features)))
        check_group(model, group, {parts.ffn_in: "out", parts.ffn_out: "in"}, f"the FFN neurons of {parts.ffn_in}")
        ffn.append(_finite(criterion(group)).cpu().numpy())
    return graph, UnitScores(heads, ffn)


def _finite(scores):
    """Scores as a float64 CPU tensor with NaN (a group whose gradients were all zero) set to 0."""
    import torch

    return torch.nan_to_num(scores.detach().double().cpu(), nan=0.0, posinf=0.0, neginf=0.0)


def select_units(scores: list[np.ndarray], ratio: float, scope: str = "uniform", min_keep: int = 1) -> list[list[int]]:
    """Indices to remove in each layer: the lowest-scoring share ``ratio`` of the units.

    ``uniform``: every layer loses the nearest whole number to ``ratio x its units``.
    ``global``: all units are ranked together and the nearest whole number to ``ratio x all units``
    go, so layers may lose different amounts. Either way each layer keeps ``min_keep`` units: an
    empty attention or FFN would leave nothing to recover and cannot be exported. Ties break by
    layer then position, so a run is reproducible.
    """
    if not 0.0 <= ratio < 1.0:
        raise CompressError(f"pruning ratio must lie in [0, 1), got {ratio}.")
    if scope not in SCOPES:
        raise CompressError(f"--scope {scope!r} is unknown; use one of {', '.join(SCOPES)}.")
    removed: list[list[int]] = [[] for _ in scores]
    if ratio == 0.0:
        return removed
    if scope == "uniform":
        for i, s in enumerate(scores):
            n = min(len(s) - min_keep, _nearest(ratio * len(s)))
            if n > 0:
                removed[i] = sorted(int(j) for j in np.argsort(np.asarray(s), kind="stable")[:n])
        return removed
    total = sum(len(s) for s in scores)
    target = min(total - min_keep * len(scores), _nearest(ratio * total))
    flat = sorted((float(v), layer, j) for layer, s in enumerate(scores) for j, v in enumerate(np.asarray(s)))
    left = [len(s) for s in scores]
    count = 0
    for _, layer, j in flat:
        if count >= target:
            break
        if left[layer] <= min_keep:
            continue
        removed[layer].append(j)
        left[layer] -= 1
        count += 1
    return [sorted(r) for r in removed]


def _nearest(x: float) -> int:
    """Round half up (0.5 -> 1), with a little slack for ratios like 0.3 x 10 = 2.9999999999999996."""
    return int(math.floor(x + 0.5 + 1e-9))


def _output_sum(out: Any):
    """One scalar of the model's outputs for torch-pruning's trace: the logits, or a reader's start and end scores."""
    if getattr(out, "logits", None) is not None:
        return out.logits.sum()
    return out.start_logits.sum() + out.end_logits.sum()


def accumulate_task_gradients(model, batches: list[dict[str, Any]]) -> int:
    """Gradients of the mean cross-entropy over ``batches`` into ``param.grad`` (for Taylor scores).

    Run in eval mode: dropout would add noise to first-order scores computed from a few batches.
    A tagger's logits ``(batch, tokens, labels)`` are scored per labelled token (``-100``, the tokens
    that carry no word's tag and the padding, are left out); a reader's batches carry ``start_positions`` and
    ``end_positions`` and are scored on its own span loss. Returns the number of examples used.
    """
    import torch

    model.eval()
    model.zero_grad(set_to_none=True)
    for p in model.parameters():
        p.requires_grad_(True)
    n = 0
    with torch.enable_grad():
        for batch in batches:
            if "start_positions" in batch:  # a reader: its own loss, the mean of the start and end cross-entropies
                (model(**batch).loss / len(batches)).backward()
                n += int(batch["start_positions"].shape[0])
                continue
            labels = batch["labels"]
            inputs = {k: v for k, v in batch.items() if k != "labels"}
            logits = model(**inputs).logits
            if logits.dim() == 3:  # a tagger: one label per token
                logits, labels_used = logits.flatten(0, 1), labels.flatten()
            else:
                labels_used = labels
            loss = torch.nn.functional.cross_entropy(logits.float(), labels_used, ignore_index=-100) / len(batches)
            loss.backward()
            n += int(labels.shape[0])
    return n
