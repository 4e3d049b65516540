"""A span reader's quality on a held-out split: SQuAD F1 and exact match, and agreement with the reference.

The counterpart of :mod:`benchmarks.accuracy` (classifiers) and :mod:`benchmarks.tagging_quality`
(taggers) for extractive question answering. Every artifact answers the split's questions through
``Predictor.predict`` (the passage in the windows the reader was trained with, n-best decoding, the
best span over all windows: the serving path), via :class:`compress.quality.SplitScorer`, and is
scored with the official SQuAD v1.1 normalisation (:mod:`compress.tasks.question_answering.metrics`). What the
gate's statistics need is kept per question: F1 and exact match (a paired bootstrap over questions
resamples both models' scores of the same questions, :func:`benchmarks.stats.mean_drop_interval`)
and whether the answer is the reference's very text (``same_answer``, what ``min_agreement`` reads).
"""

from __future__ import annotations

from typing import Any, Mapping

from benchmarks.answers import Answers, answer_each
from benchmarks.stats import mean_drop_interval, mean_interval
from compress.tasks.question_answering.metrics import question_scores


def evaluate_reading_quality(predictors: Mapping[str, Any], reference: str, scorer: Any,
                             batch_size: int | Mapping[str, int] = 32, progress: bool = True,
                             memo: Answers | None = None) -> dict[str, dict[str, Any]]:
    """``{name: quality}`` for every predictor (see the module docstring); the reference agrees with itself.
    ``batch_size``: one for all, or one per name; ``memo``: answers already made in this run
    (:mod:`benchmarks.answers`)."""
    names = [reference] + [n for n in predictors if n != reference]
    answers = answer_each(predictors, reference, batch_size, lambda p, b: scorer.predict(p, batch_size=b), progress,
                          memo, check=scorer.check_model)
    per = {name: question_scores(answers[name], scorer.gold) for name in names}
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        f1, em = per[name]["f1"], per[name]["exact_match"]
        same = [int(a == b) for a, b in zip(answers[name], answers[reference])]
        against_ref = question_scores(answers[name], [[a] for a in answers[reference]])
        interval = mean_interval(f1)
        q: dict[str, Any] = {
            "metric": "f1", "f1": float(f1.mean()), "f1_ci": [interval.low, interval.high],
            "exact_match": float(em.mean()), "agreement": sum(same) / len(same) if same else 1.0,
            "reference_f1": float(against_ref["f1"].mean()), "n": scorer.n,
            "question_f1": [round(float(v), 6) for v in f1], "question_exact_match": [int(v) for v in em],
            "same_answer": same,
        }
        if name != reference:
            agree = mean_interval(same)
            q["agreement_ci"] = [agree.low, agree.high]
            q["f1_drop"] = mean_drop_interval(per[reference]["f1"], f1).as_dict()
            q["exact_match_drop"] = mean_drop_interval(per[reference]["exact_match"], em).as_dict()
        out[name] = q
    return {name: out[name] for name in predictors}
