"""The ``scoring`` aspect of a sentence encoder (:mod:`compress.tasks.protocol.scoring`), the split scorer so far.

**One split** (quantize, optimize: :class:`EncoderScorer`): the split's scored pairs, each side embedded alone
through ``Predictor.encode``, the pairs' cosines against the gold scores: STS Spearman x100, the primary metric.
A candidate (an INT8 copy) is compared with the model it replaces on the vectors themselves: ``agreement`` is the
mean cosine between the two models' vectors of the same text (the issue's "INT8 checked on the vectors"), and the
record adds the lowest such cosine and, with more than ten texts, neighbour recall@10 of the candidate against the
reference. Text without scores cannot be scored this way (no Spearman to budget): quantize needs pairs here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from compress.errors import CompressError
from compress.quality import Scorer
from compress.tasks.sentence_embedding.metrics import DEFAULT_K, neighbour_recall, sts_scores
from compress.tasks.sentence_embedding.vectors import row_cosines


class EncoderScorer(Scorer):
    """A split of scored pairs: both sides embedded, Spearman of the cosines; agreement is vector cosine."""

    def read(self, data: Any, split: str) -> None:
        if not hasattr(data, "scores"):
            raise CompressError(f"{data.source}: text without similarity scores; scoring a sentence encoder on one "
                                "split needs scored sentence pairs (sentence1, sentence2, score: stsb-captions or "
                                "your own). Give --data with pairs.")
        self.inputs = list(data.texts(split))
        self.gold = np.asarray(data.scores(split), dtype=np.float64)

    def predict(self, predictor: Any, batch_size: int = 32) -> tuple[np.ndarray, np.ndarray]:
        """The vectors of the pairs' first and second sentences, ``(a, b)``, each ``(n, dim)``."""
        n = len(self.inputs)
        vectors = predictor.encode([a for a, _ in self.inputs] + [b for _, b in self.inputs], batch_size=batch_size)
        return vectors[:n], vectors[n:]

    def metrics(self, predictions: Any) -> dict[str, Any]:
        a, b = predictions
        return sts_scores(a, b, self.gold)

    def agreement(self, predictions: Any, reference: Any) -> float:
        """The mean cosine between the candidate's and the reference's vector of each text (1: the same vectors)."""
        return float(_cosines(predictions, reference).mean())

    def compare_more(self, predictions: Any, reference: Any, ref: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
        """The lowest vector cosine to the reference, Pearson beside Spearman, and neighbour recall@10."""
        out: dict[str, Any] = {"min_cosine": float(_cosines(predictions, reference).min()), "pearson": got["pearson"]}
        texts, theirs = np.concatenate(predictions), np.concatenate(reference)
        if len(texts) > DEFAULT_K:
            out["neighbour_recall"] = neighbour_recall(texts, theirs, DEFAULT_K)
        return out


def _cosines(predictions: Any, reference: Any) -> np.ndarray:
    ours, theirs = np.concatenate(predictions), np.concatenate(reference)
    if ours.shape != theirs.shape:
        raise CompressError(f"vectors of width {ours.shape[-1]} against a reference of width {theirs.shape[-1]}: a "
                            "compressed copy is compared with the model it was made from, which has its width.")
    return row_cosines(ours, theirs)


def split_scorer(data: Any, split: str = "validation") -> EncoderScorer:
    """The scorer of one split of scored pairs (:class:`EncoderScorer`)."""
    return EncoderScorer(data, split)


def who() -> str:
    """Who a sentence encoder's results belong to, in messages."""
    return "a sentence encoder"


def labels_per_text() -> bool:
    """An encoder answers a vector, not a label: ``bench --load-clients`` and ``--traffic-file`` do not apply."""
    return False
