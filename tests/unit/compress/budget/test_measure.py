"""The real measurement on a tiny model and a small CSV: every unit time the planner reads is measured, the
data's rows are counted, and the plan estimates every stage from it."""

from __future__ import annotations

from compress.budget.measure import SpeedMeasurement, padded_length, round_key
from compress.budget.measure import measure_recipe
from compress.budget.plan import make_plan
from compress.pipeline import load_recipe


def test_padded_length_of_length_grouped_batches():
    assert padded_length([3, 9, 4, 10], 2) == 7  # batches [3, 4] and [9, 10], padded to 4 and 10
    assert padded_length([5] * 7, 64) == 5


def test_the_measurement_of_a_tiny_recipe(tmp_path, sentiment_csv, tiny_encoder):
    path = tmp_path / "tiny.yaml"
    path.write_text("\n".join([
        f"out: {tmp_path / 'run'}", f"data: {sentiment_csv}", "budget: 5m",
        f"teacher: {{model: {tiny_encoder}, epochs: 1, batch_size: 8, max_length: 32, precision: fp32}}",
        "distill: {student: 2x32, init: random, epochs: 1, batch_size: 8, max_length: 32, precision: fp32}",
        "export: {}", "bench: {batch_sizes: [1, 4], seq_lens: [16], runs: 5, warmup: 1}",
        "elastic:", "  teacher_frozen_layers: {max: 2, cost: 0.1}", "  bench_runs: {min: 2, cost: 0}",
    ]) + "\n")
    recipe = load_recipe(path)
    m = measure_recipe(recipe, frozen=[2])
    sizes = recipe.data.load_any().sizes()
    assert m.rows == {**sizes, "transfer": 0} and sum(sizes.values()) == 240
    assert sorted(m.teacher_step_s) == [0, 2] and all(v > 0 for v in m.teacher_step_s.values())
    assert min(m.teacher_row_s, m.student_step_s, m.student_row_s, m.teacher_fp32_row_s, m.export_s) > 0
    assert set(m.round_s) == {round_key(w, b, 16) for w in ("teacher", "student") for b in (1, 4)}
    assert m.precision == "fp32" and m.seconds > 0
    assert [n for n in m.notes if not n.startswith("other work was running")] == []  # a shared machine says so
    assert SpeedMeasurement.from_dict(m.to_dict()) == m  # what plan.json keeps reads back the same
    plan = make_plan({c.stage: c.config for c in recipe.calls}, recipe.elastic, m, recipe.budget_s)
    assert all(plan.estimates[s] > 0 for s in ("teacher", "distill", "export", "bench"))


def test_a_frozen_layer_bound_past_the_teacher_s_layers_names_the_knob(tmp_path, sentiment_csv, tiny_encoder):
    import pytest

    from compress.core.errors import CompressError

    path = tmp_path / "tiny.yaml"
    path.write_text("\n".join([
        f"out: {tmp_path / 'run'}", f"data: {sentiment_csv}", "budget: 5m",
        f"teacher: {{model: {tiny_encoder}, epochs: 1, batch_size: 8, max_length: 32, precision: fp32}}",
        "elastic:", "  teacher_frozen_layers: {max: 9, cost: 0.1}",
    ]) + "\n")
    recipe = load_recipe(path)
    with pytest.raises(CompressError, match=r"elastic.teacher_frozen_layers or teacher.freeze_layers: "
                                            r"--freeze-layers 9: the model has 4 encoder layers"):
        measure_recipe(recipe, frozen=[9])
