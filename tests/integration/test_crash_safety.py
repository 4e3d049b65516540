"""Crash safety on a real subprocess: SIGKILL mid-distillation then resume gives the same student
as an uninterrupted run; Ctrl-C stops at the next step with a checkpoint and says how to resume.

Only a run that is killed or interrupted needs to be a process of its own; the uninterrupted run, the
resume and the runs that stop on an error run the same command line through the CLI's ``main`` in this
process (``tests.conftest.run_cli``, one torch thread as the subprocesses have), so that a resume test
pays one interpreter start-up, not three."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import make_bert, run_cli, sentiment_rows, write_csv

from tests.support.paths import ROOT
#: Resuming restores weights, optimiser, scheduler, RNG states and the data position, so the resumed
#: student matches the uninterrupted one up to float rounding.
WEIGHT_ATOL = 1e-5


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash")
    data = write_csv(root / "data.csv", sentiment_rows(160))
    teacher = make_bert(root / "teacher", layers=2, head=True)
    (root / "teacher" / "config.json").write_text(
        json.dumps({**json.loads((root / "teacher" / "config.json").read_text()),
                    "architectures": ["BertForSequenceClassification"]}))
    return root, teacher, data


def _args(teacher, data, out, epochs=30):
    # the teacher's head is random (distill would refuse it): this test is about checkpoints, not teaching
    return ["distill", "--teacher", str(teacher), "--data", str(data), "--student", "1x32", "--init", "random",
            "--epochs", str(epochs), "--lr", "1e-3", "--batch-size", "16", "--save-steps", "5", "--out", str(out),
            "--seed", "3", "--allow-untrained-teacher"]


def _cmd(teacher, data, out, epochs=30):
    return [sys.executable, "-m", "compress", *_args(teacher, data, out, epochs)]


def _wait_for_checkpoint(folder: Path, proc, timeout=240, settle=0.3):
    deadline = time.time() + timeout
    # a complete checkpoint: the Trainer writes trainer_state.json last
    while time.time() < deadline and proc.poll() is None and not list(folder.glob("checkpoint-*/trainer_state.json")):
        time.sleep(0.02)
    time.sleep(settle)


def test_sigkill_then_resume_matches_an_uninterrupted_run(setup, capsys):
    from safetensors.torch import load_file

    root, teacher, data = setup
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    full = run_cli(_args(teacher, data, root / "full", epochs=30), capsys)
    assert full.returncode == 0, full.stderr[-2000:]

    proc = subprocess.Popen(_cmd(teacher, data, root / "killed", epochs=30), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for_checkpoint(root / "killed.checkpoints", proc, settle=0.05)
    proc.kill()
    assert proc.wait() == -9, "the run finished before it could be killed; give it more epochs"
    assert not (root / "killed").exists(), "a killed run must not leave an artifact"
    assert list((root / "killed.checkpoints").glob("checkpoint-*"))
    resumed = run_cli(_args(teacher, data, root / "killed", epochs=30) + ["--resume"], capsys)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from" in resumed.stdout

    a, b = load_file(root / "full" / "model.safetensors"), load_file(root / "killed" / "model.safetensors")
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst <= WEIGHT_ATOL, f"resumed student differs by {worst}"
    acc = [json.loads((root / d / "compress.json").read_text())["metrics"]["test"]["accuracy"] for d in ("full", "killed")]
    assert acc[0] == acc[1]


def test_ctrl_c_saves_a_checkpoint_and_says_how_to_resume(setup):
    root, teacher, data = setup
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(_cmd(teacher, data, root / "interrupted", epochs=200), cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_checkpoint(root / "interrupted.checkpoints", proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err[-2000:]
    assert "interrupted at step" in err and "--resume" in err
    assert "Traceback" not in err
    assert not (root / "interrupted").exists()
    import re

    step = int(re.search(r"interrupted at step (\d+)", err).group(1))
    # the checkpoint is the one of the step where training stopped, not an older periodic one
    assert (root / "interrupted.checkpoints" / f"checkpoint-{step}").is_dir()
    assert f"checkpoint-{step}" in err


#: Bit of CAP_SYS_ADMIN in /proc/self/status's CapEff mask: what mount(2) needs.
CAP_SYS_ADMIN = 21


def _missing_mount_capability() -> str | None:
    """Why this process cannot mount a tmpfs (no root, no CAP_SYS_ADMIN, no mount tool), or ``None``.

    Decided from the process's credentials alone, never from a failed mount: with the capability
    present, a mount that fails is a failure of the test's setup and must show as one.
    """
    import shutil

    if os.geteuid() != 0:
        return "needs root to mount a small tmpfs"
    try:
        status = Path("/proc/self/status").read_text()
        cap_eff = int(next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), 16)
    except (OSError, StopIteration, ValueError):
        return "cannot read the process's capabilities (/proc/self/status)"
    if not cap_eff >> CAP_SYS_ADMIN & 1:
        return "root without CAP_SYS_ADMIN (an unprivileged container) cannot mount a tmpfs"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "no mount/umount command on this machine"
    return None


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                          text=True)
    assert done.returncode == 0, f"mount -t tmpfs failed although the process may mount: {done.stderr.strip()}"


def test_disk_full_during_a_checkpoint_keeps_the_previous_one(setup, tmp_path, capsys):
    """A real full disk: a 20 MB tmpfs holds one checkpoint of the tiny student (~12 MB) but not two.

    Skipped only where the process lacks the capability to mount (checked from its credentials, not
    by trying); everything after that, the mount included, passes or fails."""
    missing = _missing_mount_capability()
    if missing:
        pytest.skip(missing)
    root, teacher, data = setup
    small = tmp_path / "small-disk"
    _mount_tmpfs(small, "20m")
    try:
        done = run_cli(_args(teacher, data, small / "student", epochs=3), capsys)
        assert done.returncode == 2, done.stderr[-3000:]
        assert "disk full while saving the checkpoint of step" in done.stderr, done.stderr[-3000:]
        assert "Traceback" not in done.stderr
        kept = sorted((small / "student.checkpoints").glob("checkpoint-*"))
        assert len(kept) == 1 and (kept[0] / "trainer_state.json").exists()
        assert f"previous one is kept: {kept[0]}" in done.stderr
        assert not (small / "student").exists()
    finally:
        subprocess.run(["umount", str(small)], capture_output=True)


def test_nan_loss_stops_with_the_step_terms_and_checkpoint(setup, tmp_path, capsys):
    """A teacher with a corrupted (NaN) classifier makes the soft-label loss NaN at the first step."""
    from safetensors.torch import load_file, save_file

    root, teacher, data = setup
    broken = tmp_path / "broken-teacher"
    import shutil

    shutil.copytree(teacher, broken)
    weights = load_file(broken / "model.safetensors")
    weights["classifier.weight"] = weights["classifier.weight"] * float("nan")
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    done = run_cli(_args(broken, data, tmp_path / "student", epochs=1), capsys)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "training loss became non-finite at step 0" in done.stderr
    assert "kd=nan" in done.stderr and "Last good checkpoint: none yet" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "student").exists()


def _prune_args(teacher, data, out, epochs=12):
    return ["prune", "--model", str(teacher), "--data", str(data), "--heads", "0.5", "--ffn", "0.5",
            "--recover-epochs", str(epochs), "--lr", "1e-3", "--batch-size", "16", "--save-steps", "5",
            "--out", str(out), "--seed", "3"]


def _prune_cmd(teacher, data, out, epochs=12):
    return [sys.executable, "-m", "compress", *_prune_args(teacher, data, out, epochs)]


def test_sigkill_during_prune_recovery_then_resume_matches_an_uninterrupted_run(setup, capsys):
    """Recovery trains in a stable folder beside the output, so a killed prune resumes like distill."""
    from safetensors.torch import load_file

    root, teacher, data = setup
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    full = run_cli(_prune_args(teacher, data, root / "pruned-full"), capsys)
    assert full.returncode == 0, full.stderr[-2000:]
    assert not (root / "pruned-full.checkpoints").exists()  # the scratch folder goes once the artifact is written

    proc = subprocess.Popen(_prune_cmd(teacher, data, root / "pruned-killed"), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    recovery = root / "pruned-killed.checkpoints" / "recovered.checkpoints"
    _wait_for_checkpoint(recovery, proc, settle=0.05)
    proc.kill()
    assert proc.wait() == -9, "the prune finished before it could be killed; give it more recovery epochs"
    assert not (root / "pruned-killed").exists(), "a killed run must not leave an artifact"
    assert list(recovery.glob("checkpoint-*"))
    resumed = run_cli(_prune_args(teacher, data, root / "pruned-killed") + ["--resume"], capsys)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from" in resumed.stdout and str(recovery) in resumed.stdout

    a = load_file(root / "pruned-full" / "model.safetensors")
    b = load_file(root / "pruned-killed" / "model.safetensors")
    assert a.keys() == b.keys() and all(a[k].shape == b[k].shape for k in a)
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst <= WEIGHT_ATOL, f"resumed pruned model differs by {worst}"
    metas = [json.loads((root / d / "compress.json").read_text()) for d in ("pruned-full", "pruned-killed")]
    assert metas[0]["metrics"]["test"]["accuracy"] == metas[1]["metrics"]["test"]["accuracy"]
    assert metas[1]["pruning"]["recovery"]["training"]["global_steps"] == metas[0]["pruning"]["recovery"]["training"][
        "global_steps"]


def test_resume_refuses_checkpoints_made_under_other_settings(tmp_path, capsys):
    from compress.stages.training import FINGERPRINT_FILE, checkpoint_dir, resume_point

    out = tmp_path / "student"
    folder = checkpoint_dir(out)

    def checkpoint(step: int) -> None:
        (folder / f"checkpoint-{step}").mkdir(parents=True)
        (folder / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")

    assert resume_point(out, False, "settings-a") is None  # a fresh run records what it trains under
    assert json.loads((folder / FINGERPRINT_FILE).read_text())["fingerprint"] == "settings-a"
    checkpoint(5)
    assert resume_point(out, True, "settings-a") == str(folder / "checkpoint-5")
    assert "resuming from" in capsys.readouterr().out

    assert resume_point(out, True, "settings-b") is None
    said = capsys.readouterr().out
    aside = tmp_path / "student.set-aside-1.checkpoints"
    assert f"set aside as {aside}" in said and "other settings" in said and "resuming from" not in said
    assert (aside / "checkpoint-5" / "trainer_state.json").exists()
    assert json.loads((folder / FINGERPRINT_FILE).read_text())["fingerprint"] == "settings-b"

    (folder / FINGERPRINT_FILE).unlink()  # checkpoints from before fingerprints were recorded
    checkpoint(7)
    assert resume_point(out, True, "settings-b") is None
    assert "carry no record of the settings" in capsys.readouterr().out
    assert (tmp_path / "student.set-aside-2.checkpoints" / "checkpoint-7").exists()
