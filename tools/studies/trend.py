"""A metric against a run setting on a log scale: the measured trend that names the lever for a missed target.

When a target is missed, the next step should be a measurement, not a guess: how much does the student gain
per tenfold more transfer rows (or steps, or parameters), and how many would the fitted line need to reach the
target? :func:`fit_log_trend` fits ``metric = a + b * log10(x)`` by least squares over every run (each seed is
one point, so the residuals carry the seed-to-seed noise) with scipy's ``linregress``, and gives the slope per
tenfold with its Student-t interval (``n - 2`` degrees of freedom).

:meth:`Trend.x_reaching` inverts the line through the points' centre (the mean of ``log10 x`` and of the
metric, where the slope's error does not move it), so the range it gives from the slope's interval is the
honest one for that fit; it leaves out the uncertainty of the centre itself and is an extrapolation as soon as
it passes the largest ``x`` measured, which :func:`trend_lines` says in words. A line fitted to three sizes is a
trend, not a law: a curve that flattens would need more rows than the line says.

The x of each run is read from its ``compress.json``, so the figure cannot disagree with what the run recorded:
``rows`` (:func:`training_rows`, the rows a student was distilled on, labelled ones included, for a
classifier's or a tagger's distillation) or any dotted key holding a number (``training.global_steps``).

A study script, not a feature: it lives in ``tools/studies`` (not installed) and runs from a checkout.
Produced: docs/ablation.md, "The transfer-set size curve" (through ``tools.studies.compare --trend``); the
example of docs/protocol.md, "The trend behind a missed target".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from compress.core.errors import CompressError

#: The x a trend is usually drawn against: the rows a student was distilled on (labelled + augmented + transfer),
#: read by :func:`training_rows` from whichever record its distiller wrote.
DEFAULT_KEY = "rows"


@dataclass(frozen=True)
class Trend:
    """``metric = centre_y + slope * (log10 x - centre_log_x)``, with the slope's interval."""

    points: int
    slope: float
    slope_low: float
    slope_high: float
    centre_log_x: float
    centre_y: float
    r_squared: float
    level: float = 0.95

    def at(self, x: float) -> float:
        return self.centre_y + self.slope * (math.log10(x) - self.centre_log_x)

    def x_reaching(self, value: float, slope: float | None = None) -> float | None:
        """The x at which the line (or the same centre with another ``slope``) reaches ``value``. With a slope of
        zero or less: the centre's x when the centre is already there, ``None`` (never) when it is not."""
        slope = self.slope if slope is None else slope
        gap = value - self.centre_y
        if slope > 0:
            return 10 ** (self.centre_log_x + gap / slope)
        return 10 ** self.centre_log_x if gap <= 0 else None

    def reach_range(self, value: float) -> tuple[float | None, float | None]:
        """``(x at the slope's upper bound, x at its lower bound)``; the second is ``None`` (unbounded) when the
        lower bound is not above zero."""
        return self.x_reaching(value, self.slope_high), self.x_reaching(value, self.slope_low)


def fit_log_trend(xs: Sequence[float], ys: Sequence[float], level: float = 0.95) -> Trend:
    """Least squares of ``ys`` on ``log10(xs)`` (scipy ``linregress``) with the slope's t interval at ``level``.

    Refused with a clear error for fewer than 3 points, fewer than 2 distinct x, or an x that is not positive
    (a log scale has no place for it: count the labelled rows in x, as ``rows`` does)."""
    from scipy import stats

    if len(xs) != len(ys):
        raise CompressError(f"a trend needs one metric per x: got {len(xs)} x and {len(ys)} metrics")
    check_xs(xs)
    logs = [math.log10(x) for x in xs]
    fit = stats.linregress(logs, ys)
    dof = len(xs) - 2  # >= 1: check_xs wants 3 runs
    half = float(stats.t.ppf(0.5 + level / 2, dof) * fit.stderr)
    half = 0.0 if math.isnan(half) else half  # a perfect fit: no residual spread
    centre_log_x, centre_y = sum(logs) / len(logs), sum(ys) / len(ys)
    return Trend(points=len(xs), slope=float(fit.slope), slope_low=float(fit.slope) - half,
                 slope_high=float(fit.slope) + half, centre_log_x=centre_log_x, centre_y=centre_y,
                 r_squared=float(fit.rvalue ** 2), level=level)


def check_xs(xs: Sequence[float]) -> None:
    """Refuse, in words, the x a log-scale line cannot be fitted to (called before any model is run)."""
    if len(xs) < 3:
        raise CompressError("a trend needs at least 3 runs (it fits 2 numbers and keeps 1 for the noise); "
                            f"got {len(xs)}")
    bad = [x for x in xs if not x > 0]
    if bad:
        raise CompressError(f"a log-scale trend needs every x > 0; got {bad[0]!r}: use a count that includes the "
                            f"labelled rows, such as {DEFAULT_KEY}")
    if len({math.log10(x) for x in xs}) < 2:
        raise CompressError(f"a trend needs runs at 2 or more different x; every run has x = {xs[0]:g}")


def training_rows(meta: dict[str, Any], where: str) -> float:
    """The rows a run was distilled on, labelled + transfer: ``training.rows``, which every distiller writes (a
    long text's windows count one each). Artifacts written before it was recorded give what their transfer record
    holds: a classifier's ``transfer.total``, a tagger's labelled sentences plus ``transfer.training_rows``, or
    the labelled sentences alone when ``transfer`` is null."""
    if isinstance(meta.get("training"), dict) and "rows" in meta["training"]:
        return meta_value(meta, "training.rows", where)
    transfer = meta.get("transfer")
    if isinstance(transfer, dict) and "total" in transfer:
        return meta_value(meta, "transfer.total", where)
    labelled = meta_value(meta, "data.sizes.train", where)
    if transfer is None:
        return labelled
    if isinstance(transfer, dict) and "training_rows" in transfer:
        return labelled + meta_value(meta, "transfer.training_rows", where)
    raise CompressError(f"{where}: compress.json records neither training.rows nor how many transfer rows it trained "
                        "on; give --trend a dotted key that does (for example training.global_steps)")


def run_x(meta: dict[str, Any], key: str, where: str) -> float:
    """A run's x for ``--trend KEY``: :func:`training_rows` for ``rows``, else the number at dotted ``key``."""
    return training_rows(meta, where) if key == DEFAULT_KEY else meta_value(meta, key, where)


def meta_value(meta: dict[str, Any], key: str, where: str) -> float:
    """The number at dotted ``key`` of a run's ``compress.json`` (``where`` names the run in the error)."""
    node: Any = meta
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise CompressError(f"{where}: compress.json has no {key!r} (missing {part!r}); give --trend a key the "
                                f"run records, or {DEFAULT_KEY}")
        node = node[part]
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise CompressError(f"{where}: compress.json's {key!r} is {node!r}, not a number")
    return float(node)


@dataclass(frozen=True)
class TrendGroup:
    """One row of runs: its name and every run's ``(x, metric)``."""

    name: str
    points: list[tuple[float, float]]

    @property
    def mean_x(self) -> float:
        return sum(x for x, _ in self.points) / len(self.points)

    @property
    def mean_y(self) -> float:
        return sum(y for _, y in self.points) / len(self.points)


def fit_groups(groups: Sequence[TrendGroup], level: float = 0.95) -> Trend:
    xs = [x for g in groups for x, _ in g.points]
    ys = [y for g in groups for _, y in g.points]
    return fit_log_trend(xs, ys, level)


def _fmt_x(x: float | None) -> str:
    if x is None:
        return "never (the slope's interval reaches 0)"
    return f"{x:,.0f}" if x < 1e7 else f"{x:.1e}"


def trend_lines(groups: Sequence[TrendGroup], trend: Trend, metric: str, key: str,
                target: float | None = None, target_label: str = "") -> list[str]:
    """The Markdown table of the groups (x, runs, mean metric, the line's value) and the fit in words."""
    lines = [f"| run | {key} | runs | {metric} (mean) | the fitted line |", "|---|---:|---:|---:|---:|"]
    for g in sorted(groups, key=lambda g: g.mean_x):
        x_text = ", ".join(f"{x:,.0f}" for x in sorted({x for x, _ in g.points}))
        lines.append(f"| {g.name} | {x_text} | {len(g.points)} | {100 * g.mean_y:.2f} "
                     f"| {100 * trend.at(g.mean_x):.2f} |")
    pct = int(round(100 * trend.level))
    lines += ["", f"- fit over {trend.points} runs: {metric} = {100 * trend.centre_y:.2f} "
              f"{'+' if trend.slope >= 0 else '-'} {100 * abs(trend.slope):.2f} pt x log10({key} / "
              f"{10 ** trend.centre_log_x:,.0f}); per tenfold {100 * trend.slope:+.2f} pt, {pct}% interval "
              f"[{100 * trend.slope_low:+.2f}, {100 * trend.slope_high:+.2f}], R^2 {trend.r_squared:.2f}"]
    if target is not None:
        largest = max(x for g in groups for x, _ in g.points)
        at = trend.x_reaching(target)
        near, far = trend.reach_range(target)
        where = f"{target_label} = {100 * target:.2f}" if target_label else f"{100 * target:.2f}"
        words = f"- the line reaches {where} at {key} = {_fmt_x(at)}"
        if at is not None:
            words += f" (from the slope's interval: {_fmt_x(near)} to {_fmt_x(far)})"
            if at > largest:
                words += f"; an extrapolation past the largest measured ({largest:,.0f}), {at / largest:,.1f}x it"
        lines.append(words)
    return lines


def plot_trend(groups: Sequence[TrendGroup], trend: Trend, path: Path, metric: str, key: str,
               target: float | None = None, target_label: str = "target") -> Path:
    """Every run as a point, each group's mean as a ring, the fitted line over the measured x and, dotted, on to
    the target's x when that is past them, on a log x axis."""
    from benchmarks.report import agg_figure

    fig = agg_figure(7, 4.5)
    ax = fig.add_subplot()
    xs = [x for g in groups for x, _ in g.points]
    ax.scatter(xs, [100 * y for g in groups for _, y in g.points], color="tab:blue", s=18, zorder=3,
               label="one run (seed)")
    for g in groups:
        ax.scatter([g.mean_x], [100 * g.mean_y], s=110, facecolors="none", edgecolors="tab:blue", zorder=3)
        ax.annotate(g.name, (g.mean_x, 100 * g.mean_y), textcoords="offset points", xytext=(8, -14), fontsize=8)
    lo, hi = min(xs), max(xs)
    ax.plot([lo, hi], [100 * trend.at(lo), 100 * trend.at(hi)], color="tab:orange",
            label=f"fit: {100 * trend.slope:+.2f} pt per tenfold")
    reach = trend.x_reaching(target) if target is not None else None
    if reach is not None and reach > hi:  # the extrapolation, dotted, and cut at 1000x what was measured
        far = min(reach, 1000 * hi)
        ax.plot([hi, far], [100 * trend.at(hi), 100 * trend.at(far)], color="tab:orange", linestyle=":",
                label="the same line, extrapolated")
    if target is not None:
        ax.axhline(100 * target, color="tab:green", linestyle="--", label=target_label)
    ax.set_xscale("log")
    ax.set_xlabel(f"{key} (log scale)")
    ax.set_ylabel(f"{metric}, %")
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(loc="lower right", fontsize=8)
    fig.savefig(path, dpi=120)
    return path
