"""How good a sentence encoder is: against gold similarity scores (STS), and against the teacher without labels.

- **STS**: Spearman (and Pearson) correlation of ``cos(a_i, b_i)`` with the gold scores of the pairs, x100, as
  the STS Benchmark is reported (SentEval, MTEB).
- **Neighbour recall@k**: for each held-out text of the user's own domain, the share of its ``k`` nearest
  neighbours under the teacher (cosine, the text itself left out) that the student also ranks among its ``k``
  nearest. It needs no label, only the user's text, and says what a retrieval system cares about: whether the
  small encoder returns what the big one would. The mean over texts is reported; the per-text values feed the
  paired bootstrap (:func:`recall_difference_interval`).
- **Cosine agreement**: the mean cosine between the student's and the teacher's vector of the same text, only
  where the two have one width (an INT8 copy against its fp32 parent; a student distilled without a projection).

numpy only (the benchmark and the gate import it; ``compress.core.stats`` is imported where an interval is drawn).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from compress.core.errors import CompressError
from compress.tasks.sentence_embedding.vectors import cosine_matrix, row_cosines

#: Neighbours compared per text: the issue's recall@10.
DEFAULT_K = 10
#: Rows of the similarity matrix held at once (a 1024 x n block of float64).
BLOCK = 1024


def rank(values: Sequence[float]) -> np.ndarray:
    """Ranks from 1, ties given their average rank (``scipy.stats.rankdata``'s default)."""
    _, inverse, counts = np.unique(np.asarray(values, dtype=np.float64), return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return (ends - (counts - 1) / 2.0)[inverse]


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r (0 when either side is constant: no ordering to agree with)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"{len(x)} and {len(y)} values: a correlation needs two equally long series of 2 or more")
    dx, dy = x - x.mean(), y - y.mean()
    denom = np.sqrt((dx * dx).sum() * (dy * dy).sum())
    return float((dx * dy).sum() / denom) if denom > 0 else 0.0


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson's r of the average ranks."""
    return pearson(rank(x), rank(y))


def sts_scores(a: np.ndarray, b: np.ndarray, gold: Sequence[float]) -> dict[str, Any]:
    """``spearman`` and ``pearson`` (x100) of the pairs' cosines against their gold scores, and ``n``."""
    cosines = row_cosines(a, b)
    gold = np.asarray(gold, dtype=np.float64)
    if len(gold) != len(cosines):
        raise ValueError(f"{len(cosines)} pairs of vectors but {len(gold)} gold scores")
    return {"spearman": 100 * spearman(cosines, gold), "pearson": 100 * pearson(cosines, gold), "n": int(len(gold))}


def nearest_neighbours(vectors: np.ndarray, k: int = DEFAULT_K) -> np.ndarray:
    """``(n, k)`` indices of each row's ``k`` most cosine-similar other rows, most similar first (ties: lower index)."""
    vectors = np.asarray(vectors)
    n = len(vectors)
    if not 1 <= k < n:
        raise CompressError(f"neighbour recall@{k} needs more than {k} held-out texts, got {n}. Hold out more text "
                            "or lower k.")
    out = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, BLOCK):
        sims = cosine_matrix(vectors[start:start + BLOCK], vectors)
        rows = np.arange(start, min(start + BLOCK, n))
        sims[rows - start, rows] = -np.inf  # a text is not its own neighbour
        out[rows] = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return out


def neighbour_recalls(student: np.ndarray, teacher: np.ndarray, k: int = DEFAULT_K) -> np.ndarray:
    """Per text: the share of its ``k`` teacher neighbours among its ``k`` student neighbours (vectors of any width)."""
    if len(student) != len(teacher):
        raise ValueError(f"{len(student)} student vectors but {len(teacher)} teacher vectors: not the same texts")
    theirs, ours = nearest_neighbours(teacher, k), nearest_neighbours(student, k)
    return np.array([len(np.intersect1d(t, s, assume_unique=True)) / k for t, s in zip(theirs, ours)])


def neighbour_recall(student: np.ndarray, teacher: np.ndarray, k: int = DEFAULT_K) -> float:
    """The mean over texts of :func:`neighbour_recalls`."""
    return float(neighbour_recalls(student, teacher, k).mean())


def cosine_agreement(student: np.ndarray, teacher: np.ndarray) -> float | None:
    """The mean cosine between the two vectors of each text; ``None`` when the widths differ (no common space)."""
    student, teacher = np.asarray(student), np.asarray(teacher)
    if student.shape[-1] != teacher.shape[-1]:
        return None
    return float(row_cosines(student, teacher).mean())


def recall_difference_interval(recalls_a: Sequence[float], recalls_b: Sequence[float], confidence: float = 0.95,
                               resamples: int | None = None, seed: int | None = None) -> Any:
    """Interval of ``mean(a) - mean(b)`` of two students' per-text recalls on the same texts: a paired bootstrap
    over texts, each resampled text carrying both students' recall (:class:`compress.core.stats.Interval`)."""
    from compress.core.stats import RESAMPLES, SEED, percentile_interval

    a, b = np.asarray(recalls_a, dtype=np.float64), np.asarray(recalls_b, dtype=np.float64)
    if len(a) != len(b) or not len(a):
        raise ValueError(f"{len(a)} and {len(b)} per-text recalls: not paired")
    diff = a - b
    rng = np.random.default_rng(SEED if seed is None else seed)
    weights = rng.multinomial(len(diff), np.full(len(diff), 1.0 / len(diff)), size=resamples or RESAMPLES)
    return percentile_interval(float(diff.mean()), weights @ diff / len(diff), confidence,
                               f"paired bootstrap over {len(diff)} texts (neighbour recall difference)")


def spearman_drop_interval(reference_cosines: Sequence[float], cosines: Sequence[float], gold: Sequence[float],
                           confidence: float = 0.95, resamples: int | None = None, seed: int | None = None) -> Any:
    """Interval of the STS Spearman drop (x100), reference minus candidate, on the same pairs: a paired bootstrap
    over pairs, each resampled pair carrying both models' cosines and its gold score."""
    from compress.core.stats import RESAMPLES, SEED, percentile_interval

    ref, got, gold = (np.asarray(x, dtype=np.float64) for x in (reference_cosines, cosines, gold))
    if not len(ref) == len(got) == len(gold) or len(gold) < 3:
        raise ValueError(f"{len(ref)}, {len(got)} and {len(gold)} values: not paired, or under 3 pairs")
    rng = np.random.default_rng(SEED if seed is None else seed)
    draws = rng.integers(0, len(gold), size=(resamples or RESAMPLES, len(gold)))
    drops = np.array([spearman(ref[i], gold[i]) - spearman(got[i], gold[i]) for i in draws])
    return percentile_interval(100 * (spearman(ref, gold) - spearman(got, gold)), 100 * drops, confidence,
                               f"paired bootstrap over {len(gold)} pairs (STS Spearman drop)")


def score(predicted: np.ndarray | tuple[np.ndarray, np.ndarray], gold: Sequence[float] | None = None,
          reference: np.ndarray | tuple[np.ndarray, np.ndarray] | None = None, k: int = DEFAULT_K) -> dict[str, Any]:
    """The task's metrics. With ``gold``, ``predicted`` is ``(a, b)``, the vectors of the pairs' two sides, scored
    on STS; without, it is the vectors of held-out texts. With the teacher's vectors of the same texts as
    ``reference`` (same layout), neighbour recall@k over all the texts and, at one width, cosine agreement."""
    out: dict[str, Any] = {}
    if gold is not None:
        a, b = predicted
        out.update(sts_scores(a, b, gold))
        texts = np.concatenate([a, b])
    else:
        texts = np.asarray(predicted)
        out["n"] = int(len(texts))
    if reference is not None:
        ref = np.concatenate(reference) if gold is not None else np.asarray(reference)
        out["neighbour_recall"] = neighbour_recall(texts, ref, k)
        agreement = cosine_agreement(texts, ref)
        if agreement is not None:
            out["cosine_agreement"] = agreement
    return out
