"""The pruned-shape format: per-layer head and FFN counts in ``config.json``, and the loader.

transformers 5 removed ``prune_heads``/``config.pruned_heads`` and a ``BertConfig`` derives the head
size as ``hidden_size / num_attention_heads``, so it cannot describe a layer with fewer heads of
the original size. When only FFN neurons were removed, in equal numbers in every layer,
``config.intermediate_size`` describes the result and plain ``from_pretrained`` reloads it
(``"loader": "transformers"``). Otherwise the per-layer shapes are written into ``config.json``
under :data:`PRUNING_KEY` and :func:`load_pruned` builds the original architecture, shrinks each
layer to the recorded shapes (plain torch: the Linear layers are sliced, no torch-pruning) and loads
the weights strictly (``"loader": "compress"``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from compress.core.errors import CompressError
from compress.runtime.formats.layouts import layer_parts, structure, sync_attention_attributes
from compress.core.quiet import quiet_transformers
from compress.tasks import task_for_architectures

#: The ``config.json`` key holding the per-layer shapes of a pruned model.
PRUNING_KEY = "bert_compress_pruning"
PRUNING_FORMAT_VERSION = 1
LOADER_TRANSFORMERS = "transformers"
LOADER_COMPRESS = "compress"


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
        "loader": "compress.runtime.formats.pruned.load_pruned",
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
    loaded. Each Linear keeps its identity (and its place in the parent module); only its weight,
    bias and feature counts are cut, with plain torch, so loading needs no torch-pruning.
    """
    import torch

    d = int(spec["attention_head_size"])
    with torch.no_grad():
        for parts, heads, width in zip(layer_parts(model), spec["heads_per_layer"], spec["intermediate_per_layer"]):
            keep = heads * d
            for path in (parts.query, parts.key, parts.value):
                keep_outputs(model.get_submodule(path), keep)
            keep_inputs(model.get_submodule(parts.attn_out), keep)
            keep_outputs(model.get_submodule(parts.ffn_in), width)
            keep_inputs(model.get_submodule(parts.ffn_out), width)
    sync_attention_attributes(model)


def keep_outputs(linear, n: int) -> None:
    """Cut an ``nn.Linear`` to its first ``n`` outputs (weight rows and bias entries), in place."""
    import torch

    if linear.out_features <= n:
        return
    linear.weight = torch.nn.Parameter(linear.weight.detach()[:n].clone(), requires_grad=linear.weight.requires_grad)
    if linear.bias is not None:
        linear.bias = torch.nn.Parameter(linear.bias.detach()[:n].clone(), requires_grad=linear.bias.requires_grad)
    linear.out_features = n


def keep_inputs(linear, n: int) -> None:
    """Cut an ``nn.Linear`` to its first ``n`` inputs (weight columns), in place; the bias is per output."""
    import torch

    if linear.in_features <= n:
        return
    linear.weight = torch.nn.Parameter(linear.weight.detach()[:, :n].clone(), requires_grad=linear.weight.requires_grad)
    linear.in_features = n


def load_pruned(folder: str | os.PathLike, config, eager_attention: bool = False):
    """Load a classifier or tagger whose ``config.json`` carries :data:`PRUNING_KEY` (``"loader": "compress"``).

    Builds the architecture the config describes, shrinks each layer to the recorded head and FFN
    counts, then loads ``model.safetensors`` strictly: every tensor must be present with its
    recorded shape, so a folder that does not match its config is refused, never half-loaded.
    """
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification

    path = Path(folder)
    spec = pruning_spec(config, path / "config.json")
    if spec is None:
        raise CompressError(f"{path / 'config.json'} has no {PRUNING_KEY}: load it with from_pretrained.")
    kwargs = {"attn_implementation": "eager"} if eager_attention else {}

    # The head the config names (a tagger's ...ForTokenClassification has no pooler); a classifier otherwise.
    head = task_for_architectures(getattr(config, "architectures", None))
    auto = head.model_class() if head is not None else AutoModelForSequenceClassification
    with quiet_transformers():
        model = auto.from_config(config, **kwargs)
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
