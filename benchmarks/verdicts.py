"""How a fall against the baseline is worded, for every quality metric the gate compares over two runs.

The accuracy regression of a classifier, the entity-F1 regression of a tagger and of a seed group
all report the same four things from one interval of ``baseline - now`` (in points, or as a share of
the baseline's value): the verdict, what was measured, the interval, and the message that explains a
failure or an inconclusive result. One function words them, so the rules read alike.
"""

from __future__ import annotations

from typing import Any


def fall_report(metric: str, interval: Any, limit: float, relative: bool, how: str,
                more: str) -> tuple[str, str, str, str, float]:
    """``(status, measured, interval text, message, upper bound)`` of the fall of ``metric`` ("accuracy",
    "entity F1") decided on ``interval`` (a :class:`compress.core.stats.Interval` of ``baseline - now``);
    ``how`` says how it was computed ("paired", "mean of 3 seeds against 3"), ``more`` what would decide
    an inconclusive one ("more test examples (or --seeds)")."""
    if relative:
        measured = f"{metric} {-interval.estimate:+.1%} of the baseline's ({how})"
        shown, fell, over = interval.text("{:+.1%}"), f"{interval.estimate:.1%} of the baseline's", f"{limit:.0%}"
    else:
        measured = f"{metric} {-100 * interval.estimate:+.2f} points against the baseline ({how})"
        shown = interval.text("{:+.2f}", 100.0, " pt")
        fell, over = f"{100 * interval.estimate:.2f} points", f"{100 * limit:g} points"
    status = interval.verdict(limit, higher_is_better=False)
    message = {"fail": f"{metric} fell {fell}; even the lower bound of its interval {shown} is over {over}",
               "inconclusive": f"inconclusive: the interval of the {metric} fall, {shown}, straddles {over}; {more} "
                               "would decide",
               "pass": ""}[status]
    return status, measured, shown, message, float(interval.high)
