"""A head that was never trained is not a teacher: the reported case, reproduced on a tiny BERT.

A BERT saved as ``BertForSequenceClassification`` with its random head looks like a classifier for
a 2-class task; ``teacher`` used to package it at chance accuracy without a word and ``distill``
learnt from it.
"""

from __future__ import annotations

import json
from fractions import Fraction
from math import comb

import numpy as np
import pytest

from compress.cli import main
from compress.core.errors import CompressError
from compress.core.head_check import ALPHA, binomial_upper_tail, check_head, refuse_untrained_teacher
from tests.conftest import make_bert, sentiment_rows, write_csv


def test_binomial_tail_is_exact():
    for n in (1, 7, 24, 60):
        for p in (0.1, 0.5, 0.62):
            q = Fraction(p).limit_denominator(1000)
            for k in range(0, n + 2, max(1, n // 6)):
                exact = sum(comb(n, i) * q ** i * (1 - q) ** (n - i) for i in range(k, n + 1))
                assert binomial_upper_tail(k, n, float(q)) == pytest.approx(float(exact), rel=1e-9, abs=1e-300)
    assert binomial_upper_tail(549, 1056, 0.5) == pytest.approx(0.1035, abs=1e-4)  # 52% of 1,056: chance


def _logits(pred: np.ndarray, k: int = 2) -> np.ndarray:
    return np.eye(k)[pred]


def test_verdicts():
    rng = np.random.default_rng(0)
    labels = np.arange(1000) % 2
    guess = check_head(_logits(rng.integers(0, 2, 1000)), labels)
    assert guess.verdict == "untrained" and guess.chance_rate == 0.5
    good = labels.copy()
    good[:100] = 1 - good[:100]  # 90% right
    assert check_head(_logits(good), labels).verdict == "trained"
    # imbalanced: always answering the common class (80%) is chance, not skill
    skewed = (np.arange(1000) % 5 == 0).astype(int)
    constant = check_head(_logits(np.zeros(1000, dtype=int)), skewed)
    assert constant.accuracy == 0.8 and constant.chance_rate == 0.8 and constant.untrained
    # three classes, balanced: chance is 1/3
    three = np.arange(300) % 3
    assert check_head(_logits(three, 3), three).verdict == "trained"
    # too few examples to show anything at ALPHA = 0.01, even all right: 6 balanced (0.5 ** 6 > 0.01),
    # or 7 with a majority of 4 (4/7 ** 7 > 0.01); 8 balanced ones all right are enough
    assert check_head(_logits(labels[:6]), labels[:6]).verdict == "inconclusive"
    assert check_head(_logits(labels[:7]), labels[:7]).verdict == "inconclusive"
    assert check_head(_logits(labels[:8]), labels[:8]).verdict == "trained"


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """The reported case: a classifier with a random head, and a balanced 2-class task (24 validation rows)."""
    root = tmp_path_factory.mktemp("head-check")
    data = write_csv(root / "balanced.csv", sentiment_rows(240))
    model = make_bert(root / "converted", layers=2, head=True)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "architectures": ["BertForSequenceClassification"]}))
    return root, model, data


def _meta(folder) -> dict:
    return json.loads((folder / "compress.json").read_text())


def test_a_random_head_is_fine_tuned_and_a_trained_one_kept(case, tmp_path, capsys):
    root, model, data = case
    rc = main(["teacher", "--model", str(model), "--data", str(data), "--out", str(tmp_path / "t"), "--epochs", "6",
               "--lr", "2e-3", "--batch-size", "16"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "has a head for this task, but it is no better than chance" in out and "fine-tuning it" in out
    meta = _meta(tmp_path / "t")
    head = meta["head_check"]
    assert head["verdict"] == "untrained" and head["decision"] == "fine-tuned" and meta["fine_tuned"]
    assert head["n"] == 24 and head["chance_rate"] == head["majority_rate"] >= 0.5 and head["p_value"] > ALPHA
    assert meta["chance_check"]["verdict"] == "trained" and meta["metrics"]["test"]["accuracy"] >= 0.9

    # the fine-tuned teacher, given again, passes the check and is packaged as it is
    rc = main(["teacher", "--model", str(tmp_path / "t"), "--data", str(data), "--out", str(tmp_path / "again")])
    assert rc == 0 and "no better than chance" not in capsys.readouterr().out
    again = _meta(tmp_path / "again")
    assert not again["fine_tuned"] and again["head_check"]["verdict"] == "trained"
    assert again["head_check"]["decision"] == "kept" and again["head_check"]["p_value"] <= ALPHA
    assert again["metrics"]["validation"] == meta["metrics"]["validation"]


def test_finetune_no_refuses_a_random_head(case, tmp_path, capsys):
    root, model, data = case
    assert main(["teacher", "--model", str(model), "--data", str(data), "--finetune", "no",
                 "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert "its head was never trained for this task" in err and "--finetune" in err
    assert "validation accuracy" in err and "commonest one" in err
    assert not (tmp_path / "t").exists()


def test_distill_refuses_a_teacher_at_chance_unless_allowed(case, tmp_path, capsys):
    root, model, data = case
    common = ["--data", str(data), "--student", "1x32", "--init", "random", "--epochs", "1", "--no-intermediate"]
    # measured: a plain folder with a random head
    assert main(["distill", "--teacher", str(model), *common, "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "is no better than chance on this task" in err and "--allow-untrained-teacher" in err
    assert not (tmp_path / "s").exists()
    assert main(["distill", "--teacher", str(model), *common, "--allow-untrained-teacher",
                 "--out", str(tmp_path / "s")]) == 0
    assert "is no better than chance" in capsys.readouterr().out  # a warning, and the run goes on

    # recorded: a teacher artifact packaged at chance (--epochs 0) is refused before any soft label
    assert main(["teacher", "--model", str(model), "--data", str(data), "--epochs", "0",
                 "--out", str(tmp_path / "t0")]) == 0
    assert _meta(tmp_path / "t0")["chance_check"]["verdict"] == "untrained"
    capsys.readouterr()
    assert main(["distill", "--teacher", str(tmp_path / "t0"), *common, "--out", str(tmp_path / "s0")]) == 2
    captured = capsys.readouterr()
    assert "is no better than chance on this task" in captured.err and "soft labels" not in captured.out


def test_a_tagger_that_finds_no_entity_is_untrained_and_refused():
    from compress.core.head_check import TaggerCheck, check_tagger
    from compress.tasks import get_task

    score = get_task("token-classification").score
    gold = [["B-PER", "O", "B-LOC", "I-LOC"], ["O", "O"], ["B-LOC", "O"]]
    all_o = check_tagger(score([["O"] * len(g) for g in gold], gold))
    assert (all_o.verdict, all_o.correct, all_o.gold, all_o.predicted) == ("untrained", 0, 3, 0)
    assert "0 of 3 entities found, 0 predicted" in all_o.summary()
    wrong = check_tagger(score([["B-LOC", "O", "B-LOC", "O"], ["B-PER", "O"], ["O", "O"]], gold))
    assert (wrong.verdict, wrong.correct, wrong.predicted) == ("untrained", 0, 3)  # entities, none right
    one = check_tagger(score([["B-PER", "O", "O", "O"], ["O", "O"], ["O", "O"]], gold))
    assert (one.verdict, one.correct) == ("trained", 1)
    assert check_tagger(score([["O", "O"]], [["O", "O"]])).verdict == "inconclusive"
    assert TaggerCheck.from_dict(all_o.to_dict()) == all_o and TaggerCheck.from_dict({"accuracy": 1}) is None
    with pytest.raises(CompressError, match="no better than chance .*0 of 3 entities found.*collapsed.*--lr"):
        refuse_untrained_teacher(all_o, "runs/t", allowed=False)
    refuse_untrained_teacher(one, "runs/t", allowed=False)
