"""optimize's ranking rule on constructed measurement records (no timing): ties go to fewer changed answers.

Where two candidates' speedup intervals overlap, their speed difference is within the noise, and
the one with the higher agreement with fp32 is kept; where they do not overlap, the faster wins.
The record says which rule decided and who tied (issue 24: ORT INT8 with fp32 embeddings, 1%
faster and inside the noise, had beaten ORT INT8 fused with three times the churn).
"""

from __future__ import annotations

import json

import pytest

from compress.core.errors import CompressError
from compress.stages.optimize import format_decision, rank_candidates


def row(name: str, median: float, low: float, high: float, agreement: float, size: int = 1000,
        eligible: bool = True, batch_size: int = 1) -> dict:
    return {"name": name, "kind": "onnx-int8", "eligible": eligible, "agreement": agreement, "size_bytes": size,
            "accuracy": 0.9, "accuracy_drop": 0.0, "excluded_because": None if eligible else "accuracy drop",
            "latency": [{"batch_size": batch_size, "p50_ms": 100 / median,
                         "speedup": {"median": median, "ci_low": low, "ci_high": high}}]}


REFERENCE = row("pytorch", 1.0, 1.0, 1.0, 1.0, size=4000)


def test_overlapping_intervals_keep_the_higher_agreement():
    # The case: 12.86 ms at 96.2% agreement against 13.01 ms at 99.0%: 1% apart, intervals overlap.
    rows = [REFERENCE, row("onnx-int8-fp32-embeddings", 10.12, 9.8, 10.4, 0.962),
            row("onnx-int8-fused", 10.0, 9.7, 10.3, 0.990)]
    record = rank_candidates(rows, 1)
    assert record["winner"] == "onnx-int8-fused"
    assert record["rule"] == "agreement" and record["leader"] == "onnx-int8-fp32-embeddings"
    assert record["tied"] == ["onnx-int8-fp32-embeddings", "onnx-int8-fused"]  # fastest first; fp32 not tied
    assert "overlap" in record["why"] and "96.2%" in record["why"] and "99.0%" in record["why"]


def test_separate_intervals_keep_the_faster_whatever_its_agreement():
    rows = [REFERENCE, row("fast", 10.5, 10.3, 10.8, 0.962), row("careful", 10.0, 9.7, 10.2, 0.990)]
    record = rank_candidates(rows, 1)
    assert record == {**record, "winner": "fast", "rule": "fastest", "leader": "fast", "tied": ["fast"]}
    assert "no other candidate's interval overlaps" in record["why"] and "next careful" in record["why"]


def test_only_candidates_overlapping_the_fastest_are_tied():
    # c overlaps b but not the leader a: it is not tied with a, so its perfect agreement does not win.
    rows = [REFERENCE, row("a", 10.0, 9.6, 10.4, 0.95), row("b", 9.5, 9.2, 9.8, 0.97), row("c", 9.0, 8.7, 9.3, 1.0)]
    record = rank_candidates(rows, 1)
    assert record["tied"] == ["a", "b"] and record["winner"] == "b"


def test_a_compressed_candidate_not_measurably_faster_than_fp32_loses_to_it():
    # Agreement 1 by definition: when a candidate cannot be told apart from the reference, keep fp32.
    rows = [REFERENCE, row("torch-bf16", 1.02, 0.97, 1.08, 0.99)]
    record = rank_candidates(rows, 1)
    assert record["winner"] == "pytorch" and record["rule"] == "agreement" and record["leader"] == "torch-bf16"


def test_equal_agreement_among_tied_goes_to_the_faster_and_ineligible_rows_never_tie():
    rows = [REFERENCE, row("a", 10.0, 9.6, 10.4, 0.99), row("b", 9.9, 9.5, 10.3, 0.99),
            row("wrong", 10.1, 9.6, 10.5, 1.0, eligible=False)]
    record = rank_candidates(rows, 1)
    assert record["winner"] == "a" and record["tied"] == ["a", "b"] and record["rule"] == "fastest-among-tied"
    assert "none of the tied agrees with fp32 more often" in record["why"]


def test_a_record_without_intervals_ranks_on_the_median():
    # A table written before intervals were recorded: each interval is its median, so only equal medians tie.
    rows = [REFERENCE, row("a", 10.0, 9.0, 11.0, 0.95), row("b", 9.0, 8.0, 10.0, 0.99)]
    for r in rows:
        for e in r["latency"]:
            e["speedup"] = {"median": e["speedup"]["median"]}
    assert rank_candidates(rows, 1)["rule"] == "fastest" and rank_candidates(rows, 1)["winner"] == "a"


def test_no_eligible_candidate_is_an_error():
    with pytest.raises(CompressError, match="no candidate is within the accuracy budget"):
        rank_candidates([row("x", 2.0, 1.9, 2.1, 0.5, eligible=False)], 1)


def test_the_printed_table_names_the_tie_and_the_loser():
    rows = [REFERENCE, row("emb", 10.12, 9.8, 10.4, 0.962), row("fused", 10.0, 9.7, 10.3, 0.990)]
    record = rank_candidates(rows, 1)
    meta = {"optimize": {"table": rows, "settings": {"batch_sizes": [1], "threads": 2, "seq_len": 128},
                         "decided_on": {"cpu_model": "AMD EPYC", "cpu_flags": {"avx2": True}}},
            "choice": {"names": {"1": record["winner"]}, "decided_by": {"1": record}}}
    json.dumps(meta)  # the record is what compress.json stores
    lines = {line.split()[0]: line for line in format_decision(meta).splitlines()[2:]}
    assert "chosen for batch 1 (tie at batch 1: higher agreement)" in lines["fused"]
    assert "tied at batch 1, lower agreement" in lines["emb"]
    assert lines["pytorch"].endswith("slower")
