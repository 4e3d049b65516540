"""The CI gate: every rule passing and failing on crafted results, overrides, malformed input, outputs.

The results files here are written by hand in the bench schema, with numbers chosen so each rule's
outcome is known in advance; the round trip with a file the real benchmark wrote is in
tests/unit/benchmarks/test_bench.py.
"""

from __future__ import annotations

import copy
import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from benchmarks.gate import (EXIT_FAIL, EXIT_INCONCLUSIVE, EXIT_MALFORMED, EXIT_PASS, RULES, SETTINGS,
                             GateInputError, evaluate, load_results, load_rules, run_gate)
from compress.cli import main
from tests.support.paths import ROOT

DOCS = ROOT / "docs" / "ci.md"
from tests.support.results import (ROUNDS, _latency, _labels, _predictions, make_results, make_results_v1)


@pytest.fixture
def results_file(tmp_path) -> Path:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(make_results()))
    return path


def _rules(tmp_path: Path, text: str, name: str = "gates.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _checks(tmp_path: Path, toml: str, results: dict | None = None, baseline: dict | None = None) -> dict:
    """``{(artifact, rule): Check}`` for a rules text against crafted results."""
    rules = load_rules(_rules(tmp_path, toml))
    return {(c.artifact, c.rule): c for c in evaluate(results or make_results(), rules, baseline)}


# ----------------------------------------------------------------------------- each rule, both ways


@pytest.mark.parametrize("toml, artifact, rule, status", [
    ("min_speedup = 1.9", "student", "min_speedup", "pass"),               # worst config 2.0x +- 0.5%
    ("min_speedup = 2.0", "student", "min_speedup", "inconclusive"),       # the interval straddles the limit
    ("min_speedup = 2.5", "student", "min_speedup", "fail"),               # 2.0x at batch 8
    ("min_speedup = 2.5\nspeedup_batch_size = 1", "student", "min_speedup", "pass"),
    ("min_speedup = 2.5\nspeedup_seq_len = 128", "student", "min_speedup", "fail"),
    ("min_speedup = 2.5\nspeedup_batch_size = 32", "student", "min_speedup", "fail"),  # not measured there
    ("max_accuracy_drop = 0.05", "student", "max_accuracy_drop", "pass"),  # 2 points, paired 95% CI ~[0.6, 3.4]
    ("max_accuracy_drop = 0.02", "student", "max_accuracy_drop", "inconclusive"),
    ("max_accuracy_drop = 0.005", "student", "max_accuracy_drop", "fail"),
    ("max_relative_accuracy_drop = 0.06", "student-int8", "max_relative_accuracy_drop", "pass"),  # 3.3%
    ("max_relative_accuracy_drop = 0.01", "student-int8", "max_relative_accuracy_drop", "fail"),
    ("max_relative_accuracy_drop = 0.02", "student", "max_relative_accuracy_drop", "inconclusive"),  # 2.2%
    ("min_agreement = 0.92", "student", "min_agreement", "pass"),          # 950 of 1000, Clopper-Pearson [.935, .963]
    ("min_agreement = 0.95", "student", "min_agreement", "inconclusive"),
    ("min_agreement = 0.97", "student", "min_agreement", "fail"),
    ("max_size_mb = 90", "student", "max_size_mb", "pass"),
    ("max_size_mb = 40", "student", "max_size_mb", "fail"),
    ("max_size_mb = 40", "student-int8", "max_size_mb", "pass"),
    ("max_p50_ms = 250", "student", "max_p50_ms", "pass"),                 # 33 ms at batch 1, 200 ms at batch 8
    ("max_p50_ms = 100", "student", "max_p50_ms", "fail"),
    ("max_p50_ms = 100\nlatency_batch_size = 1", "student", "max_p50_ms", "pass"),
    ("min_throughput = 25", "student", "min_throughput", "pass"),          # 30/s at batch 1, 40/s at batch 8
    ("min_throughput = 35", "student", "min_throughput", "fail"),
    ("min_throughput = 35\nlatency_batch_size = 8", "student", "min_throughput", "pass"),
    ("min_fused_attention = 6", "student-int8", "min_fused_attention", "pass"),
    ("min_fused_attention = 7", "student-int8", "min_fused_attention", "fail"),
    ("min_fused_attention = 6", "student", "min_fused_attention", "skip"),  # a PyTorch artifact has no graph
    ("require_full_attention_fusion = true", "student-int8", "require_full_attention_fusion", "pass"),
    ("require_full_attention_fusion = true", "student", "require_full_attention_fusion", "skip"),
    ("max_regression = 0.1", "student", "max_regression", "skip"),          # no baseline given
])
def test_each_rule(tmp_path, toml, artifact, rule, status):
    checks = _checks(tmp_path, "[rules]\n" + toml + "\n")
    check = checks[(artifact, rule)]
    assert check.status == status, check
    assert ("teacher", rule) not in checks  # global rules leave the reference alone
    if status in ("fail", "inconclusive"):
        assert check.message
    if status == "inconclusive":
        assert "inconclusive" in check.message and check.interval


def test_partial_attention_fusion_fails_and_unknown_layer_count_fails(tmp_path):
    results = make_results()
    results["artifacts"][2]["onnx"]["attention_ops"] = 4
    check = _checks(tmp_path, "[rules]\nrequire_full_attention_fusion = true\n", results)[("student-int8",
                                                                                         "require_full_attention_fusion")]
    assert check.status == "fail" and "4 fused attention operators for 6 layers" in check.message
    results["artifacts"][2]["num_hidden_layers"] = None
    check = _checks(tmp_path, "[rules]\nrequire_full_attention_fusion = true\n", results)[("student-int8",
                                                                                         "require_full_attention_fusion")]
    assert check.status == "fail" and "layer count is unknown" in check.message


def _set_quality(art: dict, accuracy: float, agreement: float) -> None:
    art["quality"].update(accuracy=accuracy, agreement=agreement, predictions=_predictions(accuracy, agreement))


def test_regression_against_a_baseline(tmp_path):
    """max_regression compares normalised latency (1 / speedup) and accuracy with the baseline, on intervals."""
    baseline = make_results()
    current = make_results()
    student = current["artifacts"][1]
    student["latency"][0] = _latency(1, 128, 3.0 / 1.04, seed=11)  # normalised latency +4%
    check = _checks(tmp_path, "[rules]\nmax_regression = 0.10\n", current, baseline)[("student", "max_regression")]
    assert check.status == "pass" and check.measured.startswith("latency/reference +") and check.interval
    student["latency"][1] = _latency(8, 128, 2.0 / 1.20, seed=12)  # +20% at batch 8
    check = _checks(tmp_path, "[rules]\nmax_regression = 0.10\n", current, baseline)[("student", "max_regression")]
    assert check.status == "fail" and "grew 20." in check.message and "batch 8" in check.message
    # Selecting batch 1 only ignores the batch-8 regression.
    checks = _checks(tmp_path, "[rules]\nmax_regression = 0.10\nlatency_batch_size = 1\n", current, baseline)
    assert checks[("student", "max_regression")].status == "pass"
    # A change right at the limit cannot be told apart from it: inconclusive, with the advice to run more rounds.
    student["latency"][1] = _latency(8, 128, 2.0 / 1.10, seed=12)
    check = _checks(tmp_path, "[rules]\nmax_regression = 0.10\n", current, baseline)[("student", "max_regression")]
    assert check.status == "inconclusive" and "--runs" in check.message
    # Accuracy falling by more than the share fails too (0.88 -> 0.70 is -20.5%), paired on the same examples.
    current = make_results()
    _set_quality(current["artifacts"][1], 0.70, 0.80)
    check = _checks(tmp_path, "[rules]\nmax_regression = 0.10\n", current, baseline)[("student", "max_regression")]
    assert check.status == "fail" and "accuracy fell" in check.message and "paired" in check.measured
    # The same model measured again: identical predictions, a zero-width interval, a pass.
    check = _checks(tmp_path, "[rules]\nmax_regression = 0.10\n", make_results(), baseline)[("student", "max_regression")]
    assert check.status == "pass"
    # An artifact the baseline does not have is skipped, not failed.
    baseline["artifacts"].pop(2)
    assert _checks(tmp_path, "[rules]\nmax_regression = 0.10\n", make_results(), baseline)[
        ("student-int8", "max_regression")].status == "skip"


def test_accuracy_regression_in_points_against_a_baseline(tmp_path):
    """max_accuracy_regression: the absolute accuracy fall against the baseline, on the paired interval.

    The student falls from 0.88 to 0.85 by losing 30 examples it had right (and gaining none): a 3-point
    fall that max_regression's share (10% of 0.88 = 8.8 points) lets through."""
    baseline, current = make_results(), make_results()
    _set_quality(current["artifacts"][1], 0.85, 0.92)
    old = np.asarray(baseline["artifacts"][1]["quality"]["predictions"])
    new = np.asarray(current["artifacts"][1]["quality"]["predictions"])
    labels = np.asarray(_labels())
    assert ((old == labels) & (new != labels)).sum() == 30 and ((old != labels) & (new == labels)).sum() == 0

    def check(limit: str, doc: dict = current, base: dict = baseline):
        return _checks(tmp_path, f"[rules]\nmax_accuracy_regression = {limit}\nmax_regression = 0.10\n", doc,
                       base)[("student", "max_accuracy_regression")]

    assert _checks(tmp_path, "[rules]\nmax_regression = 0.10\nlatency_batch_size = 1\n", current, baseline)[
        ("student", "max_regression")].status == "pass"
    # 30 discordant examples, all one way: the 95% paired interval is about [2.0, 4.0] points.
    fails = check("0.0")
    assert fails.status == "fail" and "3.00 points" in fails.message and "paired" in fails.measured
    assert fails.interval.endswith("pt (95%)") and fails.measured.startswith("accuracy -3.00 points")
    assert check("0.01").status == "fail"
    inconclusive = check("0.03")
    assert inconclusive.status == "inconclusive" and "straddles 3 points" in inconclusive.message
    assert check("0.05").status == "pass"
    # The same models measured again: identical predictions, a zero-width interval, a pass even at 0.
    assert check("0.0", make_results()).status == "pass"
    # Without a baseline, or for an artifact the baseline lacks, the rule is skipped, not failed.
    assert _checks(tmp_path, "[rules]\nmax_accuracy_regression = 0.0\n", current)[
        ("student", "max_accuracy_regression")].status == "skip"
    baseline["artifacts"].pop(1)
    assert check("0.0").status == "skip"
    # A version-1 baseline has no predictions: inconclusive, saying what is missing.
    v1 = check("0.0", base=make_results_v1())
    assert v1.status == "inconclusive" and "predictions" in v1.message


def test_accuracy_regression_of_seed_groups_uses_welch_in_points(tmp_path):
    base = _with_seed_group([0.88, 0.87, 0.89])
    worse = _with_seed_group([0.85, 0.84, 0.86], 0.92)
    toml = "[rules]\nmax_accuracy_regression = 0.0\n"
    check = _checks(tmp_path, toml, worse, base)[("student", "max_accuracy_regression")]
    # Means 0.88 and 0.85, each group's sd 0.01: standard error 0.816 points, Welch's 4 degrees of freedom,
    # t = 2.776: 3.00 +- 2.27 points.
    assert check.status == "fail" and "3 seeds" in check.measured and "-3.00 points" in check.measured
    assert check.interval == "[+0.73, +5.27] pt (95%)"
    same = _checks(tmp_path, toml, base, base)[("student", "max_accuracy_regression")]
    assert same.status == "pass"


def test_every_rule_is_evaluated_and_documented(tmp_path):
    values = {"number": "1.0", "fraction": "0.5", "count": "1", "bool": "true", "selector": "1", "confidence": "0.95"}
    from benchmarks.gate import TAGGING_RULES, VECTOR_RULES

    # A classifier's results: every rule but other tasks' quality rules (tests/integration/test_ner_chain.py gates a
    # tagger's; tests/unit/benchmarks/test_results_task.py a toy task's).
    others = set(TAGGING_RULES) | set(VECTOR_RULES)
    toml = "[rules]\n" + "\n".join(f"{k} = {values[spec.kind]}" for k, spec in RULES.items() if k not in others) + "\n"
    checks = _checks(tmp_path, toml, baseline=make_results())
    assert {rule for _, rule in checks} == set(RULES) - set(SETTINGS) - others
    for rule in TAGGING_RULES:
        with pytest.raises(GateInputError, match=f"rule {rule} gates a tagger's or a reader's F1.*use max_accuracy_drop"):
            _checks(tmp_path, f"[rules]\n{rule} = 0.01\n", baseline=make_results())
    for rule in VECTOR_RULES:
        with pytest.raises(GateInputError, match=f"rule {rule} gates a sentence encoder's or a similarity model's "
                                                 "quality.*use max_accuracy_drop"):
            _checks(tmp_path, f"[rules]\n{rule} = 0.01\n", baseline=make_results())
    docs = DOCS.read_text()
    for key in RULES:
        assert f"`{key}`" in docs, f"docs/ci.md does not document {key}"


def test_the_documented_rules_file_is_valid(tmp_path):
    text = DOCS.read_text()
    example = text.split("```toml\n", 1)[1].split("```", 1)[0]
    rules = load_rules(_rules(tmp_path, example))
    assert rules.rules["max_accuracy_drop"] == 0.02
    assert rules.artifacts["onnx-int8"] == {"min_speedup": 10.0, "speedup_batch_size": 1, "max_size_mb": 40.0}
    assert rules.artifacts["student"] == {"max_regression": False}
    assert rules.for_artifact("student", is_reference=False).keys() == {"max_accuracy_drop", "min_agreement",
                                                                        "max_accuracy_regression"}
    assert rules.for_artifact("teacher", is_reference=True).keys() == {"max_p50_ms", "latency_batch_size",
                                                                      "latency_seq_len"}


# ----------------------------------------------------------------------------- per-artifact overrides


def test_per_artifact_tables_override_and_switch_off(tmp_path):
    toml = """
[rules]
min_speedup = 2.5
max_size_mb = 100

[artifacts."student"]
min_speedup = false        # switched off for this one
max_size_mb = 50           # tighter

[artifacts."teacher"]      # the reference is gated only by its own table
max_p50_ms = 150
"""
    checks = _checks(tmp_path, toml)
    assert ("student", "min_speedup") not in checks
    assert checks[("student", "max_size_mb")].status == "fail" and checks[("student", "max_size_mb")].limit == 50
    assert checks[("student-int8", "min_speedup")].status == "pass"  # 6x worst, global rule still applies
    assert checks[("student-int8", "max_size_mb")].status == "pass"
    assert checks[("teacher", "max_p50_ms")].status == "fail"  # 400 ms at batch 8
    assert {rule for art, rule in checks if art == "teacher"} == {"max_p50_ms"}


# ----------------------------------------------------------------------------- the command: exit codes and outputs


def test_gate_exit_codes_table_junit_and_step_summary(tmp_path, results_file, monkeypatch, capsys):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    junit = tmp_path / "reports" / "gate.xml"
    rules = _rules(tmp_path, "[rules]\nmin_speedup = 2.5\nmin_agreement = 0.9\nmin_fused_attention = 6\n")
    assert main(["gate", str(results_file), "--rules", str(rules), "--junit", str(junit)]) == EXIT_FAIL
    out = capsys.readouterr().out
    assert "FAIL" in out and "PASS" in out and "SKIP" in out and "gate: FAILED: 4 passed, 1 failed, 0 inconclusive, 1 skipped" in out

    root = ET.parse(junit).getroot()
    cases = root.findall(".//testcase")
    assert len(cases) == 6  # 2 artifacts x 3 rules
    assert {(c.get("classname"), c.get("name")) for c in cases} >= {("gate.student", "min_speedup"),
                                                                     ("gate.student-int8", "min_fused_attention")}
    failures = root.findall(".//testcase/failure")
    assert len(failures) == 1 and "below 2.5x" in failures[0].get("message")
    assert len(root.findall(".//testcase/skipped")) == 1
    assert root.get("tests") == "6" and root.get("failures") == "1" and root.get("skipped") == "1"

    text = summary.read_text()
    assert text.startswith("earlier step\n") and "## bert-compress gate: FAILED" in text and "❌ fail" in text

    passing = _rules(tmp_path, "[rules]\nmin_speedup = 1.9\n", "ok.toml")
    assert main(["gate", str(results_file), "--rules", str(passing), "--junit", str(junit)]) == EXIT_PASS
    assert "gate: passed" in capsys.readouterr().out
    assert ET.parse(junit).getroot().get("failures") == "0"
    assert summary.read_text().count("## bert-compress gate") == 2


def test_inconclusive_exit_code_and_on_inconclusive(tmp_path, results_file, capsys):
    """An interval straddling its limit is neither pass nor fail: exit 4, unless --on-inconclusive decides."""
    summary = tmp_path / "summary.md"
    junit = tmp_path / "gate.xml"
    rules = _rules(tmp_path, "[rules]\nmin_speedup = 2.0\n")  # student's worst config is 2.0x +- 0.5%
    args = ["gate", str(results_file), "--rules", str(rules), "--junit", str(junit)]
    assert run_gate(results_file, rules, junit=junit, step_summary=str(summary)) == EXIT_INCONCLUSIVE
    out = capsys.readouterr().out
    assert "INCONCLUSIVE" in out and "1 inconclusive" in out and "exit code 4" in out and "--runs" in out
    assert "x at batch 8 seq 128" in out and "(95%)" in out  # the interval is shown beside the measured value
    failure = ET.parse(junit).getroot().find(".//testcase/failure")
    assert failure is not None and failure.get("type") == "GateInconclusive"
    assert "❔ inconclusive" in summary.read_text() and "## bert-compress gate: INCONCLUSIVE" in summary.read_text()
    assert main(args + ["--on-inconclusive", "pass"]) == EXIT_PASS
    root = ET.parse(junit).getroot()
    assert root.get("failures") == "0" and root.get("skipped") == "1"
    assert main(args + ["--on-inconclusive", "fail"]) == EXIT_FAIL
    # A real failure still wins over an inconclusive rule, whatever --on-inconclusive says.
    both = _rules(tmp_path, "[rules]\nmin_speedup = 2.0\nmax_size_mb = 1\n", "both.toml")
    assert main(["gate", str(results_file), "--rules", str(both), "--on-inconclusive", "pass"]) == EXIT_FAIL


def test_confidence_setting_widens_the_interval(tmp_path):
    """``confidence`` is a setting, not a rule: 99.9% makes a 95%-pass inconclusive."""
    toml = "[rules]\nmin_agreement = 0.93\n"  # 950 of 1000: [0.9346, 0.9627] at 95%, [0.9233, 0.9698] at 99.9%
    assert _checks(tmp_path, toml)[("student", "min_agreement")].status == "pass"
    checks = _checks(tmp_path, toml + "confidence = 0.999\n")
    assert checks[("student", "min_agreement")].status == "inconclusive"
    assert "(99.9%)" in checks[("student", "min_agreement")].interval
    assert not any(rule == "confidence" for _, rule in checks)


@pytest.mark.parametrize("toml, expected", [
    ("[rules]\nmin_speedup = \n", "not valid TOML"),
    ("[rules]\nmax_accuracy_drop = 0.01\nmin_sppedup = 2\n", "gates.toml:3: unknown rule 'min_sppedup' in [rules]. Did you mean 'min_speedup'?"),
    ('[rules]\nmin_speedup = "fast"\n', "gates.toml:2: [rules] min_speedup must be a number"),
    ("[rules]\nmax_accuracy_drop = 5\n", "is a fraction between 0 and 1"),
    ("[rules]\nrequire_full_attention_fusion = 1\n", "must be true or false"),
    ("[rules]\nmin_fused_attention = 2.5\n", "must be a whole number"),
    ("[rules]\nspeedup_batch_size = 0\n", "must be a whole number of 1 or more"),
    ("[rules]\nmin_speedup = false\n", "must be a number"),  # false switches off only in an artifact table
    ("[rule]\nmin_speedup = 2\n", "gates.toml:1: unknown table or key 'rule'. Did you mean [rules]?"),
    ('[rules]\n\n[artifacts."student"]\nmax_size_mb = "big"\n', 'gates.toml:4: [artifacts.student] max_size_mb'),
    ('[artifacts."nobody"]\nmax_size_mb = 40\n', "gates.toml:1: [artifacts.\"nobody\"] names no artifact"),
])
def test_malformed_rules_exit_3_with_file_line_and_fix(tmp_path, results_file, toml, expected, capsys):
    rules = _rules(tmp_path, toml)
    junit = tmp_path / "gate.xml"
    assert main(["gate", str(results_file), "--rules", str(rules), "--junit", str(junit)]) == EXIT_MALFORMED
    err = capsys.readouterr().err
    assert expected in err and str(rules) in err
    errors = ET.parse(junit).getroot().findall(".//testcase/error")  # CI's test report shows the cause too
    assert len(errors) == 1 and expected in errors[0].get("message")


def _broken(doc: dict, how: str):
    if how == "version":
        doc["schema_version"] = 3
    elif how == "schema":
        doc["schema"] = "something-else"
    elif how == "missing":
        del doc["artifacts"][1]["quality"]["accuracy"]
    elif how == "type":
        doc["artifacts"][2]["latency"][0]["p50_ms"] = "fast"
    elif how == "reference":
        doc["reference"] = "nobody"
    return doc


@pytest.mark.parametrize("how, expected", [
    ("version", "schema_version 3 was written by a newer bert-compress"),
    ("schema", "not a bert-compress benchmark result"),
    ("missing", "artifacts[1].quality.accuracy is missing"),
    ("type", "artifacts[2].latency[0].p50_ms should be int or float"),
    ("reference", "the reference 'nobody' is not among the artifacts"),
])
def test_malformed_results_exit_3(tmp_path, how, expected, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_broken(make_results(), how)))
    rules = _rules(tmp_path, "[rules]\nmin_speedup = 1\n")
    assert main(["gate", str(path), "--rules", str(rules)]) == EXIT_MALFORMED
    err = capsys.readouterr().err
    assert expected in err and str(path) in err


def test_results_that_are_not_json_and_a_bad_baseline_exit_3(tmp_path, results_file, capsys):
    rules = _rules(tmp_path, "[rules]\nmax_regression = 0.1\n")
    junk = tmp_path / "junk.json"
    junk.write_text("<html>not json</html>")
    assert main(["gate", str(junk), "--rules", str(rules)]) == EXIT_MALFORMED
    assert "not JSON" in capsys.readouterr().err
    assert main(["gate", str(results_file), "--rules", str(rules), "--baseline", str(junk)]) == EXIT_MALFORMED
    assert "--baseline" in capsys.readouterr().err
    assert main(["gate", str(tmp_path / "missing.json"), "--rules", str(rules)]) == EXIT_MALFORMED
    assert main(["gate", str(results_file), "--rules", str(tmp_path / "missing.toml")]) == EXIT_MALFORMED


def test_baseline_through_the_command(tmp_path, results_file, capsys):
    slower = make_results()
    slower["artifacts"][2]["latency"] = [_latency(1, 128, 8.0 / 1.5, seed=5), _latency(8, 128, 6.0 / 1.5, seed=6)]
    current = tmp_path / "current.json"
    current.write_text(json.dumps(slower))
    rules = _rules(tmp_path, "[rules]\nmax_regression = 0.10\n")
    assert run_gate(current, rules, baseline=results_file, step_summary="") == EXIT_FAIL
    captured = capsys.readouterr()
    assert "student-int8 max_regression: normalised latency" in captured.out
    assert "warning" not in captured.err  # same machine, threads and data
    assert run_gate(results_file, rules, baseline=results_file, step_summary="") == EXIT_PASS
    other = make_results()
    other["settings"]["threads"] = 8
    other_file = tmp_path / "other.json"
    other_file.write_text(json.dumps(other))
    assert run_gate(results_file, rules, baseline=other_file, step_summary="") == EXIT_PASS
    assert "baseline was measured with other threads (8 -> 2)" in capsys.readouterr().err


def test_load_results_returns_the_document(results_file):
    doc = load_results(results_file)
    assert doc == make_results()
    broken = copy.deepcopy(doc)
    broken["artifacts"] = []
    results_file.write_text(json.dumps(broken))
    with pytest.raises(GateInputError, match="measured nothing"):
        load_results(results_file)


# ----------------------------------------------------------------------------- version 1 files


def test_version_1_results_are_read_and_their_statistical_rules_are_inconclusive(tmp_path, capsys):
    """A v1 file holds no rounds or predictions: interval rules say why they cannot decide (exit 4); the others work."""
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(make_results_v1()))
    assert load_results(path)["schema_version"] == 1
    toml = "[rules]\nmin_speedup = 1.5\nmax_accuracy_drop = 0.05\nmin_agreement = 0.9\nmax_p50_ms = 1000\nmax_size_mb = 100\n"
    checks = _checks(tmp_path, toml, make_results_v1())
    for rule in ("min_speedup", "max_accuracy_drop", "min_agreement", "max_p50_ms"):
        check = checks[("student", rule)]
        assert check.status == "inconclusive" and "schema version 1" in check.message and "bench again" in check.message
    assert checks[("student", "max_size_mb")].status == "pass"
    assert checks[("student", "min_speedup")].measured.startswith("2.00")  # the worst point value is still shown
    rules = _rules(tmp_path, toml)
    assert main(["gate", str(path), "--rules", str(rules)]) == EXIT_INCONCLUSIVE
    assert "schema version 1" in capsys.readouterr().out
    # A v1 baseline: max_regression cannot be decided either.
    current = tmp_path / "v2.json"
    current.write_text(json.dumps(make_results()))
    check = _checks(tmp_path, "[rules]\nmax_regression = 0.1\n", make_results(), make_results_v1())[
        ("student", "max_regression")]
    assert check.status == "inconclusive" and "schema version 1" in check.message


def test_version_2_needs_rounds_and_predictions(tmp_path, capsys):
    doc = make_results()
    del doc["artifacts"][1]["latency"][0]["rounds_ns"]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    rules = _rules(tmp_path, "[rules]\nmin_speedup = 1\n")
    assert main(["gate", str(path), "--rules", str(rules)]) == EXIT_MALFORMED
    assert "artifacts[1].latency[0].rounds_ns is missing" in capsys.readouterr().err
    doc = make_results()
    doc["artifacts"][2]["quality"]["predictions"] = doc["artifacts"][2]["quality"]["predictions"][:10]
    path.write_text(json.dumps(doc))
    assert main(["gate", str(path), "--rules", str(rules)]) == EXIT_MALFORMED
    assert "artifacts[2].quality.predictions should be 1000 whole numbers" in capsys.readouterr().err


# ----------------------------------------------------------------------------- seeds of one recipe


def _with_seed_group(accuracies: list[float], agreement: float = 0.95) -> dict:
    """The crafted run plus a group "student" of seeds (the first one timed), each with its own accuracy."""
    doc = make_results()
    first = doc["artifacts"][1]
    first["name"] = "student-s0"
    _set_quality(first, accuracies[0], agreement)
    for i, acc in enumerate(accuracies[1:], start=1):
        member = copy.deepcopy(first)
        member.update(name=f"student-s{i}", latency=[])
        _set_quality(member, acc, agreement - (accuracies[0] - acc))
        doc["artifacts"].append(member)
    doc["groups"] = [{"name": "student", "members": [f"student-s{i}" for i in range(len(accuracies))]}]
    return doc


def test_seed_groups_are_gated_on_their_mean(tmp_path):
    doc = _with_seed_group([0.88, 0.87, 0.89])
    checks = _checks(tmp_path, "[rules]\nmax_accuracy_drop = 0.06\nmin_agreement = 0.9\nmin_speedup = 1.9\n", doc)
    assert {art for art, _ in checks} == {"student", "student-int8"}  # members are gated through their group
    drop = checks[("student", "max_accuracy_drop")]
    assert drop.status == "pass" and "mean of 3 seeds" in drop.measured and "+2.00 pt" in drop.measured
    assert checks[("student", "min_agreement")].status == "pass"
    assert checks[("student", "min_speedup")].status == "pass"  # latency of the first, timed, member
    # Seeds that scatter widen the interval: the same mean drop is no longer shown to be under 3 points.
    tight = _checks(tmp_path, "[rules]\nmax_accuracy_drop = 0.035\n", _with_seed_group([0.88, 0.88, 0.88]))
    loose = _checks(tmp_path, "[rules]\nmax_accuracy_drop = 0.035\n", _with_seed_group([0.86, 0.88, 0.90], 0.94))
    assert tight[("student", "max_accuracy_drop")].status == "pass"
    assert loose[("student", "max_accuracy_drop")].status == "inconclusive"
    # A member named in its own table is gated alone, by that table only.
    checks = _checks(tmp_path, '[rules]\nmin_agreement = 0.9\n\n[artifacts."student-s1"]\nmax_size_mb = 100\n', doc)
    assert ("student-s1", "max_size_mb") in checks and ("student-s1", "min_agreement") not in checks
    # max_regression of a group against a baseline group: Welch's t over the per-seed accuracies.
    worse = _with_seed_group([0.78, 0.77, 0.79], 0.85)
    check = _checks(tmp_path, "[rules]\nmax_regression = 0.05\nlatency_batch_size = 1\n", worse, doc)[
        ("student", "max_regression")]
    assert check.status == "fail" and "3 seeds" in check.measured


# ----------------------------------------------------------------------------- decisions exactly on the limit
#
# Every rule kind, for both directions: exactly on the limit (pass: a bound on the limit is on the good side),
# just inside (pass), just outside (fail, or inconclusive where only one bound crossed). Zero-width
# intervals come from rounds whose ratio is constant; the others put the limit on a bound of the interval
# the gate is documented to use (computed independently where a textbook formula exists).

TINY = 1e-6


def _constant_entry(b: int, ns: int) -> dict:
    ms = ns / 1e6
    return {"batch_size": b, "seq_len": 128, "runs": ROUNDS, "p50_ms": ms, "p90_ms": ms, "p99_ms": ms, "mean_ms": ms,
            "min_ms": ms, "max_ms": ms, "throughput_seq_per_s": b * 1000.0 / ms,
            "speedup": {"median": 1.0, "p10": 1.0, "p90": 1.0, "n": ROUNDS}, "rounds_ns": [ns] * ROUNDS}


def _exact_results(student_ns: tuple[int, int] = (10_000_000, 20_000_000)) -> dict:
    """The crafted run with constant rounds: teacher 40 ms at batch 1 and 8, the student at ``student_ns``
    (by default 4x and 2x faster), so every latency interval has zero width."""
    doc = make_results()
    doc["artifacts"][0]["latency"] = [_constant_entry(1, 40_000_000), _constant_entry(8, 40_000_000)]
    doc["artifacts"][1]["latency"] = [_constant_entry(1, student_ns[0]), _constant_entry(8, student_ns[1])]
    return doc


def _status(tmp_path, toml: str, doc: dict, artifact: str = "student", baseline: dict | None = None) -> str:
    import tomllib

    checks = _checks(tmp_path, "[rules]\n" + toml + "\n", doc, baseline)
    rule = next(r for a, r in checks if a == artifact)
    check = checks[(artifact, rule)]
    assert check.limit == tomllib.loads(toml)[rule]  # the table shows the limit the rule was decided on
    return check.status


@pytest.mark.parametrize("toml, expected", [
    ("min_speedup = 2.0", "pass"),                                  # the worst config (batch 8) exactly on the limit
    (f"min_speedup = {2.0 - TINY}", "pass"),
    (f"min_speedup = {2.0 + TINY}", "fail"),                        # every config must reach it
    ("min_speedup = 4.0\nspeedup_batch_size = 1", "pass"),
    (f"min_speedup = {4.0 + TINY}\nspeedup_batch_size = 1", "fail"),
    ("max_p50_ms = 10.0\nlatency_batch_size = 1", "pass"),          # lower is better: 10 ms exactly
    (f"max_p50_ms = {10.0 + TINY}\nlatency_batch_size = 1", "pass"),
    (f"max_p50_ms = {10.0 - TINY}\nlatency_batch_size = 1", "fail"),
    ("max_p50_ms = 20.0", "pass"),                                  # the worst config (batch 8, 20 ms)
    (f"max_p50_ms = {20.0 - TINY}", "fail"),
    ("min_throughput = 100.0\nlatency_batch_size = 1", "pass"),     # 1 / 10 ms
    (f"min_throughput = {100.0 - TINY}\nlatency_batch_size = 1", "pass"),
    (f"min_throughput = {100.0 + TINY}\nlatency_batch_size = 1", "fail"),
    ("min_throughput = 400.0", "fail"),                             # batch 8 / 20 ms = 400, but batch 1 gives 100
    ("min_throughput = 100.0", "pass"),
    (f"min_throughput = {100.0 + TINY}", "fail"),                   # batch 1 is the worst config
])
def test_latency_rules_exactly_on_the_limit(tmp_path, toml, expected):
    assert _status(tmp_path, toml, _exact_results()) == expected


def test_min_throughput_scales_with_the_batch_size(tmp_path):
    doc = _exact_results()
    assert _status(tmp_path, "min_throughput = 400.0\nlatency_batch_size = 8", doc) == "pass"
    assert _status(tmp_path, f"min_throughput = {400.0 + TINY}\nlatency_batch_size = 8", doc) == "fail"


def _spread_results() -> dict:
    """The student's batch-1 rounds vary (so its intervals have width); batch 8 is dropped."""
    doc = _exact_results()
    rng = np.random.default_rng(7)
    rounds = [int(t) for t in 10_000_000 * np.exp(0.05 * rng.standard_normal(ROUNDS))]
    doc["artifacts"][1]["latency"] = [dict(_constant_entry(1, 10_000_000), rounds_ns=rounds)]
    doc["artifacts"][0]["latency"] = [_constant_entry(1, 40_000_000)]
    return doc


@pytest.mark.parametrize("rule, bound, offset, expected", [
    # higher is better: pass iff the lower bound reaches the limit, fail iff the upper bound is below it
    ("min_speedup", "low", 0.0, "pass"),
    ("min_speedup", "low", +TINY, "inconclusive"),
    ("min_speedup", "high", 0.0, "inconclusive"),
    ("min_speedup", "high", +TINY, "fail"),
    ("min_throughput", "low", 0.0, "pass"),
    ("min_throughput", "low", +TINY, "inconclusive"),
    ("min_throughput", "high", 0.0, "inconclusive"),
    ("min_throughput", "high", +TINY, "fail"),
    # lower is better: pass iff the upper bound is within the limit, fail iff the lower bound is over it
    ("max_p50_ms", "high", 0.0, "pass"),
    ("max_p50_ms", "high", -TINY, "inconclusive"),
    ("max_p50_ms", "low", 0.0, "inconclusive"),
    ("max_p50_ms", "low", -TINY, "fail"),
])
def test_latency_rules_on_the_bounds_of_their_interval(tmp_path, rule, bound, offset, expected):
    from compress.core.stats import series_median_interval, speedup_interval, throughput_interval

    doc = _spread_results()
    rounds = doc["artifacts"][1]["latency"][0]["rounds_ns"]
    interval = {"min_speedup": lambda: speedup_interval([40_000_000] * ROUNDS, rounds),
                "min_throughput": lambda: throughput_interval(rounds, 1),
                "max_p50_ms": lambda: series_median_interval(rounds)}[rule]()
    assert interval.high - interval.low > 100 * TINY  # a real interval, so the bounds are told apart
    limit = getattr(interval, bound) + offset
    assert _status(tmp_path, f"{rule} = {limit!r}", doc) == expected


@pytest.mark.parametrize("size_mb, limit, expected", [(40.0, 40.0, "pass"), (40.0, 40.0 + TINY, "pass"),
                                                      (40.0, 40.0 - TINY, "fail"), (40.000001, 40.0, "fail")])
def test_max_size_exactly_on_the_limit(tmp_path, size_mb, limit, expected):
    doc = make_results()
    doc["artifacts"][1]["size_bytes"] = round(size_mb * 1e6)
    assert _status(tmp_path, f"max_size_mb = {limit!r}", doc) == expected


@pytest.mark.parametrize("ops, toml, expected", [
    (6, "min_fused_attention = 6", "pass"), (6, "min_fused_attention = 5", "pass"),
    (5, "min_fused_attention = 6", "fail"),
    (6, "require_full_attention_fusion = true", "pass"), (5, "require_full_attention_fusion = true", "fail"),
])
def test_fusion_counts_on_the_limit(tmp_path, ops, toml, expected):
    doc = make_results()
    doc["artifacts"][2]["onnx"]["attention_ops"] = ops
    assert _status(tmp_path, toml, doc, artifact="student-int8") == expected


@pytest.mark.parametrize("relative", [False, True])
@pytest.mark.parametrize("bound, offset, expected", [
    ("high", 0.0, "pass"), ("high", -TINY, "inconclusive"), ("low", 0.0, "inconclusive"), ("low", -TINY, "fail"),
])
def test_accuracy_drop_on_the_bounds_of_the_paired_interval(tmp_path, relative, bound, offset, expected):
    """Lower is better: the drop's upper bound decides a pass, its lower bound a failure (paired interval)."""
    from compress.core.stats import accuracy_drop_interval

    doc = make_results()
    labels = np.asarray(_labels())
    ref = np.asarray(doc["artifacts"][0]["quality"]["predictions"]) == labels
    art = np.asarray(doc["artifacts"][1]["quality"]["predictions"]) == labels
    interval = accuracy_drop_interval(ref, art, relative=relative)
    assert 0 < interval.low < interval.high
    rule = "max_relative_accuracy_drop" if relative else "max_accuracy_drop"
    assert _status(tmp_path, f"{rule} = {getattr(interval, bound) + offset!r}", doc) == expected


def test_accuracy_drop_of_identical_predictions_passes_a_zero_limit(tmp_path):
    doc = make_results()
    doc["artifacts"][1]["quality"]["predictions"] = list(doc["artifacts"][0]["quality"]["predictions"])
    assert _status(tmp_path, "max_accuracy_drop = 0.0", doc) == "pass"
    assert _status(tmp_path, "max_relative_accuracy_drop = 0.0", doc) == "pass"


@pytest.mark.parametrize("bound, offset, expected", [
    ("low", 0.0, "pass"), ("low", +TINY, "inconclusive"), ("high", 0.0, "inconclusive"), ("high", +TINY, "fail"),
])
def test_agreement_on_the_clopper_pearson_bounds(tmp_path, bound, offset, expected):
    """950 of 1000 agree: the textbook Clopper-Pearson bounds are Beta quantiles (scipy.stats.beta)."""
    from scipy.stats import beta

    bounds = {"low": beta.ppf(0.025, 950, 51), "high": beta.ppf(0.975, 951, 50)}
    assert _status(tmp_path, f"min_agreement = {float(bounds[bound]) + offset!r}", make_results()) == expected


def test_full_agreement_is_not_a_pass_of_a_limit_of_one(tmp_path):
    """1000 of 1000 agree: the upper bound is 1, the lower bound 0.025^(1/1000), below a limit of 1: inconclusive."""
    doc = make_results()
    doc["artifacts"][1]["quality"]["predictions"] = list(doc["artifacts"][0]["quality"]["predictions"])
    assert _status(tmp_path, "min_agreement = 1.0", doc) == "inconclusive"
    assert _status(tmp_path, f"min_agreement = {0.025 ** (1 / 1000)!r}", doc) == "pass"


@pytest.mark.parametrize("limit, expected", [(0.1, "pass"), (0.1 + TINY, "pass"), (0.1 - TINY, "fail")])
def test_max_regression_exactly_on_the_limit(tmp_path, limit, expected):
    """Normalised latency grows exactly 10% (speedup 4x -> 4/1.1x, constant rounds); accuracy is unchanged."""
    baseline = _exact_results()
    current = _exact_results((11_000_000, 20_000_000))
    toml = f"max_regression = {limit!r}\nlatency_batch_size = 1"
    assert _status(tmp_path, toml, current, baseline=baseline) == expected


@pytest.mark.parametrize("bound, offset, expected", [
    ("high", 0.0, "pass"), ("high", -TINY, "inconclusive"), ("low", 0.0, "inconclusive"), ("low", -TINY, "fail"),
])
def test_accuracy_regression_on_the_bounds_of_the_paired_interval(tmp_path, bound, offset, expected):
    from compress.core.stats import accuracy_drop_interval

    baseline, current = make_results(), make_results()
    _set_quality(current["artifacts"][1], 0.85, 0.92)
    labels = np.asarray(_labels())
    old = np.asarray(baseline["artifacts"][1]["quality"]["predictions"]) == labels
    new = np.asarray(current["artifacts"][1]["quality"]["predictions"]) == labels
    interval = accuracy_drop_interval(old, new)
    assert 0 < interval.low < interval.high
    toml = f"max_accuracy_regression = {getattr(interval, bound) + offset!r}"
    assert _status(tmp_path, toml, current, baseline=baseline) == expected


def test_combine_and_outcome_precedence():
    from benchmarks.gate import Check, combine, outcome

    assert combine([]) == "pass" and combine(["pass", "pass"]) == "pass"
    assert combine(["pass", "inconclusive"]) == "inconclusive"
    assert combine(["inconclusive", "fail", "pass"]) == "fail"

    def checks(*statuses: str) -> list:
        return [Check("a", "r", 1.0, "-", s) for s in statuses]

    assert outcome(checks("pass", "skip")) == ("passed", EXIT_PASS)
    assert outcome(checks("pass", "inconclusive"))[1] == EXIT_INCONCLUSIVE
    assert outcome(checks("inconclusive"), "pass")[1] == EXIT_PASS
    assert outcome(checks("inconclusive"), "fail")[1] == EXIT_FAIL
    assert outcome(checks("inconclusive", "fail"), "pass")[1] == EXIT_FAIL


@pytest.mark.parametrize("bound, offset, expected", [
    ("low", 0.0, "pass"), ("low", +TINY, "inconclusive"), ("high", 0.0, "inconclusive"), ("high", +TINY, "fail"),
])
def test_traffic_agreement_on_the_clopper_pearson_bounds(tmp_path, bound, offset, expected):
    """190 of 200 traffic texts get the reference's label: the same Beta-quantile bounds as min_agreement."""
    from scipy.stats import beta

    doc = make_results()
    reference = [i % 3 for i in range(200)]
    doc["artifacts"][0]["traffic_agreement"] = {"predictions": reference}
    doc["artifacts"][1]["traffic_agreement"] = {"predictions": [(p + 1) % 3 if i < 10 else p
                                                                for i, p in enumerate(reference)]}
    bounds = {"low": beta.ppf(0.025, 190, 11), "high": beta.ppf(0.975, 191, 10)}
    assert _status(tmp_path, f"min_traffic_agreement = {float(bounds[bound]) + offset!r}", doc) == expected


@pytest.mark.parametrize("where", ["reference", "artifact"])
def test_traffic_agreement_without_traffic_predictions_fails_and_says_how_to_get_them(tmp_path, where):
    """A rules file asking for traffic agreement on results made without --traffic-file: a fail, not a skip."""
    doc = make_results()
    other = 1 if where == "reference" else 0  # the side that keeps its predictions
    doc["artifacts"][other]["traffic_agreement"] = {"predictions": [0, 1, 2]}
    checks = _checks(tmp_path, "[rules]\nmin_traffic_agreement = 0.9\n", doc)
    check = checks[("student", "min_traffic_agreement")]
    assert check.status == "fail" and "--traffic-file" in check.message


# ----------------------------------------------------------------------------- what a decision reports
# (found by mutation testing: each of these fails when the gate takes the right decision for the wrong
# reason, or reports another configuration, confidence or test-set size than the one it decided on)


@pytest.mark.parametrize("rule, bound", [("min_speedup", "low"), ("min_throughput", "low"), ("max_p50_ms", "high")])
def test_latency_rules_use_the_confidence_of_the_rules_file(tmp_path, rule, bound):
    """On the pass-side bound of the 90% interval: a pass at confidence 0.9, inconclusive on the wider 95% one."""
    from compress.core.stats import series_median_interval, speedup_interval, throughput_interval

    doc = _spread_results()
    rounds = doc["artifacts"][1]["latency"][0]["rounds_ns"]
    interval = {"min_speedup": lambda: speedup_interval([40_000_000] * ROUNDS, rounds, 0.9),
                "min_throughput": lambda: throughput_interval(rounds, 1, 0.9),
                "max_p50_ms": lambda: series_median_interval(rounds, 0.9)}[rule]()
    limit = getattr(interval, bound)
    assert _status(tmp_path, f"{rule} = {limit!r}\nconfidence = 0.9", doc) == "pass"
    assert _status(tmp_path, f"{rule} = {limit!r}", doc) == "inconclusive"


@pytest.mark.parametrize("relative", [False, True])
def test_accuracy_drop_uses_the_confidence_of_the_rules_file(tmp_path, relative):
    from compress.core.stats import accuracy_drop_interval

    doc = make_results()
    labels = np.asarray(_labels())
    ref = np.asarray(doc["artifacts"][0]["quality"]["predictions"]) == labels
    art = np.asarray(doc["artifacts"][1]["quality"]["predictions"]) == labels
    high = accuracy_drop_interval(ref, art, 0.9, relative=relative).high
    rule = "max_relative_accuracy_drop" if relative else "max_accuracy_drop"
    assert _status(tmp_path, f"{rule} = {high!r}\nconfidence = 0.9", doc) == "pass"
    assert _status(tmp_path, f"{rule} = {high!r}", doc) == "inconclusive"


def test_accuracy_drop_messages_name_the_test_sets_power(tmp_path):
    from compress.core.stats import detectable_drop

    doc = make_results()
    labels = np.asarray(_labels())
    ref = np.asarray(doc["artifacts"][0]["quality"]["predictions"]) == labels
    art = np.asarray(doc["artifacts"][1]["quality"]["predictions"]) == labels
    size = 100 * detectable_drop(ref, art)
    checks = _checks(tmp_path, "[rules]\nmax_accuracy_drop = 0.05\n")
    assert checks[("student", "max_accuracy_drop")].message == (
        f"this test set (1000 examples) detects a true drop of {size:.1f} pt with 80% power")
    checks = _checks(tmp_path, "[rules]\nmax_relative_accuracy_drop = 0.06\n")
    assert f"detects a true drop of {size / 0.9:.1f}% with 80% power" in checks[
        ("student", "max_relative_accuracy_drop")].message
    fail = _checks(tmp_path, "[rules]\nmax_accuracy_drop = 0.005\n")[("student", "max_accuracy_drop")]
    assert fail.message.startswith("accuracy fell by +2.00 pt") and "even the lower bound" in fail.message


def test_seed_group_relative_drop_and_confidence(tmp_path):
    """A group's drop is the mean-over-seeds interval; relative, divided by the reference accuracy (0.9)."""
    from statistics import NormalDist

    from compress.core.stats import mean_over_seeds_interval

    doc = _with_seed_group([0.88, 0.87, 0.89])
    labels = np.asarray(_labels())
    ref = np.asarray(doc["artifacts"][0]["quality"]["predictions"]) == labels
    members = [a for a in doc["artifacts"] if a["name"].startswith("student-s")]
    per_seed = np.stack([ref.astype(float) - (np.asarray(m["quality"]["predictions"]) == labels) for m in members])
    for confidence in (0.95, 0.9):
        i = mean_over_seeds_interval(per_seed, confidence)
        extra = f"\nconfidence = {confidence}" if confidence != 0.95 else ""
        assert _status(tmp_path, f"max_relative_accuracy_drop = {i.high / 0.9!r}{extra}", doc) == "pass"
        assert _status(tmp_path, f"max_relative_accuracy_drop = {i.high / 0.9 - TINY!r}{extra}", doc) == "inconclusive"
        assert _status(tmp_path, f"max_relative_accuracy_drop = {i.low / 0.9 - TINY!r}{extra}", doc) == "fail"
        assert _status(tmp_path, f"max_accuracy_drop = {i.high!r}{extra}", doc) == "pass"
        assert _status(tmp_path, f"max_accuracy_drop = {i.high - TINY!r}{extra}", doc) == "inconclusive"
    i = mean_over_seeds_interval(per_seed)
    z = NormalDist().inv_cdf(0.975)
    detectable = (z + NormalDist().inv_cdf(0.8)) * (i.high - i.low) / (2 * z)
    check = _checks(tmp_path, "[rules]\nmax_accuracy_drop = 0.06\n", doc)[("student", "max_accuracy_drop")]
    assert f"detects a true drop of {100 * detectable:.1f} pt" in check.message
    check = _checks(tmp_path, "[rules]\nmax_relative_accuracy_drop = 0.07\n", doc)[("student", "max_relative_accuracy_drop")]
    assert check.interval == f"[{100 * i.low / 0.9:+.2f}, {100 * i.high / 0.9:+.2f}]% (95%)"


def test_seed_group_agreement_uses_the_confidence(tmp_path):
    from compress.core.stats import mean_over_seeds_interval

    doc = _with_seed_group([0.88, 0.87, 0.89])
    ref = np.asarray(doc["artifacts"][0]["quality"]["predictions"])
    members = [a for a in doc["artifacts"] if a["name"].startswith("student-s")]
    agree = np.stack([np.asarray(m["quality"]["predictions"]) == ref for m in members]).astype(float)
    low = mean_over_seeds_interval(agree, 0.9).low
    assert _status(tmp_path, f"min_agreement = {low!r}\nconfidence = 0.9", doc) == "pass"
    assert _status(tmp_path, f"min_agreement = {low!r}", doc) == "inconclusive"


def test_version_1_results_show_the_point_values_they_have(tmp_path):
    doc = make_results_v1()
    doc["artifacts"][1]["latency"][1]["throughput_seq_per_s"] = None  # not measured at batch 8
    checks = _checks(tmp_path, "[rules]\nmin_speedup = 1.5\nmax_p50_ms = 500\nmin_throughput = 1\n"
                               "max_accuracy_drop = 0.05\nmax_relative_accuracy_drop = 0.05\nmin_agreement = 0.9\n", doc)
    speedup, p50 = checks[("student", "min_speedup")], checks[("student", "max_p50_ms")]
    assert speedup.measured.endswith("x at batch 8 seq 128")  # the worst point value: the lowest speedup
    assert p50.measured.endswith(" ms at batch 8 seq 128")  # ... the highest latency
    assert checks[("student", "min_throughput")].measured == "0.00 seq/s at batch 8 seq 128"
    assert checks[("student", "max_accuracy_drop")].measured == "+2.00 pt"
    assert checks[("student", "max_relative_accuracy_drop")].measured == "+2.22%"
    assert checks[("student", "min_agreement")].measured == "0.9500"
    for check in checks.values():
        assert check.status == "inconclusive" and check.message.startswith("RESULTS is a schema version 1 results file")
        assert check.limit is not None


def test_the_reported_configuration_is_the_one_that_decided(tmp_path):
    fails = _checks(tmp_path, "[rules]\nmin_speedup = 10\nmax_p50_ms = 1\n")
    assert fails[("student", "min_speedup")].measured.endswith("at batch 8 seq 128")  # 2x, the worse of 3x and 2x
    p50 = fails[("student", "max_p50_ms")]
    assert p50.measured.endswith("at batch 8 seq 128")  # 200 ms, the worse of 33 and 200
    assert p50.message.endswith("min_speedup compares against the in-run reference")  # absolute times: a caveat
    assert "in-run reference" not in fails[("student", "min_speedup")].message
    assert _checks(tmp_path, "[rules]\nmax_p50_ms = 1000\n")[("student", "max_p50_ms")].message == ""


@pytest.mark.parametrize("toml, keys, where", [
    ("min_speedup = 1\nspeedup_batch_size = 32", "speedup_batch_size/speedup_seq_len", "batch 32"),
    ("min_speedup = 1\nspeedup_seq_len = 64", "speedup_batch_size/speedup_seq_len", "seq 64"),
    ("max_p50_ms = 1000\nlatency_seq_len = 64", "latency_batch_size/latency_seq_len", "seq 64"),
    ("min_throughput = 1\nlatency_batch_size = 32\nlatency_seq_len = 128", "latency_batch_size/latency_seq_len",
     "batch 32 seq 128"),
])
def test_a_selector_with_no_measurement_fails_naming_the_keys(tmp_path, toml, keys, where):
    check = next(c for (a, r), c in _checks(tmp_path, "[rules]\n" + toml + "\n").items() if a == "student")
    assert check.status == "fail" and f"no latency measured at {where} " in check.message
    assert f"change {keys} in the rules" in check.message


def test_skipped_and_undecidable_regression_checks_say_why(tmp_path):
    for rule in ("max_regression", "max_accuracy_regression"):
        check = _checks(tmp_path, f"[rules]\n{rule} = 0.1\n")[("student", rule)]
        assert (check.status, check.measured, check.limit, check.message) == ("skip", "-", 0.1, "no --baseline given")
        baseline = make_results()
        baseline["artifacts"].pop(1)
        check = _checks(tmp_path, f"[rules]\n{rule} = 0.1\n", make_results(), baseline)[("student", rule)]
        assert (check.status, check.measured, check.limit) == ("skip", "-", 0.1)
        assert check.message == "not in the baseline (a new artifact)"
    check = _checks(tmp_path, "[rules]\nmax_accuracy_regression = 0.1\n", make_results(), make_results_v1())[
        ("student", "max_accuracy_regression")]
    assert (check.status, check.measured, check.limit) == ("inconclusive", "-", 0.1)
    assert check.message.startswith("RESULTS or --baseline is a schema version 1 results file")


def test_seed_group_regression_of_two_seeds_and_without_spread(tmp_path):
    """Welch's t needs two seeds a side, no more; seeds that all score the same give a zero-width interval."""
    base, worse = _with_seed_group([0.88, 0.87]), _with_seed_group([0.85, 0.84], 0.92)
    check = _checks(tmp_path, "[rules]\nmax_accuracy_regression = 0.0\n", worse, base)[("student", "max_accuracy_regression")]
    assert "mean of 2 seeds against 2" in check.measured and check.interval.endswith("pt (95%)")
    base, worse = _with_seed_group([0.88, 0.88, 0.88]), _with_seed_group([0.85, 0.85, 0.85], 0.92)
    assert _status(tmp_path, "max_accuracy_regression = 0.03", worse, baseline=base) == "pass"
    assert _status(tmp_path, f"max_accuracy_regression = {0.03 - TINY!r}", worse, baseline=base) == "fail"


def test_seed_group_relative_regression_by_hand(tmp_path):
    """max_regression's accuracy half for groups: Welch's t on the per-seed accuracies, over the old mean."""
    from scipy.stats import t

    base, worse = _with_seed_group([0.88, 0.87, 0.89]), _with_seed_group([0.80, 0.78, 0.82], 0.85)
    old, new = np.array([0.88, 0.87, 0.89]), np.array([0.80, 0.78, 0.82])
    vo, vn = old.var(ddof=1) / 3, new.var(ddof=1) / 3
    df = (vo + vn) ** 2 / (vo ** 2 / 2 + vn ** 2 / 2)
    half = t.ppf(0.975, df) * math.sqrt(vo + vn)
    est = old.mean() - new.mean()
    high, low = float((est + half) / old.mean()), float((est - half) / old.mean())
    only_accuracy = "\nlatency_batch_size = 32"  # no latency config in common: the accuracy half decides alone
    assert _status(tmp_path, f"max_regression = {high!r}{only_accuracy}", worse, baseline=base) == "pass"
    assert _status(tmp_path, f"max_regression = {high - TINY!r}{only_accuracy}", worse, baseline=base) == "inconclusive"
    assert _status(tmp_path, f"max_regression = {low - TINY!r}{only_accuracy}", worse, baseline=base) == "fail"
    check = _checks(tmp_path, f"[rules]\nmax_regression = 0.2{only_accuracy}\n", worse, base)[("student", "max_regression")]
    assert check.interval == f"[{low:+.1%}, {high:+.1%}] (95%)"
    # A baseline group that got nothing right cannot fall: its relative change is 0, never a division by zero.
    for member in base["artifacts"]:
        if member["name"].startswith("student-s"):
            member["quality"]["accuracy"] = 0.0
    assert _status(tmp_path, f"max_regression = 0.0{only_accuracy}", worse, baseline=base) == "pass"


def test_on_inconclusive_fail_headline():
    from benchmarks.gate import Check, outcome

    assert outcome([Check("a", "r", 1.0, "-", "inconclusive")], "fail") == (
        "FAILED (inconclusive counted as fail)", EXIT_FAIL)
    assert outcome([Check("a", "r", 1.0, "-", "inconclusive")], "pass") == (
        "passed (inconclusive counted as pass)", EXIT_PASS)
    assert outcome([Check("a", "r", 1.0, "-", "inconclusive")]) == ("INCONCLUSIVE", EXIT_INCONCLUSIVE)
    assert outcome([Check("a", "r", 1.0, "-", "fail")]) == ("FAILED", EXIT_FAIL)


# ----------------------------------------------------------------------------- gate survivors of issue 28
# (each test below fails on a mutant that the tests above let through; the mutant is named in its docstring)


def test_passing_point_checks_carry_no_message(tmp_path):
    """A size or fusion check that passes says nothing (``_evaluate_rule`` 28 kept the failure text)."""
    checks = _checks(tmp_path, "[rules]\nmax_size_mb = 90\nmin_fused_attention = 6\n"
                               "require_full_attention_fusion = true\n")
    for key in (("student", "max_size_mb"), ("student-int8", "max_size_mb"), ("student-int8", "min_fused_attention"),
                ("student-int8", "require_full_attention_fusion")):
        assert (checks[key].status, checks[key].message) == ("pass", ""), key


def test_a_failing_traffic_agreement_says_where_the_disagreements_are(tmp_path):
    """190 of 200 texts agree, a limit of 0.99 is above the whole interval: the message points at the file's
    disagreement list (``_traffic_agreement`` 81 dropped the fail message)."""
    doc = make_results()
    reference = [i % 3 for i in range(200)]
    doc["artifacts"][0]["traffic_agreement"] = {"predictions": reference}
    doc["artifacts"][1]["traffic_agreement"] = {"predictions": [(p + 1) % 3 if i < 10 else p
                                                                for i, p in enumerate(reference)]}
    check = _checks(tmp_path, "[rules]\nmin_traffic_agreement = 0.99\n", doc)[("student", "min_traffic_agreement")]
    assert check.status == "fail" and check.measured == "0.9500 of 200 texts"
    assert check.message.startswith("traffic agreement 0.9500 of 200 texts: even the upper bound")
    assert "traffic_agreement.disagreements" in check.message


def test_identical_seed_groups_show_no_fall_and_a_zero_width_interval(tmp_path):
    """The same seeds benchmarked again: the fall is 0 and its interval [0, 0], in points and as a share
    (``_accuracy_regression`` 30 showed a 100-point fall, 31 an interval [100, 0])."""
    base = _with_seed_group([0.88, 0.87, 0.89])
    check = _checks(tmp_path, "[rules]\nmax_accuracy_regression = 0.0\n", base, copy.deepcopy(base))[
        ("student", "max_accuracy_regression")]
    assert check.status == "pass" and check.interval == "[+0.00, +0.00] pt (95%)"
    assert check.measured.endswith(" points against the baseline (mean of 3 seeds against 3)")
    assert float(check.measured.split()[1]) == 0.0
    only_accuracy = "\nlatency_batch_size = 32"  # no latency config in common: the accuracy half decides alone
    check = _checks(tmp_path, f"[rules]\nmax_regression = 0.0{only_accuracy}\n", base, copy.deepcopy(base))[
        ("student", "max_regression")]
    assert check.status == "pass" and check.interval == "[+0.0%, +0.0%] (95%)"
    assert float(check.measured.split()[1].rstrip("%")) == 0.0


def _other_examples_baseline() -> tuple[dict, np.ndarray]:
    """A baseline run on other examples (the last 100 labels differ, another data fingerprint), and the
    baseline student's correctness on its own labels (0.95; 0.88 on the new labels)."""
    baseline = make_results()
    labels = [1 - y if i >= 900 else y for i, y in enumerate(_labels())]
    baseline["data"].update(labels=labels, fingerprint="other-test-set")
    student = baseline["artifacts"][1]["quality"]
    correct = np.asarray(student["predictions"]) == np.asarray(labels)
    student["accuracy"] = float(correct.mean())
    return baseline, correct


def test_accuracy_regression_on_other_examples_is_unpaired_at_the_rules_confidence(tmp_path):
    """Against a baseline of other examples the fall is the unpaired interval, of the baseline's correctness
    on the baseline's labels, at the rules' confidence, in points and as a share
    (``_accuracy_regression`` 47 read the baseline against the new labels, 93 dropped the confidence, 94 the
    share, 95 the baseline's correctness)."""
    from compress.core.stats import unpaired_accuracy_drop_interval

    baseline, old = _other_examples_baseline()
    current = make_results()
    _set_quality(current["artifacts"][1], 0.85, 0.92)
    new = np.asarray(current["artifacts"][1]["quality"]["predictions"]) == np.asarray(_labels())
    assert (old.mean(), new.mean()) == (0.95, 0.85)
    points = unpaired_accuracy_drop_interval(old, new, 0.9)
    check = _checks(tmp_path, "[rules]\nmax_accuracy_regression = 0.1\nconfidence = 0.9\n", current, baseline)[
        ("student", "max_accuracy_regression")]
    assert "(unpaired: other examples)" in check.measured
    assert check.interval == f"[{100 * points.low:+.2f}, {100 * points.high:+.2f}] pt (90%)"
    assert _status(tmp_path, f"max_accuracy_regression = {points.high!r}\nconfidence = 0.9", current,
                   baseline=baseline) == "pass"
    assert _status(tmp_path, f"max_accuracy_regression = {points.high - TINY!r}\nconfidence = 0.9", current,
                   baseline=baseline) == "inconclusive"
    share = unpaired_accuracy_drop_interval(old, new, 0.9, relative=True)
    assert abs(share.high - points.high) > 0.005  # the share and the points are told apart
    check = _checks(tmp_path, "[rules]\nmax_regression = 0.5\nlatency_batch_size = 32\nconfidence = 0.9\n", current,
                    baseline)[("student", "max_regression")]
    assert check.interval == f"[{share.low:+.1%}, {share.high:+.1%}] (90%)" and "unpaired" in check.measured


def test_paired_max_regression_decides_the_accuracy_share(tmp_path):
    """max_regression's accuracy half on the same examples is the paired interval of the relative fall: a
    limit just under its lower bound fails, where the fall in points would not (``_accuracy_regression`` 86)."""
    from compress.core.stats import accuracy_drop_interval

    baseline, current = make_results(), make_results()
    _set_quality(current["artifacts"][1], 0.85, 0.92)
    labels = np.asarray(_labels())
    old = np.asarray(baseline["artifacts"][1]["quality"]["predictions"]) == labels
    new = np.asarray(current["artifacts"][1]["quality"]["predictions"]) == labels
    share, points = accuracy_drop_interval(old, new, relative=True), accuracy_drop_interval(old, new)
    assert points.low < share.low - 2 * TINY  # the fall in points sits under the limit used below
    toml = "max_regression = {!r}\nlatency_batch_size = 32"
    assert _status(tmp_path, toml.format(share.low - TINY), current, baseline=baseline) == "fail"
    assert _status(tmp_path, toml.format(share.high), current, baseline=baseline) == "pass"
    check = _checks(tmp_path, "[rules]\n" + toml.format(0.2) + "\n", current, baseline)[("student", "max_regression")]
    assert check.interval == f"[{share.low:+.1%}, {share.high:+.1%}] (95%)" and "(paired)" in check.measured


def test_relative_drop_of_a_group_against_a_reference_that_got_nothing_right(tmp_path):
    """A reference right on no example cannot be divided by: the group's drop stays in points, negative (the
    seeds do better), and passes (``_accuracy_drop`` 81 divided by the reference accuracy 0)."""
    from compress.core.stats import mean_over_seeds_interval

    doc = _with_seed_group([0.88, 0.87, 0.89])
    labels = np.asarray(_labels())
    teacher = doc["artifacts"][0]["quality"]
    teacher.update(accuracy=0.0, predictions=[int(1 - y) for y in labels])
    members = [a for a in doc["artifacts"] if a["name"].startswith("student-s")]
    per_seed = np.stack([0.0 - (np.asarray(m["quality"]["predictions"]) == labels) for m in members])
    interval = mean_over_seeds_interval(per_seed)
    assert interval.high < 0
    check = _checks(tmp_path, "[rules]\nmax_relative_accuracy_drop = 0.0\n", doc)[("student", "max_relative_accuracy_drop")]
    assert check.status == "pass"
    assert check.interval == f"[{100 * interval.low:+.2f}, {100 * interval.high:+.2f}]% (95%)"


def test_regression_shows_the_config_with_the_largest_growth(tmp_path):
    """Constant rounds: normalised latency grows exactly 10% at batch 1 and 4% at batch 8, both under 20%.
    The check shows batch 1, the larger growth, in the percent format (``_regression`` 212 picked the part
    by its text, 152 showed the interval unformatted)."""
    baseline = _exact_results()
    current = _exact_results((11_000_000, 20_800_000))
    check = _checks(tmp_path, "[rules]\nmax_regression = 0.2\n", current, baseline)[("student", "max_regression")]
    assert check.status == "pass"
    assert check.measured.startswith("latency/reference +10.0% at batch 1 seq 128")
    assert check.interval == "[+10.0%, +10.0%] (95%)"


def test_regression_goes_on_past_a_config_the_reference_was_not_timed_at(tmp_path):
    """The reference was timed at batch 8 only; the student at batch 1 and 8, its batch-8 latency 20% up. The
    batch-1 config has no paired speedup, and the next one is still judged: a fail naming batch 8, not an
    inconclusive for the missing timings (``_regression`` 108 stopped at the first config)."""
    baseline, current = _exact_results(), _exact_results((10_000_000, 24_000_000))
    for doc in (baseline, current):
        doc["artifacts"][0]["latency"] = [_constant_entry(8, 40_000_000)]
    path = tmp_path / "partial-reference.json"
    path.write_text(json.dumps(current))
    current = load_results(path)  # a results file the gate accepts
    check = _checks(tmp_path, "[rules]\nmax_regression = 0.1\n", current, baseline)[("student", "max_regression")]
    assert check.status == "fail" and "at batch 8 seq 128 grew 20.0%" in check.message
    assert check.measured.startswith("latency/reference +20.0% at batch 8 seq 128")


def test_every_unknown_rule_is_listed_with_the_rule_meant(tmp_path):
    from benchmarks.gate_rules import GateInputError, load_rules, suggest_rule

    assert suggest_rule("max_latency_ms") == "max_p50_ms"
    assert suggest_rule("min_sppedup") == "min_speedup" and suggest_rule("max_acc_drop") == "max_accuracy_drop"
    rules = tmp_path / "gates.toml"
    rules.write_text("[rules]\nmax_latency_ms = 20\nmin_speedup = 2\nmax_model_mb = 50\nmin_agreement = 2\n",
                     encoding="utf-8")
    with pytest.raises(GateInputError) as exc:
        load_rules(rules)
    lines = str(exc.value).splitlines()
    assert "gates.toml:2: unknown rule 'max_latency_ms'" in lines[0] and "'max_p50_ms'" in lines[0]
    assert "gates.toml:4: unknown rule 'max_model_mb'" in lines[1] and "'max_size_mb'" in lines[1]
    assert "gates.toml:5:" in lines[2] and "min_agreement" in lines[2] and len(lines) == 3
    assert "Known rules:" in lines[1] and "Known rules:" not in lines[0]
