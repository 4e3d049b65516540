"""The benchmark harness: percentile maths, the interleaved runner, the whole `bench` command.

Models are tiny BERTs built here (2 and 4 layers, hidden 32) plus an ONNX export of one, so the
whole file runs in seconds. Nothing asserts absolute times or which model is faster: on a shared
machine that would be a flaky test. What is asserted is the structure: every artifact got the same
number of timed runs, in interleaved rounds, and speedups are medians of per-round ratios.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from benchmarks.gate import load_results, run_gate
from benchmarks.latency import (fixed_shape_inputs, paired_speedup, percentile, run_interleaved, summarize)
from benchmarks.memory import measure_memory
from benchmarks.report import pareto_front, render_markdown
from benchmarks.suite import (QUICK, RESULTS_FILE, SCHEMA, SCHEMA_VERSION, BenchConfig, artifact_names,
                              measure_latency)
from compress.cli import main
from compress.config import DataOptions
from compress.core.errors import CompressError
from compress.runtime.predictor import Predictor
from tests.conftest import make_bert, sentiment_rows, write_csv

TEXTS = [r["text"] for r in sentiment_rows(40, seed=5)]


# ----------------------------------------------------------------------------- pure maths


def test_percentile_on_known_samples():
    samples = [4, 1, 3, 2]  # unsorted on purpose
    assert percentile(samples, 0) == 1
    assert percentile(samples, 25) == pytest.approx(1.75)
    assert percentile(samples, 50) == pytest.approx(2.5)
    assert percentile(samples, 90) == pytest.approx(3.7)
    assert percentile(samples, 100) == 4
    # h = 0.4 * 4 = 1.6: between 20 and 35, 60% of the way
    assert percentile([15, 20, 35, 40, 50], 40) == pytest.approx(29.0)
    assert percentile([7.5], 99) == 7.5


def test_percentile_matches_numpy_linear():
    rng = np.random.default_rng(0)
    for n in (2, 3, 10, 301):
        samples = rng.exponential(5.0, size=n).tolist()
        for q in (0, 1, 10, 33.3, 50, 90, 99, 100):
            assert percentile(samples, q) == pytest.approx(np.percentile(samples, q, method="linear"), rel=1e-12)


def test_percentile_rejects_bad_input():
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1, 2], 101)


def test_summarize_milliseconds_and_throughput():
    stats = summarize([1_000_000, 2_000_000, 3_000_000, 4_000_000], batch_size=8)
    assert stats["runs"] == 4
    assert stats["p50_ms"] == pytest.approx(2.5)
    assert stats["p90_ms"] == pytest.approx(3.7)
    assert stats["p99_ms"] == pytest.approx(3.97)
    assert stats["mean_ms"] == pytest.approx(2.5)
    assert stats["min_ms"] == 1.0 and stats["max_ms"] == 4.0
    assert stats["throughput_seq_per_s"] == pytest.approx(8 / 0.0025)


def test_paired_speedup_is_the_median_of_per_round_ratios():
    reference = [10, 20, 30, 40]
    artifact = [5, 10, 10, 40]  # ratios 2, 2, 3, 1
    sp = paired_speedup(reference, artifact)
    assert sp["median"] == pytest.approx(2.0)
    assert sp["p10"] == pytest.approx(1.3)
    assert sp["p90"] == pytest.approx(2.7)
    assert sp["n"] == 4
    # Not the ratio of the medians (25 / 10 = 2.5): the pairing is what cancels drift between rounds.
    assert sp["median"] != pytest.approx(percentile(reference, 50) / percentile(artifact, 50))
    with pytest.raises(ValueError):
        paired_speedup([1, 2], [1])


def test_run_interleaved_rotates_rounds_after_per_artifact_warmup():
    calls: list[str] = []
    runners = {name: (lambda n=name: calls.append(n)) for name in "ABC"}
    ticks: list[int] = []
    timings = run_interleaved(runners, warmup=2, runs=3, tick=ticks.append)
    assert calls == list("AABBCC") + list("ABC") + list("BCA") + list("CAB")
    assert {name: len(t) for name, t in timings.items()} == {"A": 3, "B": 3, "C": 3}
    assert all(isinstance(t, int) and t > 0 for ts in timings.values() for t in ts)
    assert sum(ticks) == 3 * 2 + 3 * 3
    with pytest.raises(CompressError, match="--runs"):
        run_interleaved(runners, warmup=0, runs=0)


def test_pareto_front():
    points = [(10.0, 0.90), (5.0, 0.85), (2.0, 0.80), (6.0, 0.84), (10.0, 0.89), (1.0, 0.70)]
    # (6, .84) is beaten by (5, .85); (10, .89) by (10, .90)
    assert pareto_front(points) == [5, 2, 1, 0]
    assert pareto_front([(1.0, 0.5)]) == [0]
    assert pareto_front([(1.0, 0.5), (1.0, 0.5)]) == [0, 1]  # ties dominate neither


def test_artifact_names_are_unique_and_short():
    paths = [Path("/runs/a/student"), Path("/runs/b/student"), Path("/runs/teacher")]
    assert artifact_names(paths) == ["a/student", "b/student", "teacher"]
    same = [Path("/x/m"), Path("/x/m")]
    assert artifact_names(same) == ["x/m#1", "x/m#2"]


def test_quick_preset_and_explicit_settings():
    cfg = BenchConfig(artifacts=["a"], reference="a", quick=True).resolved()
    assert (cfg.warmup, cfg.runs, tuple(cfg.batch_sizes), tuple(cfg.seq_lens)) == (3, 10, (1,), (32,))
    assert cfg.data.limit == QUICK["limit"] and cfg.threads >= 1
    cfg = BenchConfig(artifacts=["a"], reference="a", quick=True, runs=7, batch_sizes=[4],
                      data=DataOptions(limit=10)).resolved()
    assert cfg.runs == 7 and tuple(cfg.batch_sizes) == (4,) and cfg.data.limit == 10
    full = BenchConfig(artifacts=["a"], reference="a").resolved()
    assert (full.warmup, full.runs, tuple(full.batch_sizes), tuple(full.seq_lens)) == (50, 300, (1, 8, 32), (32, 128))
    with pytest.raises(CompressError, match="--seq-lens"):
        BenchConfig(artifacts=["a"], reference="a", seq_lens=[1]).resolved()


# ----------------------------------------------------------------------------- tiny models


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bench")


@pytest.fixture(scope="module")
def small(work) -> Path:
    return make_bert(work / "small", layers=2, head=True, seed=1)


@pytest.fixture(scope="module")
def large(work) -> Path:
    return make_bert(work / "large", layers=4, head=True, seed=2)


@pytest.fixture(scope="module")
def small_onnx(small, work) -> Path:
    from compress.stages.export import export_onnx

    return export_onnx(small, work / "small-onnx")


@pytest.fixture(scope="module")
def small_int8(small_onnx, work) -> Path:
    from compress.stages.quantize import quantize

    return quantize(small_onnx, work / "small-int8")


@pytest.fixture(scope="module")
def small_torch_int8(small, work) -> Path:
    from compress.stages.quantize import quantize

    return quantize(small, work / "small-torch-int8", method="torch-dynamic")


@pytest.fixture(scope="module")
def data_csv(work) -> Path:
    return write_csv(work / "sentiment.csv", sentiment_rows(200, seed=3))


def test_fixed_shape_inputs_pad_and_truncate_to_exactly_seq_len(small):
    predictor = Predictor.load(small, threads=1)
    arrays = fixed_shape_inputs(predictor, ["good", " ".join(["wonderful"] * 50)], batch_size=3, seq_len=12)
    assert arrays["input_ids"].shape == (3, 12) and arrays["attention_mask"].shape == (3, 12)
    assert arrays["token_type_ids"].shape == (3, 12)
    assert arrays["attention_mask"][0].sum() == 3  # [CLS] good [SEP], then padding
    assert arrays["attention_mask"][1].sum() == 12  # truncated
    assert arrays["input_ids"][1, -1] == predictor.tokenizer.sep_token_id
    assert (arrays["input_ids"][2] == arrays["input_ids"][0]).all()  # texts reused when fewer than the batch
    with pytest.raises(CompressError, match="--seq-lens"):
        fixed_shape_inputs(predictor, TEXTS, 1, 512)  # the tiny model has 128 positions


def test_interleaved_matrix_on_two_tiny_models(small, large):
    predictors = {"large": Predictor.load(large, threads=1), "small": Predictor.load(small, threads=1)}
    out = measure_latency(predictors, "large", TEXTS, batch_sizes=[1, 2], seq_lens=[8, 16], warmup=1, runs=6,
                          progress=False, keep_samples=True)
    assert set(out) == {"large", "small"}
    for name, entries in out.items():
        assert [(e["batch_size"], e["seq_len"]) for e in entries] == [(1, 8), (1, 16), (2, 8), (2, 16)]
        for e in entries:
            assert e["runs"] == 6 and len(e["rounds_ns"]) == 6
            assert 0 < e["min_ms"] <= e["p50_ms"] <= e["p90_ms"] <= e["p99_ms"] <= e["max_ms"]
            assert e["throughput_seq_per_s"] == pytest.approx(e["batch_size"] * 1000 / e["mean_ms"])
    for ref_entry, entry in zip(out["large"], out["small"]):
        # The reference against itself is exactly 1 in every round.
        assert {k: ref_entry["speedup"][k] for k in ("median", "p10", "p90", "n", "ci_low", "ci_high")} == {
            "median": 1.0, "p10": 1.0, "p90": 1.0, "n": 6, "ci_low": 1.0, "ci_high": 1.0}
        ratios = [r / a for r, a in zip(ref_entry["rounds_ns"], entry["rounds_ns"])]
        assert entry["speedup"]["median"] == pytest.approx(float(np.median(ratios)))
        assert entry["speedup"]["p10"] <= entry["speedup"]["median"] <= entry["speedup"]["p90"]
        # The 95% interval of the median, from a block bootstrap over these same rounds.
        assert entry["speedup"]["ci_low"] <= entry["speedup"]["median"] <= entry["speedup"]["ci_high"]
        assert entry["speedup"]["confidence"] == 0.95 and "block bootstrap over 6 paired rounds" in entry["speedup"]["method"]


def test_memory_is_measured_in_a_separate_process(small):
    """In a child process of its own, which a big benchmark process must not lend its high-water mark to (one
    child serves both checks: each costs a process start with torch)."""
    ballast = bytearray(2 * 1024 ** 3)  # 2 GiB resident in this (parent) process
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    mem = measure_memory(small, threads=1, batch_size=2, seq_len=16, texts=TEXTS[:2])
    del ballast
    assert mem["peak_rss_bytes"] < 1.5 * 1024 ** 3, mem
    assert mem["kind"] == "pytorch" and (mem["batch_size"], mem["seq_len"]) == (2, 16)
    assert 0 < mem["bare_rss_bytes"] <= mem["libraries_rss_bytes"] <= mem["peak_rss_bytes"]
    assert mem["rss_increase_bytes"] == mem["peak_rss_bytes"] - mem["bare_rss_bytes"]
    assert mem["model_rss_increase_bytes"] == mem["peak_rss_bytes"] - mem["libraries_rss_bytes"]
    with pytest.raises(CompressError, match="memory measurement"):
        measure_memory(small.parent / "missing", threads=1)


# ----------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def bench_out(work, small, large, small_onnx, small_int8, small_torch_int8, data_csv) -> Path:
    """Every artifact kind in one run: PyTorch fp32 and INT8, ONNX fp32 and INT8."""
    out = work / "bench-out"
    code = main(["bench", str(small), str(small_onnx), str(small_int8), str(small_torch_int8), str(large), "--reference", str(large), "--data", str(data_csv),
                 "--out", str(out), "--batch-sizes", "1,2", "--seq-lens", "16", "--warmup", "1", "--runs", "4",
                 "--threads", "1", "--limit", "40", "--no-memory"])
    assert code == 0
    return out


def test_bench_writes_results_report_and_plots(bench_out, large):
    assert sorted(p.name for p in bench_out.iterdir()) == ["pareto.png", "report.md", "results.json", "size.png",
                                                           "speedup.png"]
    assert not [p for p in bench_out.parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
    for png in ("pareto.png", "speedup.png", "size.png"):
        assert (bench_out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    results = json.loads((bench_out / RESULTS_FILE).read_text())
    assert results["schema"] == SCHEMA and results["schema_version"] == SCHEMA_VERSION
    assert results["reference"] == "large"
    arts = {a["name"]: a for a in results["artifacts"]}
    # reference first, then the given order
    assert list(arts) == ["large", "small", "small-onnx", "small-int8", "small-torch-int8"]
    assert [arts[n]["kind"] for n in arts] == ["pytorch", "pytorch", "onnx-fp32", "onnx-int8", "torch-int8"]
    assert [arts[n]["is_reference"] for n in arts] == [True, False, False, False, False]
    assert arts["large"]["path"] == str(large.resolve())

    settings = results["settings"]
    assert (settings["threads"], settings["warmup"], settings["runs"]) == (1, 1, 4)
    assert settings["batch_sizes"] == [1, 2] and settings["seq_lens"] == [16]
    assert results["data"]["split"] == "test" and results["data"]["n"] == 20  # 10% of 200 rows (--limit 40 caps more)
    machine = results["machine"]
    assert machine["available_cpus"] >= 1 and "avx512_vnni" in machine["cpu_flags"] and "amx_int8" in machine["cpu_flags"]
    assert "torch" in results["versions"] and "onnxruntime" in results["versions"]
    assert results["created"] and "git_commit" in results

    # What the gate's statistics need: every round's time, every example's prediction (schema version 2).
    labels = results["data"]["labels"]
    assert len(labels) == 20 and set(labels) <= {0, 1} and results["groups"] == [] and results["run_id"]
    for art in arts.values():
        assert [(e["batch_size"], e["seq_len"], e["runs"]) for e in art["latency"]] == [(1, 16, 4), (2, 16, 4)]
        assert all(len(e["rounds_ns"]) == 4 for e in art["latency"])
        q = art["quality"]
        assert len(q["predictions"]) == 20
        assert q["accuracy"] == pytest.approx(np.mean(np.asarray(q["predictions"]) == np.asarray(labels)))
        assert q["accuracy_ci"][0] <= q["accuracy"] <= q["accuracy_ci"][1]
        if not art["is_reference"]:
            assert q["agreement_ci"][0] <= q["agreement"] <= q["agreement_ci"][1]
            drop = q["accuracy_drop"]
            assert drop["low"] <= drop["estimate"] <= drop["high"] and q["detectable_drop"] > 0
            assert drop["estimate"] == pytest.approx(arts["large"]["quality"]["accuracy"] - q["accuracy"])
        q = art["quality"]
        assert 0 <= q["accuracy"] <= 1 and 0 <= q["macro_f1"] <= 1 and q["n"] == 20
        assert art["size_bytes"] > 0 and art["memory"] is None
    assert arts["large"]["quality"]["agreement"] == 1.0
    assert arts["large"]["parameters"] > arts["small"]["parameters"] > 0
    assert (arts["large"]["num_hidden_layers"], arts["small"]["num_hidden_layers"]) == (4, 2)
    # Fusions are counted in the graph that runs, and what export recorded is kept beside them.
    onnx = arts["small-onnx"]["onnx"]
    assert onnx["attention_ops"] == 2 == arts["small-onnx"]["num_hidden_layers"]
    assert onnx["fused_ops"]["Attention"] == 2 and onnx["recorded_fused_ops"]["Attention"] == 2
    # INT8 turns Attention into QAttention: still one fused attention per layer.
    onnx = arts["small-int8"]["onnx"]
    assert onnx["fused_ops"]["QAttention"] == 2 and onnx["attention_ops"] == 2
    assert arts["small"]["onnx"] is None and arts["small-torch-int8"]["onnx"] is None
    assert arts["small-int8"]["size_bytes"] < arts["small-onnx"]["size_bytes"]

    report = (bench_out / "report.md").read_text()
    for heading in ("## Quality", "## Latency", "### batch 1, sequence 16", "### batch 2, sequence 16",
                    "## Size and memory", "## ONNX Runtime fusions", "![pareto.png](pareto.png)"):
        assert heading in report
    for name in arts:
        assert f"`{name}`" in report


def test_results_round_trip_through_the_gate_and_the_report(bench_out, tmp_path):
    """The written file passes the gate's schema check, and the report is a pure function of it."""
    path = bench_out / RESULTS_FILE
    results = load_results(path)
    assert render_markdown(results) == (bench_out / "report.md").read_text()
    rules = tmp_path / "gates.toml"
    rules.write_text("[rules]\nmin_agreement = 0.0\nmax_size_mb = 1000\nrequire_full_attention_fusion = true\n")
    assert run_gate(path, rules, step_summary="") == 0


def test_bench_refuses_to_overwrite_a_model_folder(small, large, data_csv, capsys):
    before = sorted(p.name for p in small.iterdir())
    code = main(["bench", str(large), "--reference", str(large), "--data", str(data_csv), "--out", str(small),
                 "--quick", "--no-memory"])
    assert code == 2
    assert "--out" in capsys.readouterr().err
    assert sorted(p.name for p in small.iterdir()) == before


@pytest.mark.parametrize("flags, message", [
    (["--seq-lens", "512"], "--seq-lens 512"),
    (["--split", "nope"], "--split nope"),
])
def test_bench_input_errors_before_measuring(flags, message, large, data_csv, work, capsys):
    out = work / "never-written"
    code = main(["bench", str(large), "--reference", str(large), "--data", str(data_csv), "--out", str(out),
                 "--quick", "--no-memory", *flags])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_bench_quick_with_memory(small, large, data_csv, work):
    """--quick end to end with the memory subprocess: the smoke run CI uses."""
    out = work / "quick"
    assert main(["bench", str(small), "--reference", str(large), "--data", str(data_csv), "--out", str(out),
                 "--quick", "--threads", "1"]) == 0
    results = json.loads((out / RESULTS_FILE).read_text())
    assert results["settings"]["quick"] is True and results["settings"]["runs"] == QUICK["runs"]
    for art in results["artifacts"]:
        assert [(e["batch_size"], e["seq_len"]) for e in art["latency"]] == [(1, 32)]
        assert art["memory"]["peak_rss_bytes"] >= art["memory"]["libraries_rss_bytes"] > 0
        assert (art["memory"]["batch_size"], art["memory"]["seq_len"]) == (1, 32)
    assert "Quick run" in (out / "report.md").read_text()
    # Run again into the same folder: an old results folder is replaced whole.
    assert main(["bench", str(small), "--reference", str(large), "--data", str(data_csv), "--out", str(out),
                 "--quick", "--threads", "1", "--no-memory"]) == 0
    assert json.loads((out / RESULTS_FILE).read_text())["artifacts"][0]["memory"] is None
    assert not [p for p in work.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
    assert os.path.isdir(out)


def test_mcnemar_exact_values():
    import numpy as np

    from benchmarks.accuracy import mcnemar_p

    # 10 discordant pairs, 9 against 1: two-sided exact p = 2 * (1 + 10) / 1024
    a = np.array([True] * 9 + [False] * 1 + [True] * 50)
    b = np.array([False] * 9 + [True] * 1 + [True] * 50)
    assert abs(mcnemar_p(a, b) - 22 / 1024) < 1e-12
    assert mcnemar_p(a, a) == 1.0
    assert mcnemar_p(b, a) == mcnemar_p(a, b)


def test_bench_seed_group_and_history(small, large, data_csv, work, tmp_path):
    """--seeds: every seed's quality is measured, only the first is timed, the gate decides on their mean;
    --history appends one summary line per run."""
    other_seed = make_bert(work / "small-seed2", layers=2, head=True, seed=7)
    out, history = tmp_path / "bench", tmp_path / "history.jsonl"
    argv = ["bench", "--reference", str(large), "--seeds", f"tiny={small},{other_seed}", str(large),
            "--data", str(data_csv), "--out", str(out), "--batch-sizes", "1", "--seq-lens", "16", "--warmup", "1",
            "--runs", "5", "--threads", "1", "--limit", "40", "--no-memory", "--history", str(history)]
    assert main(argv) == 0
    results = json.loads((out / RESULTS_FILE).read_text())
    assert results["groups"] == [{"name": "tiny", "members": ["small", "small-seed2"]}]
    arts = {a["name"]: a for a in results["artifacts"]}
    assert arts["small"]["group"] == "tiny" and len(arts["small"]["latency"]) == 1
    assert arts["small-seed2"]["latency"] == [] and len(arts["small-seed2"]["quality"]["predictions"]) == 20
    assert main(argv) == 0
    lines = history.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["artifacts"]["small-seed2"]["group"] == "tiny"
    rules = tmp_path / "gates.toml"
    rules.write_text("[rules]\nmax_accuracy_drop = 1.0\nmin_speedup = 0.01\n")
    code = run_gate(out / RESULTS_FILE, rules, step_summary="", history=history, window=5)
    assert code == 0  # too few earlier runs for history: skipped, not failed
    from benchmarks.gate import evaluate, load_rules

    checks = {(c.artifact, c.rule): c for c in evaluate(load_results(out / RESULTS_FILE), load_rules(rules))}
    assert ("tiny", "max_accuracy_drop") in checks and ("small", "max_accuracy_drop") not in checks
    assert "mean of 2 seeds" in checks[("tiny", "max_accuracy_drop")].measured


def test_demo_table_shows_each_artifacts_share_of_the_reference_accuracy():
    from benchmarks.report import demo_table

    def art(name, acc, p50, tput, speed):
        return {"name": name, "kind": "pytorch", "quality": {"accuracy": acc}, "size_bytes": 2**20,
                "latency": [{"batch_size": 1, "seq_len": 128, "p50_ms": p50, "speedup": {"median": speed}},
                            {"batch_size": 32, "seq_len": 128, "throughput_seq_per_s": tput,
                             "speedup": {"median": speed}}]}

    results = {"settings": {"batch_sizes": [1, 32], "seq_lens": [128], "threads": 2}, "reference": "teacher",
               "artifacts": [art("teacher", 0.90, 100.0, 8.0, 1.0), art("student", 0.882, 10.0, 80.0, 10.0)]}
    table = demo_table(results, markdown=True).splitlines()
    assert table[0].startswith("| artifact | kind | accuracy | of reference |")
    assert table[2].startswith("| teacher | pytorch | 90.0% | 100.0% |")
    assert table[3].startswith("| student | pytorch | 88.2% | 98.0% | 10.00 | 80.0 | 1.0 | 10.0x | 10.0x |")
