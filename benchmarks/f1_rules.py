"""How the gate decides F1 results: a tagger's entity F1 or a reader's SQuAD F1, their drop, regression and agreement.

The results' task reads its own per-unit records (its scoring aspect's ``gate_records``,
:mod:`compress.tasks.protocol.scoring`): a reader's ``results.json`` holds, per artifact and question, the F1
against the gold answers and whether the answer is the reference's very text; a tagger's, per artifact and
sentence, the ``(correct, predicted, gold)`` entity counts per type and the words tagged as the reference tagged
them. Each rule here is decided like the
accuracy rules, on an interval and not on the point estimate, with the task's unit (the sentence, the question)
as the unit resampled:

- ``max_f1_drop``: reference F1 minus artifact F1, paired bootstrap over the same units (``records.drop``);
- ``max_f1_regression``: the same against ``--baseline``'s artifact of that name, paired when both
  runs scored the same units (same data fingerprint, types and count), else two independent
  bootstraps (``records.unpaired_drop``);
- ``min_agreement``: the share of words tagged as the reference tagged them (a reader: of questions answered
  with the reference's very text), bootstrapped over units;
- ``max_regression``'s quality half: the F1 fall as a share of the baseline's F1.

A seed group (``bench --seeds NAME=A,B,C``) is gated on its members' mean: ``max_f1_drop`` and
``min_agreement`` add the seed spread to the bootstrap's test-set term (``records.drop_over_seeds``,
:func:`compress.core.stats.mean_ratio_over_seeds_interval`), as a classifier's group adds it to its
accuracy drop; ``max_f1_regression`` compares the two runs' per-seed F1 with Welch's t (equal
per-unit records member for member: the same models benchmarked again, no change).

Each function returns the parts of a :class:`benchmarks.gate.Check` after the rule and its limit:
``(measured, status, message, interval text)``; :func:`benchmarks.gate._quality_rule` picks the rule.
"""

from __future__ import annotations

from typing import Any

from benchmarks.verdicts import fall_report
from compress.core.stats import Interval, mean_ratio_over_seeds_interval, ratio_interval


def _message(status: str, fail: str, inconclusive: str) -> str:
    return {"fail": fail, "inconclusive": inconclusive, "pass": ""}[status]


def f1_drop(ref: dict[str, Any], art: dict[str, Any], limit: float, confidence: float,
            records: Any) -> tuple[str, str, str, str]:
    """``max_f1_drop`` from the reference's and the artifact's quality records."""
    interval = records.drop(records.units(ref), records.units(art), confidence)
    name, unit = records.metric_name, records.unit_name
    measured = f"{100 * interval.estimate:+.2f} pt ({records.f1(art):.4f} vs {records.f1(ref):.4f})"
    shown = interval.text("{:+.2f}", 100.0, " pt")
    status = interval.verdict(limit, higher_is_better=False)
    return measured, status, _message(
        status, f"{name} fell by {measured}: even the lower bound of its {100 * confidence:g}% paired interval "
                f"{shown} is over {100 * limit:g} pt",
        f"inconclusive: the {100 * confidence:g}% paired interval of the F1 drop, {shown}, straddles {100 * limit:g} "
        f"pt; more test {unit} would decide"), shown


def f1_drop_over_seeds(ref: dict[str, Any], members: list[dict[str, Any]], limit: float,
                       confidence: float, records: Any) -> tuple[str, str, str, str]:
    """``max_f1_drop`` of a seed group: the reference's F1 minus its members' mean F1."""
    interval = records.drop_over_seeds(ref, members, confidence)
    mean_f1 = sum(records.f1(m) for m in members) / len(members)
    measured = (f"{100 * interval.estimate:+.2f} pt (mean of {len(members)} seeds {mean_f1:.4f} vs "
                f"{records.f1(ref):.4f})")
    shown = interval.text("{:+.2f}", 100.0, " pt")
    status = interval.verdict(limit, higher_is_better=False)
    return measured, status, _message(
        status, f"{records.metric_name} fell by {measured}: even the lower bound of its {100 * confidence:g}% "
                f"interval {shown} is over {100 * limit:g} pt",
        f"inconclusive: the {100 * confidence:g}% interval of the seeds' mean F1 drop, {shown}, straddles "
        f"{100 * limit:g} pt; more test {records.unit_name} (or seeds) would decide"), shown


def word_agreement_over_seeds(members: list[dict[str, Any]], limit: float, confidence: float,
                              records: Any) -> tuple[str, str, str, str]:
    """``min_agreement`` of a seed group: the members' mean share of words tagged as the reference tagged them
    (a reader: of questions answered with the reference's very text)."""

    interval = mean_ratio_over_seeds_interval([records.agreement_units(m) for m in members], confidence)
    measured = f"{interval.estimate:.4f} {records.agreed} (mean of {len(members)} seeds)"
    shown = interval.text("{:.4f}")
    status = interval.verdict(limit, higher_is_better=True)
    return measured, status, _message(
        status, f"agreement {measured}: even the upper bound of its interval {shown} is below {limit:g}",
        f"inconclusive: the {100 * confidence:g}% interval of the seeds' mean agreement, {shown}, straddles "
        f"{limit:g}; more test {records.unit_name} (or seeds) would decide"), shown


def word_agreement(art: dict[str, Any], limit: float, confidence: float, records: Any) -> tuple[str, str, str, str]:
    """``min_agreement`` on a tagger: the share of words tagged as the reference tagged them (a reader: of
    questions answered with the reference's very text)."""

    interval = ratio_interval(records.agreement_units(art), confidence)
    measured = f"{interval.estimate:.4f} {records.agreed}"
    shown = interval.text("{:.4f}")
    status = interval.verdict(limit, higher_is_better=True)
    return measured, status, _message(
        status, f"agreement {measured}: even the upper bound of its interval {shown} is below {limit:g}",
        f"inconclusive: the {100 * confidence:g}% interval of the agreement, {shown}, straddles {limit:g}; "
        f"more test {records.unit_name} would decide"), shown


def f1_regression(old: dict[str, Any], new: dict[str, Any], old_data: dict[str, Any], new_data: dict[str, Any],
                  limit: float, confidence: float, records: Any,
                  relative: bool = False) -> tuple[str, str, str, str, float]:
    """The F1 fall from the baseline's quality record ``old`` to ``new``, in points or (``relative``) as a share
    of the baseline's F1: ``(status, measured, interval text, message, upper bound)``, the shape of the
    gate's accuracy regression."""

    old_units, new_units = records.units(old), records.units(new)
    same = (len(old_units) == len(new_units) and old_data.get("types") == new_data.get("types")
            and old_data.get("fingerprint") == new_data.get("fingerprint"))
    interval = (records.drop if same else records.unpaired_drop)(old_units, new_units, confidence)
    how = "paired" if same else f"unpaired: other {records.unit_name}"
    if relative:
        base_f1 = records.f1(old)
        scale = 1.0 / base_f1 if base_f1 > 0 else 0.0
        interval = Interval(interval.estimate * scale, interval.low * scale, interval.high * scale, confidence,
                            interval.method + ", divided by the baseline's F1")
    return fall_report(records.metric_name, interval, limit, relative, how, f"more test {records.unit_name}")
