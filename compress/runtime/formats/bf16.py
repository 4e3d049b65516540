"""The torch-bf16 format: a ``save_pretrained`` folder whose floating weights are all bfloat16.

Why bf16 weights rather than fp32 weights under autocast: on CPUs with AMX (and on GPUs) PyTorch's
bf16 matmuls run several times faster than fp32 (docs/design.md, "Known traps": 3.5x at batch 32 for the 6L/384
student), and with the weights already in bf16 no cast runs on each call; the file is half the
fp32 size. LayerNorm and softmax kernels accumulate in fp32 internally even on bf16 tensors.

The layout is the ordinary one (``config.json`` with ``"dtype": "bfloat16"``, ``model.safetensors``,
the tokenizer), so plain ``AutoModelForSequenceClassification.from_pretrained`` reloads it (in
bf16: transformers 5 keeps the checkpoint's dtype) and nothing is ever unpickled. A pruned model
keeps its per-layer shapes in ``config.json`` as the fp32 one does, and reloads through the
project's loader. :func:`is_bf16_weights` reads only the safetensors header, so a folder without
``compress.json`` is still recognised as bf16 without loading torch.
"""

from __future__ import annotations

import json
import os
import struct
from collections import Counter
from pathlib import Path

from compress.core.errors import CompressError
from compress.runtime.modeling import load_classifier

#: The weights file of a ``torch-bf16`` artifact (the ``save_pretrained`` name).
BF16_FILE = "model.safetensors"
#: safetensors dtype names of floating-point tensors.
_FLOAT_DTYPES = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}
#: A header larger than this is not a real safetensors header (the format caps it at 100 MB).
_MAX_HEADER = 100 * 1024 * 1024


def safetensors_dtypes(file: str | os.PathLike) -> Counter:
    """How many tensors of each dtype a safetensors file holds, read from its JSON header only.

    The format starts with an 8-byte little-endian header length and the JSON header naming each
    tensor's dtype and shape: reading it costs microseconds and needs neither torch nor the weights.
    """
    path = Path(file)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(8)
            if len(raw) != 8:
                raise ValueError("shorter than a safetensors header")
            (length,) = struct.unpack("<Q", raw)
            if not 0 < length <= _MAX_HEADER:
                raise ValueError(f"header length {length} is impossible")
            header = json.loads(handle.read(length))
    except (OSError, ValueError) as exc:
        raise CompressError(f"{path}: not a readable safetensors file ({exc}). The artifact is damaged; produce it "
                            "again.") from exc
    return Counter(v.get("dtype") for k, v in header.items() if k != "__metadata__" and isinstance(v, dict))


def is_bf16_weights(folder: str | os.PathLike) -> bool:
    """Whether the folder's ``model.safetensors`` holds floating tensors and every one of them is bf16."""
    file = Path(folder) / BF16_FILE
    if not file.exists():
        return False
    floats = {d: n for d, n in safetensors_dtypes(file).items() if d in _FLOAT_DTYPES}
    return bool(floats) and set(floats) == {"BF16"}


def save_bf16(model, folder: str | os.PathLike) -> Path:
    """Write ``model`` (any float dtype; it is cast in place) as bf16 safetensors in ``save_pretrained`` layout.

    Returns the weights file. The caller writes the tokenizer beside it.
    """
    import torch

    model.to(torch.bfloat16)
    model.config.dtype = "bfloat16"
    model.save_pretrained(str(folder), safe_serialization=True)
    file = Path(folder) / BF16_FILE
    if not is_bf16_weights(folder):
        raise CompressError(f"{file}: after casting, the weights are not all bfloat16 "
                            f"({dict(safetensors_dtypes(file))}); nothing bf16 was written.")
    return file


def load_bf16(folder: str | os.PathLike, allow_pickle: bool = False):
    """Reload a ``torch-bf16`` artifact as a bf16 model in eval mode; returns ``(model, tokenizer)``.

    The project's loader handles both the plain and the head-pruned layout; a loader that rebuilt
    the model in fp32 and copied the bf16 tensors in is cast back (losslessly: every value is a
    bf16 number).
    """
    import torch

    path = Path(folder)
    if not is_bf16_weights(path):
        raise CompressError(f"{path} is recorded as torch-bf16 but {BF16_FILE} is missing or not all bfloat16. "
                            "Produce it again with bert-compress quantize --method torch-bf16.")
    model, tokenizer, has_head = load_classifier(path, allow_pickle=allow_pickle)
    if not has_head:
        raise CompressError(f"{path}: the model has no trained classification head, so its predictions would be "
                            "random. Convert a fine-tuned classifier.")
    model.to(torch.bfloat16)
    model.eval()
    return model, tokenizer
