"""Exact match and F1 of extractive QA answers, as the official SQuAD evaluation scripts compute them.

Both compare *normalised* texts (:func:`normalize_answer`, the v1.1 script's ``normalize_answer``):
lower case, punctuation removed (Python's ``string.punctuation``), the articles ``a``, ``an``,
``the`` removed as whole words, whitespace collapsed to single spaces. Exact match is 1 when the
normalised prediction equals a normalised gold answer; F1 is the harmonic mean of precision and
recall of the shared words (a bag: a word counts as often as it is in both). A question's score
is the best over its gold answers.

A question without an answer (SQuAD 2.0) has the empty string as its one gold answer, as the v2.0
script does: only an empty prediction scores 1 there, and an empty prediction scores 0 on a
question that has an answer. Gold answers that normalise to nothing are dropped the same way.

With SQuAD 2.0 questions the null threshold (answer nothing when the null score beats the best span by more
than it) is chosen the way the v2.0 script's ``find_best_thresh`` does, on validation:
:func:`best_null_threshold`.

Per-question scores are kept (:func:`question_scores`) so a paired bootstrap over questions can
resample them; :func:`squad_scores` averages them. Scores are fractions in [0, 1] like every other
metric of bert-compress (the official scripts print them times 100).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any, Sequence

import numpy as np

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces: the SQuAD v1.1 script's normalisation."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalised texts are equal."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """F1 of the normalised words; two empty texts agree (1.0), one empty text scores 0.0."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def _golds(answers: Sequence[str]) -> list[str]:
    """The gold answers a prediction is compared with: the non-empty ones, else the empty string."""
    kept = [a for a in answers if normalize_answer(a)]
    return kept or [""]


def question_scores(predictions: Sequence[str], golds: Sequence[Sequence[str]]) -> dict[str, np.ndarray]:
    """Per question: ``exact_match`` and ``f1`` (best over its gold answers), and ``has_answer`` (bool)."""
    if len(predictions) != len(golds):
        raise ValueError(f"{len(predictions)} predictions for {len(golds)} questions")
    em = np.zeros(len(golds))
    f1 = np.zeros(len(golds))
    has = np.zeros(len(golds), dtype=bool)
    for i, (pred, answers) in enumerate(zip(predictions, golds)):
        refs = _golds(answers)
        has[i] = refs != [""]
        em[i] = max(exact_match(pred, r) for r in refs)
        f1[i] = max(token_f1(pred, r) for r in refs)
    return {"exact_match": em, "f1": f1, "has_answer": has}


def squad_scores(predictions: Sequence[str], golds: Sequence[Sequence[str]],
                 reference: Sequence[str] | None = None) -> dict[str, Any]:
    """Mean exact match and F1 over the questions; with SQuAD 2.0 questions, both also on the answerable
    (``has_answer_*``) and the unanswerable (``no_answer_*``) ones. With ``reference`` predictions (the
    teacher's), ``reference_f1`` / ``reference_exact_match``: the same scores taking them as the gold."""
    per = question_scores(predictions, golds)
    n = len(golds)
    out: dict[str, Any] = {"exact_match": float(per["exact_match"].mean()) if n else 0.0,
                           "f1": float(per["f1"].mean()) if n else 0.0, "n": n}
    has = per["has_answer"]
    if n and not has.all():
        for name, mask in (("has_answer", has), ("no_answer", ~has)):
            out[f"{name}_n"] = int(mask.sum())
            for metric in ("exact_match", "f1"):
                out[f"{name}_{metric}"] = float(per[metric][mask].mean()) if mask.any() else 0.0
    if reference is not None:
        ref = question_scores(predictions, [[r] for r in reference])
        out["reference_exact_match"] = float(ref["exact_match"].mean()) if n else 0.0
        out["reference_f1"] = float(ref["f1"].mean()) if n else 0.0
    return out


def best_null_threshold(margins: Sequence[float], answered_f1: Sequence[float], empty_f1: Sequence[float],
                        default: float = 0.0) -> tuple[float, float]:
    """``(threshold, mean F1)``: the null threshold with the best mean F1, and that F1.

    Question ``i`` is answered with its best span (F1 ``answered_f1[i]``) when ``margins[i]`` (null score minus
    best span score) is at most the threshold, else left empty (``empty_f1[i]``: 1 for an unanswerable question);
    ``inf`` margins are empty at every threshold. Every cut between two sorted margins is tried, as the v2.0
    script sweeps its no-answer probabilities; a cut is placed halfway between its two margins (the script puts it
    on one of them, where unseen questions land on either side by a hair), and among cuts of equal F1 the one
    nearest ``default`` (``run_qa.py``'s 0.0) wins, so a threshold moves only when it scores better.
    """
    margins = np.asarray(margins, dtype=np.float64)
    answered, empty = np.asarray(answered_f1, dtype=np.float64), np.asarray(empty_f1, dtype=np.float64)
    if not len(margins):
        return float(default), 0.0
    order = np.argsort(margins, kind="stable")
    m = margins[order]
    # answering the k questions with the smallest margins: F1 = their answered F1 + the others' empty F1
    totals = np.round(np.concatenate([[0.0], np.cumsum(answered[order] - empty[order])]) + empty.sum(), 9)
    finite = np.isfinite(m)
    cuts = []
    for k in range(len(m) + 1):  # k answered: a threshold in [m[k-1], m[k]) (-inf below all, beyond the largest)
        if k and not finite[k - 1]:
            break
        low = m[k - 1] if k else -np.inf
        high = m[k] if k < len(m) else np.inf
        if low == high:
            continue  # equal margins: a threshold cannot answer one and not the other
        if low <= default < high:
            cut = float(default)
        elif np.isinf(low) or np.isinf(high):
            cut = float(high - 1.0 if np.isinf(low) else low + 1.0)
        else:
            cut = float((low + high) / 2)
        cuts.append((totals[k], -abs(cut - default), cut))
    best_total, _, threshold = max(cuts)
    return threshold, float(best_total / len(margins))
