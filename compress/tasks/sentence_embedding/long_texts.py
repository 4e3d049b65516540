"""A text longer than the encoder's window: read in overlapping windows, one vector from all of them.

Each window (:func:`compress.core.windows.encode_windows`, ``stride`` tokens shared between neighbours) goes through the
encoder as any input does, pooling and normalisation included; the text's vector is the mean of its windows'
vectors weighted by their tokens, normalised again when the model normalises
(:func:`compress.tasks.sentence_embedding.vectors.pool_window_vectors`). That uses only what the model outputs,
so an exported graph (pooling and normalisation inside it) gives the same long-text vector as PyTorch. A text
that fits in one window gets exactly the vector :func:`compress.tasks.sentence_embedding.pooling.encode` gives it.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from compress.tasks.sentence_embedding.pooling import PooledEncoder
from compress.tasks.sentence_embedding.vectors import pool_window_vectors
from compress.core.windows import encode_windows, window_stride


@torch.no_grad()
def encode_long(model: PooledEncoder, tokenizer: Any, texts: Sequence[str], max_length: int,
                stride: int | None = None, batch_size: int = 32) -> np.ndarray:
    """``(len(texts), dim)`` float32 vectors of texts of any length (``stride``: the windows' overlap, a quarter
    of ``max_length`` by default)."""
    model.eval()
    windows = encode_windows(tokenizer, list(texts), max_length=max_length, stride=window_stride(stride, max_length))
    pooled = np.zeros((len(windows), model.dimension), dtype=np.float64)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    for rows, arrays in windows.batches(batch_size, pad_id, model.takes_token_types):
        tensors = {name: torch.from_numpy(value) for name, value in arrays.items()}
        pooled[rows] = model(tensors["input_ids"], tensors["attention_mask"],
                             tensors.get("token_type_ids")).double().numpy()
    tokens = np.array([len(ids) for ids in windows.input_ids])
    return pool_window_vectors(pooled, windows.sample, tokens, windows.n_samples, model.normalize)
