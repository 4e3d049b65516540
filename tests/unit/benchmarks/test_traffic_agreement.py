"""Agreement on the user's own traffic: the statistics on constructed predictions, the traffic file, the gate
rule ``min_traffic_agreement`` at and around its limit, and ``bench --traffic-file`` end to end on tiny BERTs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import beta

from benchmarks.agreement import confident_disagreements, traffic_agreement, wilson_interval
from benchmarks.gate import EXIT_MALFORMED, EXIT_PASS, evaluate, load_rules, run_gate
from compress.core.stats import mean_over_seeds_interval
from benchmarks.traffic import read_traffic_file
from compress.core.errors import CompressError
from tests.support.models import shifted_copy
from tests.conftest import make_bert, sentiment_rows, write_csv
from tests.support.results import make_results

N = 1000


def _probs(labels, confidences) -> np.ndarray:
    """Two-class probabilities whose argmax is ``labels`` with that probability."""
    labels, conf = np.asarray(labels), np.asarray(confidences, dtype=float)
    out = np.empty((len(labels), 2))
    out[np.arange(len(labels)), labels] = conf
    out[np.arange(len(labels)), 1 - labels] = 1 - conf
    return out


# ----------------------------------------------------------------------------- the statistics


def test_traffic_agreement_and_its_clopper_pearson_interval():
    ref = np.zeros(100, dtype=int)
    pred = ref.copy()
    pred[:10] = 1  # 90 of 100 agree
    texts = [f"text {i}" for i in range(100)]
    record = traffic_agreement(_probs(pred, [0.9] * 100), _probs(ref, [0.8] * 100), texts, ["neg", "pos"])
    assert (record["n"], record["agreeing"], record["agreement"]) == (100, 90, 0.9)
    # Clopper-Pearson from the beta quantiles: [B(0.025; 90, 11), B(0.975; 91, 10)] = [0.8238, 0.9510]
    assert record["ci"] == pytest.approx([beta.ppf(0.025, 90, 11), beta.ppf(0.975, 91, 10)])
    assert record["ci"][0] == pytest.approx(0.8238, abs=1e-4) and record["ci"][1] == pytest.approx(0.9510, abs=1e-4)
    assert record["predictions"] == pred.tolist() and len(record["disagreements"]) == 10


def test_most_confident_disagreements_rank_by_the_less_sure_model():
    ref = np.array([0, 0, 0, 0, 0, 1])
    pred = np.array([1, 1, 1, 0, 1, 1])  # disagreements at 0, 1, 2, 4
    conf = [0.99, 0.7, 0.9, 0.99, 0.9, 0.99]
    ref_conf = [0.6, 0.95, 0.9, 0.99, 0.9, 0.99]
    texts = ["a", "b", ("c", "c2"), "d", "e", "f"]
    listed = confident_disagreements(_probs(pred, conf), _probs(ref, ref_conf), texts, ["neg", "pos"])
    # min confidences: 0 -> 0.6, 1 -> 0.7, 2 -> 0.9, 4 -> 0.9 (tie: position order)
    assert [d["index"] for d in listed] == [2, 4, 1, 0]
    assert listed[0] == {"index": 2, "text": "c", "text_pair": "c2", "label": "pos", "confidence": 0.9,
                         "reference_label": "neg", "reference_confidence": 0.9}
    assert [d["index"] for d in confident_disagreements(_probs(pred, conf), _probs(ref, ref_conf), texts,
                                                        ["neg", "pos"], top=2)] == [2, 4]


def test_wilson_interval_by_hand():
    # 8 of 10 at 95%: (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n) = [0.4902, 0.9433]
    i = wilson_interval(8, 10)
    assert (round(i.low, 4), round(i.high, 4)) == (0.4902, 0.9433)
    full = wilson_interval(10, 10)  # not degenerate at 100%, where the Wald interval is [1, 1]
    assert full.high == 1.0 and round(full.low, 4) == 0.7225
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


# ----------------------------------------------------------------------------- the traffic file


def test_read_traffic_file_txt_and_csv(tmp_path):
    txt = tmp_path / "traffic.txt"
    txt.write_text("great phone\n\n  terrible battery  \n", encoding="utf-8")
    texts, info = read_traffic_file(txt)
    assert texts == ["great phone", "terrible battery"]
    assert (info["rows"], info["empty"], info["texts"], info["format"]) == (3, 1, 2, "txt") and len(info["sha256"]) == 64
    csv = write_csv(tmp_path / "t.csv", [{"body": "fine", "b": "x"}, {"body": "", "b": "y"}, {"body": "meh", "b": "z"}])
    assert read_traffic_file(csv, "body")[0] == ["fine", "meh"]
    assert read_traffic_file(csv, "body", "b")[0] == [("fine", "x"), ("meh", "z")]


@pytest.mark.parametrize("name, content, column, message", [
    ("missing.txt", None, "text", "no such file"),
    ("t.docx", "x", "text", "unsupported file type '.docx'"),
    ("t.csv", "body\nfine\n", "text", "no column 'text'"),
    ("t.txt", "\n \n", "text", "no text in any of its 2 rows"),
])
def test_read_traffic_file_errors_name_the_file_and_the_fix(tmp_path, name, content, column, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(CompressError, match=message) as err:
        read_traffic_file(path, column)
    assert str(path) in str(err.value)


# ----------------------------------------------------------------------------- the gate rule


def _with_traffic(agreeing: dict[str, int], n: int = N) -> dict:
    """make_results() with a traffic agreement per artifact: the reference predicts 0 on all n texts,
    an artifact ``agreeing[name]`` times (1 on the rest)."""
    doc = make_results()
    for art in doc["artifacts"]:
        k = n if art["is_reference"] else agreeing[art["name"]]
        pred = [0] * k + [1] * (n - k)
        art["traffic_agreement"] = {"n": n, "agreeing": k, "agreement": k / n, "ci": [0, 1], "confidence": 0.95,
                                    "method": "Clopper-Pearson", "predictions": pred, "disagreements": []}
    doc["settings"]["traffic_file"] = {"path": "/traffic.txt", "format": "txt", "sha256": "0" * 64, "rows": n,
                                       "empty": 0, "texts": n}
    return doc


def _check(tmp_path: Path, doc: dict, toml: str, name: str = "student"):
    path = tmp_path / "gates.toml"
    path.write_text(toml)
    return {c.artifact: c for c in evaluate(doc, load_rules(path)) if c.rule == "min_traffic_agreement"}[name]


def test_gate_rule_passes_fails_and_is_inconclusive_on_the_interval(tmp_path):
    doc = _with_traffic({"student": 950, "student-int8": 900})
    low, high = beta.ppf(0.025, 950, 51), beta.ppf(0.975, 951, 50)  # [0.9346, 0.9627]
    assert _check(tmp_path, doc, "[rules]\nmin_traffic_agreement = 0.93\n").status == "pass"
    inconclusive = _check(tmp_path, doc, "[rules]\nmin_traffic_agreement = 0.95\n")
    assert inconclusive.status == "inconclusive" and "straddles 0.95" in inconclusive.message
    assert inconclusive.interval == f"[{low:.4f}, {high:.4f}] (95%)"
    failed = _check(tmp_path, doc, "[rules]\nmin_traffic_agreement = 0.97\n")
    assert failed.status == "fail" and "0.9500 of 1000 texts" in failed.measured
    assert "traffic_agreement.disagreements" in failed.message


def test_gate_rule_at_the_boundary(tmp_path):
    doc = _with_traffic({"student": 950, "student-int8": 900})
    low = float(beta.ppf(0.025, 950, 51))
    # a lower bound exactly on the limit is on the good side; a hair above the bound is not decided
    assert _check(tmp_path, doc, f"[rules]\nmin_traffic_agreement = {low!r}\n").status == "pass"
    assert _check(tmp_path, doc, f"[rules]\nmin_traffic_agreement = {low + 1e-6!r}\n").status == "inconclusive"
    high = float(beta.ppf(0.975, 951, 50))
    assert _check(tmp_path, doc, f"[rules]\nmin_traffic_agreement = {high + 1e-6!r}\n").status == "fail"
    assert _check(tmp_path, doc, f"[rules]\nmin_traffic_agreement = {high!r}\n").status == "inconclusive"


def test_gate_rule_on_a_seed_group_and_without_traffic(tmp_path):
    doc = _with_traffic({"student": 950, "student-int8": 900})
    twin = copy.deepcopy(next(a for a in doc["artifacts"] if a["name"] == "student"))
    twin["name"] = "student-s1"
    twin["traffic_agreement"]["predictions"] = [0] * 930 + [1] * 70
    doc["artifacts"].append(twin)
    doc["groups"] = [{"name": "students", "members": ["student", "student-s1"]}]
    # the mean over seeds with seed and text variance (2 seeds: few degrees of freedom, a wide interval)
    agree = np.stack([np.r_[np.ones(950), np.zeros(50)], np.r_[np.ones(930), np.zeros(70)]])
    interval = mean_over_seeds_interval(agree)
    group = _check(tmp_path, doc, f"[rules]\nmin_traffic_agreement = {interval.low - 0.001:.4f}\n", "students")
    assert group.status == "pass" and "0.9400 of 1000 texts (mean of 2 seeds)" == group.measured
    assert group.interval == f"[{interval.low:.4f}, {interval.high:.4f}] (95%)"
    assert _check(tmp_path, doc, f"[rules]\nmin_traffic_agreement = {interval.low + 0.001:.4f}\n",
                  "students").status == "inconclusive"
    missing = _check(tmp_path, make_results(), "[rules]\nmin_traffic_agreement = 0.5\n")
    assert missing.status == "fail" and "--traffic-file" in missing.message


def test_gate_refuses_damaged_traffic_predictions(tmp_path, capsys):
    doc = _with_traffic({"student": 950, "student-int8": 900})
    doc["artifacts"][1]["traffic_agreement"]["predictions"] = ["0"]
    results = tmp_path / "results.json"
    results.write_text(json.dumps(doc))
    rules = tmp_path / "gates.toml"
    rules.write_text("[rules]\nmin_traffic_agreement = 0.5\n")
    assert run_gate(results, rules) == EXIT_MALFORMED
    assert "artifacts[1].traffic_agreement.predictions" in capsys.readouterr().err


# ----------------------------------------------------------------------------- bench --traffic-file, end to end


def test_bench_traffic_file_on_tiny_models(tmp_path, capsys):
    from compress.cli import main
    from compress.runtime.predictor import Predictor

    teacher = make_bert(tmp_path / "teacher", layers=2, hidden=32, heads=2, ffn=64, head=True, seed=1)
    data = write_csv(tmp_path / "sentiment.csv", sentiment_rows(60, seed=3))
    lines = [" ".join(r["text"].split()[::-1]) + f" {i}" for i, r in enumerate(sentiment_rows(40, seed=9))]
    student = shifted_copy(teacher, tmp_path / "student", lines)
    traffic = tmp_path / "traffic.txt"
    traffic.write_text("\n".join(lines[:20] + [""] + lines[20:]) + "\n", encoding="utf-8")
    out = tmp_path / "bench"
    code = main(["bench", str(student), "--reference", str(teacher), "--data", str(data), "--out", str(out),
                 "--batch-sizes", "1", "--seq-lens", "16", "--threads", "1", "--warmup", "1", "--runs", "3",
                 "--no-memory", "--traffic-file", str(traffic), "--precision", "fp32"])  # as the fp32 Predictors below
    printed = capsys.readouterr().out
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["traffic_file"]["texts"] == 40 and results["settings"]["traffic_file"]["empty"] == 1
    arts = {a["name"]: a for a in results["artifacts"]}
    expected = {name: Predictor.load(path, threads=1).logits(lines).argmax(-1) for name, path in
                (("teacher", teacher), ("student", student))}
    ref, own = arts["teacher"]["traffic_agreement"], arts["student"]["traffic_agreement"]
    assert ref["agreement"] == 1.0 and ref["disagreements"] == [] and ref["predictions"] == expected["teacher"].tolist()
    assert own["predictions"] == expected["student"].tolist()
    agreeing = int((expected["student"] == expected["teacher"]).sum())
    assert own["agreeing"] == agreeing and own["n"] == 40 and own["ci"][0] <= own["agreement"] <= own["ci"][1]
    assert 0 < agreeing < 40, "the two random models should disagree somewhere for this test to mean something"
    assert len(own["disagreements"]) == min(20, 40 - agreeing)
    for d in own["disagreements"]:
        assert d["text"] == lines[d["index"]] and d["label"] != d["reference_label"]
        assert d["label"] == ["LABEL_0", "LABEL_1"][expected["student"][d["index"]]]
    mins = [min(d["confidence"], d["reference_confidence"]) for d in own["disagreements"]]
    assert mins == sorted(mins, reverse=True)
    assert f"agreement with teacher on --traffic-file {traffic}" in printed
    assert "## Agreement on traffic: `traffic.txt` (40 texts)" in (out / "report.md").read_text()
    rules = tmp_path / "gates.toml"
    rules.write_text(f"[rules]\nmin_traffic_agreement = {max(0.0, own['ci'][0] - 0.01):.4f}\n")
    assert run_gate(out / "results.json", rules) == EXIT_PASS
