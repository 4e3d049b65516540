"""The two-tower encoder (``sentence-embedding``) through the stages on tiny models: a sentence-transformers folder
is the teacher as it is (or fine-tuned on scored pairs with ``--finetune yes``), a student is distilled on
unlabelled in-domain text, exported with pooling and normalisation in the ONNX graph, quantized (INT8 checked on the
vectors), benched on STS Spearman and neighbour recall, gated, and asked for vectors by ``predict``."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from compress.cli import main
from conftest import make_bert
from tests.support.embedding import corpus, make_st_folder
from tests.support.similarity import scored_pairs, write_pairs


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """A sentence-transformers teacher used as it is by ``bert-compress teacher``, and a student distilled from it
    by ``bert-compress distill`` on unlabelled text (the stages under test)."""
    tmp = tmp_path_factory.mktemp("embedding")
    folder = make_st_folder(tmp / "st", hidden=32, layers=2, seed=1)
    text = tmp / "domain.txt"
    text.write_text("\n".join(corpus(400)), encoding="utf-8")
    pairs = write_pairs(tmp / "pairs.csv", scored_pairs(120))
    teacher = tmp / "teacher"
    assert main(["teacher", "--model", str(folder), "--data", str(text), "--max-length", "32",
                 "--out", str(teacher)]) == 0
    student = tmp / "student"
    assert main(["distill", "--teacher", str(teacher), "--data", str(text), "--student", "1x32", "--init", "random",
                 "--max-steps", "30", "--lr", "1e-3", "--batch-size", "16", "--max-length", "32",
                 "--out", str(student)]) == 0
    return SimpleNamespace(folder=folder, text=text, pairs=pairs, teacher=teacher, student=student, tmp=tmp)


def _meta(folder):
    return json.loads((folder / "compress.json").read_text())


def test_a_sentence_transformers_folder_is_the_teacher_as_it_is(chain):
    meta = _meta(chain.teacher)
    assert meta["task"] == "sentence-embedding" and meta["stage"] == "teacher"
    assert not meta["distillation"]["fine_tuned"]
    for name in ("modules.json", "1_Pooling/config.json"):
        assert (chain.teacher / name).is_file(), name


def test_the_teacher_is_fine_tuned_on_scored_pairs_when_asked(chain, tmp_path):
    out = tmp_path / "tuned"
    assert main(["teacher", "--model", str(chain.folder), "--data", str(chain.pairs), "--finetune", "yes",
                 "--max-steps", "4", "--batch-size", "8", "--lr", "1e-3", "--max-length", "32",
                 "--out", str(out)]) == 0
    meta = _meta(out)
    assert meta["task"] == "sentence-embedding" and meta["distillation"]["fine_tuned"]
    assert {"spearman", "pearson"} <= set(meta["metrics"]["test"])


def test_the_student_learns_the_teachers_vectors_on_unlabelled_text(chain):
    meta = _meta(chain.student)
    assert meta["task"] == "sentence-embedding"
    record = meta["distillation"]
    assert record["projection"]["stored"] is False
    assert (chain.student / "modules.json").is_file()


@pytest.fixture(scope="module")
def exported(chain):
    """The student exported by ``bert-compress export`` (pooling and normalisation in the graph)."""
    out = chain.tmp / "onnx"
    assert main(["export", "--model", str(chain.student), "--out", str(out)]) == 0
    return out


def test_export_puts_pooling_in_the_graph_and_carries_the_pipeline_files(chain, exported):
    import onnx

    meta = _meta(exported)
    assert meta["task"] == "sentence-embedding" and meta["onnx"]["outputs"] == ["sentence_embedding"]
    assert meta["parity"]["max_abs_diff"] <= meta["parity"]["atol"]
    assert [o.name for o in onnx.load(str(exported / "model.onnx")).graph.output] == ["sentence_embedding"]
    for name in ("modules.json", "1_Pooling/config.json"):
        assert (exported / name).read_text() == (chain.student / name).read_text(), name


def test_the_predictor_encodes_in_pytorch_and_onnx_alike(chain, exported):
    from compress.runtime.predictor import Predictor
    from compress.tasks.sentence_embedding.distill import Encoder

    texts = corpus(9, seed=7)
    torch_vectors = Predictor.load(chain.student).encode(texts)
    onnx_vectors = Predictor.load(exported).encode(texts)
    assert torch_vectors.shape == onnx_vectors.shape == (9, 32) and onnx_vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(onnx_vectors, axis=1), 1.0, atol=1e-5)  # the folder normalises
    np.testing.assert_allclose(onnx_vectors, torch_vectors, atol=1e-4)
    np.testing.assert_allclose(torch_vectors, Encoder.load(chain.student, 32).vectors(texts).numpy(), atol=1e-5)


@pytest.fixture(scope="module")
def int8(chain, exported):
    """The exported student quantized by ``bert-compress quantize``, decided on the scored pairs' vectors (the budget
    a fraction of Spearman, as every task's: 0.05 = 5 points)."""
    out = chain.tmp / "int8"
    assert main(["quantize", "--model", str(exported), "--data", str(chain.pairs), "--max-accuracy-drop", "0.05",
                 "--out", str(out)]) == 0
    return out


def test_int8_is_checked_on_the_vectors_and_keeps_the_pipeline_files(chain, exported, int8):
    from compress.runtime.predictor import Predictor

    meta = _meta(int8)
    assert meta["task"] == "sentence-embedding" and meta["kind"].startswith("onnx-int8")
    chosen = next(c for c in meta["quantization"]["candidates"] if c["name"] == meta["quantization"]["chosen"])
    assert meta["quantization"]["metric"] == "spearman" and chosen["within_budget"]
    assert {"spearman", "spearman_drop", "agreement", "min_cosine"} <= set(chosen)  # the vectors' cosine to fp32
    assert -1 <= chosen["spearman"] <= 1 and chosen["spearman_drop"] <= 0.05  # a fraction, within the budget
    assert (int8 / "modules.json").is_file() and (int8 / "1_Pooling" / "config.json").is_file()
    texts = corpus(20, seed=9)
    fp32, q = Predictor.load(exported).encode(texts), Predictor.load(int8).encode(texts)
    assert q.shape == fp32.shape and q.dtype == np.float32
    cosines = np.sum(fp32 * q, axis=1)  # both unit length
    assert cosines.min() > 0.9, cosines


@pytest.fixture(scope="module")
def benched(chain, int8):
    """``bert-compress bench`` of the student and its INT8 against the teacher, once on held-out text (neighbour
    recall) and once on scored pairs (STS Spearman)."""
    out = {}
    # the texts held out of a plain text file are its validation split
    for name, data, split in (("text", chain.text, "validation"), ("pairs", chain.pairs, "test")):
        folder = chain.tmp / f"bench-{name}"
        assert main(["bench", str(chain.student), str(int8), "--reference", str(chain.teacher), "--data", str(data),
                     "--split", split, "--quick", "--no-memory", "--out", str(folder)]) == 0
        out[name] = folder
    return out


def test_bench_reports_neighbour_recall_on_text_and_spearman_on_pairs(benched):
    text = json.loads((benched["text"] / "results.json").read_text())
    assert text["data"]["task"] == "sentence-embedding"
    quality = [a["quality"] for a in text["artifacts"] if not a["is_reference"]]
    for q in quality:
        assert 0 <= q["neighbour_recall"] <= 1 and len(q["neighbour_recalls"]) == q["n_texts"] and "agreement" in q
    pairs = json.loads((benched["pairs"] / "results.json").read_text())
    for q in (a["quality"] for a in pairs["artifacts"] if not a["is_reference"]):
        assert {"spearman", "spearman_drop", "neighbour_recall"} <= set(q)
        assert -1 <= q["spearman"] <= 1 and abs(q["spearman_drop"]["estimate"]) <= 2  # fractions


def test_the_gate_decides_neighbour_recall_and_the_spearman_drop(benched, tmp_path, capsys):
    rules = tmp_path / "rules.toml"
    rules.write_text("[rules]\nmin_neighbour_recall = 0.0\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["gate", str(benched["text"] / "results.json"), "--rules", str(rules)]) == 0
    assert "min_neighbour_recall" in capsys.readouterr().out
    rules.write_text("[rules]\nmax_spearman_drop = 1.0\n", encoding="utf-8")
    assert main(["gate", str(benched["pairs"] / "results.json"), "--rules", str(rules)]) == 0
    assert "max_spearman_drop" in capsys.readouterr().out
    rules.write_text("[rules]\nmin_neighbour_recall = 1.01\n", encoding="utf-8")
    assert main(["gate", str(benched["text"] / "results.json"), "--rules", str(rules)]) != 0


def test_another_tasks_quality_rule_is_refused_on_an_encoders_results(benched, tmp_path, capsys):
    rules = tmp_path / "rules.toml"
    rules.write_text("[rules]\nmax_accuracy_drop = 0.05\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["gate", str(benched["text"] / "results.json"), "--rules", str(rules)]) == 3
    assert "min_neighbour_recall" in capsys.readouterr().err


def test_predict_prints_json_lines_and_writes_npy(chain, int8, tmp_path, capsys):
    from compress.runtime.predictor import Predictor

    texts = corpus(3, seed=11)
    capsys.readouterr()
    assert main(["predict", "--model", str(int8), *texts]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["text"] for line in lines] == texts and all(len(line["embedding"]) == 32 for line in lines)
    out = tmp_path / "vectors.npy"
    assert main(["predict", "--model", str(int8), "--format", "npy", "--out", str(out), *texts]) == 0
    vectors = np.load(out)
    assert vectors.shape == (3, 32) and vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, Predictor.load(int8).encode(texts), atol=1e-6)
    np.testing.assert_allclose(vectors, np.array([line["embedding"] for line in lines]), atol=1e-6)
    assert main(["predict", "--model", str(int8), "--out", str(out), texts[0]]) == 2
    assert "--format npy" in capsys.readouterr().err


def test_predict_npy_is_refused_for_a_model_without_vectors(tmp_path, capsys):
    classifier = make_bert(tmp_path / "classifier", layers=1, head=True, num_labels=2)
    assert main(["predict", "--model", str(classifier), "--format", "npy", "--out", str(tmp_path / "v.npy"),
                 "a text"]) == 2
    assert "no sentence vector" in capsys.readouterr().err and not (tmp_path / "v.npy").exists()


def test_a_narrower_student_keeps_its_projection_when_asked(chain, tmp_path):
    out = tmp_path / "narrow"
    assert main(["distill", "--teacher", str(chain.teacher), "--data", str(chain.text), "--student", "1x16",
                 "--init", "random", "--max-steps", "4", "--batch-size", "16", "--max-length", "32",
                 "--embedding-loss", "mse", "--keep-projection", "--out", str(out)]) == 0
    meta = _meta(out)
    assert meta["distillation"]["projection"]["stored"] is True and (out / "projection.safetensors").is_file()
    assert meta["config"]["embedding_loss"] == "mse" and meta["config"]["keep_projection"] is True


def test_the_encoder_settings_are_recorded_only_when_set():
    from compress.config import DistillConfig

    plain = DistillConfig(teacher="t").to_dict()
    assert "embedding_loss" not in plain and "keep_projection" not in plain  # older fingerprints stay as they were
    assert DistillConfig.from_dict(plain) == DistillConfig(teacher="t")
    assert DistillConfig(teacher="t", embedding_loss="cosine").to_dict()["embedding_loss"] == "cosine"


def test_optimize_chooses_among_the_encoders_runtimes_on_spearman(chain, exported, int8, tmp_path):
    out = tmp_path / "choice"
    assert main(["optimize", "--model", str(chain.student), "--artifacts", str(exported), str(int8), "--data",
                 str(chain.pairs), "--batch-sizes", "1", "--seq-len", "16", "--warmup", "0", "--runs", "2",
                 "--threads", "1", "--max-accuracy-drop", "0.05", "--out", str(out)]) == 0
    meta = _meta(out)
    assert meta["task"] == "sentence-embedding", sorted(meta)
    assert "spearman" in json.dumps(meta)


def test_bench_on_text_names_the_split_of_its_held_out_texts(chain, tmp_path, capsys):
    assert main(["bench", str(chain.student), "--reference", str(chain.teacher), "--data", str(chain.text),
                 "--quick", "--no-memory", "--out", str(tmp_path / "bench")]) == 2
    assert "--split validation" in capsys.readouterr().err


def test_the_server_answers_the_int8_encoders_vectors(int8):
    """``bert-compress serve`` of the INT8 artifact in the serving install (the training stack unimportable)."""
    import sys

    import httpx

    from benchmarks.http_server import ServerProcess
    from compress.runtime.predictor import Predictor
    from tests.support.paths import ROOT
    from tests.support.serving_env import BLOCKER, TRAINING_STACK, blocked_env

    launcher = [sys.executable, "-c", BLOCKER + "import runpy\nrunpy.run_module('compress', run_name='__main__')\n",
                ",".join(TRAINING_STACK)]
    texts = corpus(3, seed=13)
    with ServerProcess(int8, ["--threads", "1"], launcher=launcher, env=blocked_env(), cwd=ROOT,
                       start_timeout=90) as server:
        answer = httpx.post(f"{server.url}/predict", json={"inputs": texts}, timeout=60)
    assert answer.status_code == 200, answer.text
    vectors = np.array(answer.json(), dtype=np.float32)
    assert vectors.shape == (3, 32)
    np.testing.assert_allclose(vectors, Predictor.load(int8).encode(texts), atol=1e-5)


def test_the_encoders_settings_are_refused_for_a_classifiers_distillation(tmp_path, capsys):
    from conftest import sentiment_rows, write_csv

    table = write_csv(tmp_path / "sentiment.csv", sentiment_rows(40))
    teacher = make_bert(tmp_path / "classifier", layers=1, head=True, num_labels=2)
    assert main(["distill", "--teacher", str(teacher), "--data", str(table), "--student", "1x32", "--init", "random",
                 "--epochs", "1", "--embedding-loss", "cosine", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "--embedding-loss 'cosine'" in err and "sentence classification" in err
