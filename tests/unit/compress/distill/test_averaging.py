"""Tail averaging of the student's weights (``distill --average-tail``): the schedule of snapshots, the mean
loaded into the model at the end, the settings it refuses, and a run of tiny BERTs trained in the test."""

from __future__ import annotations

import json

import pytest
import torch

from compress.cli import main
from compress.config import DataOptions, DistillConfig
from compress.core.errors import CompressError
from compress.stages.teacher import TeacherConfig, train_teacher
from compress.stages.training import TrainSettings
from tests.conftest import make_bert, sentiment_rows, write_csv


def test_tail_averaging_writes_the_mean_of_the_last_steps_weights():
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from compress.stages.distill.averaging import tail_average_callback, tail_schedule

    assert tail_schedule(1154, 0.5) == (1154 - 9 * 57, 57)  # ten snapshots over the last 577 steps, the last one last
    assert tail_schedule(100, 0.0) == (100, 1) and tail_schedule(3, 1.0) == (1, 1)
    model = torch.nn.Linear(2, 1)
    callback = tail_average_callback(model, 0.5)
    state, control = TrainerState(max_steps=20), TrainerControl()
    args = TrainingArguments(output_dir="unused", report_to="none", use_cpu=True)
    callback.on_train_begin(args, state, control)
    seen = []
    for step in range(1, 21):
        with torch.no_grad():
            model.weight.fill_(float(step))
        state.global_step = step
        callback.on_step_end(args, state, control)
        if step in callback.steps:
            seen.append(step)
    callback.on_train_end(args, state, control)
    assert seen == list(range(11, 21)) and callback.record()["snapshots"] == 10
    assert model.weight.tolist() == [[pytest.approx(15.5)] * 2]  # the mean of steps 11..20
    with pytest.raises(CompressError, match="tail-averaged weights apply to sentence classification only"):
        DistillConfig(average_tail=0.5).refuse_beyond_logits("a tagger")
    with pytest.raises(CompressError, match="the term 'pooled' on pooled applies to sentence classification only"):
        DistillConfig(losses=[{"loss": "soft_ce"}, {"loss": "pooled_cosine"}]).refuse_beyond_logits("a tagger")
    assert any("from 0 (off) to 1" in p.message for p in DistillConfig(average_tail=1.5).problems())


def test_distill_with_average_tail_records_the_steps_it_averaged(tmp_path, capsys):
    data = write_csv(tmp_path / "data.csv", sentiment_rows(120))
    base = make_bert(tmp_path / "base", layers=2, head=True)
    teacher = train_teacher(TeacherConfig(model=str(base), data=DataOptions(str(data)),
                                          train=TrainSettings(epochs=1, lr=2e-3, batch_size=16, logging_steps=1000)),
                            tmp_path / "teacher")
    out = tmp_path / "student"
    rc = main(["distill", "--teacher", str(teacher), "--data", str(data), "--student", "2x32", "--init", "random",
               "--epochs", "2", "--batch-size", "16", "--lr", "2e-3", "--average-tail", "0.5", "--out", str(out),
               "--allow-untrained-teacher"])
    assert rc == 0, capsys.readouterr().err
    meta = json.loads((out / "compress.json").read_text())
    record, steps = meta["training"]["weight_average"], meta["training"]["global_steps"]
    assert steps == 12 and record == {"share": 0.5, "snapshots": 6, "steps": [7, 8, 9, 10, 11, 12]}
    assert meta["config"]["average_tail"] == 0.5
