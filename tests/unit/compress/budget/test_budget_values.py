"""``budget:`` values as people write them, and a bad one reported as one line naming the recipe's line."""

from __future__ import annotations

import pytest

from compress.budget.duration import parse_budget
from compress.core.errors import CompressError
from compress.pipeline import load_recipe


@pytest.mark.parametrize("text, seconds", [("30m", 1800), ("1h", 3600), ("90s", 90), ("1h30m", 5400),
                                           ("2.5m", 150), (45, 2700), ("45", 2700), (" 20 m ", 1200)])
def test_durations(text, seconds):
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("bad", ["soon", "30x", "m", "", "-5m", 0, "0m", True, [30]])
def test_bad_durations_say_how_to_write_one(bad):
    with pytest.raises(ValueError, match="30m, 1h, 90s"):
        parse_budget(bad)


def test_a_bad_budget_names_its_recipe_line(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("out: o\ndata: movie-reviews\nbudget: half an hour\nexport: {}\n")
    with pytest.raises(CompressError) as err:
        load_recipe(recipe)
    assert str(err.value).splitlines()[1:] == [f"  {recipe}:3: budget 'half an hour' is not a duration; write it as 30m, 1h, 90s or 1h30m"]


def test_elastic_knobs_are_checked_against_the_recipe(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("\n".join([
        "out: o", "data: movie-reviews", "budget: 1h",
        "teacher: {model: mpnet-base, epochs: 1}",
        "distill: {student: tinybert-6l-384, unlabeled: movie-reviews-unlabeled, epochs: 2}",
        "elastic:",
        "  warp_speed: {min: 1, cost: 0}",                    # 7: no such knob
        "  transfer_rows: {min: 2000, cost: 1.0}",            # 8: distill.unlabeled_limit is not set
        "  student_epochs: {min: 3, cost: 0.2}",              # 9: the bound is above the recipe's 2 epochs
        "  teacher_frozen_layers: {min: 2, cost: 0.1}",       # 10: frozen layers save time upwards
        "  bench_runs: {min: 5, cost: 0}",                    # 11: no bench stage
        "  teacher_epochs: {min: 0.5, cost: -1}",             # 12: a negative cost
    ]) + "\n")
    with pytest.raises(CompressError) as err:
        load_recipe(recipe)
    message = str(err.value)
    assert "has 6 problem(s)" in message
    for line, words in [(7, "unknown elastic knob 'warp_speed'"), (8, "needs distill.unlabeled_limit set"),
                        (9, "min 3 is above the recipe's distill.epochs 2"), (10, "its bound is max"),
                        (11, "the recipe has no bench stage"), (12, "cost must be a number >= 0")]:
        assert f"{recipe}:{line}: " in message and words in message, (line, words)
