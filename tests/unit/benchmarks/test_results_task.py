"""Which task a ``results.json`` is of: ``$.data.task`` (the registry name, written by bench), or, in a file
written before bench recorded it, the task whose primary metric is ``$.data.metric`` (version 1: accuracy).
Old files gate as they did; the gate's verdicts do not depend on which of the two names the task."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest

from benchmarks.gate import evaluate, load_results, load_rules
from benchmarks.gate_results import results_task
from benchmarks.gate_rules import GateInputError
from compress.tasks import register_task, unregister_task
from compress.tasks.registry import Task
from compress.tasks.sequence_classification import scoring as classifier_scoring
from tests.support.results import make_results, make_results_v1


@pytest.mark.parametrize("data, version, task", [
    ({"task": "token-classification", "metric": "entity_f1"}, 2, "token-classification"),
    ({"task": "ner"}, 2, "token-classification"),  # an alias reads as its task
    ({"metric": "entity_f1"}, 2, "token-classification"),  # written before data.task
    ({"metric": "f1"}, 2, "question-answering"),
    ({"metric": "accuracy"}, 2, "sequence-classification"),
    ({}, 1, "sequence-classification"),
    ({"metric": "f1"}, 1, "sequence-classification"),  # version 1 had no metric: a classifier's
])
def test_the_task_of_a_results_file(data, version, task):
    assert results_task({"schema_version": version, "data": data}).name == task


def test_an_unknown_task_or_metric_is_a_malformed_file():
    with pytest.raises(GateInputError, match=r"\$\.data\.task 'no-such-task'"):
        results_task({"schema_version": 2, "data": {"task": "no-such-task"}}, "r.json")
    with pytest.raises(GateInputError, match=r"\$\.data\.metric 'bleu' is no task's primary metric"):
        results_task({"schema_version": 2, "data": {"metric": "bleu"}}, "r.json")


def test_a_file_with_and_without_data_task_gates_alike(tmp_path):
    rules = tmp_path / "gates.toml"
    rules.write_text("[rules]\nmax_accuracy_drop = 0.02\nmin_agreement = 0.9\nmin_speedup = 1.5\n", encoding="utf-8")
    for doc, name in ((make_results(), "old"), (make_results_v1(), "v1")):
        new = copy.deepcopy(doc)
        new["data"]["task"] = "sequence-classification"
        paths = []
        for d, suffix in ((doc, "a"), (new, "b")):
            path = tmp_path / f"{name}-{suffix}.json"
            path.write_text(json.dumps(d), encoding="utf-8")
            paths.append(path)
        old_checks, new_checks = (evaluate(load_results(p), load_rules(rules)) for p in paths)
        assert old_checks == new_checks and old_checks
    with pytest.raises(GateInputError, match="rule max_f1_drop gates a tagger's or a reader's F1"):
        evaluate(make_results(), load_rules(_write(tmp_path / "f1.toml", "[rules]\nmax_f1_drop = 0.01\n")))


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


#: A toy task's scoring aspect (this module is its package): a classifier's records, but only ``min_agreement``.
scoring = SimpleNamespace(
    gate_rules=lambda: {"min_agreement": "agreement", "max_regression": "accuracy_regression"},
    gate_refusal=lambda rule: f"the toy task has no rule {rule}",
    gate_records=lambda: None, who=lambda: "a toy",
    check_results_data=classifier_scoring.check_results_data,
    check_results_quality=classifier_scoring.check_results_quality)


TOY = Task(name="toy-scored", package=__name__, description="a test's toy", auto_model="AutoModel",
           head_suffix="ToyModel", inputs={}, outputs={}, label_unit="example", soft_labels=(),
           metrics=("accuracy",), primary_metric="accuracy", predictor_returns=())


@pytest.fixture
def toy_results(tmp_path):
    """A classifier's results recorded as the toy task's, with the toy registered."""
    doc = make_results()
    doc["data"]["task"] = TOY.name
    register_task(TOY)
    try:
        yield _write(tmp_path / "toy.json", json.dumps(doc))
    finally:
        unregister_task(TOY.name)


def test_the_gate_asks_the_results_task_which_rules_apply_and_how(tmp_path, toy_results):
    checks = evaluate(load_results(toy_results), load_rules(_write(tmp_path / "a.toml", "[rules]\nmin_agreement = 0.5\n")))
    assert {c.rule for c in checks} == {"min_agreement"} and all(c.status != "skip" for c in checks)
    with pytest.raises(GateInputError, match="the toy task has no rule max_accuracy_drop"):
        evaluate(load_results(toy_results), load_rules(_write(tmp_path / "b.toml", "[rules]\nmax_accuracy_drop = 0.1\n")))


def test_max_regression_of_a_task_without_a_quality_fall_judges_latency_only(tmp_path, toy_results, monkeypatch):
    monkeypatch.setattr(scoring, "gate_rules", lambda: {"min_agreement": "agreement"})
    doc = load_results(toy_results)
    rules = load_rules(_write(tmp_path / "r.toml", "[rules]\nmax_regression = 0.1\n"))
    checks = evaluate(doc, rules, baseline=doc)
    assert checks and all(c.status == "pass" and c.measured.startswith("latency/reference") for c in checks)
    moved = copy.deepcopy(doc)
    for art in moved["artifacts"]:
        for entry in art["latency"]:
            entry["batch_size"] += 100  # no configuration in common with the baseline: nothing to judge
    assert {c.status for c in evaluate(moved, rules, baseline=doc)} == {"skip"}


class _Recalls:
    """A toy task's per-text scores, read by the gate's ``unit_mean`` decider."""

    mean_name, mean_unit = "neighbour recall", "texts"

    def mean_units(self, q: dict) -> list:
        return q["recalls"]


@pytest.mark.parametrize("limit, status", [(0.8, "pass"), (0.9, "inconclusive"), (0.95, "fail")])
def test_a_floor_on_a_mean_per_unit_score_is_decided_on_its_bootstrap_interval(tmp_path, toy_results, monkeypatch,
                                                                                limit, status):
    monkeypatch.setattr(scoring, "gate_rules", lambda: {"min_neighbour_recall": "unit_mean"})
    monkeypatch.setattr(scoring, "gate_records", _Recalls)
    doc = json.loads(toy_results.read_text(encoding="utf-8"))
    for art in doc["artifacts"]:
        art["quality"]["recalls"] = [1.0] * 900 + [0.0] * 100  # a mean of 0.9 over 1000 texts: about +-0.02
    path = _write(tmp_path / "recalls.json", json.dumps(doc))
    checks = evaluate(load_results(path), load_rules(_write(tmp_path / "n.toml",
                                                            f"[rules]\nmin_neighbour_recall = {limit}\n")))
    assert checks and {c.status for c in checks} == {status}
    assert checks[0].measured == "0.9000" and (status == "pass") == (checks[0].message == "")
