"""Soft gold labels (``distill --gold-labels``): a data column of label probabilities or scores, read with
clear errors, carried through the loaders, and trained toward by the distillation loss over the rows that
have them. Tiny BERTs built in the test."""

from __future__ import annotations

import json
import math

import pytest
import torch

from compress.cli import main
from compress.config import DistillConfig
from compress.tasks.tables import load_task_data
from compress.stages.distill.trainer import DistillationModule
from compress.core.errors import CompressError
from compress.stages.gold_labels import ABSENT, COLUMN, gold_probabilities, gold_row, with_gold
from compress.stages.losses import LossTerm
from compress.stages.teacher import TeacherConfig, train_teacher
from compress.config import DataOptions
from compress.stages.training import TrainSettings
from tests.conftest import make_bert, sentiment_rows, write_csv


def test_scores_become_sigmoid_probabilities_and_lists_are_checked():
    assert gold_row(0.0, 2, 1.0) == [0.5, 0.5]
    p = 1 / (1 + math.exp(-2.0))
    assert gold_row(2.0, 2, 1.0) == pytest.approx([1 - p, p])
    assert gold_row(-4.0, 2, 2.0) == pytest.approx([1 - 1 / (1 + math.exp(2.0)), 1 / (1 + math.exp(2.0))])
    assert gold_row("[0.2, 0.5, 0.3]", 3, 1.0) == pytest.approx([0.2, 0.5, 0.3])  # a JSON cell of a CSV
    assert gold_row("1.5", 2, 1.0) == pytest.approx(gold_row(1.5, 2, 1.0))
    assert sum(gold_row([0.3334, 0.3333, 0.3333], 3, 1.0)) == pytest.approx(1.0)  # rounded cells renormalised
    for bad, why in [(1.0, "two-label tasks only"), ([0.5, 0.6, 0.1], "sum to 1"), ([0.5, 0.5], "expected 3"),
                     ([-0.1, 0.6, 0.5], ">= 0"), ("high", "expected a score")]:
        with pytest.raises(ValueError, match=why):
            gold_row(bad, 3, 1.0)
    rows, missing = gold_probabilities([1.0, None, float("nan"), ""], 2, 1.0, "x.csv", "rating")
    assert missing == 3 and rows[1] == rows[2] == rows[3] == [ABSENT, ABSENT]
    with pytest.raises(CompressError, match=r"x\.csv: column 'rating', data row 1: .*leave it empty"):
        gold_probabilities([1.0, "[0.9, 0.9]"], 2, 1.0, "x.csv", "rating")
    with pytest.raises(CompressError, match="--gold-scale must be > 0"):
        gold_probabilities([1.0], 2, 0.0, "x.csv", "rating")


def test_a_files_gold_column_is_carried_through_loading_and_a_missing_one_names_the_others(tmp_path):
    rows = sentiment_rows(40)
    for i, r in enumerate(rows):
        r["rating"] = (1.5 if r["label"] else -1.5) if i % 7 else None  # some cells empty
        r["note"] = "x"
    path = write_csv(tmp_path / "rated.csv", rows)
    task = load_task_data(str(path), keep_columns=("rating",))
    assert "note" not in task.splits["train"].column_names  # only the named columns travel
    gold = with_gold(task, "rating", 1.0)
    for split in ("train", "validation", "test"):
        ds = gold.splits[split]
        for label, cell, probs in zip(ds["label"][:], ds["rating"][:], ds[COLUMN][:]):
            if cell is None:
                assert probs == [ABSENT, ABSENT]
            else:  # the score's sign is the label here, so the gold probability leans the label's way
                assert probs[label] == pytest.approx(1 / (1 + math.exp(-1.5)))
    with pytest.raises(CompressError, match=r"no column 'score' in the training data .*other columns: rating"):
        with_gold(task, "score", 1.0)
    jsonl = tmp_path / "probs.jsonl"
    jsonl.write_text("\n".join(json.dumps({"text": r["text"], "label": r["label"],
                                           "probs": [0.3, 0.7] if r["label"] else [0.8, 0.2]}) for r in rows))
    task = with_gold(load_task_data(str(jsonl), keep_columns=("probs",)), "probs", 1.0)
    train = task.splits["train"]
    assert all(p == pytest.approx([0.3, 0.7] if y else [0.8, 0.2]) for y, p in zip(train["label"][:], train[COLUMN][:]))


def test_the_gold_term_is_the_cross_entropy_with_the_probabilities_over_the_rows_that_have_them():
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32, num_labels=2))
    module = DistillationModule(model, 16, 16, {}, intermediate=False)
    ids = torch.randint(5, 100, (6, 7))
    mask = torch.ones_like(ids)
    gold = torch.tensor([[0.9, 0.1], [0.3, 0.7], [0.5, 0.5], [0.2, 0.8], [ABSENT, ABSENT], [ABSENT, ABSENT]])
    terms = [LossTerm("soft_ce", 1.0, on="gold")]
    model.eval()
    value = module(ids, mask, gold=gold, terms=terms, temperature=4.0)["gold"]  # T does not apply to gold
    logp = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits, -1)
    expected = -(gold[:4] * logp[:4]).sum(-1).sum() / 6  # rows with gold, divided by the whole batch
    assert torch.allclose(value, expected, atol=1e-6)
    assert float(module(ids[4:], mask[4:], gold=gold[4:], terms=terms)["gold"].detach()) == 0.0
    # Trained on the gold term alone, the model's probabilities become the gold ones (not the argmax labels).
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        optimizer.zero_grad()
        module(ids[:4], mask[:4], gold=gold[:4], terms=terms)["loss"].backward()
        optimizer.step()
    model.eval()
    probs = torch.softmax(model(input_ids=ids[:4], attention_mask=mask[:4]).logits, -1)
    assert torch.allclose(probs, gold[:4], atol=0.05), probs


def test_gold_settings_are_checked_and_refused_where_they_do_not_apply():
    assert any(t.on == "gold" and t.weight == 0.5 for t in DistillConfig(gold_labels="rating", alpha_gold=0.5).loss_terms())
    assert not any(t.on == "gold" for t in DistillConfig().loss_terms())
    messages = [p.message for p in DistillConfig(losses=[{"loss": "soft_ce", "on": "gold"}]).problems()]
    assert any("--gold-labels" in m for m in messages)
    messages = [p.message for p in DistillConfig(gold_labels="r", gold_scale=0, alpha_gold=-1).problems()]
    assert any("--gold-scale must be > 0" in m for m in messages) and any("--alpha-gold" in m for m in messages)
    # gold alone is something to learn from
    assert not DistillConfig(gold_labels="r", alpha_kd=0, alpha_hard=0).problems()
    with pytest.raises(CompressError, match="--gold-labels 'rating': soft gold labels apply to sentence classif"):
        DistillConfig(gold_labels="rating").refuse_beyond_logits("a tagger")


def test_distill_with_gold_labels_and_transfer_rows(tmp_path, capsys):
    """Gold probabilities that contradict the labels, as the only target: a student that learns the inverted
    labels shows that the column reached the loss (a dropped column would leave nothing to learn, at chance)."""
    rows = sentiment_rows(160)
    for r in rows:
        r["rating"] = -3.0 if r["label"] else 3.0
    data = write_csv(tmp_path / "rated.csv", rows)
    teacher = train_teacher(TeacherConfig(model=str(make_bert(tmp_path / "base", layers=2, head=True)),
                                          data=DataOptions(str(data)),
                                          train=TrainSettings(epochs=1, lr=2e-3, batch_size=16, logging_steps=1000)),
                            tmp_path / "teacher")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(r["text"] for r in sentiment_rows(40, seed=9)), encoding="utf-8")
    out = tmp_path / "student"
    rc = main(["distill", "--teacher", str(teacher), "--data", str(data), "--student", "2x32", "--init", "random",
               "--epochs", "4", "--batch-size", "16", "--lr", "3e-3", "--out", str(out), "--unlabeled", str(corpus),
               "--gold-labels", "rating", "--alpha-gold", "1", "--alpha-kd", "0", "--alpha-hard", "0",
               "--allow-untrained-teacher"])
    assert rc == 0, capsys.readouterr().err
    meta = json.loads((out / "compress.json").read_text())
    record = meta["distillation"]["gold_labels"]
    assert record == {"column": "rating", "scale": 1.0, "weight": 1.0, "training_rows_with_gold": 128,
                      "training_rows": 128}
    assert {"name": "gold", "loss": "soft_ce", "on": "gold", "weight": 1.0} in meta["distillation"]["loss_terms"]
    assert meta["transfer"]["unlabeled"] > 0  # transfer rows trained beside, without gold probabilities
    assert meta["metrics"]["test"]["accuracy"] < 0.25, meta["metrics"]["test"]
    rc = main(["distill", "--teacher", str(teacher), "--data", str(data), "--out", str(tmp_path / "x"),
               "--gold-labels", "score"])
    assert rc != 0 and "no column 'score'" in capsys.readouterr().err
