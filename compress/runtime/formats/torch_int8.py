"""The torch-int8 weight format: PyTorch dynamic-INT8 Linear layers in safetensors, without pickle.

PyTorch-quantized models cannot be exported to ONNX (pytorch #123555), so ``torch-dynamic``
quantization is a CPU runtime of its own. Its weights are saved as int8 tensors + scales in
``model_int8.safetensors`` (:func:`save_torch_int8`) and reloaded by rebuilding the fp32 model from
``config.json`` (shrunk to its pruned shapes when it was pruned), quantizing it the same way and
loading the tensors back (:func:`load_torch_int8`). The quantize stage writes this format; the
runtime reads it; neither needs the other.

**Deprecated upstream, kept on purpose.** The kernels behind this format are
``torch.ao.quantization.quantize_dynamic`` and quantized-tensor creation
(``torch._make_per_tensor_quantized_tensor``), which torch 2.13 warns "will be removed in a
future PyTorch release" (pytorch/ao #2259). The supported successor, torchao 0.18.0's
``quantize_(model, Int8DynamicActivationInt8WeightConfig())``, was measured against this path on a
6L/384 BERT at sequence 128, 2 threads, interleaved in one process on an AMD EPYC Zen 3 (AVX2 + FMA,
no AVX-512/VNNI), a shared machine: about 30x slower at batch 1, eager and with ``torch.compile``
alike (its ``torch._int_mm`` has no fast kernel on that CPU), with a first call of minutes
(``python -m tools.studies.torch_int8_probe`` reproduces it; the numbers are in the docs). So
``torch-int8`` stays on this path. ``tests/unit/compress/test_torch_int8_api.py`` fails, naming what to do,
the day torch drops the API: then measure torchao again on the CPUs served (or drop the kind and
use ``onnx-int8`` / ``openvino-int8``, which never depended on it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from compress.core.errors import CompressError
from compress.runtime.formats.pruned import apply_pruned_shapes, pruning_spec
from compress.core.quiet import quiet_torch_ao
from compress.core.artifact import SUPPORTED_MODEL_TYPES
from compress.core.quiet import quiet_transformers

#: The weights file of a ``torch-int8`` artifact.
TORCH_INT8_FILE = "model_int8.safetensors"
TORCH_INT8_FORMAT = "bert-compress-torch-int8"
TORCH_INT8_VERSION = "1"


def dynamic_linear_type():
    """torch's dynamically quantized Linear class (what ``quantize_dynamic`` puts in place of ``nn.Linear``)."""
    from torch.ao.nn.quantized.dynamic import Linear

    return Linear


def save_torch_int8(qmodel, folder: str | os.PathLike) -> Path:
    """Write a dynamically quantized model as ``model_int8.safetensors`` (no pickle anywhere).

    Each quantized Linear is stored as its int8 weight, its scales and zero points (per tensor or
    per channel) and its fp32 bias; everything else (embeddings, LayerNorms, excluded Linears) as
    in ``state_dict``. The header lists the quantized modules and their scheme, so the file says
    how to rebuild the model without any code from the writer.
    """
    import torch
    from safetensors.torch import save_file

    dynamic_linear = dynamic_linear_type()
    tensors: dict[str, Any] = {}
    spec: dict[str, dict[str, Any]] = {}
    for name, module in qmodel.named_modules():
        if not isinstance(module, dynamic_linear):
            continue
        weight, bias = module._weight_bias()
        scheme = weight.qscheme()
        tensors[f"{name}.weight.int8"] = weight.int_repr().contiguous()
        if scheme in (torch.per_tensor_affine, torch.per_tensor_symmetric):
            tensors[f"{name}.weight.scale"] = torch.tensor([weight.q_scale()], dtype=torch.float64)
            tensors[f"{name}.weight.zero_point"] = torch.tensor([weight.q_zero_point()], dtype=torch.int64)
            entry: dict[str, Any] = {"qscheme": "per_tensor"}
        elif scheme in (torch.per_channel_affine, torch.per_channel_symmetric):
            tensors[f"{name}.weight.scale"] = weight.q_per_channel_scales().to(torch.float64).contiguous()
            tensors[f"{name}.weight.zero_point"] = weight.q_per_channel_zero_points().to(torch.int64).contiguous()
            entry = {"qscheme": "per_channel", "axis": int(weight.q_per_channel_axis())}
        else:
            raise CompressError(f"module {name}: unsupported quantization scheme {scheme}; use per-tensor or per-channel.")
        if bias is not None:
            tensors[f"{name}.bias"] = bias.detach().contiguous().clone()
        spec[name] = entry
    if not spec:
        raise CompressError("the model has no dynamically quantized Linear modules; nothing INT8 to save.")
    prefixes = tuple(f"{name}." for name in spec)
    for key, value in qmodel.state_dict().items():
        if key.startswith(prefixes) or not isinstance(value, torch.Tensor):
            continue
        tensors[key] = value.detach().contiguous().clone()
    path = Path(folder) / TORCH_INT8_FILE
    save_file(tensors, str(path), metadata={"format": TORCH_INT8_FORMAT, "version": TORCH_INT8_VERSION,
                                            "quantized_linear": json.dumps(spec, sort_keys=True)})
    return path


def load_torch_int8(folder: str | os.PathLike):
    """Rebuild a ``torch-int8`` artifact: fp32 model from config, same quantization, tensors loaded back."""
    import torch
    from safetensors import safe_open
    from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic
    from transformers import AutoConfig, AutoModelForSequenceClassification

    path = Path(folder)
    file = path / TORCH_INT8_FILE
    if not file.exists():
        raise CompressError(f"{path} has no {TORCH_INT8_FILE}; it is not a torch-int8 artifact. Produce one with "
                            "bert-compress quantize --method torch-dynamic.")
    if not (path / "config.json").exists():
        raise CompressError(f"{path} has {TORCH_INT8_FILE} but no config.json, which is needed to rebuild the model. "
                            "Quantize the fp32 model again.")
    try:
        with safe_open(str(file), framework="pt") as handle:
            header = handle.metadata() or {}
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    except Exception as exc:
        raise CompressError(f"{file}: unreadable ({exc}). The artifact is damaged; quantize again.") from exc
    if header.get("format") != TORCH_INT8_FORMAT:
        raise CompressError(f"{file}: not a {TORCH_INT8_FORMAT} file (format {header.get('format')!r}). Quantize again.")
    if header.get("version") != TORCH_INT8_VERSION:
        raise CompressError(f"{file}: format version {header.get('version')!r}; this bert-compress reads version "
                            f"{TORCH_INT8_VERSION}. Quantize the fp32 model again with this version.")
    spec: dict[str, dict[str, Any]] = json.loads(header["quantized_linear"])

    config = AutoConfig.from_pretrained(str(path), trust_remote_code=False)
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        raise CompressError(f"{path / 'config.json'}: model_type {config.model_type!r} is not a BERT-family encoder.")
    quantized: dict[str, dict[str, Any]] = {}
    for name in spec:
        try:
            quantized[name] = {part: tensors.pop(f"{name}.weight.{part}") for part in ("int8", "scale", "zero_point")}
        except KeyError as exc:
            raise CompressError(f"{file}: the tensors of quantized module {name} are missing ({exc}). The file is "
                                "damaged; quantize again.") from exc
        quantized[name]["bias"] = tensors.pop(f"{name}.bias", None)

    with quiet_transformers():
        model = AutoModelForSequenceClassification.from_config(config)

    pruned = pruning_spec(config, path / "config.json")
    if pruned:  # a pruned model: shrink the layers to the recorded shapes before loading
        apply_pruned_shapes(model, pruned)
    model.eval()
    # The fp32 parts first, into the fp32 model: quantized modules cannot load a plain tensor dict.
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    expected_missing = {f"{name}.{part}" for name in spec for part in ("weight", "bias")}
    missing = [k for k in missing if k not in expected_missing]
    if missing or unexpected:
        raise CompressError(f"{file}: weights do not match config.json (missing {missing[:5]}, unexpected "
                            f"{list(unexpected)[:5]}). Quantize the fp32 model again.")
    qconfigs = {name: per_channel_dynamic_qconfig if entry["qscheme"] == "per_channel" else default_dynamic_qconfig
                for name, entry in spec.items()}
    dynamic_linear = dynamic_linear_type()
    with quiet_torch_ao():
        qmodel = quantize_dynamic(model, qconfigs, dtype=torch.qint8, inplace=True)
        for name, entry in spec.items():
            try:
                module = qmodel.get_submodule(name)
            except AttributeError:
                module = None
            if not isinstance(module, dynamic_linear):
                raise CompressError(f"{file}: {name} is not a Linear layer in the model config.json describes; the "
                                    "file and config.json do not belong together.")
            parts = quantized[name]
            if entry["qscheme"] == "per_channel":
                weight = torch._make_per_channel_quantized_tensor(parts["int8"], parts["scale"].to(torch.float64),
                                                                  parts["zero_point"].to(torch.int64), int(entry["axis"]))
            else:
                weight = torch._make_per_tensor_quantized_tensor(parts["int8"], float(parts["scale"][0]),
                                                                 int(parts["zero_point"][0]))
            module.set_weight_bias(weight, parts["bias"])
    return qmodel
