"""Recipes: validation with line numbers, stage skipping, resume after a kill, end to end on tiny models."""

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compress.core.errors import CompressError
from compress.pipeline import load_recipe, plan, run_recipe
from tests.conftest import make_bert, run_cli, sentiment_rows, train_briefly, write_csv

from tests.support.paths import ROOT


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
    for name in ("default", "quick", "prune", "ner", "ner-best", "similarity", "embedding"):
        recipe = load_recipe(ROOT / "recipes" / f"{name}.yaml")
        stages = [c.stage for c in plan(recipe)]
        assert stages[:2] == ["teacher", "distill"]
    assert [c.stage for c in plan(load_recipe(ROOT / "recipes" / "prune.yaml"))][2] == "prune"
    assert [c.stage for c in plan(load_recipe(ROOT / "recipes" / "ner.yaml"))] == [
        "teacher", "distill", "export", "optimize", "bench", "gate"]
    assert [c.stage for c in plan(load_recipe(ROOT / "recipes" / "similarity.yaml"))] == [
        "teacher", "distill", "export", "quantize", "optimize", "bench", "gate"]
    embedding = plan(load_recipe(ROOT / "recipes" / "embedding.yaml"))
    assert [c.stage for c in embedding] == ["teacher", "distill", "export", "quantize", "optimize", "bench", "gate"]
    # the same built-in teacher on the same pairs: used as it is, a two-tower encoder; fine-tuned, a cross-encoder
    for name, task in (("embedding", "sentence-embedding"), ("similarity", "sentence-similarity")):
        teacher = plan(load_recipe(ROOT / "recipes" / f"{name}.yaml"))[0].config
        assert teacher.data.task(teacher.model, as_is=teacher.finetune is False) == task


def _tiny_recipe(tmp_path, extra: str = "", epochs: int = 2) -> Path:
    data = write_csv(tmp_path / "sentiment.csv", sentiment_rows(160))
    encoder = make_bert(tmp_path / "encoder")
    return _recipe(tmp_path, f"""\
out: {tmp_path / 'run'}
data: {{data: {data}}}
teacher: {{model: {encoder}, epochs: 3, lr: 0.002, batch_size: 16}}
distill: {{student: 2x32, init: teacher-layers, epochs: {epochs}, lr: 0.002, batch_size: 16, save_steps: 2,
           allow_untrained_teacher: true}}
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


def test_killed_run_resumes_at_the_unfinished_stage(tmp_path, capsys):
    # 12 epochs (120 steps, a checkpoint every 2): several seconds of training left when the kill lands 0.7 s
    # after the first checkpoint, and a resume that finishes them in seconds (40 epochs cost 20 s more)
    path = _tiny_recipe(tmp_path, epochs=12)
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
    done = run_cli(["run", str(path)], capsys)  # the resume: the same command, in this process
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "[teacher] up to date" in done.stdout
    assert "resuming from" in done.stdout
    assert json.loads((tmp_path / "run" / "student" / "compress.json").read_text())["complete"]


# ----------------------------------------------------------------------------- configs, identity, checkpoints


def test_a_wrong_type_and_a_bad_gate_rule_fail_up_front_with_both_lines(tmp_path, sentiment_csv):
    encoder = make_bert(tmp_path / "encoder")
    path = _recipe(tmp_path, f"""\
out: {tmp_path / 'run'}
data:
  data: {sentiment_csv}
  limit: ten
teacher: {{model: {encoder}, epochs: 1}}
export: {{}}
gate:
  rules:
    max_accuracy_drop: 0.05
    onnx:
      min_speedup: fast
""")
    with pytest.raises(CompressError) as info:
        load_recipe(path)
    msg = str(info.value)
    assert "2 problem(s)" in msg
    assert f"{path}:4: data.limit must be an integer, got 'ten'" in msg
    assert f"{path}:11: gate.rules: [artifacts.onnx] min_speedup must be a number, got 'fast'" in msg
    assert not (tmp_path / "run").exists()  # nothing ran

    rules = tmp_path / "gates.toml"
    rules.write_text("[rules]\nmin_speedup = 2.0\nmin_speed = 3\n")
    path = _recipe(tmp_path, f"data: {sentiment_csv}\nteacher: {{model: {encoder}}}\ngate: {{rules: {rules}}}\n")
    with pytest.raises(CompressError, match=rf"{path}:3: gate.rules: {rules}:3: unknown rule 'min_speed'"):
        load_recipe(path)


def _classifier_recipe(tmp_path, data) -> Path:
    """A teacher that is only evaluated (a classifier already), exported and quantized: no training."""
    model = train_briefly(make_bert(tmp_path / "classifier", head=True, seed=2))  # a head at chance is refused
    return _recipe(tmp_path, f"""\
out: {tmp_path / 'run'}
data: {data}
teacher: {{model: {model}, finetune: "no"}}
export: {{}}
quantize: {{method: ort-dynamic, max_accuracy_drop: 0.5}}
""")


def test_editing_a_data_file_reruns_the_stages_that_read_it(tmp_path, capsys):
    data = write_csv(tmp_path / "data.csv", sentiment_rows(120, seed=1))
    path = _classifier_recipe(tmp_path, data)
    assert [r["status"] for r in run_recipe(load_recipe(path))] == ["ran", "ran", "ran"]
    os.utime(data, (time.time() + 100, time.time() + 100))  # touched, same content: still current
    assert [r["status"] for r in run_recipe(load_recipe(path))] == ["skipped", "skipped", "skipped"]
    capsys.readouterr()
    write_csv(data, sentiment_rows(120, seed=2))  # edited in place: same path, same size class, new rows
    statuses = [r["status"] for r in run_recipe(load_recipe(path))]
    # teacher and quantize read the data; export reads only the teacher's weights, which did not change
    assert statuses == ["ran", "skipped", "ran"]
    out = capsys.readouterr().out
    assert "[teacher] running" in out and "input data changed" in out
    record = json.loads((tmp_path / "run" / ".bert-compress-run" / "quantize.json").read_text())
    assert record["identity"]["inputs"]["data"] == importlib.import_module("compress.stages.fingerprint").file_sha256(data)


def test_a_stage_error_keeps_its_message_and_debug_shows_the_traceback(tmp_path, sentiment_csv, capsys):
    broken = tmp_path / "no-weights"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "bert"}))
    path = _recipe(tmp_path, f"out: {tmp_path / 'run'}\ndata: {sentiment_csv}\nteacher: {{model: {broken}}}\n")
    with pytest.raises(CompressError, match="has a config.json but no weights"):
        run_recipe(load_recipe(path))
    done = run_cli(["run", str(path)], capsys)
    assert done.returncode == 2 and "error:" in done.stderr and "has a config.json but no weights" in done.stderr
    assert "Traceback" not in done.stderr and "exit code" not in done.stderr
    done = subprocess.run([sys.executable, "-m", "compress", "--debug", "run", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "Traceback" in done.stderr and "check_model_folder" in done.stderr


def test_bench_runs_in_its_own_process_from_a_config_file_and_its_errors_come_back(tmp_path):
    data = write_csv(tmp_path / "data.csv", sentiment_rows(120, seed=1))
    model = train_briefly(make_bert(tmp_path / "classifier", head=True, seed=2))  # a head at chance is refused
    recipe = f"""\
out: {tmp_path / 'run'}
data: {data}
teacher: {{model: {model}, finetune: "no"}}
export: {{}}
bench: {{quick: true, memory: false, seq_lens: [SEQ]}}
gate: {{rules: {{max_accuracy_drop: 0.5}}}}
"""
    status = run_recipe(load_recipe(_recipe(tmp_path, recipe.replace("SEQ", "16"))))
    assert [r["status"] for r in status] == ["ran", "ran", "ran", "ran"]
    config = json.loads((tmp_path / "run" / ".bert-compress-run" / "bench.config.json").read_text())
    assert config["seq_lens"] == [16] and config["quick"] is True
    results = json.loads((tmp_path / "run" / "bench" / "results.json").read_text())
    assert results["settings"]["seq_lens"] == [16]
    assert (tmp_path / "run" / "gates.toml").exists() and (tmp_path / "run" / "gate-junit.xml").exists()
    with pytest.raises(CompressError, match="--seq-lens 4096"):  # the child's own message, not an exit code
        run_recipe(load_recipe(_recipe(tmp_path, recipe.replace("SEQ", "4096"))))


def test_optimize_in_a_recipe_writes_a_choice_that_bench_measures(tmp_path):
    data = write_csv(tmp_path / "data.csv", sentiment_rows(120, seed=1))
    model = train_briefly(make_bert(tmp_path / "classifier", head=True, seed=2))  # a head at chance is refused
    path = _recipe(tmp_path, f"""\
out: {tmp_path / 'run'}
data: {data}
teacher: {{model: {model}, finetune: "no"}}
export: {{}}
optimize: {{candidates: onnx-fp32, batch_sizes: [1, 4], seq_len: 16, warmup: 1, runs: 3, threads: 1,
           max_accuracy_drop: 0.5}}
bench: {{quick: true, memory: false, seq_lens: [16], threads: 1}}
""")
    assert [r["status"] for r in run_recipe(load_recipe(path))] == ["ran"] * 4
    run = tmp_path / "run"
    meta = json.loads((run / "optimized" / "compress.json").read_text())
    assert meta["kind"] == "choice" and Path(meta["parent"]["path"]) == (run / "teacher").resolve()
    assert sorted(meta["choice"]["by_batch_size"]) == ["1", "4"]
    # optimize times runtimes, so like bench it ran in its own process from its config file
    assert json.loads((run / ".bert-compress-run" / "optimize.config.json").read_text())["runs"] == 3
    results = json.loads((run / "bench" / "results.json").read_text())
    measured = {a["name"]: a for a in results["artifacts"]}
    assert sorted(measured) == ["onnx", "optimized", "teacher"]
    assert measured["optimized"]["kind"] == "choice" and measured["optimized"]["latency"]
    assert measured["optimized"]["quality"]["accuracy"] is not None
    # bench's identity holds the choice's own fingerprint (the artifacts it chose), so a re-run is current
    record = json.loads((run / ".bert-compress-run" / "bench.json").read_text())
    assert record["identity"]["inputs"]["artifacts"][1].startswith("choice:")
    assert [r["status"] for r in run_recipe(load_recipe(path))] == ["skipped"] * 4


def test_a_recipe_changed_after_a_kill_does_not_resume_the_old_checkpoint(tmp_path, capsys):
    path = _tiny_recipe(tmp_path, epochs=40)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "compress", "run", str(path)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpts = tmp_path / "run" / "student.checkpoints"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not list(ckpts.glob("checkpoint-*/trainer_state.json")):
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -9, "the run finished before it could be killed"
    # The kill may land while a later checkpoint is half written (no trainer_state.json yet): the rerun
    # removes such a folder, so the complete ones are what must be set aside.
    old = sorted((p.parent for p in ckpts.glob("checkpoint-*/trainer_state.json")),
                 key=lambda p: int(p.name.rsplit("-", 1)[1]))
    assert old, "distillation never wrote a checkpoint"
    # the recipe is edited: another learning rate, and fewer epochs so the fresh run is short
    path.write_text(path.read_text().replace("epochs: 40, lr: 0.002", "epochs: 1, lr: 0.001"))
    done = run_cli(["run", str(path)], capsys)  # the rerun: the same command, in this process
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "[teacher] up to date" in done.stdout
    assert "resuming from" not in done.stdout
    assert "not resumed; set aside as" in done.stdout
    aside = tmp_path / "run" / "student.set-aside-1.checkpoints"
    assert (aside / old[-1].name / "trainer_state.json").exists()  # renamed, not deleted
    meta = json.loads((tmp_path / "run" / "student" / "compress.json").read_text())
    assert meta["config"]["train"]["lr"] == 0.001 and meta["training"]["global_steps"] < 40


def test_run_data_replaces_the_recipe_s_data_so_a_recipe_runs_on_a_user_s_file(tmp_path):
    from tests.support.toy_ner import toy_sentences, write_conll

    conll = write_conll(tmp_path / "mine.conll", toy_sentences(30))
    recipe = load_recipe(ROOT / "recipes" / "ner.yaml", data=str(conll))
    assert recipe.data.data == str(conll)
    assert {c.stage: c.config.data.data for c in plan(recipe) if c.stage in ("teacher", "distill", "bench")} == {
        "teacher": str(conll), "distill": str(conll), "bench": str(conll)}
    assert load_recipe(ROOT / "recipes" / "ner.yaml").data.data == "wnut17"
    with pytest.raises(CompressError, match=r"--data 'nope\.conll' is neither a built-in dataset"):
        load_recipe(ROOT / "recipes" / "ner.yaml", data="nope.conll")
    mapped = _recipe(tmp_path, "data: {data: wnut17, limit: 20}\nteacher: {model: minilm}\n")
    replaced = load_recipe(mapped, data=str(conll)).data
    assert (replaced.data, replaced.limit) == (str(conll), 20)  # the mapping's other keys stay
