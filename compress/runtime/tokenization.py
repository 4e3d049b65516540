"""An artifact's tokenizer read with the ``tokenizers`` library alone (no transformers).

Serving an ONNX artifact must not need the training stack. transformers' fast tokenizers are a
thin layer over a ``tokenizers.Tokenizer`` saved as ``tokenizer.json``: for the calls this toolkit
makes (``tokenizer(texts[, pairs], truncation=True, max_length=N[, padding="max_length"])``) they set
the backend's truncation (``longest_first``, the configured side) and padding, then call
``encode_batch``. :class:`ArtifactTokenizer` does exactly that from ``tokenizer.json`` and the
settings ``save_pretrained`` writes to ``tokenizer_config.json`` (pad token, model_max_length,
truncation and padding side), so both paths give the same ids (tested against transformers on
single texts and pairs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

from compress.core.errors import CompressError

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
SPECIAL_TOKENS = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token", "bos_token", "eos_token")
#: Tokenizer classes whose models take no ``token_type_ids`` (transformers' ``model_input_names``).
NO_TOKEN_TYPES = ("MPNet", "Roberta", "XLMRoberta", "DistilBert", "Camembert")
#: transformers' stand-in for "no limit" (``VERY_LARGE_INTEGER``) when a config has no model_max_length.
NO_LIMIT = int(1e30)


def _token_text(value: Any) -> str | None:
    """A special token as saved: a string, or an ``AddedToken`` dict with its ``content``."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


class ArtifactTokenizer:
    """The subset of a transformers fast tokenizer's interface that prediction uses."""

    def __init__(self, backend: Any, settings: dict[str, Any], path: Path):
        self._backend = backend
        self.path = path
        for name in SPECIAL_TOKENS:  # pad_token / pad_token_id, sep_token / sep_token_id, ...
            token = _token_text(settings.get(name))
            setattr(self, name, token)
            setattr(self, f"{name}_id", backend.token_to_id(token) if token is not None else None)
        self.pad_token_type_id = 0
        limit = settings.get("model_max_length")
        self.model_max_length = int(limit) if isinstance(limit, (int, float)) and limit > 0 else NO_LIMIT
        cls_name = str(settings.get("tokenizer_class") or "")
        types = not cls_name.startswith(NO_TOKEN_TYPES)
        self.model_input_names = ["input_ids", "token_type_ids", "attention_mask"] if types else ["input_ids",
                                                                                                   "attention_mask"]
        self.truncation_side = settings.get("truncation_side") or "right"
        self.padding_side = settings.get("padding_side") or "right"

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> "ArtifactTokenizer":
        """Read ``tokenizer.json`` and the saved settings; a clear error when the folder has none."""
        from tokenizers import Tokenizer

        path = Path(folder)
        file = path / TOKENIZER_FILE
        if not file.exists():
            raise CompressError(f"{path} has no {TOKENIZER_FILE}, which serving without transformers needs. Save the "
                                "artifact's tokenizer as a fast tokenizer (AutoTokenizer.from_pretrained(DIR)."
                                "save_pretrained(DIR) writes it), or install the full toolkit.")
        try:
            backend = Tokenizer.from_file(str(file))
        except Exception as exc:
            raise CompressError(f"{file}: the tokenizer could not be read ({exc}). Re-save it with save_pretrained().") from exc
        settings: dict[str, Any] = {}
        for name in (SPECIAL_TOKENS_FILE, CONFIG_FILE):  # the config's values win, as in transformers
            try:
                data = json.loads((path / name).read_text(encoding="utf-8")) if (path / name).exists() else {}
            except ValueError as exc:
                raise CompressError(f"{path / name}: not valid JSON ({exc}). Re-save the tokenizer.") from exc
            settings.update({k: v for k, v in data.items() if v is not None})
        backend.no_truncation()
        backend.no_padding()
        return cls(backend, settings, path)

    @property
    def backend_tokenizer(self) -> Any:
        """The ``tokenizers.Tokenizer`` (as on a transformers fast tokenizer): :mod:`compress.core.windows` cuts
        long texts with its overflow support."""
        return self._backend

    def __len__(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    def __call__(self, text: str | Sequence[str], text_pair: str | Sequence[str] | None = None, *,
                 truncation: bool = False, max_length: int | None = None, padding: bool | str = False,
                 return_tensors: str | None = None) -> dict[str, Any]:
        """Encode like ``transformers``' ``tokenizer(text, text_pair, truncation=, max_length=, padding=)``.

        ``padding``: ``False`` (none), ``"max_length"`` (to ``max_length``) or ``True``/``"longest"``.
        Returns lists (one per text) for a batch, a single row for a single text; ``return_tensors``
        ``"np"`` (or ``"pt"``, where torch is installed) gives 2-D int64 arrays of a padded batch.
        """
        single = isinstance(text, str)
        firsts = [text] if single else list(text)
        seconds = None if text_pair is None else ([text_pair] if isinstance(text_pair, str) else list(text_pair))
        if seconds is not None and len(seconds) != len(firsts):
            raise CompressError(f"{len(firsts)} texts but {len(seconds)} second texts; give one pair per text.")
        backend = self._backend
        if truncation:
            limit = max_length if max_length is not None else min(self.model_max_length, NO_LIMIT)
            backend.enable_truncation(limit, stride=0, strategy="longest_first", direction=self.truncation_side)
        else:
            backend.no_truncation()
        if padding in (True, "longest", "max_length"):
            if self.pad_token_id is None:
                raise CompressError(f"{self.path}: the tokenizer has no pad token, so it cannot pad a batch.")
            length = max_length if padding == "max_length" else None
            backend.enable_padding(direction=self.padding_side, pad_id=self.pad_token_id, pad_type_id=0,
                                   pad_token=self.pad_token, length=length)
        else:
            backend.no_padding()
        inputs: list[Any] = list(zip(firsts, seconds)) if seconds is not None else firsts
        encodings = backend.encode_batch(inputs, add_special_tokens=True)
        out = {"input_ids": [e.ids for e in encodings], "token_type_ids": [e.type_ids for e in encodings],
               "attention_mask": [e.attention_mask for e in encodings]}
        out = {k: v for k, v in out.items() if k in self.model_input_names}
        if return_tensors is not None:
            return self._tensors(out, return_tensors)
        return {k: v[0] for k, v in out.items()} if single else out

    def _tensors(self, out: dict[str, list[list[int]]], kind: str) -> dict[str, Any]:
        import numpy as np

        if kind not in ("np", "pt"):
            raise CompressError(f"return_tensors must be 'np' or 'pt', got {kind!r}")
        if len({len(row) for row in out["input_ids"]}) > 1:
            raise CompressError("rows of different lengths cannot form one tensor; pass padding=True")
        arrays = {k: np.asarray(v, dtype=np.int64) for k, v in out.items()}
        if kind == "np":
            return arrays
        import torch

        return {k: torch.from_numpy(v) for k, v in arrays.items()}


class ArtifactConfig:
    """A model's ``config.json`` read with ``json``: attribute access, as on a transformers config."""

    def __init__(self, values: dict[str, Any]):
        self.__dict__.update(values)
        id2label = values.get("id2label")
        if isinstance(id2label, dict) and id2label:
            self.id2label = {int(k): v for k, v in id2label.items()}
        else:
            n = int(values.get("num_labels", 2))
            self.id2label = {i: f"LABEL_{i}" for i in range(n)}
        self.num_labels = len(self.id2label)

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> "ArtifactConfig":
        file = Path(folder) / "config.json"
        try:
            values = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CompressError(f"{file}: unreadable ({exc}). Export the model again with bert-compress export.") from exc
        if not isinstance(values, dict):
            raise CompressError(f"{file}: expected a JSON object, got {type(values).__name__}. Export the model again.")
        return cls(values)
