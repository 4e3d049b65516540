"""Real traffic replay, the load mode and the speedup against the teacher's best runtime, on tiny BERTs.

No test asserts a time: what is checked is that requests keep their order and real lengths, that
concurrent answers equal the single-threaded ones (and that a real race is caught), and that the
teacher's runtimes are found from the artifacts' lineage.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.load import run_load
from benchmarks.teacher_runtimes import add_teacher_best, model_root
from benchmarks.traffic import replay_batch1, replay_batched, traffic_requests
from compress.runtime.predictor import Predictor
from tests.conftest import make_bert, sentiment_rows, write_csv

#: Texts of very different lengths, so padding or a reordering would show.
TEXTS = ["good", "a really long and winding plot with a great cast and a funny script that never quite ends well",
         "dull", "the film was tedious and clumsy", "superb", "the acting was weak but the story was charming",
         "bad", "wonderful moving brilliant"]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("traffic")


@pytest.fixture(scope="module")
def teacher(work) -> Path:
    return make_bert(work / "teacher", layers=3, hidden=64, heads=4, ffn=128, head=True, seed=1)


@pytest.fixture(scope="module")
def teacher_onnx(teacher, work) -> Path:
    from compress.stages.export import export_onnx

    return export_onnx(teacher, work / "teacher-onnx")


@pytest.fixture(scope="module")
def teacher_int8(teacher_onnx, work) -> Path:
    from compress.stages.quantize import quantize

    return quantize(teacher_onnx, work / "teacher-int8")


@pytest.fixture(scope="module")
def student(work) -> Path:
    return make_bert(work / "student", layers=1, hidden=32, heads=2, ffn=64, head=True, seed=2)


@pytest.fixture(scope="module")
def student_onnx(student, work) -> Path:
    from compress.stages.export import export_onnx

    return export_onnx(student, work / "student-onnx")


@pytest.fixture(scope="module")
def student_bf16(student, work) -> Path:
    from compress.stages.quantize import quantize

    return quantize(student, work / "student-bf16", method="torch-bf16")


@pytest.fixture(scope="module")
def data_csv(work) -> Path:
    return write_csv(work / "sentiment.csv", sentiment_rows(200, seed=3))


def test_traffic_requests_keep_order_and_real_lengths(student_onnx):
    predictor = Predictor.load(student_onnx, threads=1)
    requests = traffic_requests(predictor, TEXTS)
    assert len(requests) == len(TEXTS)
    for text, request in zip(TEXTS, requests):
        ids = predictor.tokenizer(text, truncation=True, max_length=predictor.max_length)["input_ids"]
        assert request["input_ids"].tolist() == [ids]  # this text, in this place, unpadded
        assert request["attention_mask"].all() and request["attention_mask"].shape == (1, len(ids))


def test_batch1_replay_runs_every_request_of_every_artifact(student_onnx, teacher):
    predictors = {"teacher": Predictor.load(teacher, threads=1), "student": Predictor.load(student_onnx, threads=1)}
    out = replay_batch1(predictors, "teacher", TEXTS, warmup=2, progress=False)
    lengths = [len(predictors["student"].tokenizer(t)["input_ids"]) for t in TEXTS]
    for name in predictors:
        entry = out[name]
        assert entry["requests"] == len(TEXTS) and entry["speedup"]["n"] == len(TEXTS)
        assert entry["tokens"]["max"] == max(lengths) and entry["tokens"]["mean"] == pytest.approx(np.mean(lengths))
        assert entry["p50_ms"] <= entry["p90_ms"] <= entry["p99_ms"] <= entry["max_ms"]
        assert entry["with_tokenization"]["p50_ms"] >= entry["p50_ms"]
    assert out["teacher"]["speedup"]["median"] == 1.0


def test_batched_replay_uses_the_predictors_length_sorted_batches(student_onnx, teacher):
    predictors = {"teacher": Predictor.load(teacher, threads=1), "student": Predictor.load(student_onnx, threads=1)}
    out = replay_batched(predictors, "teacher", TEXTS, [3], warmup=1, progress=False)
    entry = out["student"][0]
    assert entry["batch_size"] == 3 and entry["batches"] == 3 and entry["texts"] == len(TEXTS)
    # Sorted by length, each batch padded to its own longest row: little padding, never less than none.
    assert 1.0 <= entry["padding_overhead"] < 1.5
    assert entry["throughput_seq_per_s"] > 0 and out["teacher"][0]["speedup_total"] == 1.0


@pytest.mark.parametrize("which", ["teacher", "student_onnx", "teacher_int8"])
def test_load_mode_answers_equal_the_single_threaded_ones(request, which):
    predictor = Predictor.load(request.getfixturevalue(which), threads=1)
    levels = run_load(predictor, TEXTS, clients=[1, 3], requests=24)
    assert [lv["clients"] for lv in levels] == [1, 3]
    for lv in levels:
        assert lv["ok"], lv
        assert lv["answered"] == 24 and lv["errors"] == 0 and lv["label_mismatches"] == 0
        assert lv["throughput_req_per_s"] > 0 and lv["p50_ms"] <= lv["p99_ms"]


class _SharedBufferPredictor:
    """A real Predictor behind a real concurrency bug: every call writes its answer into one shared
    buffer and reads it back a moment later, as a server caching "the last result" would."""

    def __init__(self, inner):
        self.inner = inner
        self.buffer = None

    def logits(self, texts, batch_size=32):
        out = self.inner.logits(texts, batch_size)
        self.buffer = out
        time.sleep(0.002)
        return self.buffer.copy()


def test_load_mode_catches_answers_crossing_between_threads(student_onnx):
    predictor = Predictor.load(student_onnx, threads=1)
    logits = predictor.logits(TEXTS)
    # The random student's answers differ little between texts (~1e-4), but they differ: with a tolerance
    # below that spread, an answer that crossed to another request is visible.
    distinct = np.unique(logits.round(7), axis=0)
    assert len(distinct) == len(TEXTS) and np.ptp(logits, axis=0).max() > 1e-5
    single, crowded = run_load(_SharedBufferPredictor(predictor), TEXTS, clients=[1, 4], requests=40, atol=1e-6)
    assert single["ok"] and single["logit_mismatches"] == 0 and single["bitwise_equal"] == 40
    assert not crowded["ok"] and crowded["logit_mismatches"] > 0


def test_model_root_follows_format_stages_only(teacher, teacher_onnx, teacher_int8, student, student_onnx):
    assert model_root(teacher_onnx) == str(teacher.resolve())
    assert model_root(teacher_int8) == str(teacher.resolve())
    assert model_root(student_onnx) == str(student.resolve())
    assert model_root(student) == str(student.resolve())


def test_speedup_against_the_teachers_best_runtime_is_paired_per_round():
    def art(name, path, rounds, ref_rounds):
        return {"name": name, "path": path, "kind": "x", "latency": [
            {"batch_size": 1, "seq_len": 8, "samples_ns": rounds,
             "speedup": {"median": float(np.median(np.array(ref_rounds) / np.array(rounds)))}}]}

    ref = [100, 110, 90]
    arts = [art("teacher", "/nonexistent/teacher", ref, ref), art("student", "/nonexistent/student", [10, 11, 9], ref)]
    assert add_teacher_best(arts, "teacher") is None  # one teacher runtime: nothing to add
    assert "speedup_vs_teacher_best" not in arts[1]["latency"][0]


def test_bench_with_traffic_load_and_teacher_runtimes(teacher, teacher_onnx, teacher_int8, student_onnx, student_bf16,
                                                      data_csv, work, capsys):
    from compress.cli import main

    out = work / "bench"
    code = main(["bench", str(teacher_onnx), str(teacher_int8), str(student_onnx), str(student_bf16), "--reference",
                 str(teacher),
                 "--data", str(data_csv), "--out", str(out), "--batch-sizes", "1,4", "--seq-lens", "16",
                 "--threads", "1", "--warmup", "1", "--runs", "5", "--no-memory", "--traffic", "test",
                 "--traffic-limit", "12", "--load-clients", "1,2", "--load-requests", "8"])
    assert code == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    info = results["teacher_runtimes"]
    assert set(info["artifacts"]) == {"teacher", "teacher-onnx", "teacher-int8"}
    assert set(info["best"]) == {"1x16", "4x16"}
    assert {a["name"]: a["kind"] for a in results["artifacts"]}["student-bf16"] == "torch-bf16"
    for name in ("student-onnx", "student-bf16"):
        student = next(a for a in results["artifacts"] if a["name"] == name)
        for entry in student["latency"]:
            best = entry["speedup_vs_teacher_best"]
            assert best["against"] == info["best"][f"{entry['batch_size']}x16"]
            assert best["method"] == "median of per-round ratios" and best["n"] == 5
            same = entry.get("speedup_vs_teacher_same_kind")
            assert (same["against"] == "teacher-onnx") if name == "student-onnx" else same is None
    teacher_entry = next(a for a in results["artifacts"] if a["name"] == "teacher-onnx")
    assert "speedup_vs_teacher_best" not in teacher_entry["latency"][0]
    assert results["settings"]["traffic"]["requests"] == 12
    for art in results["artifacts"]:
        assert art["traffic"]["batch1"]["requests"] == 12
        assert [e["batch_size"] for e in art["traffic"]["batched"]] == [4]
        assert [lv["clients"] for lv in art["load"]] == [1, 2] and all(lv["ok"] for lv in art["load"])
    report = (out / "report.md").read_text()
    for heading in ("Speedup against the teacher's best runtime", "Real traffic: split `test`", "## Load:"):
        assert heading in report
