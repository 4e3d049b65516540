"""Distilling a tagger with unlabelled transfer text: the teacher labels whitespace words, no gold reaches them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from tests.support.toy_ner import toy_sentences, toy_tagger


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ner-transfer")
    data, path = toy_tagger(tmp)
    return SimpleNamespace(path=path, data=data, tmp=tmp)


def _corpus(trained, tmp_path):
    """Unseen toy sentences as raw text, plus one validation sentence and one training sentence verbatim."""
    from compress.tasks.token_classification.data import load_token_data

    task = load_token_data(str(trained.data))
    leak = " ".join(task.splits["validation"]["tokens"][0])
    twice = " ".join(task.splits["train"]["tokens"][0])
    fresh = [" ".join(words) for words, _ in toy_sentences(40, seed=7)]
    path = tmp_path / "raw.txt"
    quoted = f"so {leak} , she said"  # a validation sentence inside a longer line: the run-based check drops it
    path.write_text("\n".join(fresh + [leak, twice, fresh[0], quoted, ""]) + "\n", encoding="utf-8")
    return path, len(set(fresh) - {leak, twice})


def test_distill_with_unlabelled_text_labels_it_by_the_teacher_only(trained, tmp_path, capsys):
    from compress.cli import main

    corpus, unseen = _corpus(trained, tmp_path)
    out = tmp_path / "student"
    assert main(["distill", "--teacher", str(trained.path), "--data", str(trained.data), "--student", "1x32",
                 "--init", "teacher-layers", "--out", str(out), "--max-length", "48", "--epochs", "2", "--lr", "3e-3",
                 "--batch-size", "8", "--sampling", "sequential", "--unlabeled", str(corpus),
                 "--unlabeled-weight", "0.5"]) == 0
    meta = json.loads((out / "compress.json").read_text())
    transfer = meta["transfer"]
    assert transfer["kept"] == unseen and transfer["training_rows"] == unseen and transfer["weight"] == 0.5
    assert transfer["in_validation_or_test"] >= 1 and transfer["in_training"] >= 1 and transfer["duplicates"] >= 1
    assert transfer["overlaps_validation_or_test"] >= 1
    labelled_rows = meta["training"]["rows"] - transfer["training_rows"]
    assert labelled_rows >= len(toy_sentences(160)) * 0.6  # the training split's windows, each sentence at least once
    assert meta["metrics"]["validation"]["entity_f1"] >= 0.7, meta["metrics"]["validation"]
    assert "soft labels (unlabelled" in capsys.readouterr().out


def test_the_transfer_sample_can_be_drawn_evenly_across_a_source_column(trained, tmp_path):
    from compress.cli import main

    fresh = [" ".join(words) for words, _ in toy_sentences(60, seed=11)]
    rows = [(text, "forum" if i < 4 else "chat") for i, text in enumerate(dict.fromkeys(fresh))]
    corpus = tmp_path / "traffic.csv"
    corpus.write_text("text,channel\n" + "".join(f'"{t}",{c}\n' for t, c in rows), encoding="utf-8")
    out = tmp_path / "balanced"
    assert main(["distill", "--teacher", str(trained.path), "--data", str(trained.data), "--student", "1x32",
                 "--init", "teacher-layers", "--out", str(out), "--max-length", "48", "--epochs", "1",
                 "--batch-size", "8", "--unlabeled", str(corpus), "--unlabeled-limit", "12",
                 "--unlabeled-balance", "channel"]) == 0
    meta = json.loads((out / "compress.json").read_text())
    assert meta["transfer"]["kept_by_group"] == {"chat": 8, "forum": 4} and meta["transfer"]["training_rows"] == 12
    assert meta["config"]["unlabeled_balance"] == "channel"


def test_origins_rebuilds_a_taggers_rows_and_counts_entities_either_model_finds(trained, tmp_path, capsys):
    from tools.studies.origins import entity_agreement_rows, main
    from compress.cli import main as cli
    from compress.runtime.predictor import Predictor
    from compress.tasks.token_classification.data import load_token_data

    corpus, unseen = _corpus(trained, tmp_path)
    student = tmp_path / "student"
    assert cli(["distill", "--teacher", str(trained.path), "--data", str(trained.data), "--student", "1x32",
                "--init", "random", "--out", str(student), "--max-length", "48", "--epochs", "1", "--batch-size", "8",
                "--unlabeled", str(corpus), "--allow-untrained-teacher"]) == 0  # a weak student: some disagreement
    capsys.readouterr()
    out = tmp_path / "origins.json"
    assert main(["--teacher", str(trained.path), str(student), "--per-origin", "0", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())[0]
    by = report["by_origin"]
    assert list(by) == ["train", "unlabeled", "validation", "test"] and by["unlabeled"]["sentences"] == unseen
    assert report["unit"] == "entities either model finds" and report["diagnosis"]["trained"] == ["train", "unlabeled"]
    assert f"entities in {by['test']['sentences']:,} sentences" in printed
    assert "teacher's confidence" not in printed  # no bands for entities: no empty table
    # the test row by hand: both models through Predictor on the test sentences, entity by entity
    task = load_token_data(str(trained.data))
    words = [" ".join(w) for w in task.splits["test"]["tokens"]]
    tags = [[r["word_tags"] for r in Predictor.load(p).predict(words, word_tags=True)] for p in (student, trained.path)]
    ours, theirs = entity_agreement_rows(*tags)
    assert by["test"]["n"] == len(ours) and by["test"]["agreeing"] == sum(a == b for a, b in zip(ours, theirs))
    assert by["test"]["n"] > by["test"]["agreeing"]  # one random-init epoch does not reproduce the teacher


def test_transfer_rows_carry_the_teachers_word_labels_and_no_gold(trained):
    from compress.runtime.modeling import load_classifier
    from compress.tasks.token_classification.alignment import IGNORE_INDEX
    from compress.tasks.token_classification.distill import _transfer_rows, word_soft_labels

    model, tok, _ = load_classifier(trained.path, task="token-classification")
    sentences = [["we", "saw", "New", "York,", "with", "Alice"], ["Rome"]]
    rows, reused, returned = _transfer_rows(model, tok, tok, "sha", sentences, 48, "fp32", 2.0)
    assert not reused and len(rows) == 2 and rows["weight"] == [2.0, 2.0]
    assert all(label == IGNORE_INDEX for labels in rows["labels"] for label in labels)
    soft, _ = word_soft_labels(model, tok, sentences, [[0] * 6, [0]], 48, "sha")
    assert rows["soft"][0] == pytest.approx(soft[0].reshape(-1).tolist())
    assert [s.shape for s in returned] == [(6, 5), (1, 5)] and returned[0] == pytest.approx(soft[0])
    assert rows["first"][0][0] == 1 and len(rows["first"][0]) == 6  # [CLS] first, then one position per word


def test_the_unlabelled_weight_scales_those_rows_in_the_soft_term():
    from compress.stages.losses import soft_cross_entropy
    from compress.tasks.token_classification.distill import word_distillation_loss

    torch.manual_seed(0)
    logits, soft = torch.randn(2, 4, 3), torch.randn(2, 3, 3)
    first = torch.tensor([[1, 2, 3], [1, 2, -1]])
    labels = torch.full((2, 4), -100)
    ones = word_distillation_loss(logits, labels, first, soft, 2.0, 1.0, 0.0, torch.ones(2))["soft_ce"]
    plain = word_distillation_loss(logits, labels, first, soft, 2.0, 1.0, 0.0)["soft_ce"]
    assert torch.allclose(ones, plain)
    weighted = word_distillation_loss(logits, labels, first, soft, 2.0, 1.0, 0.0, torch.tensor([1.0, 3.0]))["soft_ce"]
    row0 = soft_cross_entropy(logits[0, 1:4], soft[0], 2.0)
    row1 = soft_cross_entropy(logits[1, 1:3], soft[1, :2], 2.0)
    assert torch.allclose(weighted, (3 * row0 + 3 * 2 * row1) / (3 + 2))  # mean over the 5 words, row 1's at 3x


def test_augmentation_is_still_refused_for_a_tagger_in_one_line(trained, tmp_path, capsys):
    from compress.cli import main

    out = tmp_path / "student"
    assert main(["distill", "--teacher", str(trained.path), "--data", str(trained.data), "--student", "1x32",
                 "--init", "teacher-layers", "--out", str(out), "--augment", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--augment 2" in err[0] and "--mention-variants" in err[0] and not out.exists()


def _quick_distill(trained, data, out, *extra: str) -> int:
    """``bert-compress distill`` of a 1x32 student from the toy tagger for one epoch; its exit code."""
    from compress.cli import main

    return main(["distill", "--teacher", str(trained.path), "--data", str(data), "--student", "1x32",
                 "--init", "teacher-layers", "--out", str(out), "--max-length", "48", "--epochs", "1",
                 "--batch-size", "8", *extra])


def _refused_for_a_classifier_in_one_line(trained, tmp_path, capsys, flag: str, value: str, shown: str) -> None:
    """``distill FLAG VALUE`` on sentence-classification data ends in one line naming ``shown`` and writes nothing."""
    from compress.cli import main
    from tests.conftest import sentiment_rows, write_csv

    capsys.readouterr()
    data = write_csv(tmp_path / "reviews.csv", sentiment_rows(20))
    refused = tmp_path / "refused"
    assert main(["distill", "--teacher", str(trained.path), "--data", str(data), "--out", str(refused),
                 flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and shown in err[0] and "sentence classification" in err[0]
    assert not refused.exists()


def test_entity_weight_is_recorded_for_a_tagger_and_refused_for_a_classifier_in_one_line(trained, tmp_path, capsys):
    out = tmp_path / "weighted"
    assert _quick_distill(trained, trained.data, out, "--entity-weight", "4") == 0
    meta = json.loads((out / "compress.json").read_text())
    assert meta["distillation"]["entity_weight"] == 4.0 and meta["config"]["entity_weight"] == 4.0
    _refused_for_a_classifier_in_one_line(trained, tmp_path, capsys, "--entity-weight", "2", "--entity-weight 2.0")


def test_mention_variants_add_gold_tagged_rows_for_a_tagger_and_are_refused_for_a_classifier(trained, tmp_path,
                                                                                            capsys):
    out = tmp_path / "variants"
    assert _quick_distill(trained, trained.data, out, "--mention-variants", "2") == 0
    meta = json.loads((out / "compress.json").read_text())
    variants = meta["mention_variants"]
    assert variants["per_sentence"] == 2 and variants["variants"] > variants["sentences_with_entities"] > 0
    assert variants["training_rows"] >= variants["variants"] and meta["config"]["mention_variants"] == 2
    assert set(variants["variant_entities_by_type"]) == {"LOC", "PER"} and meta["transfer"] is None
    plain = tmp_path / "plain"
    assert _quick_distill(trained, trained.data, plain) == 0
    rows = json.loads((plain / "compress.json").read_text())["training"]["rows"]
    assert meta["training"]["rows"] == rows + variants["training_rows"]
    assert "soft labels (mention-replaced variants" in capsys.readouterr().out
    _refused_for_a_classifier_in_one_line(trained, tmp_path, capsys, "--mention-variants", "2", "--mention-variants 2")


def test_variants_with_the_teachers_transfer_mentions_are_recorded(trained, tmp_path, capsys):
    corpus, unseen = _corpus(trained, tmp_path)
    out = tmp_path / "pooled"
    assert _quick_distill(trained, trained.data, out, "--mention-variants", "2", "--unlabeled", str(corpus),
                          "--mention-pool", "train+transfer") == 0
    meta = json.loads((out / "compress.json").read_text())
    variants = meta["mention_variants"]
    assert variants["transfer_confidence"] == 0.5 and set(variants["transfer_mentions_by_type"]) <= {"LOC", "PER"}
    assert not any(variants["transfer_mentions_new_by_type"].values())  # the toy text has only the training names
    assert variants["training_rows"] >= variants["variants"] > 0 and meta["transfer"]["training_rows"] == unseen
    assert meta["config"]["mention_pool"] == "train+transfer"
    printed = capsys.readouterr().out
    assert printed.index("soft labels (unlabelled") < printed.index("soft labels (mention-replaced variants")


def test_mention_variants_with_one_mention_per_type_train_on_the_labelled_rows_with_a_note(trained, tmp_path, capsys):
    from tests.support.toy_ner import toy_sentences, write_conll

    def one_name(words, tags):  # every LOC mention becomes "New York", every PER mention "Alice"
        out_w, out_t = [], []
        for w, t in zip(words, tags):
            if t == "B-LOC":
                out_w += ["New", "York"]
                out_t += ["B-LOC", "I-LOC"]
            elif t == "B-PER":
                out_w.append("Alice")
                out_t.append("B-PER")
            elif t == "O":
                out_w.append(w)
                out_t.append(t)
        return out_w, out_t

    data = write_conll(tmp_path / "one-name.conll", [one_name(*s) for s in toy_sentences(120, seed=3)])
    out = tmp_path / "student"
    assert _quick_distill(trained, data, out, "--mention-variants", "2") == 0
    meta = json.loads((out / "compress.json").read_text())
    assert meta["mention_variants"]["variants"] == 0 and meta["mention_variants"]["training_rows"] == 0
    assert meta["mention_variants"]["sentences_with_entities"] > 0
    assert "--mention-variants 2: no variant could be made" in capsys.readouterr().err
