"""The stage registry (compress.stages.registry): a stage registered from outside the package runs from a recipe and
from the command line; the built-in order and wiring; a pretrain stage feeding the teacher."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from compress import cli
from compress.stages import registry as stages
from compress.config import ConfigBase, DataOptions, Problem
from compress.core.errors import CompressError
from compress.pipeline import RECORD_DIR, load_recipe, run_recipe
from compress.stages.registry import Input, Stage
from tests.conftest import make_bert, sentiment_rows, write_csv


@dataclass
class ShoutConfig(ConfigBase):
    """Settings of a toy stage: write the model's type and the data's row count, loudly or not."""

    model: str = ""
    data: DataOptions = field(default_factory=DataOptions)
    times: int = 1
    loud: bool = False

    def problems(self) -> list[Problem]:
        return [Problem(("times",), f"--times must be at least 1, got {self.times}")] if self.times < 1 else []


def shout(cfg: ShoutConfig, out) -> Path:
    """The toy stage's run function: reads ``cfg.model``'s config.json and ``cfg.data``'s rows, writes an artifact."""
    from compress.core.artifact import write_artifact

    cfg.validate()
    model_type = json.loads((Path(cfg.model) / "config.json").read_text())["model_type"]
    rows = len(Path(cfg.data.data).read_text().splitlines()) - 1
    word = model_type.upper() if cfg.loud else model_type

    def fill(tmp: Path) -> None:
        (tmp / "shout.txt").write_text(f"{' '.join([word] * cfg.times)} {rows}\n")

    return write_artifact(out, fill, {"stage": "shout", "kind": "toy", "config": cfg.to_dict()})


SHOUT = Stage("shout", ShoutConfig, f"{__name__}:shout", "shouted",
              reads={"data": Input("data", "data"), "model": Input("model", "model")},
              wire=lambda o, s: {"model": str(o.model()), "data": o.data}, announce="shouted artifact")


@pytest.fixture
def shout_stage():
    stages.register(SHOUT, after="export")
    yield SHOUT
    stages.unregister("shout")


def test_the_builtin_stages_in_recipe_order():
    assert stages.names() == ("pretrain", "teacher", "distill", "prune", "export", "quantize", "optimize", "bench",
                              "gate")
    assert [s.name for s in stages.all_stages() if s.trains] == ["pretrain", "teacher", "distill", "prune"]
    assert [s.name for s in stages.all_stages() if s.timed] == ["optimize", "bench"]


def test_a_registered_stage_takes_its_place_and_bad_declarations_are_refused(shout_stage):
    assert stages.names().index("shout") == stages.names().index("export") + 1
    with pytest.raises(CompressError, match="registered already"):
        stages.register(SHOUT)
    with pytest.raises(CompressError, match="reads 'weights', which ShoutConfig has no field for"):
        stages.register(Stage("other", ShoutConfig, f"{__name__}:shout", "o", reads={"w": Input("weights", "model")}))
    with pytest.raises(CompressError, match="kind 'file'"):
        stages.register(Stage("other", ShoutConfig, f"{__name__}:shout", "o", reads={"m": Input("model", "file")}))
    with pytest.raises(CompressError, match="needs a resume: bool setting"):
        stages.register(Stage("other", ShoutConfig, f"{__name__}:shout", "o", trains=True))
    with pytest.raises(CompressError, match="after='nope'"):
        stages.register(Stage("other", ShoutConfig, f"{__name__}:shout", "o"), after="nope")
    assert "other" not in stages.names()
    with pytest.raises(CompressError, match="cannot import its run function 'no.such.module:f'"):
        Stage("other", ShoutConfig, "no.such.module:f", "o").runner()


def test_a_registered_stage_runs_from_a_recipe_and_is_skipped_when_current(tmp_path, shout_stage, capsys):
    data = write_csv(tmp_path / "data.csv", sentiment_rows(40))
    teacher = make_bert(tmp_path / "run" / "teacher", head=True)  # the teacher an earlier run left in OUT/teacher
    path = tmp_path / "recipe.yaml"
    path.write_text(f"out: {tmp_path / 'run'}\ndata: {data}\nshout: {{times: 2, loud: true}}\n")
    recipe = load_recipe(path)
    [call] = recipe.calls
    assert call.output == tmp_path / "run" / "shouted" and call.config.model == str(teacher)
    assert [r["status"] for r in run_recipe(recipe)] == ["ran"]
    assert (tmp_path / "run" / "shouted" / "shout.txt").read_text() == "BERT BERT 40\n"
    record = json.loads((tmp_path / "run" / RECORD_DIR / "shout.json").read_text())
    from compress.core.artifact import weights_sha256
    from compress.stages.fingerprint import file_sha256

    assert record["identity"]["inputs"] == {"data": file_sha256(data), "model": weights_sha256(teacher)}
    assert [r["status"] for r in run_recipe(load_recipe(path))] == ["skipped"]
    make_bert(teacher, head=True, seed=1)  # other weights in the same folder: the stage is stale
    capsys.readouterr()
    assert [r["status"] for r in run_recipe(load_recipe(path))] == ["ran"]
    assert "input model changed" in capsys.readouterr().out

    path.write_text(f"out: {tmp_path / 'run'}\ndata: {data}\nshout: {{model: x, times: 0}}\n")
    with pytest.raises(CompressError) as info:
        load_recipe(path)
    assert f"{path}:3: shout.model is set by the pipeline" in str(info.value)
    assert f"{path}:3: shout: --times must be at least 1, got 0" in str(info.value)


def test_a_registered_stage_runs_from_the_command_line(tmp_path, shout_stage, capsys):
    data = write_csv(tmp_path / "data.csv", sentiment_rows(12))
    model = make_bert(tmp_path / "model", head=True)
    out = tmp_path / "cli"
    code = cli.main(["shout", "--model", str(model), "--data", str(data), "--times", "3", "--out", str(out)])
    assert code == 0
    assert (out / "shout.txt").read_text() == "bert bert bert 12\n"
    assert f"shouted artifact: {out}" in capsys.readouterr().out
    assert cli.main(["shout", "--model", str(model), "--data", str(data), "--loud", "--out", str(out)]) == 0
    assert (out / "shout.txt").read_text() == "BERT 12\n"
    assert cli.main(["shout", "--model", str(model), "--data", str(data), "--times", "two", "--out", str(out)]) == 2
    assert "shout.times must be an integer, got 'two'" in capsys.readouterr().err


def test_pretrain_comes_first_and_its_output_is_the_teachers_model(tmp_path):
    data = write_csv(tmp_path / "data.csv", sentiment_rows(20))
    path = tmp_path / "recipe.yaml"
    path.write_text(f"out: {tmp_path / 'run'}\ndata: {data}\ndistill: {{student: 2x32}}\nteacher: {{epochs: 1}}\n"
                    "pretrain: {model: minilm, epochs: 1}\n")
    calls = load_recipe(path).calls
    assert [c.stage for c in calls] == ["pretrain", "teacher", "distill"]
    assert calls[0].output == tmp_path / "run" / "pretrained" and calls[0].config.data.data == str(data)
    assert calls[1].config.model == str(tmp_path / "run" / "pretrained")
    assert calls[2].config.teacher == str(tmp_path / "run" / "teacher")
    path.write_text(f"data: {data}\npretrain: {{epochs: 1}}\nteacher: {{model: minilm}}\n")
    with pytest.raises(CompressError) as info:
        load_recipe(path)
    assert f"{path}:2: pretrain.model is required" in str(info.value)
    assert f"{path}:3: teacher.model is set by the pipeline" in str(info.value)


def test_optimize_is_wired_after_export_and_bench_measures_its_choice(tmp_path):
    data = write_csv(tmp_path / "data.csv", sentiment_rows(20))
    path = tmp_path / "recipe.yaml"
    path.write_text(f"out: {tmp_path / 'run'}\ndata: {data}\nbench: {{quick: true}}\noptimize: {{runs: 3}}\n"
                    "teacher: {model: minilm}\ndistill: {student: 2x32}\nexport: {}\nquantize: {method: torch-dynamic}\n")
    calls = {c.stage: c for c in load_recipe(path).calls}
    assert list(calls) == ["teacher", "distill", "export", "quantize", "optimize", "bench"]
    run = tmp_path / "run"
    assert calls["optimize"].config.model == str(run / "student") and calls["optimize"].output == run / "optimized"
    assert calls["quantize"].config.model == str(run / "student") and calls["quantize"].output == run / "torch-int8"
    assert calls["bench"].config.artifacts == [str(run / n) for n in ("student", "onnx", "torch-int8", "optimized")]
    assert calls["bench"].config.reference == str(run / "teacher")
