"""A budgeted recipe's plan, decided once: measured and planned on the first run, read back on every later one.

The plan is written atomically to ``OUT/.bert-compress-run/plan.json`` with what it was decided for (the
recipe's stage settings, its elastic knobs and the budget). A re-run or a resume of the same recipe and budget
reads it back instead of measuring again, so the stage settings, hence the finished stages' identities
(:mod:`compress.stages.fingerprint`), are the same as when the plan was made and finished stages stay finished.
``replan=True`` (``--replan``) measures and plans again.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from compress.core.artifact import now_iso
from compress.budget.duration import format_minutes
from compress.budget.plan import Plan, apply_changes, make_plan
from compress.config import canonical_sha256
from compress.core.errors import CompressError
from compress.stages.fingerprint import NOT_IDENTITY
from compress.pipeline import RECORD_DIR, Recipe

PLAN_FILE = "plan.json"


def plan_path(recipe: Recipe) -> Path:
    return recipe.out / RECORD_DIR / PLAN_FILE


def decided_for(recipe: Recipe, budget_s: float) -> str:
    """What a plan was made for: the recipe's stage settings as written, its elastic knobs, the budget."""
    configs = {c.stage: {k: v for k, v in c.config.to_dict().items() if k not in NOT_IDENTITY} for c in recipe.calls}
    return canonical_sha256({"stages": configs, "elastic": [k.to_dict() for k in recipe.elastic],
                             "budget_s": budget_s})


def _write_atomically(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _measure_default(recipe: Recipe):
    from compress.budget.measure import measure_recipe

    frozen = [int(k.bound) for k in recipe.elastic if k.knob.name == "teacher_frozen_layers"]
    return measure_recipe(recipe, frozen=frozen)


def decide(recipe: Recipe, budget_s: float, replan: bool = False, strict: bool = False,
           measure: Callable[[Recipe], Any] | None = None, say: Callable[[str], None] = print
           ) -> tuple[Recipe, Plan]:
    """The recipe with its plan's settings in place, and the plan (printed through ``say`` before anything runs).

    ``measure`` takes the recipe and returns a :class:`~compress.budget.measure.SpeedMeasurement` (tests pass
    constructed ones). With ``strict``, a plan that cannot fit raises a one-line :class:`CompressError` and nothing
    is written.
    """
    path = plan_path(recipe)
    key = decided_for(recipe, budget_s)
    saved = None if replan else _read(path)
    plan = None
    if saved is not None and saved.get("decided_for") == key:
        try:
            plan = Plan.from_dict(saved["plan"])
            say(f"[plan] reusing the plan decided {saved.get('decided', '')} ({path}); --replan measures again")
        except (KeyError, TypeError, ValueError):  # written by another version: decided again, not guessed at
            say(f"[plan] {path} cannot be read as a plan; measuring again")
            saved = None
    if plan is None:
        if saved is not None:
            say(f"[plan] the recipe or its budget changed since {path} was decided; measuring again")
        say("[plan] measuring this machine at the recipe's shapes (counted in the budget)...")
        measurement = (measure or _measure_default)(recipe)
        plan = make_plan({c.stage: c.config for c in recipe.calls}, recipe.elastic, measurement, budget_s)
        saved = None
    for line in plan.lines():
        say(f"[plan] {line}")
    if not plan.fits:
        if strict:
            raise CompressError(f"recipe {recipe.path}: the plan is estimated at {format_minutes(plan.total_s)}, over "
                                f"the budget of {format_minutes(budget_s)} (--strict-budget); raise budget: or widen "
                                "the elastic: bounds")
        say(f"[plan] running the smallest plan anyway ({format_minutes(plan.total_s)} estimated against "
            f"{format_minutes(budget_s)}); --strict-budget stops instead")
    if saved is None:
        _write_atomically(path, {"decided_for": key, "decided": now_iso(), "recipe": str(recipe.path),
                                 "plan": plan.to_dict()})
    configs = apply_changes({c.stage: c.config for c in recipe.calls}, plan.changes)
    calls = [replace(c, config=configs[c.stage]) for c in recipe.calls]
    return replace(recipe, calls=calls), plan


__all__ = ["PLAN_FILE", "decide", "decided_for", "plan_path"]
