"""A tagger's quality on a held-out split: entity F1, per-type F1 and word agreement with the reference.

The counterpart of :mod:`benchmarks.accuracy` for token classification. Every artifact tags the
split's sentences through ``Predictor.predict`` (whitespace words, first sub-token, windows past
the model's length: the serving path), via :class:`compress.quality.SplitScorer`. Entities are
scored with strict span-and-type matching (:mod:`compress.tasks.token_classification.metrics`, equal to seqeval's
default). What the gate's statistics need is kept per sentence: the ``(correct, predicted, gold)``
entity counts per type (a paired bootstrap over sentences resamples both models' counts of the
same sentences, :func:`benchmarks.stats.f1_drop_interval`; per type, :func:`benchmarks.stats.type_f1_drop_intervals`)
and, against the reference, how many
of each sentence's words got the reference's tag.
"""

from __future__ import annotations

from typing import Any, Mapping

from benchmarks.answers import Answers, answer_each
from benchmarks.stats import f1_drop_interval, f1_interval, ratio_interval, type_f1_drop_intervals
from compress.tasks.token_classification.metrics import scores_from_counts, sentence_counts, token_agreement


def evaluate_tagging_quality(predictors: Mapping[str, Any], reference: str, scorer: Any, types: list[str],
                             batch_size: int | Mapping[str, int] = 32, progress: bool = True,
                             memo: Answers | None = None) -> dict[str, dict[str, Any]]:
    """``{name: quality}`` for every predictor (see the module docstring); the reference agrees with itself.
    ``batch_size``: one for all, or one per name; ``memo``: answers already made in this run
    (:mod:`benchmarks.answers`)."""
    names = [reference] + [n for n in predictors if n != reference]
    tags = answer_each(predictors, reference, batch_size, lambda p, b: scorer.predict(p, batch_size=b), progress, memo,
                       check=scorer.check_model)
    counts = {name: sentence_counts(scorer.gold, tags[name], types)[1] for name in names}
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        scores = scores_from_counts(types, counts[name])
        same = [[sum(a == b for a, b in zip(mine, ref)), len(ref)] for mine, ref in zip(tags[name], tags[reference])]
        f1 = f1_interval(counts[name])
        q: dict[str, Any] = {
            "metric": "entity_f1", "entity_f1": scores["f1"], "entity_f1_ci": [f1.low, f1.high],
            "entity_precision": scores["precision"], "entity_recall": scores["recall"],
            "per_type_f1": {t: s["f1"] for t, s in scores["per_type"].items()},
            "per_type_support": {t: s["support"] for t, s in scores["per_type"].items()},
            "token_accuracy": token_agreement(tags[name], scorer.gold),
            "agreement": token_agreement(tags[name], tags[reference]), "n": scorer.n,
            "entity_counts": counts[name].tolist(), "word_agreement": same,
        }
        if name != reference:
            agree = ratio_interval(same)
            q["agreement_ci"] = [agree.low, agree.high]
            q["entity_f1_drop"] = f1_drop_interval(counts[reference], counts[name]).as_dict()
            ref_types = out[reference]["per_type_f1"]
            q["per_type_f1_drop"] = {t: round(f - q["per_type_f1"].get(t, 0.0), 6) for t, f in ref_types.items()}
            q["per_type_f1_drop_interval"] = {t: [i.low, i.high] for t, i in type_f1_drop_intervals(
                types, counts[reference], counts[name]).items() if scores["per_type"][t]["support"]}
        out[name] = q
    return {name: out[name] for name in predictors}
