"""A loss registered from outside the toolkit (here, in the test) is used by ``distill`` from a config
alone: no trainer edit, recorded in ``compress.json`` and logged under its own name."""

from __future__ import annotations

import json

import pytest
import torch

from compress.stages import losses
from compress.cli import main
from compress.config import DataOptions
from compress.stages.teacher import TeacherConfig, train_teacher
from compress.stages.training import TrainSettings
from tests.conftest import make_bert, sentiment_rows, write_csv

CALLS = {"n": 0}


@pytest.fixture
def logit_l1():
    """Register ``logit_l1`` (a soft loss: mean |student - teacher| of the logits) for one test."""

    @losses.register("logit_l1", kind="soft")
    def _logit_l1(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
        CALLS["n"] += 1
        return (student_logits - teacher_logits).abs().mean()

    CALLS["n"] = 0
    yield "logit_l1"
    losses.LOSSES.pop("logit_l1", None)
    losses.KINDS.pop("logit_l1", None)


def test_a_registered_loss_is_used_by_distill_from_the_config(logit_l1, tmp_path, capsys):
    data = write_csv(tmp_path / "sentiment.csv", sentiment_rows(80))
    base = make_bert(tmp_path / "base", layers=2, head=True, seed=3)
    teacher = train_teacher(TeacherConfig(model=str(base), data=DataOptions(str(data)),
                                          train=TrainSettings(epochs=1, lr=2e-3, batch_size=16, logging_steps=1000)),
                            tmp_path / "teacher")
    out = tmp_path / "student"
    rc = main(["distill", "--teacher", str(teacher), "--data", str(data), "--student", "2x32", "--init", "random",
               "--epochs", "1", "--batch-size", "16", "--lr", "2e-3", "--losses", "logit_l1:1.0,hard_ce:0.5",
               "--out", str(out), "--allow-untrained-teacher"])
    assert rc == 0, capsys.readouterr().err
    meta = json.loads((out / "compress.json").read_text())
    assert CALLS["n"] >= meta["training"]["global_steps"] > 0  # called on every training step
    terms = meta["distillation"]["loss_terms"]
    assert {"name": "kd", "loss": "logit_l1", "on": "logits", "weight": 1.0} in terms
    assert any(t["loss"] == "hard_ce" and t["weight"] == 0.5 for t in terms)
    # An unregistered name is refused up front, naming the known ones.
    assert main(["distill", "--teacher", str(teacher), "--data", str(data), "--losses", "no_such_loss:1",
                 "--out", str(tmp_path / "x")]) == 2
    assert "no_such_loss" in capsys.readouterr().err
