"""The cross-encoder through the teacher and distill stages on tiny models: a regression head trained with MSE on a
small file of scored pairs, scored on Spearman/Pearson; a student distilled from the teacher's scores beside the
gold ones; a classifier and a similarity scorer refused for each other's data in one line."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from compress.cli import main
from conftest import make_bert
from tests.support.similarity import scored_pairs, write_pairs


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A teacher fine-tuned by ``bert-compress teacher`` on 160 scored pairs (the stage under test)."""
    tmp = tmp_path_factory.mktemp("similarity")
    data = write_pairs(tmp / "pairs.csv", scored_pairs(160))
    encoder = make_bert(tmp / "encoder", layers=2, hidden=32)
    out = tmp / "teacher"
    rc = main(["teacher", "--model", str(encoder), "--data", str(data), "--epochs", "10", "--lr", "5e-3",
               "--batch-size", "16", "--max-length", "32", "--seed", "0", "--out", str(out)])
    assert rc == 0
    return SimpleNamespace(path=out, data=data, tmp=tmp)


def test_the_teacher_is_a_regression_head_scored_on_spearman(trained):
    meta = json.loads((trained.path / "compress.json").read_text())
    config = json.loads((trained.path / "config.json").read_text())
    assert meta["task"] == "sentence-similarity" and meta["fine_tuned"]
    assert config["architectures"] == ["BertForSequenceClassification"] and config["problem_type"] == "regression"
    assert len(config["id2label"]) == 1
    for split in ("validation", "test"):
        assert set(meta["metrics"][split]) >= {"spearman", "pearson", "n"}
    assert meta["metrics"]["validation"]["spearman"] > 30, meta["metrics"]  # word overlap is learnable
    assert meta["training"]["train_loss"] > 0
    assert not (trained.tmp / "teacher.checkpoints").exists()


def test_distill_learns_the_teachers_scores_beside_the_gold_ones(trained, tmp_path, capsys):
    out = tmp_path / "student"
    rc = main(["distill", "--teacher", str(trained.path), "--data", str(trained.data), "--student", "1x32",
               "--init", "random", "--epochs", "10", "--lr", "5e-3", "--batch-size", "16", "--max-length", "32",
               "--alpha-kd", "1.0", "--alpha-hard", "0.5", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    meta = json.loads((out / "compress.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert meta["task"] == "sentence-similarity" and config["problem_type"] == "regression"
    assert meta["distillation"]["losses"] == {"teacher_score_mse": 1.0, "gold_score_mse": 0.5}
    # the teacher stage's validation and test scores are found in the soft-label cache
    assert meta["distillation"]["soft_labels_reused"] == {"train": False, "validation": True, "test": True}
    test = meta["metrics"]["test"]
    assert {"spearman", "pearson", "reference_spearman", "teacher_spearman"} <= set(test)
    assert test["teacher_spearman"] == pytest.approx(
        json.loads((trained.path / "compress.json").read_text())["metrics"]["test"]["spearman"], abs=1e-6)
    assert test["reference_spearman"] > 50 and test["spearman"] > 50, meta["metrics"]  # it learnt the scores


def test_a_classifier_and_a_scorer_are_refused_for_each_others_data(trained, tmp_path, capsys):
    from conftest import sentiment_rows, write_csv

    table = write_csv(tmp_path / "sentiment.csv", sentiment_rows(40))
    rc = main(["distill", "--teacher", str(trained.path), "--data", str(table), "--student", "1x32",
               "--init", "random", "--epochs", "1", "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert rc == 2 and "a similarity scorer (a cross-encoder)" in err and "classification data" in err
    classifier = make_bert(tmp_path / "classifier", layers=1, head=True, num_labels=2)
    rc = main(["teacher", "--model", str(classifier), "--data", str(trained.data), "--epochs", "1",
               "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert rc == 2 and "the model is a sentence classifier" in err and "similarity data" in err
    assert len(err.strip().splitlines()) == 1
