"""Recipes: validation with line numbers, stage skipping, resume after a kill, end to end on tiny models."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compress.errors import CompressError
from compress.pipeline import load_recipe, plan, run_recipe
from tests.conftest import make_bert, sentiment_rows, write_csv

ROOT = Path(__file__).resolve().parents[1]


def _recipe(tmp_path, text: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return path


def test_every_problem_is_reported_with_its_line(tmp_path):
    path = _recipe(tmp_path, """\
out: runs/x
data: no-such-file.csv
teacher:
  model: minilm
  epochs: two
  colour: blue
distill:
  temperature: 0
  out: somewhere
  kd_loss: mse
  bf16: true
banana: 1
""")
    with pytest.raises(CompressError) as info:
        load_recipe(path)
    msg = str(info.value)
    assert "6 problem(s)" in msg or "problem(s)" in msg
    assert f"{path}:5: teacher.epochs must be a float" in msg
    assert f"{path}:6: unknown teacher setting 'colour'" in msg
    assert f"{path}:8: distill: --temperature must be > 0" in msg
    assert f"{path}:9: distill.out is set by the pipeline" in msg
    assert f"{path}:10: distill.kd_loss must be one of soft_ce, kl" in msg
    assert f"{path}:12: unknown key 'banana'" in msg
    assert f"{path}:2: data 'no-such-file.csv'" in msg


def test_prune_ratio_and_gate_shape_are_checked(tmp_path, sentiment_csv):
    path = _recipe(tmp_path, f"""\
data: {sentiment_csv}
teacher: {{model: minilm}}
distill: {{student: 2x32}}
prune: {{heads: 1.0, ffn: -0.1}}
gate: {{rules: 3}}
""")
    with pytest.raises(CompressError) as info:
        load_recipe(path)
    msg = str(info.value)
    assert "prune: --heads must be a share in [0, 1)" in msg and "got 1.0" in msg
    assert "prune: --ffn must be a share in [0, 1)" in msg and "got -0.1" in msg
    assert "gate.rules must be a path" in msg


def test_shipped_recipes_are_valid():
    for name in ("default", "quick", "prune"):
        recipe = load_recipe(ROOT / "recipes" / f"{name}.yaml")
        stages = [c.stage for c in plan(recipe)]
        assert stages[:2] == ["teacher", "distill"]
    assert [c.stage for c in plan(load_recipe(ROOT / "recipes" / "prune.yaml"))][2] == "prune"


def _tiny_recipe(tmp_path, extra: str = "", epochs: int = 2) -> Path:
    data = write_csv(tmp_path / "sentiment.csv", sentiment_rows(160))
    encoder = make_bert(tmp_path / "encoder")
    return _recipe(tmp_path, f"""\
out: {tmp_path / 'run'}
data: {{data: {data}}}
teacher: {{model: {encoder}, epochs: 3, lr: 0.002, batch_size: 16}}
distill: {{student: 2x32, init: teacher-layers, epochs: {epochs}, lr: 0.002, batch_size: 16, save_steps: 2}}
{extra}""")


def test_tiny_recipe_end_to_end_then_everything_is_skipped(tmp_path, capsys):
    recipe = load_recipe(_tiny_recipe(tmp_path, "export: {}\nquantize: {method: ort-dynamic}\n"))
    first = run_recipe(recipe)
    assert [r["status"] for r in first] == ["ran"] * 4
    meta = json.loads((tmp_path / "run" / "onnx-int8" / "compress.json").read_text())
    assert meta["kind"] == "onnx-int8"
    capsys.readouterr()
    second = run_recipe(load_recipe(_tiny_recipe(tmp_path, "export: {}\nquantize: {method: ort-dynamic}\n")))
    assert [r["status"] for r in second] == ["skipped"] * 4
    # a changed setting re-runs that stage and everything after it
    third = run_recipe(load_recipe(_tiny_recipe(tmp_path, "export: {}\nquantize: {method: ort-dynamic}\n", epochs=1)))
    assert [r["status"] for r in third] == ["skipped", "ran", "ran", "ran"]


def test_killed_run_resumes_at_the_unfinished_stage(tmp_path):
    path = _tiny_recipe(tmp_path, epochs=40)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "compress", "run", str(path)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ckpts = tmp_path / "run" / "student.checkpoints"
    deadline = time.time() + 240
    while time.time() < deadline and not list(ckpts.glob("checkpoint-*")):
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert list(ckpts.glob("checkpoint-*")), "distillation never wrote a checkpoint"
    assert not (tmp_path / "run" / "student").exists()  # no half-written artifact
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "[teacher] up to date" in done.stdout
    assert "resuming from" in done.stdout
    assert json.loads((tmp_path / "run" / "student" / "compress.json").read_text())["complete"]
