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
