"""How the gate decides F1 results: a tagger's entity F1 or a reader's SQuAD F1, their drop, regression and agreement.

A reader's ``results.json`` (``data.metric == "f1"``, :mod:`benchmarks.reading_quality`) holds, per
artifact and question, the F1 against the gold answers (``question_f1``) and whether the answer is
the reference's very text (``same_answer``): the same rules are then decided with the question as the
unit resampled, F1 being a mean over questions (:func:`benchmarks.stats.mean_drop_interval`; a seed
group's mean by :func:`benchmarks.stats.mean_over_seeds_interval`).

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
from benchmarks.stats import (Interval, f1_drop_interval, mean_drop_interval, mean_f1_drop_over_seeds_interval,
                              mean_over_seeds_interval, mean_ratio_over_seeds_interval, ratio_interval,
                              unpaired_f1_drop_interval, unpaired_mean_drop_interval)


def is_reader(q: dict[str, Any]) -> bool:
    """Whether a quality record is a span reader's (per-question F1) rather than a tagger's (entity counts)."""
    return "question_f1" in q


def task_of(q: dict[str, Any]) -> str:
    """Who a quality record belongs to, for messages: a reader, a tagger or a sentence classifier."""
    return "a reader" if is_reader(q) else "a tagger" if "entity_counts" in q else "a sentence classifier"


def units(q: dict[str, Any]) -> Any:
    """The per-example data the F1 statistics resample: per-question F1, or per-sentence entity counts."""
    return q["question_f1"] if is_reader(q) else q["entity_counts"]


def f1_of(q: dict[str, Any]) -> float:
    return float(q["f1"] if is_reader(q) else q["entity_f1"])


def metric_name(q: dict[str, Any]) -> str:
    return "F1" if is_reader(q) else "entity F1"


def _unit_name(q: dict[str, Any]) -> str:
    return "questions" if is_reader(q) else "sentences"


def _drop(ref: dict[str, Any], art: dict[str, Any], confidence: float):
    """The paired interval of ``F1(ref) - F1(art)`` on the same examples, whichever task."""

    if is_reader(art):
        return mean_drop_interval(ref["question_f1"], art["question_f1"], confidence)
    return f1_drop_interval(ref["entity_counts"], art["entity_counts"], confidence)


def _agreement_units(q: dict[str, Any]) -> Any:
    """``(same, total)`` per example: words tagged as the reference tagged them, or the reference's answer given."""
    return [[int(v), 1] for v in q["same_answer"]] if is_reader(q) else q["word_agreement"]


def _message(status: str, fail: str, inconclusive: str) -> str:
    return {"fail": fail, "inconclusive": inconclusive, "pass": ""}[status]


def f1_drop(ref: dict[str, Any], art: dict[str, Any], limit: float, confidence: float) -> tuple[str, str, str, str]:
    """``max_f1_drop`` from the reference's and the artifact's quality records."""
    interval = _drop(ref, art, confidence)
    name, unit = metric_name(art), _unit_name(art)
    measured = f"{100 * interval.estimate:+.2f} pt ({f1_of(art):.4f} vs {f1_of(ref):.4f})"
    shown = interval.text("{:+.2f}", 100.0, " pt")
    status = interval.verdict(limit, higher_is_better=False)
    return measured, status, _message(
        status, f"{name} fell by {measured}: even the lower bound of its {100 * confidence:g}% paired interval "
                f"{shown} is over {100 * limit:g} pt",
        f"inconclusive: the {100 * confidence:g}% paired interval of the F1 drop, {shown}, straddles {100 * limit:g} "
        f"pt; more test {unit} would decide"), shown


def f1_drop_over_seeds(ref: dict[str, Any], members: list[dict[str, Any]], limit: float,
                       confidence: float) -> tuple[str, str, str, str]:
    """``max_f1_drop`` of a seed group: the reference's F1 minus its members' mean F1."""
    import numpy as np

    if is_reader(ref):
        interval = mean_over_seeds_interval(np.asarray([np.asarray(ref["question_f1"]) - np.asarray(m["question_f1"])
                                                        for m in members]), confidence)
    else:
        interval = mean_f1_drop_over_seeds_interval(ref["entity_counts"], [m["entity_counts"] for m in members],
                                                    confidence)
    mean_f1 = sum(f1_of(m) for m in members) / len(members)
    measured = (f"{100 * interval.estimate:+.2f} pt (mean of {len(members)} seeds {mean_f1:.4f} vs "
                f"{f1_of(ref):.4f})")
    shown = interval.text("{:+.2f}", 100.0, " pt")
    status = interval.verdict(limit, higher_is_better=False)
    return measured, status, _message(
        status, f"{metric_name(ref)} fell by {measured}: even the lower bound of its {100 * confidence:g}% interval "
                f"{shown} is over {100 * limit:g} pt",
        f"inconclusive: the {100 * confidence:g}% interval of the seeds' mean F1 drop, {shown}, straddles "
        f"{100 * limit:g} pt; more test {_unit_name(ref)} (or seeds) would decide"), shown


def _agreed(q: dict[str, Any]) -> str:
    return "of answers identical" if is_reader(q) else "of words"


def word_agreement_over_seeds(members: list[dict[str, Any]], limit: float,
                              confidence: float) -> tuple[str, str, str, str]:
    """``min_agreement`` of a seed group: the members' mean share of words tagged as the reference tagged them
    (a reader: of questions answered with the reference's very text)."""

    interval = mean_ratio_over_seeds_interval([_agreement_units(m) for m in members], confidence)
    what = _agreed(members[0])
    measured = f"{interval.estimate:.4f} {what} (mean of {len(members)} seeds)"
    shown = interval.text("{:.4f}")
    status = interval.verdict(limit, higher_is_better=True)
    return measured, status, _message(
        status, f"agreement {measured}: even the upper bound of its interval {shown} is below {limit:g}",
        f"inconclusive: the {100 * confidence:g}% interval of the seeds' mean agreement, {shown}, straddles "
        f"{limit:g}; more test {_unit_name(members[0])} (or seeds) would decide"), shown


def word_agreement(art: dict[str, Any], limit: float, confidence: float) -> tuple[str, str, str, str]:
    """``min_agreement`` on a tagger: the share of words tagged as the reference tagged them (a reader: of
    questions answered with the reference's very text)."""

    interval = ratio_interval(_agreement_units(art), confidence)
    measured = f"{interval.estimate:.4f} {_agreed(art)}"
    shown = interval.text("{:.4f}")
    status = interval.verdict(limit, higher_is_better=True)
    return measured, status, _message(
        status, f"agreement {measured}: even the upper bound of its interval {shown} is below {limit:g}",
        f"inconclusive: the {100 * confidence:g}% interval of the agreement, {shown}, straddles {limit:g}; "
        f"more test {_unit_name(art)} would decide"), shown


def f1_regression(old: dict[str, Any], new: dict[str, Any], old_data: dict[str, Any], new_data: dict[str, Any],
                  limit: float, confidence: float, relative: bool = False) -> tuple[str, str, str, str, float]:
    """The F1 fall from the baseline's quality record ``old`` to ``new``, in points or (``relative``) as a share
    of the baseline's F1: ``(status, measured, interval text, message, upper bound)``, the shape of the
    gate's accuracy regression."""

    reader = is_reader(new)
    same = (len(units(old)) == len(units(new)) and old_data.get("types") == new_data.get("types")
            and old_data.get("fingerprint") == new_data.get("fingerprint"))
    if reader:
        pick = mean_drop_interval if same else unpaired_mean_drop_interval
    else:
        pick = f1_drop_interval if same else unpaired_f1_drop_interval
    interval = pick(units(old), units(new), confidence)
    how = "paired" if same else f"unpaired: other {_unit_name(new)}"
    if relative:
        base_f1 = f1_of(old)
        scale = 1.0 / base_f1 if base_f1 > 0 else 0.0
        interval = Interval(interval.estimate * scale, interval.low * scale, interval.high * scale, confidence,
                            interval.method + ", divided by the baseline's F1")
    return fall_report(metric_name(new), interval, limit, relative, how, f"more test {_unit_name(new)}")
