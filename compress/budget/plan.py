"""Each stage's time from a :class:`~compress.budget.measure.SpeedMeasurement`, and the plan that fits a budget.

The time model is the measured unit times times the work the stage's config asks for: a training stage's
optimiser steps (rows / batch x epochs, as the Trainer counts them, ``min_steps`` and ``max_steps`` included)
at the measured step time, the rows the teacher labels and the rows each evaluation scores at the measured
per-row times, and the timing stages' rounds at the measured round times. A stage also pays the measured loads
of what it reads: the data, and the teacher's weights.

When the estimate is over the budget, :func:`make_plan` moves the recipe's elastic knobs
(:mod:`compress.budget.knobs`) one step at a time, each time the step with the fewest expected accuracy points
per second saved, until the estimate fits or every knob is at its bound (then the smallest plan runs, or
``--strict-budget`` stops).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from compress.budget.duration import format_minutes
from compress.budget.knobs import ElasticKnob, KNOBS, with_value
from compress.budget.measure import SpeedMeasurement


def _steps(train: Any, rows: int) -> int:
    """Optimiser steps the Trainer takes over ``rows`` (compress.stages.training.training_arguments' count)."""
    if train.max_steps > 0:
        return int(train.max_steps)
    per_epoch = -(-rows // max(train.batch_size * train.grad_accum, 1))
    epochs = train.epochs
    if train.min_steps > 0 and epochs > 0 and per_epoch > 0 and per_epoch * epochs < train.min_steps:
        epochs = float(math.ceil(train.min_steps / per_epoch))
    return int(per_epoch * max(epochs, 0))


def _scored(m: SpeedMeasurement) -> int:
    return m.rows.get("validation", 0) + m.rows.get("test", 0)


def transfer_rows(cfg: Any, m: SpeedMeasurement) -> int:
    """Model rows the transfer set adds to distillation (its limit, capped by the corpus when it was counted)."""
    if not getattr(cfg, "unlabeled", None):
        return 0
    limit, available = cfg.unlabeled_limit, m.rows.get("transfer", 0)
    count = min(limit, available) if limit is not None and available else (limit or available)
    return int(round(count * m.windows_per_row))


def teacher_seconds(cfg: Any, m: SpeedMeasurement) -> float:
    steps = _steps(cfg.train, m.rows.get("train", 0)) if cfg.finetune is not False else 0
    best = cfg.train.epochs * m.rows.get("validation", 0) * m.teacher_row_s if cfg.train.keep_best else 0.0
    return m.data_s + m.model_s + steps * m.teacher_step(cfg.freeze_layers) + _scored(m) * m.teacher_row_s + best


def distill_seconds(cfg: Any, m: SpeedMeasurement) -> float:
    rows = m.rows.get("train", 0) * (1 + cfg.augment) + transfer_rows(cfg, m)
    steps = _steps(cfg.train, rows)
    # Every row is labelled by the teacher once (a cache of earlier runs' labels makes it shorter).
    labels = rows * m.teacher_row_s
    per_step = m.student_step_s
    if getattr(cfg, "wants_intermediate", False):  # the teacher's states are computed on every batch
        per_step += cfg.train.batch_size * m.teacher_row_s
    evaluate = (cfg.train.epochs * m.rows.get("validation", 0) + _scored(m)) * m.student_row_s
    return m.data_s + m.model_s + labels + steps * per_step + evaluate


def prune_seconds(cfg: Any, m: SpeedMeasurement) -> float:
    steps = _steps(cfg.train, m.rows.get("train", 0))
    teacher = cfg.train.batch_size * m.teacher_row_s if cfg.teacher else 0.0
    importance = cfg.importance_batches * cfg.train.batch_size * m.student_row_s * 3  # forward + backward
    return m.data_s + (m.model_s if cfg.teacher else 0.0) + steps * (m.student_step_s + teacher) + importance + 2 * _scored(m) * m.student_row_s


def export_seconds(cfg: Any, m: SpeedMeasurement) -> float:
    return m.export_s


def quantize_seconds(cfg: Any, m: SpeedMeasurement) -> float:
    return m.data_s + m.export_s + 2 * _scored(m) * m.student_row_s


def optimize_seconds(cfg: Any, m: SpeedMeasurement) -> float:
    from compress.config import OPTIMIZE_CANDIDATES

    candidates = [c for c in (cfg.candidates or ",".join(OPTIMIZE_CANDIDATES)).split(",") if c.strip()]
    build = len(candidates) * (m.export_s + m.rows.get("validation", 0) * m.student_row_s)
    rounds = (cfg.warmup + cfg.runs) * (len(candidates) + 1) * sum(
        m.round("student", b, cfg.seq_len) for b in cfg.batch_sizes)
    return m.data_s + build + rounds


def bench_seconds(cfg: Any, m: SpeedMeasurement) -> float:
    from compress.config import FULL, QUICK

    preset = QUICK if cfg.quick else FULL
    warmup = cfg.warmup if cfg.warmup is not None else preset["warmup"]
    runs = cfg.runs if cfg.runs is not None else preset["runs"]
    shapes = [(b, s) for b in (cfg.batch_sizes or preset["batch_sizes"]) for s in (cfg.seq_lens or preset["seq_lens"])]
    students = len([a for a in cfg.artifacts if a != cfg.reference])
    timing = (warmup + runs) * sum(m.round("teacher", b, s) + students * m.round("student", b, s) for b, s in shapes)
    test = m.rows.get("test", 0) if cfg.data.limit is None else min(cfg.data.limit, m.rows.get("test", 0))
    accuracy = test * (m.teacher_fp32_row_s + students * m.student_row_s)
    traffic = 0.0
    if cfg.traffic:  # each request replayed alone (batch 1) at about its real length
        requests = cfg.traffic_limit or test
        traffic = requests * (m.teacher_fp32_row_s + students * m.student_row_s)
    return m.data_s + m.model_s + timing + accuracy + traffic


#: Stage -> its time model; a stage not here (the gate, a plugin's) is estimated at 0 s and said so.
ESTIMATORS: dict[str, Callable[[Any, SpeedMeasurement], float]] = {
    "teacher": teacher_seconds, "distill": distill_seconds, "prune": prune_seconds, "export": export_seconds,
    "quantize": quantize_seconds, "optimize": optimize_seconds, "bench": bench_seconds,
}


def estimate(configs: Mapping[str, Any], m: SpeedMeasurement) -> dict[str, float]:
    """Seconds per stage, in the recipe's order."""
    return {stage: round(ESTIMATORS[stage](cfg, m), 1) if stage in ESTIMATORS else 0.0
            for stage, cfg in configs.items()}


@dataclass
class Change:
    """One knob the plan moved: from the recipe's value to the plan's, what it is expected to cost and save."""

    knob: str
    stage: str
    field: str
    before: float
    after: float
    points: float
    saves_s: float

    def line(self) -> str:
        label = KNOBS[self.knob].label
        cost = f"about -{self.points:.1f} points" if self.points >= 0.05 else "no accuracy cost expected"
        return f"{label} {_value(self.before)} -> {_value(self.after)}: {cost}, saves {format_minutes(self.saves_s)}"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _value(v: float) -> str:
    return f"{int(v):,}" if float(v).is_integer() else f"{v:g}"


@dataclass
class Plan:
    """What a budgeted run decided: the budget, the estimate per stage before and after, and the changes."""

    budget_s: float
    measurement: SpeedMeasurement
    before: dict[str, float]
    estimates: dict[str, float]
    changes: list[Change] = field(default_factory=list)
    elastic: list[dict[str, Any]] = field(default_factory=list)

    @property
    def total_s(self) -> float:
        """The run's estimate: the measurement (already spent) and every stage."""
        return self.measurement.seconds + sum(self.estimates.values())

    @property
    def fits(self) -> bool:
        return self.total_s <= self.budget_s

    def lines(self) -> list[str]:
        """The plan as printed before the run starts."""
        m = self.measurement
        out = [f"budget {format_minutes(self.budget_s)}; measured this machine in {m.seconds:.0f} s ({m.cpu}, "
               f"{m.precision})"]
        width = max((len(s) for s in self.estimates), default=5)
        for stage, seconds in self.estimates.items():
            was = self.before.get(stage, seconds)
            changed = f"  (recipe as written: {format_minutes(was)})" if abs(was - seconds) >= 0.5 else ""
            out.append(f"  {stage:<{width}}  {format_minutes(seconds):>9}{changed}")
        before_total = m.seconds + sum(self.before.values())
        if not self.changes:
            verdict = "fits; the recipe runs as written" if self.fits else "over the budget, with nothing to scale"
            out.append(f"  {'total':<{width}}  {format_minutes(self.total_s):>9} with the measurement: {verdict}")
        else:
            out.append(f"  {'total':<{width}}  {format_minutes(self.total_s):>9} with the measurement (the recipe as "
                       f"written: {format_minutes(before_total)}); scaled, fewest accuracy points per minute first:")
            out += [f"  {c.line()}" for c in self.changes]
        if self.changes and not self.fits:
            out.append(f"even the smallest plan (every elastic knob at its bound) is estimated at "
                       f"{format_minutes(self.total_s)}, over the budget of {format_minutes(self.budget_s)}")
        out += [f"  note: {n}" for n in m.notes]
        return out

    def artifact_record(self, stage: str) -> dict[str, Any]:
        """What an artifact's ``compress.json`` records of the plan it was made under (``budget_plan``)."""
        return {"budget_s": self.budget_s, "fits": self.fits, "total_s": round(self.total_s, 1),
                "stage_estimate_s": self.estimates.get(stage), "changes": [c.to_dict() for c in self.changes]}

    def to_dict(self) -> dict[str, Any]:
        return {"budget_s": self.budget_s, "fits": self.fits, "total_s": round(self.total_s, 1),
                "estimates": self.estimates, "before": self.before, "changes": [c.to_dict() for c in self.changes],
                "elastic": self.elastic, "measurement": self.measurement.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Plan":
        return cls(float(data["budget_s"]), SpeedMeasurement.from_dict(data["measurement"]), dict(data["before"]),
                   dict(data["estimates"]), [Change(**c) for c in data.get("changes", [])],
                   list(data.get("elastic", [])))


def apply_changes(configs: Mapping[str, Any], changes: Sequence[Change]) -> dict[str, Any]:
    """The stage configs with the plan's values in place (the values the stages run, and are identified, with)."""
    out = dict(configs)
    for c in changes:
        knob = KNOBS[c.knob]
        value = int(round(c.after)) if knob.integer else float(c.after)
        out[c.stage] = with_value(out[c.stage], c.field, value)
    return out


def make_plan(configs: Mapping[str, Any], elastic: Sequence[ElasticKnob], m: SpeedMeasurement,
              budget_s: float) -> Plan:
    """The plan for ``configs`` (stage -> config, in recipe order) within ``budget_s``, the measurement included.

    Greedy by marginal price: each move is the one step of one knob that costs the fewest expected points per
    second it saves (free knobs first, the bigger saving on a tie), so a cheap knob is used up before a dear one
    is touched, and a knob whose cost grows as it shrinks (rows, per tenfold) yields to another when it gets dear.
    """
    before = estimate(configs, m)
    current = dict(configs)
    available = budget_s - m.seconds
    total = sum(before.values())
    at = {k.knob.name: k.value for k in elastic}
    moves = {k.knob.name: k.moves() for k in elastic}
    tried = {k.knob.name: 0 for k in elastic}  # moves[name][tried[name]] is the knob's next value to try
    saved: dict[str, float] = {}
    order: list[str] = []
    labelled = m.rows.get("train", 0)
    while total > available:
        best, skipped = None, False
        for k in elastic:
            name = k.knob.name
            if tried[name] >= len(moves[name]):
                continue
            value = moves[name][tried[name]]
            trial = dict(current)
            trial[k.knob.stage] = with_value(current[k.knob.stage], k.knob.field,
                                            int(value) if k.knob.integer else float(value))
            new_total = sum(estimate(trial, m).values())
            gain = total - new_total
            if gain <= 0:  # a step that saves nothing (min_steps holds the steps): try the one past it
                tried[name] += 1
                skipped = True
                continue
            price = (k.points(value, labelled) - k.points(at[name], labelled)) / gain
            if best is None or (price, -gain) < (best[0], -best[1]):
                best = (price, gain, k, value, trial, new_total)
        if best is None:
            if skipped:
                continue
            break
        _, gain, k, value, trial, new_total = best
        name = k.knob.name
        at[name], current, total = value, trial, new_total
        tried[name] += 1
        saved[name] = saved.get(name, 0.0) + gain
        if name not in order:
            order.append(name)
    by_name = {k.knob.name: k for k in elastic}
    changes = [Change(name, by_name[name].knob.stage, by_name[name].knob.field, by_name[name].value, at[name],
                      round(by_name[name].points(at[name], labelled), 2), round(saved[name], 1)) for name in order]
    return Plan(budget_s, m, before, estimate(current, m), changes, [k.to_dict() for k in elastic])


__all__ = ["Change", "ESTIMATORS", "Plan", "apply_changes", "estimate", "make_plan", "transfer_rows"]
