"""The cross-encoder through the teacher and distill stages on tiny models: a regression head trained with MSE on a
small file of scored pairs, scored on Spearman/Pearson; a student distilled from the teacher's scores beside the
gold ones; a classifier and a similarity scorer refused for each other's data in one line."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from compress.cli import main
from compress.core.errors import CompressError
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


def test_the_predictor_scores_pairs_in_pytorch_and_onnx_alike(trained, tmp_path):
    from compress.stages.export import export_onnx
    from compress.runtime.predictor import Predictor

    pairs = [(r["sentence1"], r["sentence2"]) for r in scored_pairs(12, seed=5)]
    torch_scores = Predictor.load(trained.path).predict(pairs)
    onnx = Predictor.load(export_onnx(trained.path, tmp_path / "onnx"))
    assert onnx.task == "sentence-similarity" and torch_scores.shape == (12,) and torch_scores.dtype == np.float32
    np.testing.assert_allclose(onnx.predict(pairs), torch_scores, atol=1e-3)
    with pytest.raises(CompressError, match="scores sentence pairs"):
        onnx.predict(["a single text"])
    with pytest.raises(CompressError, match="gives no sentence vector"):
        onnx.encode(["a text"])


def test_quantize_is_decided_on_spearman_against_the_fp32_model(trained, tmp_path):
    from compress.config import DataOptions
    from compress.stages.quantize import quantize

    out = quantize(trained.path, tmp_path / "int8", data=DataOptions(str(trained.data)), max_accuracy_drop=0.05)
    meta = json.loads((out / "compress.json").read_text())
    text = json.dumps(meta)
    assert "spearman_drop" in text, sorted(meta)


def test_the_scorer_bench_records_and_gate_records_read_spearman(trained):
    from compress.config import DataOptions
    from compress.stages.quality import split_scorer
    from compress.runtime.predictor import Predictor
    from compress.tasks.sentence_similarity import scoring

    data = DataOptions(str(trained.data)).load_any()
    predictor = Predictor.load(trained.path)
    scorer = split_scorer(data, "test")
    scorer.check_model(predictor)
    scores = scorer.predict(predictor)
    record = scorer.compare(scores, scores)
    assert record["spearman_drop"] == 0 and record["agreement"] == pytest.approx(1.0) and record["n"] == 16
    assert scorer.failures({**record, "spearman_drop": 0.006}, max_drop=0.005) == [
        "Spearman drop 0.0060 > budget 0.005"]
    assert record["spearman"] == pytest.approx(scoring.spearman(scores, scorer.gold))  # a fraction, as every task's
    worse = scores + np.random.RandomState(0).normal(0, 1.0, len(scores))
    quality = scoring.BenchQuality(data, "test", predictor, None)
    records = scoring.gate_records()
    ref_q = {"spearman": scoring.spearman(scores, scorer.gold), "units": np.c_[scores, scorer.gold].tolist()}
    art_q = {"spearman": scoring.spearman(worse, scorer.gold), "units": np.c_[worse, scorer.gold].tolist()}
    interval = records.drop(records.units(ref_q), records.units(art_q), 0.95)
    assert interval.estimate == pytest.approx(records.f1(ref_q) - records.f1(art_q))
    assert interval.low <= interval.estimate <= interval.high
    assert quality.data_record()["metric"] == "spearman" and len(quality.data_record()["scores"]) == 16


def test_the_server_reads_pairs_and_answers_scores():
    from compress.serving.schemas import BadInput
    from compress.tasks.sentence_similarity import decoding

    parsed = decoding.parse_request([{"text": "a cat", "text_pair": "a dog"}], {}, {})
    assert parsed.inputs == [("a cat", "a dog")] and not parsed.single
    assert decoding.format_results(parsed, [2.5], []) == [{"score": 2.5}]
    single = decoding.parse_request({"text": "a", "text_pair": "b"}, {}, {})
    assert decoding.format_results(single, [1.0], []) == {"score": 1.0}
    with pytest.raises(BadInput, match="scores pairs"):
        decoding.parse_request("one text", {}, {})
    from compress.serving import schemas

    assert schemas.check_task("sentence-similarity", "m") == "sentence-similarity"
    body = schemas.parse_request("sentence-similarity", {"inputs": [{"text": "a", "text_pair": "b"}] * 2}, 8)
    assert body.inputs == [("a", "b")] * 2
    with pytest.raises(BadInput):
        schemas.parse_request("sentence-similarity", {"inputs": {"text": "a", "text_pair": "b"},
                                                      "parameters": {"top_k": 1}}, 8)


def test_bench_and_the_gate_decide_the_spearman_drop_on_a_paired_interval(trained, tmp_path, capsys):
    from compress.config import DataOptions
    from compress.stages.quantize import quantize

    int8 = quantize(trained.path, tmp_path / "int8", data=DataOptions(str(trained.data)), max_accuracy_drop=0.05)
    bench = tmp_path / "bench"
    assert main(["bench", str(trained.path), str(int8), "--reference", str(trained.path), "--data", str(trained.data),
                 "--quick", "--no-memory", "--out", str(bench)]) == 0
    results = json.loads((bench / "results.json").read_text())
    assert results["data"]["task"] == "sentence-similarity" and len(results["data"]["scores"]) == 16
    quality = next(a["quality"] for a in results["artifacts"] if not a["is_reference"])
    assert 0 <= quality["spearman"] <= 1 and len(quality["units"]) == 16 and "spearman_drop" in quality
    assert "Spearman to reference" in (bench / "report.md").read_text()
    (tmp_path / "rules.toml").write_text("[rules]\nmax_spearman_drop = 0.5\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["gate", str(bench / "results.json"), "--rules", str(tmp_path / "rules.toml")]) == 0
    assert "max_spearman_drop" in capsys.readouterr().out
    (tmp_path / "wrong.toml").write_text("[rules]\nmax_accuracy_drop = 0.05\n", encoding="utf-8")
    assert main(["gate", str(bench / "results.json"), "--rules", str(tmp_path / "wrong.toml")]) == 3
    assert "Spearman" in capsys.readouterr().err


def test_prune_recovers_a_cross_encoder_by_distilling_its_scores(trained, tmp_path, capsys):
    out = tmp_path / "pruned"
    assert main(["prune", "--model", str(trained.path), "--data", str(trained.data), "--heads", "0.25",
                 "--recover-epochs", "1", "--max-length", "32", "--out", str(out)]) == 0
    assert "the scores alone are distilled" in capsys.readouterr().err  # recovery's --intermediate, said
    meta = json.loads((out / "compress.json").read_text())
    assert meta["task"] == "sentence-similarity"
    assert {"spearman", "reference_spearman", "mse_to_unpruned"} <= set(meta["metrics"]["test"])


def test_a_teacher_that_learnt_nothing_is_refused_by_distill(trained, tmp_path, capsys):
    untrained = tmp_path / "untrained"
    assert main(["teacher", "--model", str(make_bert(tmp_path / "encoder", layers=1)), "--data", str(trained.data),
                 "--epochs", "0", "--max-length", "32", "--out", str(untrained)]) == 0
    assert "distill will refuse it" in capsys.readouterr().err
    args = ["distill", "--teacher", str(untrained), "--data", str(trained.data), "--student", "1x32", "--init",
            "random", "--epochs", "1", "--max-length", "32", "--out", str(tmp_path / "student")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "it has not learnt these scores" in err and "--allow-untrained-teacher" in err
    assert main(args + ["--allow-untrained-teacher"]) == 0
