"""How the gate decides a tagger's results: entity F1 drop, F1 regression and word agreement.

A tagger's ``results.json`` (``data.metric == "entity_f1"``, :mod:`benchmarks.tagging_quality`) holds,
per artifact and sentence, the ``(correct, predicted, gold)`` entity counts per type and the words
tagged as the reference tagged them. Each rule is decided like the accuracy rules, on an interval
and not on the point estimate, with the sentence as the unit resampled (a sentence's entities and
words are not independent of one another):

- ``max_f1_drop``: reference F1 minus artifact F1, paired bootstrap over the same sentences
  (:func:`benchmarks.stats.f1_drop_interval`);
- ``max_f1_regression``: the same against ``--baseline``'s artifact of that name, paired when both
  runs scored the same sentences (same data fingerprint, types and count), else two independent
  bootstraps;
- ``min_agreement``: the share of words tagged as the reference tagged them, bootstrapped over sentences;
- ``max_regression``'s quality half: the F1 fall as a share of the baseline's F1.

A seed group (``bench --seeds NAME=A,B,C``) is gated on its members' mean: ``max_f1_drop`` and
``min_agreement`` add the seed spread to the bootstrap's test-set term
(:func:`benchmarks.stats.mean_f1_drop_over_seeds_interval`,
:func:`benchmarks.stats.mean_ratio_over_seeds_interval`), as a classifier's group adds it to its
accuracy drop; ``max_f1_regression`` compares the two runs' per-seed F1 with Welch's t (equal
entity counts member for member: the same models benchmarked again, no change).

Each function returns the parts of a :class:`benchmarks.gate.Check` after the rule and its limit:
``(measured, status, message, interval text)``; :func:`benchmarks.gate._tagging_rule` picks the rule.
"""

from __future__ import annotations

from typing import Any

from benchmarks.verdicts import fall_report


def _message(status: str, fail: str, inconclusive: str) -> str:
    return {"fail": fail, "inconclusive": inconclusive, "pass": ""}[status]


def f1_drop(ref: dict[str, Any], art: dict[str, Any], limit: float, confidence: float) -> tuple[str, str, str, str]:
    """``max_f1_drop`` from the reference's and the artifact's quality records."""
    from benchmarks.stats import f1_drop_interval

    interval = f1_drop_interval(ref["entity_counts"], art["entity_counts"], confidence)
    measured = f"{100 * interval.estimate:+.2f} pt ({art['entity_f1']:.4f} vs {ref['entity_f1']:.4f})"
    shown = interval.text("{:+.2f}", 100.0, " pt")
    status = interval.verdict(limit, higher_is_better=False)
    return measured, status, _message(
        status, f"entity F1 fell by {measured}: even the lower bound of its {100 * confidence:g}% paired interval "
                f"{shown} is over {100 * limit:g} pt",
        f"inconclusive: the {100 * confidence:g}% paired interval of the F1 drop, {shown}, straddles {100 * limit:g} "
        "pt; more test sentences would decide"), shown


def f1_drop_over_seeds(ref: dict[str, Any], members: list[dict[str, Any]], limit: float,
                       confidence: float) -> tuple[str, str, str, str]:
    """``max_f1_drop`` of a seed group: the reference's F1 minus its members' mean F1."""
    from benchmarks.stats import mean_f1_drop_over_seeds_interval

    interval = mean_f1_drop_over_seeds_interval(ref["entity_counts"], [m["entity_counts"] for m in members],
                                                confidence)
    mean_f1 = sum(float(m["entity_f1"]) for m in members) / len(members)
    measured = (f"{100 * interval.estimate:+.2f} pt (mean of {len(members)} seeds {mean_f1:.4f} vs "
                f"{ref['entity_f1']:.4f})")
    shown = interval.text("{:+.2f}", 100.0, " pt")
    status = interval.verdict(limit, higher_is_better=False)
    return measured, status, _message(
        status, f"entity F1 fell by {measured}: even the lower bound of its {100 * confidence:g}% interval {shown} "
                f"is over {100 * limit:g} pt",
        f"inconclusive: the {100 * confidence:g}% interval of the seeds' mean F1 drop, {shown}, straddles "
        f"{100 * limit:g} pt; more test sentences (or seeds) would decide"), shown


def word_agreement_over_seeds(members: list[dict[str, Any]], limit: float,
                              confidence: float) -> tuple[str, str, str, str]:
    """``min_agreement`` of a seed group: the members' mean share of words tagged as the reference tagged them."""
    from benchmarks.stats import mean_ratio_over_seeds_interval

    interval = mean_ratio_over_seeds_interval([m["word_agreement"] for m in members], confidence)
    measured = f"{interval.estimate:.4f} of words (mean of {len(members)} seeds)"
    shown = interval.text("{:.4f}")
    status = interval.verdict(limit, higher_is_better=True)
    return measured, status, _message(
        status, f"word agreement {measured}: even the upper bound of its interval {shown} is below {limit:g}",
        f"inconclusive: the {100 * confidence:g}% interval of the seeds' mean word agreement, {shown}, straddles "
        f"{limit:g}; more test sentences (or seeds) would decide"), shown


def word_agreement(art: dict[str, Any], limit: float, confidence: float) -> tuple[str, str, str, str]:
    """``min_agreement`` on a tagger: the share of words tagged as the reference tagged them."""
    from benchmarks.stats import ratio_interval

    interval = ratio_interval(art["word_agreement"], confidence)
    measured = f"{interval.estimate:.4f} of words"
    shown = interval.text("{:.4f}")
    status = interval.verdict(limit, higher_is_better=True)
    return measured, status, _message(
        status, f"word agreement {measured}: even the upper bound of its interval {shown} is below {limit:g}",
        f"inconclusive: the {100 * confidence:g}% interval of the word agreement, {shown}, straddles {limit:g}; "
        "more test sentences would decide"), shown


def f1_regression(old: dict[str, Any], new: dict[str, Any], old_data: dict[str, Any], new_data: dict[str, Any],
                  limit: float, confidence: float, relative: bool = False) -> tuple[str, str, str, str, float]:
    """The F1 fall from the baseline's quality record ``old`` to ``new``, in points or (``relative``) as a share
    of the baseline's F1: ``(status, measured, interval text, message, upper bound)``, the shape of the
    gate's accuracy regression."""
    from benchmarks.stats import Interval, f1_drop_interval, unpaired_f1_drop_interval

    same = (len(old["entity_counts"]) == len(new["entity_counts"]) and old_data.get("types") == new_data.get("types")
            and old_data.get("fingerprint") == new_data.get("fingerprint"))
    pick = f1_drop_interval if same else unpaired_f1_drop_interval
    interval = pick(old["entity_counts"], new["entity_counts"], confidence)
    how = "paired" if same else "unpaired: other sentences"
    if relative:
        base_f1 = float(old["entity_f1"])
        scale = 1.0 / base_f1 if base_f1 > 0 else 0.0
        interval = Interval(interval.estimate * scale, interval.low * scale, interval.high * scale, confidence,
                            interval.method + ", divided by the baseline's F1")
    return fall_report("entity F1", interval, limit, relative, how, "more test sentences")
