"""The two-tower encoder as one torch module: token states -> pooled (and normalised) sentence vector.

:class:`PooledEncoder` wraps a transformers encoder and does sentence-transformers' ``Pooling`` and
``Normalize`` inside ``forward``, so ``torch.onnx.export`` of it puts the pooling and the normalisation in the
graph: the exported model answers with the vector itself, and nothing outside it (the runtime, a server) has
to repeat the pooling. The arithmetic is sentence-transformers' own (mean over the attention mask with the
count clamped at 1e-9; max with padded positions at -1e9; L2 normalisation with eps 1e-12), so a vector equals
``SentenceTransformer.encode``'s for the same weights.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from compress.core.errors import CompressError
from compress.tasks.sentence_embedding.folder import POOLINGS, SentenceConfig, sentence_config


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, mode: str = "mean") -> torch.Tensor:
    """``(batch, hidden)`` from token states ``(batch, sequence, hidden)`` under ``attention_mask`` (1 = token)."""
    if mode == "cls":
        return hidden[:, 0]
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    if mode == "max":
        return hidden.masked_fill(mask == 0, -1e9).max(dim=1).values
    summed = (hidden * mask).sum(dim=1)
    counts = mask.sum(dim=1).clamp(min=1e-9)
    if mode == "mean":
        return summed / counts
    if mode == "mean_sqrt_len":
        return summed / counts.sqrt()
    raise CompressError(f"unknown pooling {mode!r}; the modes are {', '.join(POOLINGS)}.")


class PooledEncoder(torch.nn.Module):
    """``forward(input_ids, attention_mask[, token_type_ids])`` -> the pooled, optionally normalised vector.

    ``token_type_ids`` reaches the encoder only when its ``forward`` takes them (MPNet's does not).
    :meth:`pooled` is the vector before normalisation (what windows of a long text are averaged on).
    """

    def __init__(self, encoder: torch.nn.Module, pooling: str = "mean", normalize: bool = False) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise CompressError(f"unknown pooling {pooling!r}; the modes are {', '.join(POOLINGS)}.")
        self.encoder = encoder
        self.pooling = pooling
        self.normalize = bool(normalize)
        self.takes_token_types = "token_type_ids" in inspect.signature(encoder.forward).parameters

    @property
    def config(self) -> Any:
        """The encoder's transformers config (what the export stage reads for lengths and layer counts)."""
        return self.encoder.config

    @property
    def dimension(self) -> int:
        return int(self.encoder.config.hidden_size)

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The pooled vector, not normalised."""
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None and self.takes_token_types:
            kwargs["token_type_ids"] = token_type_ids
        hidden = self.encoder(**kwargs).last_hidden_state
        return pool(hidden, attention_mask, self.pooling)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        vectors = self.pooled(input_ids, attention_mask, token_type_ids)
        return F.normalize(vectors, p=2, dim=1) if self.normalize else vectors


def load_pooled_encoder(folder: str | Path, builtin: str | None = None,
                        eager: bool = False) -> tuple[PooledEncoder, Any, SentenceConfig]:
    """``(encoder, tokenizer, config)`` of a sentence-transformers folder or a plain encoder folder
    (:func:`compress.tasks.sentence_embedding.folder.sentence_config`). ``eager`` loads the encoder with eager
    attention, which the ONNX export needs (ONNX Runtime fuses its attention pattern)."""
    from transformers import AutoModel, AutoTokenizer

    folder = Path(folder).expanduser()
    config = sentence_config(folder, builtin)
    encoder_dir = folder / config.encoder_path if config.encoder_path else folder
    kwargs = {"attn_implementation": "eager"} if eager else {}
    encoder = AutoModel.from_pretrained(encoder_dir, **kwargs)
    hidden = int(encoder.config.hidden_size)
    if config.dimension is not None and config.dimension != hidden:
        raise CompressError(f"{folder}: the pooling configuration says {config.dimension} dimensions but the encoder "
                            f"has hidden size {hidden}. Restore 1_Pooling/config.json from the model's published "
                            "folder.")
    tokenizer = AutoTokenizer.from_pretrained(encoder_dir)
    return PooledEncoder(encoder, config.pooling, config.normalize).eval(), tokenizer, config


def tokenizer_limit(tokenizer: Any, model: PooledEncoder, config: SentenceConfig | None = None) -> int:
    """The longest input the encoder reads: the trained length (``max_seq_length``) when the folder states one,
    else the tokenizer's limit, and never past the position table (MPNet's counts from ``padding_idx + 1``)."""
    positions = int(getattr(model.config, "max_position_embeddings", 512) or 512)
    offset = int(getattr(model.config, "pad_token_id", 0) or 0) + 1 if model.config.model_type == "mpnet" else 0
    limits = [positions - offset, int(getattr(tokenizer, "model_max_length", positions) or positions)]
    if config is not None and config.max_seq_length:
        limits.append(config.max_seq_length)
    return max(1, min(limits))


@torch.no_grad()
def encode(model: PooledEncoder, tokenizer: Any, texts: Sequence[str], max_length: int, batch_size: int = 32,
           normalize: bool | None = None) -> np.ndarray:
    """``(len(texts), dim)`` float32 vectors, texts cut at ``max_length`` tokens (:mod:`.windows` reads the rest).

    ``normalize`` overrides the model's own setting (``False``: the pooled vector before normalisation).
    """
    model.eval()
    device = next(model.parameters()).device
    unit = model.normalize if normalize is None else normalize
    out = np.zeros((len(texts), model.dimension), dtype=np.float32)
    order = np.argsort([-len(t) for t in texts], kind="stable")  # similar lengths together: less padding
    for start in range(0, len(texts), batch_size):
        rows = order[start:start + batch_size]
        enc = tokenizer([texts[i] for i in rows], padding=True, truncation=True, max_length=max_length,
                        return_tensors="pt").to(device)
        vectors = model.pooled(enc["input_ids"], enc["attention_mask"], enc.get("token_type_ids"))
        if unit:
            vectors = F.normalize(vectors, p=2, dim=1)
        out[rows] = vectors.float().cpu().numpy()
    return out
