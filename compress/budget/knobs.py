"""The knobs a recipe may mark elastic: the one place that says which stage setting each is, which way saves
time, how far the planner moves it at a time, and what the recipe's ``cost`` is counted per.

A recipe marks a knob elastic with its bound and its accuracy cost, from the measured tables::

    elastic:
      transfer_rows: {min: 2000, cost: 1.0}   # points per tenfold fewer rows (docs/ablation.md, size curve)
      bench_runs: {min: 8, cost: 0}           # rounds buy timing precision, not accuracy

The bound is on the side that saves time (``min`` for a count the plan may lower, ``max`` for frozen
layers, which it may raise); the cost is the points of the deployed model's metric one unit is expected
to lose (:attr:`Knob.unit`). The numbers live in the recipe, beside the table they come from, because
they are measured per task.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

_NUMBER = (int, float)


@dataclass(frozen=True)
class Knob:
    """One setting the planner may scale: where it is, which way saves time, and its cost's unit."""

    name: str
    stage: str
    #: Attribute path in the stage's config (``train.epochs``); ``key`` is its recipe key.
    field: str
    key: str
    label: str
    #: ``min``: lowering the value saves time; ``max``: raising it does (frozen layers).
    bound: str
    #: How far one planner move changes the value.
    step: float
    integer: bool
    #: What one unit of the recipe's ``cost`` is.
    unit: str
    #: The cost is per tenfold of the rows distilled on (labelled + transfer), not per unit of the value.
    per_tenfold_rows: bool = False


KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob("transfer_rows", "distill", "unlabeled_limit", "unlabeled_limit", "transfer rows", "min", 500, True,
         "tenfold fewer rows distilled on (labelled + transfer)", per_tenfold_rows=True),
    Knob("student_epochs", "distill", "train.epochs", "epochs", "student epochs", "min", 0.25, False, "epoch"),
    Knob("teacher_epochs", "teacher", "train.epochs", "epochs", "teacher epochs", "min", 0.25, False, "epoch"),
    Knob("teacher_frozen_layers", "teacher", "freeze_layers", "freeze_layers", "frozen teacher layers", "max", 1,
         True, "layer"),
    Knob("recover_epochs", "prune", "train.epochs", "recover_epochs", "pruning recovery epochs", "min", 0.25, False,
         "epoch"),
    Knob("optimize_runs", "optimize", "runs", "runs", "optimize rounds", "min", 1, True, "round"),
    Knob("bench_runs", "bench", "runs", "runs", "bench rounds", "min", 1, True, "round"),
    Knob("bench_requests", "bench", "traffic_limit", "traffic_limit", "replayed requests", "min", 25, True,
         "request"),
)}


def get_value(config: Any, path: str) -> Any:
    """The value at a dotted attribute path of a config."""
    for part in path.split("."):
        config = getattr(config, part)
    return config


def with_value(config: Any, path: str, value: Any) -> Any:
    """A copy of a (nested) dataclass config with the value at a dotted path replaced."""
    head, _, rest = path.partition(".")
    if not rest:
        return dataclasses.replace(config, **{head: value})
    return dataclasses.replace(config, **{head: with_value(getattr(config, head), rest, value)})


@dataclass(frozen=True)
class ElasticKnob:
    """A knob as a recipe marked it: its bound, its cost per unit, and the recipe's own value."""

    knob: Knob
    bound: float
    cost: float
    value: float

    def moves(self) -> list[float]:
        """The values the planner may try, one step at a time from the recipe's toward the bound."""
        sign = -1 if self.knob.bound == "min" else 1
        values, v = [], self.value
        while (v - self.bound) * sign < 0:
            v = v + sign * self.knob.step
            v = min(v, self.bound) if sign > 0 else max(v, self.bound)
            values.append(int(round(v)) if self.knob.integer else round(v, 4))
        return values

    def points(self, value: float, labelled_rows: int = 0) -> float:
        """Expected accuracy points lost moving from the recipe's value to ``value``."""
        if self.knob.per_tenfold_rows:
            return self.cost * math.log10((labelled_rows + self.value) / max(labelled_rows + value, 1))
        return self.cost * abs(self.value - value)

    def to_dict(self) -> dict[str, Any]:
        return {"knob": self.knob.name, self.knob.bound: self.bound, "cost": self.cost, "value": self.value}


def _integral(value: float) -> bool:
    return float(value).is_integer()


def parse_elastic(section: Any, where: Callable[..., str], stages: Mapping[str, Any]) -> tuple[list[ElasticKnob], list[str]]:
    """A recipe's ``elastic:`` section against the knobs and the recipe's stage configs: ``(knobs, problems)``,
    each problem one line starting with its recipe line (``where('elastic', name)``)."""
    if section is None:
        return [], []
    if not isinstance(section, Mapping):
        return [], [f"{where('elastic')}: elastic must be a mapping of knobs such as "
                    "transfer_rows: {min: 2000, cost: 1.0}"]
    knobs, problems = [], []
    for raw_name, spec in section.items():
        name = str(raw_name).replace("-", "_")
        at = where("elastic", name)
        knob = KNOBS.get(name)
        if knob is None:
            problems.append(f"{at}: unknown elastic knob {name!r}; knobs: {', '.join(KNOBS)}")
            continue
        if not isinstance(spec, Mapping):
            problems.append(f"{at}: elastic.{name} must be a mapping such as {{{knob.bound}: N, cost: POINTS}}")
            continue
        spec = {str(k).replace("-", "_"): v for k, v in spec.items()}
        extra = sorted(set(spec) - {knob.bound, "cost"})
        if extra:
            other = "max" if knob.bound == "min" else "min"
            why = (f"; {knob.label} save time the other way, so its bound is {knob.bound}" if other in extra else "")
            problems.append(f"{at}: elastic.{name} takes {knob.bound} and cost, not {', '.join(extra)}{why}")
            continue
        bound, cost = spec.get(knob.bound), spec.get("cost")
        if not isinstance(bound, _NUMBER) or isinstance(bound, bool) or (knob.integer and not _integral(bound)) \
                or bound < 0:
            kind = "a whole number" if knob.integer else "a number"
            problems.append(f"{at}: elastic.{name}.{knob.bound} must be {kind} >= 0, got {bound!r}")
            continue
        if not isinstance(cost, _NUMBER) or isinstance(cost, bool) or cost < 0:
            problems.append(f"{at}: elastic.{name}.cost must be a number >= 0 (accuracy points per {knob.unit}), "
                            f"got {cost!r}")
            continue
        config = stages.get(knob.stage)
        if config is None:
            problems.append(f"{at}: elastic.{name} scales {knob.stage}.{knob.key}, but the recipe has no "
                            f"{knob.stage} stage")
            continue
        value = get_value(config, knob.field)
        if value is None:
            problems.append(f"{at}: elastic.{name} needs {knob.stage}.{knob.key} set in the recipe (the value the "
                            "plan starts from)")
            continue
        if (knob.bound == "min" and bound > value) or (knob.bound == "max" and bound < value):
            side = "above" if knob.bound == "min" else "below"
            problems.append(f"{at}: elastic.{name}.{knob.bound} {bound:g} is {side} the recipe's {knob.stage}."
                            f"{knob.key} {value:g}; a bound is where the plan may go to save time")
            continue
        knobs.append(ElasticKnob(knob, float(bound), float(cost), float(value)))
    return knobs, problems
