"""Small models derived from a tiny one, for tests that need a student with a known disagreement."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def shifted_copy(teacher: Path, out: Path, texts: list[str], quantile: float = 0.25) -> Path:
    """The teacher with its class-1 logit lowered by the ``quantile`` of its margin on ``texts``: a random tiny
    model predicts nearly one class everywhere, and this copy then disagrees with it on about that share of them."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(teacher)
    tok = AutoTokenizer.from_pretrained(teacher)
    with torch.no_grad():
        logits = model(**tok(texts, padding=True, return_tensors="pt")).logits
        margin = (logits[:, 1] - logits[:, 0]).numpy()
        model.classifier.bias[1] -= float(np.quantile(margin, quantile))
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
