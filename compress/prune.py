"""Structured pruning: whole attention heads and FFN neurons, physically removed, reloadable.

What is removed, and what is not:

- A *head* is its rows of the query, key and value projections and the matching input columns of
  the attention output projection; an *FFN neuron* is one output of the intermediate dense layer
  and the matching input column of the output dense layer. Nothing else changes: the hidden width,
  the embeddings, the LayerNorms, the pooler and the classifier keep their shapes, so the residual
  stream (and any layer map or projection built on it) is untouched.
- Removal is physical: the weight matrices shrink, so the file, the parameter count and the
  compute all fall. Masking (zeroed weights that still cost time) is the complaint this stage
  exists to avoid (sparseml #741, nni #4780).

How it is done (torch-pruning 1.6.1 on transformers 5.24):

- torch-pruning's dependency graph traces the classifier and yields, for a head or a neuron, the
  group of coupled parameters; its ``GroupMagnitudeImportance`` / ``GroupTaylorImportance`` score
  every channel of a group, and ``Group.prune()`` removes the chosen channels from every member.
  Each group is checked to hold exactly the expected Linear layers before anything is removed.
- Which heads and neurons go is decided here, not by ``MetaPruner``. Measured on this stack,
  MetaPruner with ``num_heads``/``prune_num_heads=True``/``prune_head_dims=False``: (1) removes no
  head at all when the channel ratio is 0 (head removal only runs inside the channel-thresholding
  branch), so "heads only" is impossible; (2) rounds the per-layer head count up (``ceil``), so
  ``--heads 0.3`` on 4 heads removed 2 (50%); (3) with ``global_pruning`` ranks the FFN neurons
  together with the (never removed) attention dimensions, so ``--ffn 0.25`` removed 28%; (4) can
  empty a layer completely under global ranking. The selection below removes the nearest whole
  count to the requested share and always keeps one head and one neuron per layer.

Reloading: transformers 5 removed ``prune_heads``/``config.pruned_heads`` and a ``BertConfig``
derives the head size as ``hidden_size / num_attention_heads``, so it cannot describe a layer with
fewer heads of the original size. When only FFN neurons were removed, in equal numbers in every
layer, ``config.intermediate_size`` describes the result and plain ``from_pretrained`` reloads it
(``"loader": "transformers"``). Otherwise the per-layer shapes are written into ``config.json``
under ``"bert_compress_pruning"`` and :func:`load_pruned` (used by
:func:`compress.modeling.load_classifier`, hence by every stage and the runtime) builds the
original architecture, shrinks each layer to the recorded shapes and loads the weights
(``"loader": "compress"``). Plain ``from_pretrained`` on such a folder fails loudly with a size
mismatch rather than loading wrong weights.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from compress.artifact import folder_size_bytes, read_meta, weights_sha256, write_artifact
from compress.data import DataOptions, DynamicPaddingCollator, tokenize_split
from compress.errors import CompressError
from compress.training import TrainSettings

#: The ``config.json`` key holding the per-layer shapes of a pruned model.
PRUNING_KEY = "bert_compress_pruning"
PRUNING_FORMAT_VERSION = 1
IMPORTANCES = ("magnitude", "taylor")
SCOPES = ("uniform", "global")
LOADER_TRANSFORMERS = "transformers"
LOADER_COMPRESS = "compress"


# --------------------------------------------------------------------------------------------
# Where the prunable parts of a layer live, per architecture family
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerParts:
    """Dotted module paths (relative to the classifier) of one transformer layer's prunable parts.

    Paths rather than module objects, so the same description serves the pruner (which changes
    modules in place) and the loader (which builds a fresh model and shrinks it).
    """

    attention: str  # the module holding num_attention_heads / attention_head_size / all_head_size
    query: str
    key: str
    value: str
    attn_out: str
    ffn_in: str
    ffn_out: str


def _bert_layout(model) -> list[LayerParts]:
    """BERT and the architectures that copy its layer code (RoBERTa, XLM-R, CamemBERT, ELECTRA)."""
    prefix = model.base_model_prefix
    encoder = getattr(model.base_model, "encoder", None)
    if encoder is None or not hasattr(encoder, "layer"):
        raise CompressError(f"{type(model).__name__} has no encoder.layer list; it cannot be pruned here.")
    parts = []
    for i, layer in enumerate(encoder.layer):
        if getattr(layer, "add_cross_attention", False):
            raise CompressError(f"{type(model).__name__} has cross-attention (a decoder); only encoders are pruned.")
        base = f"{prefix}.encoder.layer.{i}"
        parts.append(LayerParts(
            attention=f"{base}.attention.self", query=f"{base}.attention.self.query",
            key=f"{base}.attention.self.key", value=f"{base}.attention.self.value",
            attn_out=f"{base}.attention.output.dense", ffn_in=f"{base}.intermediate.dense",
            ffn_out=f"{base}.output.dense"))
    return parts


#: model_type -> function listing the layers' prunable parts. A new family is an entry here.
#: MPNet and DistilBERT are absent: MPNet's relative-position bias is shared by all layers with one
#: slot per head, so its heads cannot be removed layer by layer without rewriting the model.
LAYOUTS: dict[str, Callable[[Any], list[LayerParts]]] = {
    "bert": _bert_layout, "roberta": _bert_layout, "xlm-roberta": _bert_layout,
    "camembert": _bert_layout, "electra": _bert_layout,
}


def layer_parts(model) -> list[LayerParts]:
    """The prunable parts of every layer of ``model``; a :class:`CompressError` for other families."""
    model_type = getattr(model.config, "model_type", None)
    layout = LAYOUTS.get(model_type)
    if layout is None:
        raise CompressError(f"pruning supports model_type {', '.join(LAYOUTS)}; this model is {model_type!r}. "
                            "Prune a BERT-family student (e.g. one distilled with bert-compress distill) instead.")
    return layout(model)


def head_size(model) -> int:
    """Width of one attention head; pruning never changes it."""
    config = model.config
    return int(config.hidden_size // config.num_attention_heads)


def structure(model) -> dict[str, Any]:
    """Heads and FFN neurons per layer, read from the weight shapes (the truth after pruning)."""
    d = head_size(model)
    heads, ffn = [], []
    for parts in layer_parts(model):
        q = model.get_submodule(parts.query)
        heads.append(int(q.out_features // d))
        ffn.append(int(model.get_submodule(parts.ffn_in).out_features))
    return {"heads_per_layer": heads, "intermediate_per_layer": ffn, "attention_head_size": d}


def encoder_parameters(model) -> int:
    """Parameters of the transformer layers alone: what pruning acts on. On small models the
    embedding table dominates the total, which hides the change in compute."""
    encoder = getattr(model.base_model, "encoder", None)
    return int(sum(p.numel() for p in encoder.parameters())) if encoder is not None else 0


# --------------------------------------------------------------------------------------------
# Importance and selection
# --------------------------------------------------------------------------------------------

def _importance(name: str):
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


def _check_group(model, group, expected: dict[str, str], what: str) -> None:
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
                                                  output_transform=lambda out: out.logits.sum())
    criterion = _importance(importance)
    d = head_size(model)
    heads, ffn = [], []
    for parts in layer_parts(model):
        attn_out = model.get_submodule(parts.attn_out)
        group = graph.get_pruning_group(attn_out, tp.prune_linear_in_channels, list(range(attn_out.in_features)))
        _check_group(model, group, {parts.query: "out", parts.key: "out", parts.value: "out", parts.attn_out: "in"},
                     f"the heads of {parts.attention}")
        dims = _finite(criterion(group))
        heads.append(dims.view(-1, d).mean(1).numpy())
        ffn_in = model.get_submodule(parts.ffn_in)
        group = graph.get_pruning_group(ffn_in, tp.prune_linear_out_channels, list(range(ffn_in.out_features)))
        _check_group(model, group, {parts.ffn_in: "out", parts.ffn_out: "in"}, f"the FFN neurons of {parts.ffn_in}")
        ffn.append(_finite(criterion(group)).numpy())
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


def accumulate_task_gradients(model, batches: list[dict[str, Any]]) -> int:
    """Gradients of the mean cross-entropy over ``batches`` into ``param.grad`` (for Taylor scores).

    Run in eval mode: dropout would add noise to first-order scores computed from a few batches.
    Returns the number of examples used.
    """
    import torch

    model.eval()
    model.zero_grad(set_to_none=True)
    for p in model.parameters():
        p.requires_grad_(True)
    n = 0
    with torch.enable_grad():
        for batch in batches:
            labels = batch["labels"]
            inputs = {k: v for k, v in batch.items() if k != "labels"}
            logits = model(**inputs).logits
            loss = torch.nn.functional.cross_entropy(logits.float(), labels) / len(batches)
            loss.backward()
            n += int(labels.shape[0])
    return n


# --------------------------------------------------------------------------------------------
# Physical removal, config patching, reloading
# --------------------------------------------------------------------------------------------

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
            _check_group(model, group, {parts.query: "out", parts.key: "out", parts.value: "out", parts.attn_out: "in"},
                         f"the heads of {parts.attention}")
            group.prune()
        if drop_ffn:
            group = graph.get_pruning_group(model.get_submodule(parts.ffn_in), tp.prune_linear_out_channels, list(drop_ffn))
            _check_group(model, group, {parts.ffn_in: "out", parts.ffn_out: "in"}, f"the FFN neurons of {parts.ffn_in}")
            group.prune()
    _sync_attention_attributes(model)


def _sync_attention_attributes(model) -> None:
    """Make each attention module's head count agree with its (possibly shrunk) projections.

    BERT's forward reshapes with ``-1`` heads, so it would run without this; but the export reads
    ``num_attention_heads`` to tell ONNX Runtime's fusion the real head count, and a wrong count
    there fuses silently into wrong attention.
    """
    d = head_size(model)
    for parts in layer_parts(model):
        attention = model.get_submodule(parts.attention)
        q, k, v = (model.get_submodule(p) for p in (parts.query, parts.key, parts.value))
        o = model.get_submodule(parts.attn_out)
        ffn_in, ffn_out = model.get_submodule(parts.ffn_in), model.get_submodule(parts.ffn_out)
        if not (q.out_features == k.out_features == v.out_features == o.in_features) or q.out_features % d:
            raise CompressError(f"internal: {parts.attention} has query/key/value/output widths {q.out_features}/"
                                f"{k.out_features}/{v.out_features}/{o.in_features}, not whole heads of {d}.")
        if ffn_in.out_features != ffn_out.in_features:
            raise CompressError(f"internal: {parts.ffn_in} has {ffn_in.out_features} outputs but {parts.ffn_out} takes "
                                f"{ffn_out.in_features}.")
        attention.num_attention_heads = q.out_features // d
        attention.all_head_size = q.out_features
        attention.attention_head_size = d


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
    _importance(importance)
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
    from compress.modeling import accepts_token_types

    if accepts_token_types(model):
        inputs["token_type_ids"] = torch.zeros_like(ids)
    return inputs


def patch_config(model) -> str:
    """Make ``model.config`` describe the pruned shapes; return the loader the folder will need.

    ``transformers``: every layer keeps all heads and has the same FFN width, so
    ``intermediate_size`` says it all and the pruning key is dropped. ``compress``: the per-layer
    shapes go under :data:`PRUNING_KEY`; ``intermediate_size`` becomes the widest layer's width
    (the loader builds that and shrinks narrower layers) and ``num_attention_heads`` stays the
    original count, since it fixes the head size (``hidden_size / num_attention_heads``).
    """
    config = model.config
    shape = structure(model)
    heads = int(config.num_attention_heads)
    ffn = shape["intermediate_per_layer"]
    config.intermediate_size = int(max(ffn))
    if all(h == heads for h in shape["heads_per_layer"]) and len(set(ffn)) == 1:
        if hasattr(config, PRUNING_KEY):
            delattr(config, PRUNING_KEY)
        return LOADER_TRANSFORMERS
    setattr(config, PRUNING_KEY, {
        "format_version": PRUNING_FORMAT_VERSION,
        "heads_per_layer": shape["heads_per_layer"],
        "attention_head_size": shape["attention_head_size"],
        "intermediate_per_layer": ffn,
        "loader": "compress.prune.load_pruned",
    })
    return LOADER_COMPRESS


def loader_of(model_or_config) -> str:
    """``compress`` when the config carries per-layer pruned shapes, else ``transformers``."""
    config = getattr(model_or_config, "config", model_or_config)
    return LOADER_COMPRESS if getattr(config, PRUNING_KEY, None) else LOADER_TRANSFORMERS


def pruning_spec(config, source: str | os.PathLike = "config.json") -> dict[str, Any] | None:
    """The validated per-layer shapes of a pruned model's config, or ``None`` for an unpruned one."""
    spec = getattr(config, PRUNING_KEY, None)
    if not spec:
        return None
    where = f"{source}: {PRUNING_KEY}"
    if not isinstance(spec, dict) or spec.get("format_version") != PRUNING_FORMAT_VERSION:
        raise CompressError(f"{where} has format version {spec.get('format_version') if isinstance(spec, dict) else spec!r}; "
                            f"this bert-compress reads version {PRUNING_FORMAT_VERSION}. Prune the model again.")
    layers = int(config.num_hidden_layers)
    heads, ffn = spec.get("heads_per_layer"), spec.get("intermediate_per_layer")
    d = int(config.hidden_size // config.num_attention_heads)
    problems = []
    if not isinstance(heads, list) or len(heads) != layers:
        problems.append(f"heads_per_layer must list {layers} counts")
    elif not all(isinstance(h, int) and 1 <= h <= config.num_attention_heads for h in heads):
        problems.append(f"heads_per_layer {heads} must lie in 1..{config.num_attention_heads}")
    if not isinstance(ffn, list) or len(ffn) != layers:
        problems.append(f"intermediate_per_layer must list {layers} widths")
    elif not all(isinstance(f, int) and 1 <= f <= config.intermediate_size for f in ffn):
        problems.append(f"intermediate_per_layer {ffn} must lie in 1..{config.intermediate_size}")
    if spec.get("attention_head_size") != d:
        problems.append(f"attention_head_size {spec.get('attention_head_size')} differs from hidden_size / "
                        f"num_attention_heads = {d}")
    if problems:
        raise CompressError(f"{where}: {'; '.join(problems)}. The config was edited by hand or damaged; prune again.")
    return spec


def apply_pruned_shapes(model, spec: dict[str, Any]) -> None:
    """Shrink a freshly built (unpruned) model's layers to the recorded shapes, in place.

    The kept channels are simply the first ones: their values are replaced when the weights are
    loaded. torch-pruning's own ``prune_linear_*`` functions do the shrinking, so module identity
    (and the parent's attribute) stays as it is.
    """
    import torch
    import torch_pruning as tp

    d = int(spec["attention_head_size"])
    with torch.no_grad():
        for parts, heads, width in zip(layer_parts(model), spec["heads_per_layer"], spec["intermediate_per_layer"]):
            keep = heads * d
            for path in (parts.query, parts.key, parts.value):
                linear = model.get_submodule(path)
                if linear.out_features > keep:
                    tp.prune_linear_out_channels(linear, list(range(keep, linear.out_features)))
            o = model.get_submodule(parts.attn_out)
            if o.in_features > keep:
                tp.prune_linear_in_channels(o, list(range(keep, o.in_features)))
            ffn_in, ffn_out = model.get_submodule(parts.ffn_in), model.get_submodule(parts.ffn_out)
            if ffn_in.out_features > width:
                tp.prune_linear_out_channels(ffn_in, list(range(width, ffn_in.out_features)))
            if ffn_out.in_features > width:
                tp.prune_linear_in_channels(ffn_out, list(range(width, ffn_out.in_features)))
    _sync_attention_attributes(model)


def load_pruned(folder: str | os.PathLike, config, eager_attention: bool = False):
    """Load a classifier whose ``config.json`` carries :data:`PRUNING_KEY` (``"loader": "compress"``).

    Builds the architecture the config describes, shrinks each layer to the recorded head and FFN
    counts, then loads ``model.safetensors`` strictly: every tensor must be present with its
    recorded shape, so a folder that does not match its config is refused, never half-loaded.
    """
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification

    from compress.modeling import _quiet_transformers

    path = Path(folder)
    spec = pruning_spec(config, path / "config.json")
    if spec is None:
        raise CompressError(f"{path / 'config.json'} has no {PRUNING_KEY}: load it with from_pretrained.")
    kwargs = {"attn_implementation": "eager"} if eager_attention else {}
    with _quiet_transformers():
        model = AutoModelForSequenceClassification.from_config(config, **kwargs)
    apply_pruned_shapes(model, spec)
    state = _read_safetensors(path, load_file)
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}" for k, v in expected.items()
             if k in state and tuple(state[k].shape) != tuple(v.shape)]
    if missing or unexpected or wrong:
        raise CompressError(f"{path}: the weights do not match the pruned shapes in config.json (missing {missing[:3]}, "
                            f"unexpected {unexpected[:3]}, wrong shape {wrong[:3]}). Prune the model again.")
    with torch.no_grad():
        model.load_state_dict(state, strict=True)
    model.eval()
    return model


def _read_safetensors(path: Path, load_file) -> dict[str, Any]:
    """All tensors of a folder's safetensors weights (one file, or the shards an index names)."""
    import json

    single = path / "model.safetensors"
    if single.exists():
        return load_file(str(single))
    index = path / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        state: dict[str, Any] = {}
        for shard in shards:
            state.update(load_file(str(path / shard)))
        return state
    raise CompressError(f"{path} is a pruned model (config.json has {PRUNING_KEY}) but holds no model.safetensors; "
                        "pruned models are only written as safetensors. Prune the model again.")


# --------------------------------------------------------------------------------------------
# The stage
# --------------------------------------------------------------------------------------------

@dataclass
class PruneConfig:
    """Settings of the prune stage (``bert-compress prune``)."""

    model: str = ""
    data: DataOptions = field(default_factory=DataOptions)
    #: Share of attention heads to remove, in [0, 1).
    heads: float = 0.0
    #: Share of FFN neurons to remove, in [0, 1).
    ffn: float = 0.0
    importance: str = "magnitude"
    scope: str = "uniform"
    #: Batches of training data whose loss gradients feed the Taylor scores.
    importance_batches: int = 8
    #: Epochs of distillation from the unpruned model (or ``teacher``) after pruning; 0 = none.
    recover_epochs: float = 0.0
    teacher: str | None = None
    train: TrainSettings = field(default_factory=lambda: TrainSettings(epochs=0.0, lr=5e-5))
    temperature: float = 2.0
    alpha_kd: float = 1.0
    alpha_hard: float = 0.5
    intermediate: bool = True
    max_length: int = 128
    allow_pickle: bool = False

    def validate(self) -> None:
        problems = []
        if not self.model:
            problems.append("--model is required")
        for name in ("heads", "ffn"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= float(value) < 1.0:
                problems.append(f"--{name} must be a share in [0, 1) (0.5 removes half), got {value!r}")
        if self.importance not in IMPORTANCES:
            problems.append(f"--importance must be one of {', '.join(IMPORTANCES)}, got {self.importance!r}")
        if self.scope not in SCOPES:
            problems.append(f"--scope must be one of {', '.join(SCOPES)}, got {self.scope!r}")
        if self.importance_batches < 1:
            problems.append(f"--importance-batches must be >= 1, got {self.importance_batches}")
        if not self.recover_epochs >= 0:
            problems.append(f"--recover-epochs must be >= 0, got {self.recover_epochs}")
        if self.teacher and not self.recover_epochs:
            problems.append("--teacher is used only for recovery; give --recover-epochs N (> 0) or drop --teacher")
        if self.max_length < 8:
            problems.append(f"--max-length must be >= 8, got {self.max_length}")
        if self.temperature <= 0:
            problems.append(f"--temperature must be > 0, got {self.temperature}")
        for name in ("alpha_kd", "alpha_hard"):
            if getattr(self, name) < 0:
                problems.append(f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        if problems:
            raise CompressError("; ".join(problems))
        self.train.validate()


def prune(cfg: PruneConfig, out: str | os.PathLike) -> Path:
    """Prune a classifier artifact, optionally recover it by distillation, and write the artifact.

    ``compress.json`` records the heads and FFN neurons per layer before and after, parameters and
    file size before and after, and accuracy before pruning, right after, and after recovery.
    """
    from compress.assets import resolve_model
    from compress.export import check_out_is_not_input
    from compress.modeling import classification_metrics, count_parameters, load_classifier, predict_logits
    from compress.runtime import artifact_kind

    cfg.validate()
    started = time.perf_counter()
    timings: dict[str, float] = {}
    notes: list[str] = []
    source = Path(resolve_model(cfg.model))
    check_out_is_not_input(source, out)
    kind = artifact_kind(source)
    if kind != "pytorch":
        raise CompressError(f"--model {source} is a {kind} artifact; pruning needs the PyTorch fp32 folder it was made "
                            "from (the teacher, distill or prune artifact).")
    task = cfg.data.load()
    model, tokenizer, has_head = load_classifier(source, task.num_labels, task.label_names, cfg.allow_pickle)
    if not has_head:
        raise CompressError(f"--model {source}: the model has no trained classification head, so there is nothing to "
                            "keep accurate while pruning. Fine-tune it first: bert-compress teacher --model DIR --data DATA --out DIR")
    layer_parts(model)  # refuses unsupported families before any work
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    tokenized = {name: tokenize_split(split, tokenizer, cfg.max_length, task.is_pair, what=name)
                 for name, split in task.splits.items()}
    eval_splits = [name for name in ("validation", "test") if name in tokenized]
    labels = {name: np.asarray(task.splits[name]["label"]) for name in eval_splits}

    def evaluate(m, reference: dict[str, np.ndarray] | None, desc: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        logits = {name: predict_logits(m, tokenized[name], batch_size=64, pad_id=pad_id, desc=f"{desc} ({name})")
                  for name in eval_splits}
        metrics = {name: classification_metrics(logits[name], labels[name],
                                                reference[name] if reference else None) for name in eval_splits}
        if reference:
            for name in eval_splits:
                metrics[name]["kl_to_unpruned"] = kl_divergence(reference[name], logits[name])
        return metrics, logits

    t0 = time.perf_counter()
    before_metrics, before_logits = evaluate(model, None, "evaluating the unpruned model")
    timings["evaluate_before_s"] = round(time.perf_counter() - t0, 2)
    params_before = count_parameters(model)
    encoder_before = encoder_parameters(model)
    size_before = folder_size_bytes(source)

    t0 = time.perf_counter()
    taylor = cfg.importance == "taylor"
    batches = _batches(tokenized["train"], pad_id, cfg.train.batch_size, cfg.importance_batches if taylor else 1,
                       cfg.train.seed)
    example = {k: v[:2] for k, v in batches[0].items() if k != "labels"}
    plan = prune_model(model, cfg.heads, cfg.ffn, cfg.importance, cfg.scope, example_inputs=example,
                       gradient_batches=batches if taylor else None)
    loader = loader_of(model)
    timings["prune_s"] = round(time.perf_counter() - t0, 2)
    params_after = count_parameters(model)
    after_metrics, _ = evaluate(model, before_logits, "evaluating the pruned model")
    print(f"prune: {plan.before['heads_per_layer']} -> {plan.after['heads_per_layer']} heads, "
          f"{plan.before['intermediate_per_layer']} -> {plan.after['intermediate_per_layer']} FFN neurons; "
          f"parameters {params_before:,} -> {params_after:,}")

    out_path = Path(out).expanduser().resolve()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out_path.name}.prune-", dir=out_path.parent))
    recovery: dict[str, Any] | None = None
    recovered_metrics: dict[str, Any] | None = None
    final_metrics = {name: dict(m) for name, m in after_metrics.items()}
    try:
        if cfg.recover_epochs > 0:
            t0 = time.perf_counter()
            model, recovery = _recover(cfg, source, model, tokenizer, work)
            timings["recover_s"] = round(time.perf_counter() - t0, 2)
            if loader_of(model) != loader or structure(model) != plan.after:
                raise CompressError("internal: recovery changed the pruned shapes; nothing was written.")
            recovered_metrics, _ = evaluate(model, before_logits, "evaluating the recovered model")
            final_metrics = {name: dict(m) for name, m in recovered_metrics.items()}
        for name in eval_splits:
            final_metrics[name]["unpruned_accuracy"] = before_metrics[name]["accuracy"]
        timings["total_s"] = round(time.perf_counter() - started, 2)

        parent_meta = read_meta(source) or {}
        pruning = {
            "method": "torch-pruning dependency graph; whole heads (query/key/value rows + attention output columns) "
                      "and FFN neurons (intermediate rows + output columns) removed; hidden width, embeddings and "
                      "LayerNorms unchanged",
            "importance": cfg.importance,
            "importance_examples": sum(int(b["labels"].shape[0]) for b in batches) if taylor else None,
            "scope": cfg.scope,
            "loader": loader,
            "heads": {"ratio": cfg.heads, "before": plan.before["heads_per_layer"],
                      "after": plan.after["heads_per_layer"], "total_before": sum(plan.before["heads_per_layer"]),
                      "total_after": sum(plan.after["heads_per_layer"]),
                      "removed": {str(i): r for i, r in enumerate(plan.heads) if r},
                      "head_size": plan.after["attention_head_size"]},
            "ffn": {"ratio": cfg.ffn, "before": plan.before["intermediate_per_layer"],
                    "after": plan.after["intermediate_per_layer"],
                    "total_before": sum(plan.before["intermediate_per_layer"]),
                    "total_after": sum(plan.after["intermediate_per_layer"])},
            "parameters": {"before": params_before, "after": params_after, "removed": params_before - params_after,
                           "reduction": round(1 - params_after / params_before, 6),
                           "encoder_before": encoder_before, "encoder_after": encoder_parameters(model),
                           "encoder_reduction": round(1 - encoder_parameters(model) / encoder_before, 6)},
            "file_size_bytes": {"before": size_before, "after": None},
            "accuracy": {"before": _accuracies(before_metrics), "after_prune": _accuracies(after_metrics),
                         "after_recovery": _accuracies(recovered_metrics) if recovered_metrics else None},
            "metrics": {"before": before_metrics, "after_prune": after_metrics, "after_recovery": recovered_metrics},
            "recovery": recovery,
        }
        meta: dict[str, Any] = {
            "stage": "prune",
            "kind": "pytorch",
            "loader": loader,
            "model_type": model.config.model_type,
            "parameters": params_after,
            "max_length": cfg.max_length,
            "parent": {"path": str(source.resolve()), "stage": parent_meta.get("stage"),
                       "weights_sha256": parent_meta.get("weights_sha256") or weights_sha256(source),
                       "parameters": params_before},
            "pruning": pruning,
            "config": asdict(cfg),
            "data": task.describe(),
            "metrics": final_metrics,
            "timings": timings,
            "notes": notes,
        }
        if loader == LOADER_COMPRESS:
            notes.append("config.json cannot express fewer heads per layer (transformers 5 derives the head size from "
                         "num_attention_heads and dropped pruned_heads); load with compress.modeling.load_classifier "
                         "or compress.prune.load_pruned, not plain from_pretrained")

        def fill(tmp: Path) -> None:
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            pruning["file_size_bytes"]["after"] = folder_size_bytes(tmp)
            meta["weights_sha256"] = weights_sha256(tmp)

        path = write_artifact(out, fill, meta)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _print_summary(path, pruning)
    return path


def kl_divergence(reference_logits: np.ndarray, logits: np.ndarray) -> float:
    """Mean KL(reference || model) of the softmax outputs, in nats.

    Accuracy on an easy task can stay flat while pruning wrecks the model's confidence; this says
    how far the pruned (and the recovered) model's predictions moved from the unpruned model's.
    """
    def log_softmax(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        x = x - x.max(axis=-1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))

    ref, mod = log_softmax(reference_logits), log_softmax(logits)
    return float(np.mean(np.sum(np.exp(ref) * (ref - mod), axis=-1)))


def _accuracies(metrics: dict[str, Any] | None) -> dict[str, float]:
    return {name: m["accuracy"] for name, m in (metrics or {}).items()}


def _batches(train_ds, pad_id: int, batch_size: int, count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` padded batches of training rows (a seeded sample, so both labels appear early)."""
    cols = [c for c in ("input_ids", "attention_mask", "token_type_ids", "label") if c in train_ds.column_names]
    rows = train_ds.select_columns(cols)
    size = max(2, batch_size)  # the traced example takes two rows, one padded
    order = np.random.default_rng(seed).permutation(len(rows))[:size * count]
    if len(order) < 2:
        raise CompressError("the training split has fewer than 2 rows; pruning needs data to trace and score the model.")
    collate = DynamicPaddingCollator({"": pad_id})
    return [collate([rows[int(i)] for i in order[start:start + size]])
            for start in range(0, len(order), size) if len(order[start:start + size]) >= 2]


def _recover(cfg: PruneConfig, source: Path, model, tokenizer, work: Path):
    """Distil from the unpruned model (or ``--teacher``) into the pruned one with the distill stage.

    The pruned model is saved to a scratch folder and handed to the distillation trainer as
    ``--init pretrained:FOLDER``; the trainer loads it through the same pruning-aware loader.
    Hidden widths match, so the intermediate losses need no projections; attention maps of
    different head counts are compared head-averaged (see ``compress.distill.losses``).
    """
    from compress.distill.trainer import DistillConfig, distill
    from compress.modeling import load_classifier
    from students.factory import StudentSpec

    pruned_dir = work / "pruned"
    model.save_pretrained(pruned_dir, safe_serialization=True)
    tokenizer.save_pretrained(pruned_dir)
    teacher = cfg.teacher or str(source)
    config = model.config
    dcfg = DistillConfig(
        teacher=teacher, data=cfg.data,
        student=StudentSpec(f"{config.num_hidden_layers}x{config.hidden_size}", f"pretrained:{pruned_dir}"),
        train=replace(cfg.train, epochs=float(cfg.recover_epochs)), temperature=cfg.temperature,
        kd_loss="soft_ce", alpha_kd=cfg.alpha_kd, alpha_hard=cfg.alpha_hard, intermediate=cfg.intermediate,
        max_length=cfg.max_length, allow_pickle=cfg.allow_pickle)
    recovered_dir = distill(dcfg, work / "recovered")
    recovered, _, _ = load_classifier(recovered_dir)
    meta = read_meta(recovered_dir) or {}
    return recovered, {
        "epochs": cfg.recover_epochs,
        "teacher": str(Path(teacher).resolve()) if Path(teacher).exists() else teacher,
        "teacher_weights_sha256": (meta.get("parent") or {}).get("teacher_weights_sha256"),
        "distillation": meta.get("distillation"),
        "training": meta.get("training"),
        "notes": meta.get("notes"),
    }


def _print_summary(path: Path, pruning: dict[str, Any]) -> None:
    acc = pruning["accuracy"]
    split = "test" if "test" in acc["before"] else next(iter(acc["before"]), None)
    p = pruning["parameters"]
    line = (f"prune: {path} ({p['before']:,} -> {p['after']:,} parameters, -{100 * p['reduction']:.1f}%; "
            f"loader {pruning['loader']})")
    if split:
        line += f"; {split} accuracy {acc['before'][split]:.4f} -> {acc['after_prune'][split]:.4f} after pruning"
        if acc["after_recovery"]:
            line += f" -> {acc['after_recovery'][split]:.4f} after recovery"
    print(line)
