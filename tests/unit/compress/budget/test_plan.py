"""The planner on constructed speed measurements: a fast machine gets the recipe as written, a slow one the
elastic knobs scaled in price order within their bounds, and one too slow for any plan is told so."""

from __future__ import annotations

import dataclasses

import pytest

from compress.budget.knobs import KNOBS, get_value, with_value
from compress.budget.plan import apply_changes, estimate, make_plan
from compress.pipeline import load_recipe
from tests.support.budget import demo_recipe, make_measurement  # noqa: F401  (fixtures)


def _plan(recipe_path, m, budget_s=None):
    recipe = load_recipe(recipe_path)
    configs = {c.stage: c.config for c in recipe.calls}
    return recipe, configs, make_plan(configs, recipe.elastic, m, budget_s or recipe.budget_s)


def test_a_fast_machine_gets_the_recipe_as_written(demo_recipe, make_measurement):
    for speed in (1.0, 2.0):  # about the AVX-512 EPYC this recipe was measured on, and twice its speed
        recipe, configs, plan = _plan(demo_recipe, make_measurement(speed))
        assert plan.changes == [] and plan.fits
        assert plan.estimates == plan.before
        assert apply_changes(configs, plan.changes) == configs
        assert "fits; the recipe runs as written" in "\n".join(plan.lines())


def test_the_estimate_counts_the_measurement_and_every_stage(demo_recipe, make_measurement):
    m = make_measurement()
    _, configs, plan = _plan(demo_recipe, m)
    assert list(plan.estimates) == ["teacher", "distill", "export", "optimize", "bench", "gate"]
    assert plan.total_s == pytest.approx(m.seconds + sum(plan.estimates.values()))
    # the data and the teacher's weights loaded, 265 steps (8,452 rows / 32, one epoch), 2,114 rows scored
    assert plan.estimates["teacher"] == pytest.approx(2.0 + 6.0 + 265 * 1.9 + 2114 * 0.009, abs=0.2)
    assert plan.estimates["export"] == 3.0
    # more transfer rows cost distillation time: the time model reads the knob's setting
    more = dict(configs, distill=dataclasses.replace(configs["distill"], unlabeled_limit=20000))
    assert estimate(more, m)["distill"] > plan.estimates["distill"]


def test_a_slow_machine_scales_the_knobs_in_price_order_within_bounds(demo_recipe, make_measurement):
    m = make_measurement(speed=0.6)
    recipe, configs, plan = _plan(demo_recipe, m)
    assert plan.before != plan.estimates and plan.changes
    assert plan.fits and plan.total_s <= recipe.budget_s
    bounds = {k.knob.name: k for k in recipe.elastic}
    planned = apply_changes(configs, plan.changes)
    for change in plan.changes:
        knob, marked = KNOBS[change.knob], bounds[change.knob]
        value = get_value(planned[knob.stage], knob.field)
        assert value == change.after != change.before
        low, high = sorted((marked.bound, marked.value))
        assert low <= value <= high, change
        assert change.saves_s > 0 and change.points >= 0
    names = [c.knob for c in plan.changes]
    # the free knobs (timing rounds) are used up first, at their bounds
    free = [k.knob.name for k in recipe.elastic if k.cost == 0]
    assert names[:len(free)] == free
    assert all(get_value(planned[KNOBS[n].stage], KNOBS[n].field) == bounds[n].bound for n in free)
    # each change is explained in a line: from, to, the points and the minutes
    line = next(c for c in plan.changes if c.knob == "transfer_rows").line()
    assert line.startswith("transfer rows 10,000 -> ") and "points, saves" in line and line.endswith("min")


def test_a_cheaper_knob_is_used_before_a_dearer_one(demo_recipe, make_measurement):
    m = make_measurement()
    _, _, whole = _plan(demo_recipe, m)
    # a minute under the recipe as written: more than the free rounds save, a little of one costed knob suffices
    recipe, configs, plan = _plan(demo_recipe, m, budget_s=whole.total_s - 60)
    assert plan.fits and plan.changes
    prices = {k.knob.name: k for k in recipe.elastic}
    moved = [c.knob for c in plan.changes if prices[c.knob].cost > 0]
    assert len(moved) == 1, plan.changes
    # the one moved is the cheapest per second saved of those with a cost, at its first step
    def price(k):
        step = k.moves()[0]
        trial = dict(configs, **{k.knob.stage: with_value(configs[k.knob.stage], k.knob.field, step)})
        gain = sum(estimate(configs, m).values()) - sum(estimate(trial, m).values())
        return k.points(step, m.rows["train"]) / gain
    costed = [k for k in recipe.elastic if k.cost > 0]
    assert moved[0] == min(costed, key=price).knob.name


def test_too_slow_for_any_plan_runs_the_smallest_and_says_so(demo_recipe, make_measurement):
    recipe, configs, plan = _plan(demo_recipe, make_measurement(speed=0.2))
    assert not plan.fits
    planned = apply_changes(configs, plan.changes)
    for k in recipe.elastic:  # the smallest plan: every knob at its bound
        assert get_value(planned[k.knob.stage], k.knob.field) == k.bound, k.knob.name
    last = plan.lines()[-1]
    assert last.startswith("even the smallest plan (every elastic knob at its bound) is estimated at ")
    assert last.endswith("over the budget of 30.0 min")


def test_a_recipe_without_elastic_knobs_is_never_changed(demo_recipe, make_measurement):
    text = demo_recipe.read_text()
    demo_recipe.write_text(text[:text.index("elastic:")] + text[text.index("teacher:"):])
    recipe, configs, plan = _plan(demo_recipe, make_measurement(speed=0.3))
    assert recipe.elastic == [] and plan.changes == [] and not plan.fits
    assert "over the budget, with nothing to scale" in "\n".join(plan.lines())
