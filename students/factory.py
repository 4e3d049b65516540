"""Build a student classifier of a given shape and initialise it.

Initialisations:

- ``random``: the teacher's architecture family at the student's shape, fresh weights, the
  teacher's tokenizer (so vocabulary and position limits are the teacher's).
- ``teacher-layers``: like ``random``, then the embeddings and the teacher layers chosen by the
  layer map are copied in (DistilBERT's recipe); needs the student's width to equal the teacher's.
- ``pretrained:PATH`` / ``minilm``: a compact pretrained encoder of the student's width (MiniLM for
  a 384-wide student), with a fresh classifier head and its own tokenizer; when it is deeper than
  the preset, the layers chosen by a uniform map are kept.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from students.layer_map import parse_layer_map, uniform_layer_map
from compress.config import StudentSpec
from compress.core.errors import CompressError
from students.presets import PRESETS, StudentShape, parse_shape
from compress.core.assets import resolve_model
from compress.runtime.formats.pruned import PRUNING_KEY, patch_config
from compress.runtime.modeling import load_classifier
from compress.tasks import get_task
from students.presets import estimate_parameters

_LAYER_KEY = re.compile(r"^(.*?\.layer\.)(\d+)(\..*)$")


def _shape_config(base_config, shape: StudentShape, num_labels: int, label_names: list[str]):
    config = copy.deepcopy(base_config)
    if config.model_type == "distilbert":
        config.n_layers, config.dim, config.n_heads, config.hidden_dim = shape.layers, shape.hidden, shape.heads, shape.ffn
    else:
        config.num_hidden_layers = shape.layers
        config.hidden_size = shape.hidden
        config.num_attention_heads = shape.heads
        config.intermediate_size = shape.ffn
    config.num_labels = num_labels
    config.id2label = dict(enumerate(label_names))
    config.label2id = {n: i for i, n in enumerate(label_names)}
    config.architectures = None
    return config


def teacher_shape(config) -> StudentShape:
    """The shape of a model config (BERT-style or DistilBERT-style attribute names)."""
    if config.model_type == "distilbert":
        return StudentShape(config.n_layers, config.dim, config.n_heads, config.hidden_dim)
    return StudentShape(config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
                        config.intermediate_size)


def build_student(spec: StudentSpec, teacher_model, teacher_tokenizer, label_names: list[str],
                  layer_map: str | None = "uniform", seed: int = 0, eager_attention: bool = False,
                  task: str = "sequence-classification"):
    """Create and initialise a student classifier (a tagger for ``task="token-classification"``).

    Returns ``(model, tokenizer, info)`` where ``info`` records shape, init and copied layers.
    """
    import torch

    model_class = get_task(task).model_class()

    spec.validate()
    shape = parse_shape(spec.shape)
    t_shape = teacher_shape(teacher_model.config)
    num_labels = len(label_names)
    info: dict[str, Any] = {"preset": spec.shape, "init": spec.init}
    torch.manual_seed(seed)
    attn = {"attn_implementation": "eager"} if eager_attention else {}

    if spec.init == "teacher-layers" and spec.shape not in PRESETS and shape.hidden == t_shape.hidden:
        # LxH at the teacher's width: heads and FFN follow the teacher, so its layers can be copied.
        shape = StudentShape(shape.layers, shape.hidden, t_shape.heads, t_shape.ffn, shape.name)
    if spec.init in ("random", "teacher-layers"):
        if shape.hidden > t_shape.hidden or shape.layers > t_shape.layers:
            raise CompressError(
                f"--student {spec.shape} ({shape.layers} layers, hidden {shape.hidden}) is larger than the teacher "
                f"({t_shape.layers} layers, hidden {t_shape.hidden}). Choose a smaller preset, e.g. "
                f"--student {max(1, t_shape.layers // 2)}x{t_shape.hidden}."
            )
        if shape.hidden % shape.heads:
            raise CompressError(f"--student {spec.shape}: hidden {shape.hidden} does not divide into {shape.heads} heads")
        config = _shape_config(teacher_model.config, shape, num_labels, label_names)
        model = model_class.from_config(config, **attn)
        tokenizer = teacher_tokenizer
        if spec.init == "teacher-layers":
            if (shape.hidden, shape.heads, shape.ffn) != (t_shape.hidden, t_shape.heads, t_shape.ffn):
                raise CompressError(
                    f"--init teacher-layers copies teacher layers, so the student must be as wide as the teacher "
                    f"(hidden {t_shape.hidden}, {t_shape.heads} heads, FFN {t_shape.ffn}); --student {spec.shape} is "
                    f"hidden {shape.hidden}. Use --student {shape.layers}x{t_shape.hidden}, or --init random/minilm."
                )
            pairs = parse_layer_map(layer_map, t_shape.layers, shape.layers)
            copied = copy_teacher_layers(teacher_model, model, pairs)
            info["copied_teacher_layers"] = {str(s): t for s, t in pairs.items()}
            info["copied_tensors"] = copied
    else:
        source = "minilm" if spec.init == "minilm" else spec.init.split(":", 1)[1]
        path = resolve_model(source)
        model, tokenizer, _ = load_classifier(path, num_labels, label_names, eager_attention=eager_attention, task=task)
        p_shape = teacher_shape(model.config)
        if p_shape.hidden != shape.hidden:
            raise CompressError(
                f"--init {spec.init}: {path} has hidden size {p_shape.hidden} but --student {spec.shape} asks for "
                f"{shape.hidden}. Use --student {shape.layers}x{p_shape.hidden}, or --init random."
            )
        if p_shape.layers < shape.layers:
            raise CompressError(f"--init {spec.init}: {path} has {p_shape.layers} layers, fewer than the {shape.layers} "
                                f"of --student {spec.shape}. Choose a student of at most {p_shape.layers} layers.")
        if p_shape.layers > shape.layers:
            keep = list(uniform_layer_map(p_shape.layers, shape.layers).values())
            model = keep_layers(model, keep)
            info["kept_pretrained_layers"] = keep
        info["pretrained_from"] = str(path)
        # Teacher and student share a label space: same names, same order.
        model.config.id2label = dict(enumerate(label_names))
        model.config.label2id = {n: i for i, n in enumerate(label_names)}
    info["shape"] = teacher_shape(model.config).to_dict()
    return model, tokenizer, info


def copy_teacher_layers(teacher_model, student_model, pairs: dict[int, int]) -> int:
    """Copy embeddings, the paired layers (student ``s`` gets teacher ``pairs[s]``) and any other
    tensor of matching name and shape (pooler, classifier, MPNet's relative attention bias)."""
    import torch

    t_state = teacher_model.state_dict()
    s_state = student_model.state_dict()
    copied = 0
    with torch.no_grad():
        for key, tensor in s_state.items():
            match = _LAYER_KEY.match(key)
            if match:
                s_layer = int(match.group(2))
                if s_layer not in pairs:
                    continue
                source = f"{match.group(1)}{pairs[s_layer]}{match.group(3)}"
            else:
                source = key
            if source in t_state and t_state[source].shape == tensor.shape:
                tensor.copy_(t_state[source])
                copied += 1
    return copied


def keep_layers(model, keep: list[int]):
    """Drop every transformer layer not in ``keep`` (in place), updating the config's depth."""
    import torch

    encoder = getattr(model.base_model, "encoder", None) or getattr(model.base_model, "transformer", None)
    if encoder is None or not hasattr(encoder, "layer"):
        raise CompressError(f"cannot select layers of a {type(model).__name__}: no encoder.layer list")
    encoder.layer = torch.nn.ModuleList([encoder.layer[i] for i in keep])
    if model.config.model_type == "distilbert":
        model.config.n_layers = len(keep)
    else:
        model.config.num_hidden_layers = len(keep)
    for i, layer in enumerate(encoder.layer):  # keep per-layer indices (used by caches) consistent
        attn = getattr(layer, "attention", None)
        inner = getattr(attn, "self", attn)
        if inner is not None and hasattr(inner, "layer_idx"):
            inner.layer_idx = i

    if getattr(model.config, PRUNING_KEY, None):  # a pruned model: its per-layer shapes must follow the kept layers
        patch_config(model)
    return model


def describe_presets(vocab_size: int = 30522, num_labels: int = 2) -> list[dict[str, Any]]:
    """Rows for ``bert-compress students``: name, shape and parameter count (BERT vocabulary)."""

    return [{**shape.to_dict(), "parameters": estimate_parameters(shape, vocab_size, num_labels=num_labels)}
            for shape in PRESETS.values()]
