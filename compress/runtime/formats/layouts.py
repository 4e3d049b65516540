"""Where the prunable parts of a transformer layer live, per architecture family.

The pruner (which changes modules in place) and the pruned-model loader (which builds a fresh
model and shrinks it) both locate a layer's attention and FFN projections through this one table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from compress.core.errors import CompressError


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


def sync_attention_attributes(model) -> None:
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
