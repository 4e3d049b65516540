"""A plan is decided once: written to the run folder, reused by a re-run and a resume (so finished stages keep
their identities), measured again with --replan or when the recipe changed; --strict-budget stops instead of
running an over-budget plan; each artifact a budgeted run writes records its plan."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from compress.stages import registry as stages
from compress.budget.decide import decide, plan_path
from compress.budget.plan import make_plan
from compress.config import ConfigBase, canonical_sha256
from compress.core.errors import CompressError
from compress.stages.fingerprint import stage_identity
from compress.pipeline import RECORD_DIR, load_recipe, run_recipe
from compress.stages.registry import Stage
from tests.conftest import run_cli
from tests.support.budget import demo_recipe, make_measurement  # noqa: F401  (fixtures)


class Measurer:
    """Hands out constructed measurements and counts how often the planner asked for one."""

    def __init__(self, make, speed):
        self.make, self.speed, self.calls = make, speed, 0

    def __call__(self, recipe):
        self.calls += 1
        return self.make(self.speed)


def _identities(recipe) -> dict[str, str]:
    return {c.stage: canonical_sha256(stage_identity(c.config)) for c in recipe.calls}


def test_a_rerun_reuses_the_plan_and_keeps_the_stage_identities(demo_recipe, make_measurement):
    slow = Measurer(make_measurement, 0.6)
    first, plan = decide(load_recipe(demo_recipe), 1800, measure=slow, say=lambda s: None)
    assert slow.calls == 1 and plan.changes
    saved = json.loads(plan_path(first).read_text())
    assert saved["plan"]["changes"] == [c.to_dict() for c in plan.changes]
    assert not list(plan_path(first).parent.glob("*.tmp*"))  # written atomically, nothing left beside it

    # a re-run on a machine that now measures fast: the decided plan stands, nothing is measured
    fast = Measurer(make_measurement, 3.0)
    said = []
    again, reused = decide(load_recipe(demo_recipe), 1800, measure=fast, say=said.append)
    assert fast.calls == 0 and said[0].startswith("[plan] reusing the plan decided ")
    assert reused.changes == plan.changes
    assert _identities(again) == _identities(first)


def test_a_resume_finds_its_finished_stage_current(demo_recipe, make_measurement):
    first, _ = decide(load_recipe(demo_recipe), 1800, measure=Measurer(make_measurement, 0.6), say=lambda s: None)
    teacher = next(c for c in first.calls if c.stage == "teacher")
    # what run_recipe records when the teacher finishes, before the run is killed in distillation
    records = first.out / RECORD_DIR
    (records / "teacher.json").write_text(json.dumps({"hash": canonical_sha256(stage_identity(teacher.config))}))
    resumed, _ = decide(load_recipe(demo_recipe), 1800, measure=Measurer(make_measurement, 3.0), say=lambda s: None)
    config = next(c for c in resumed.calls if c.stage == "teacher").config
    assert json.loads((records / "teacher.json").read_text())["hash"] == canonical_sha256(stage_identity(config))


def test_replan_measures_again_and_so_does_a_changed_recipe(demo_recipe, make_measurement):
    decided, plan = decide(load_recipe(demo_recipe), 1800, measure=Measurer(make_measurement, 0.6), say=lambda s: None)
    fast = Measurer(make_measurement, 3.0)
    replanned, fresh = decide(load_recipe(demo_recipe), 1800, replan=True, measure=fast, say=lambda s: None)
    assert fast.calls == 1 and plan.changes and fresh.changes == []
    assert _identities(replanned) != _identities(decided)
    assert _identities(replanned) == _identities(load_recipe(demo_recipe))  # the recipe as written
    # another budget is another plan
    said = []
    decide(load_recipe(demo_recipe), 3600, measure=fast, say=said.append)
    assert fast.calls == 2 and "changed since" in said[0]


def test_strict_budget_stops_with_one_line_and_writes_no_plan(demo_recipe, make_measurement):
    recipe = load_recipe(demo_recipe)
    with pytest.raises(CompressError) as err:
        decide(recipe, 1800, strict=True, measure=Measurer(make_measurement, 0.2), say=lambda s: None)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"recipe {demo_recipe}: the plan is estimated at ")
    assert "over the budget of 30.0 min (--strict-budget)" in message
    assert not plan_path(recipe).exists()
    # without --strict-budget the smallest plan runs, and the run says so
    said = []
    decide(recipe, 1800, measure=Measurer(make_measurement, 0.2), say=said.append)
    assert any(s.startswith("[plan] running the smallest plan anyway") for s in said)


def test_the_command_prints_the_plan_and_stops_with_plan_only(demo_recipe, make_measurement, monkeypatch, capsys):
    from compress.budget import decide as decide_module

    monkeypatch.setattr(decide_module, "_measure_default", Measurer(make_measurement, 1.0))
    result = run_cli(["run", str(demo_recipe), "--budget", "30m", "--plan-only"], capsys)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "[plan] budget 30.0 min; measured this machine in 40 s (constructed, bf16)" in out
    assert "[plan]   teacher " in out and "running ->" not in out  # nothing ran
    monkeypatch.setattr(decide_module, "_measure_default", Measurer(make_measurement, 0.2))
    result = run_cli(["run", str(demo_recipe), "--budget", "30m", "--strict-budget", "--replan"], capsys)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "--strict-budget" in result.stderr


def test_budget_flags_need_a_budget_and_a_bad_one_is_refused(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"out: {tmp_path / 'o'}\ndata: movie-reviews\nexport: {{}}\n")
    result = run_cli(["run", str(recipe), "--replan"], capsys)
    assert result.returncode == 2 and "has no budget: give --budget 30m" in result.stderr
    with pytest.raises(SystemExit):
        run_cli(["run", str(recipe), "--budget", "soon"], capsys)
    assert "write it as 30m, 1h, 90s or 1h30m" in capsys.readouterr().err


@dataclass
class NoteConfig(ConfigBase):
    """A toy stage's settings: the note it writes."""

    text: str = "hello"


def write_note(cfg: NoteConfig, out):
    from compress.core.artifact import write_artifact

    return write_artifact(out, lambda tmp: (tmp / "note.txt").write_text(cfg.text),
                          {"stage": "note", "kind": "toy", "config": cfg.to_dict()})


def test_each_artifact_records_the_plan_and_the_summary_has_the_estimates(tmp_path, make_measurement):
    stages.register(Stage("note", NoteConfig, f"{__name__}:write_note", "note"))
    try:
        path = tmp_path / "r.yaml"
        path.write_text(f"out: {tmp_path / 'o'}\ndata: movie-reviews\nnote: {{text: hi}}\n")
        recipe = load_recipe(path)
        plan = make_plan({"note": recipe.calls[0].config}, [], make_measurement(), 600)
        rows = run_recipe(recipe, budget_plan=plan)
        assert rows[0]["status"] == "ran" and rows[0]["estimate_s"] == 0.0
        meta = json.loads((tmp_path / "o" / "note" / "compress.json").read_text())
        assert meta["budget_plan"] == plan.artifact_record("note") and meta["complete"] is True
        assert [r["status"] for r in run_recipe(load_recipe(path), budget_plan=plan)] == ["skipped"]
    finally:
        stages.unregister("note")


def test_the_summary_shows_each_stage_estimate_beside_its_seconds(tmp_path, make_measurement, monkeypatch, capsys):
    from compress.budget import decide as decide_module

    monkeypatch.setattr(decide_module, "_measure_default", Measurer(make_measurement, 1.0))
    stages.register(Stage("note", NoteConfig, f"{__name__}:write_note", "note"))
    try:
        path = tmp_path / "r.yaml"
        path.write_text(f"out: {tmp_path / 'o'}\ndata: movie-reviews\nbudget: 10m\nnote: {{text: hi}}\n")
        result = run_cli(["run", str(path)], capsys)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert "stage      status      seconds estimate  output" in lines
        assert any(l.startswith("note       ran ") and l.split()[3] == "0.0" for l in lines)
        assert lines[-1] == "plan: the recipe ran as written (it fit the budget)"
    finally:
        stages.unregister("note")


def test_a_plan_file_that_cannot_be_read_is_decided_again(demo_recipe, make_measurement):
    from compress.budget.decide import decided_for

    recipe = load_recipe(demo_recipe)
    plan_path(recipe).parent.mkdir(parents=True)
    plan_path(recipe).write_text(json.dumps({"decided_for": decided_for(recipe, 1800), "plan": {"budget_s": 1}}))
    measurer, said = Measurer(make_measurement, 1.0), []
    decide(recipe, 1800, measure=measurer, say=said.append)
    assert measurer.calls == 1 and said[0].endswith("cannot be read as a plan; measuring again")
    assert json.loads(plan_path(recipe).read_text())["plan"]["measurement"]["cpu"] == "constructed"
