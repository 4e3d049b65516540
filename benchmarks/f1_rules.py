"""The gate's rules on a tagger's results: entity F1 drop, F1 regression and word agreement.

A tagger's ``results.json`` (``data.metric == "entity_f1"``, :mod:`benchmarks.tagging_quality`) holds,
per artifact and sentence, the ``(correct, predicted, gold)`` entity counts per type and the words
tagged as the reference tagged them. Each rule is decided like the accuracy rules, on an interval
and not on the point estimate, with the sentence as the unit resampled (a sentence's entities and
words are not independent of one another):

- ``max_f1_drop``: reference F1 minus artifact F1, paired bootstrap over the same sentences
  (:func:`benchmarks.stats.f1_drop_interval`);
- ``max_f1_regression``: the same against ``--baseline``'s artifact of that name, paired when both
  runs scored the same sentences (same data fingerprint and count), else two independent bootstraps;
- ``min_agreement``: the share of words tagged as the reference tagged them, bootstrapped over sentences;
- ``max_regression``'s quality half: the F1 fall as a share of the baseline's F1.

The classifier rules (``max_accuracy_drop`` and the rest) are refused on a tagger's results, and the
F1 rules on a classifier's, in one line saying which rule to use: a rule that silently passed
because its numbers were missing would hide a regression.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.gate import CLASSIFIER_RULES, TAGGING_RULES, Check, GateInputError, _baseline_of, _ci


def f1_rule(rule: str, limit: float, subject: Any, ctx: Any, confidence: float) -> Check:
    """One rule of :data:`benchmarks.gate.TAGGING_RULES` (or ``min_agreement``) on a tagger's results."""
    if not ctx.tagging and rule in TAGGING_RULES:
        raise GateInputError(f"rule {rule} gates a tagger's entity F1, but these results are a sentence classifier's "
                             "(accuracy): use max_accuracy_drop / max_accuracy_regression in the rules file.")
    if ctx.tagging and rule in CLASSIFIER_RULES and rule != "min_agreement":
        raise GateInputError(f"rule {rule} gates a sentence classifier's accuracy, but these results are a tagger's "
                             "(entity F1): use max_f1_drop / max_f1_regression in the rules file.")
    if subject.is_group:
        return Check(subject.name, rule, limit, "-", "inconclusive",
                     "seed groups of taggers are not gated as a group yet; name each member in its own "
                     "[artifacts.\"NAME\"] table")
    if rule == "max_f1_drop":
        return _f1_drop(limit, subject, ctx, confidence)
    if rule == "max_f1_regression":
        if ctx.baseline is None:
            return Check(subject.name, rule, limit, "-", "skip", "no --baseline given")
        base = _baseline_of(subject, ctx)
        if base is None:
            return Check(subject.name, rule, limit, "-", "skip", "not in the baseline (a new artifact)")
        status, measured, shown, message, _ = f1_regression(limit, subject, base, ctx, confidence, relative=False)
        return Check(subject.name, rule, limit, measured, status, message, shown)
    return _word_agreement(limit, subject, ctx, confidence)


def _f1_drop(limit: float, subject: Any, ctx: Any, confidence: float) -> Check:
    from benchmarks.stats import f1_drop_interval

    q, rq = subject.art["quality"], ctx.ref["quality"]
    interval = f1_drop_interval(rq["entity_counts"], q["entity_counts"], confidence)
    measured = f"{100 * interval.estimate:+.2f} pt ({q['entity_f1']:.4f} vs {rq['entity_f1']:.4f})"
    shown = _ci(interval, "{:+.2f}", 100.0, " pt")
    status = interval.verdict(limit, higher_is_better=False)
    message = {"fail": f"entity F1 fell by {measured}: even the lower bound of its {100 * confidence:g}% paired "
                       f"interval {shown} is over {100 * limit:g} pt",
               "inconclusive": f"inconclusive: the {100 * confidence:g}% paired interval of the F1 drop, {shown}, "
                               f"straddles {100 * limit:g} pt; more test sentences would decide",
               "pass": ""}[status]
    return Check(subject.name, "max_f1_drop", limit, measured, status, message, shown)


def _word_agreement(limit: float, subject: Any, ctx: Any, confidence: float) -> Check:
    from benchmarks.stats import ratio_interval

    interval = ratio_interval(subject.art["quality"]["word_agreement"], confidence)
    measured = f"{interval.estimate:.4f} of words"
    shown = _ci(interval, "{:.4f}")
    status = interval.verdict(limit, higher_is_better=True)
    message = {"fail": f"word agreement {measured}: even the upper bound of its interval {shown} is below {limit:g}",
               "inconclusive": f"inconclusive: the {100 * confidence:g}% interval of the word agreement, {shown}, "
                               f"straddles {limit:g}; more test sentences would decide",
               "pass": ""}[status]
    return Check(subject.name, "min_agreement", limit, measured, status, message, shown)


def f1_regression(limit: float, subject: Any, base: dict, ctx: Any, confidence: float, relative: bool = False):
    """The F1 fall against the baseline's artifact, in points or (``relative``) as a share of its F1:
    ``(status, measured, interval text, message, upper bound)``, as the gate's accuracy regression."""
    from benchmarks.stats import Interval, f1_drop_interval, unpaired_f1_drop_interval

    old, new = base["quality"], subject.art["quality"]
    if "entity_counts" not in old:
        raise GateInputError("--baseline holds a sentence classifier's results and RESULTS a tagger's: compare "
                             "results of the same task.")
    old_data, new_data = ctx.baseline.get("data") or {}, ctx.results.get("data") or {}
    same = (len(old["entity_counts"]) == len(new["entity_counts"]) and old_data.get("types") == new_data.get("types")
            and old_data.get("fingerprint") == new_data.get("fingerprint"))
    if same:
        interval = f1_drop_interval(old["entity_counts"], new["entity_counts"], confidence)
    else:
        interval = unpaired_f1_drop_interval(old["entity_counts"], new["entity_counts"], confidence)
    how = "paired" if same else "unpaired: other sentences"
    if relative:
        base_f1 = float(old["entity_f1"])
        scale = 1.0 / base_f1 if base_f1 > 0 else 0.0
        interval = Interval(interval.estimate * scale, interval.low * scale, interval.high * scale, confidence,
                            interval.method + ", divided by the baseline's F1")
    status = interval.verdict(limit, higher_is_better=False)
    if relative:
        measured = f"entity F1 {-interval.estimate:+.1%} of the baseline's ({how})"
        shown, fell, over = _ci(interval, "{:+.1%}"), f"{interval.estimate:.1%} of the baseline's", f"{limit:.0%}"
    else:
        measured = f"entity F1 {-100 * interval.estimate:+.2f} points against the baseline ({how})"
        shown = _ci(interval, "{:+.2f}", scale=100.0, suffix=" pt")
        fell, over = f"{100 * interval.estimate:.2f} points", f"{100 * limit:g} points"
    message = {"fail": f"entity F1 fell {fell}; even the lower bound of its interval {shown} is over {over}",
               "inconclusive": f"inconclusive: the interval of the F1 fall, {shown}, straddles {over}; more test "
                               "sentences would decide",
               "pass": ""}[status]
    return status, measured, shown, message, float(np.float64(interval.high))
