"""Teacher ensembles (``distill --ensemble``): the soft labels are the mean of the teachers' logits, each
teacher reading the text its own way; the student is reported against the ensemble and the single teacher.
Tiny BERTs trained in the test."""

from __future__ import annotations

import json

import numpy as np
import pytest

from compress.cli import main
from compress.config import DataOptions, DistillConfig
from compress.tasks.tables import load_task_data, tokenize_split
from compress.stages.distill.ensemble import averaged, load_members, member_specs
from compress.core.errors import CompressError
from compress.stages.teacher import TeacherConfig, load_teacher, teacher_logits, train_teacher
from compress.stages.training import TrainSettings
from tests.conftest import make_bert, sentiment_rows, write_csv


@pytest.fixture(scope="module")
def teachers(tmp_path_factory):
    root = tmp_path_factory.mktemp("ensemble")
    data = write_csv(root / "data.csv", sentiment_rows(120))
    made = []
    for seed in (0, 1):
        base = make_bert(root / f"base{seed}", layers=2, head=True, seed=seed)
        made.append(train_teacher(TeacherConfig(model=str(base), data=DataOptions(str(data)),
                                                train=TrainSettings(epochs=1, lr=2e-3, batch_size=16, seed=seed,
                                                                    logging_steps=1000)), root / f"teacher{seed}"))
    return {"data": data, "teachers": made}


def test_the_soft_labels_are_the_mean_of_every_teachers_logits(teachers):
    task = load_task_data(str(teachers["data"]))
    first, second = (load_teacher(t, task) for t in teachers["teachers"])
    members = load_members(str(teachers["teachers"][1]), first, task)
    split = task.splits["validation"]
    own = [teacher_logits(t, tokenize_split(split, t.tokenizer, 64, False, prefix="t_"), prefix="t_")[0]
           for t in (first, second)]
    assert not np.allclose(own[0], own[1])  # two different teachers
    mean = averaged(own[0], members, split, 64, False, "fp32", "validation")
    assert np.allclose(mean, (own[0] + own[1]) / 2, atol=1e-6)
    assert member_specs(" a, b ,,") == ["a", "b"]
    with pytest.raises(CompressError, match="the same weights as"):
        load_members(str(teachers["teachers"][0]), first, task)


def test_distill_from_an_ensemble_reports_the_single_teacher_beside_it(teachers, tmp_path, capsys):
    first, second = (str(t) for t in teachers["teachers"])
    out = tmp_path / "student"
    rc = main(["distill", "--teacher", first, "--ensemble", second, "--data", str(teachers["data"]), "--student",
               "2x32", "--init", "random", "--epochs", "1", "--batch-size", "16", "--lr", "2e-3", "--out", str(out),
               "--allow-untrained-teacher"])
    assert rc == 0, capsys.readouterr().err
    meta = json.loads((out / "compress.json").read_text())
    assert meta["distillation"]["ensemble"]["members"] == [first, second]
    task = load_task_data(str(teachers["data"]))
    labels = np.asarray(task.splits["test"]["label"])
    loaded = [load_teacher(t, task) for t in (first, second)]
    logits = [teacher_logits(t, tokenize_split(task.splits["test"], t.tokenizer, 128, False, prefix="t_"),
                             prefix="t_")[0] for t in loaded]
    test = meta["metrics"]["test"]
    assert test["single_teacher_accuracy"] == pytest.approx(float((logits[0].argmax(-1) == labels).mean()))
    assert test["teacher_accuracy"] == pytest.approx(float((((logits[0] + logits[1]) / 2).argmax(-1) == labels).mean()))
    assert 0 <= test["agreement_with_single_teacher"] <= 1
    with pytest.raises(CompressError, match="teacher ensembles apply to sentence classification only"):
        DistillConfig(ensemble=second).refuse_beyond_logits("a tagger")
