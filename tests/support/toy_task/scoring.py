"""The toy task's ``scoring`` aspect: order accuracy on one split (quantize, optimize), bench's quality section
with the per-pair predictions, its report table, and the gate's accuracy rules on those predictions.

The gate's accuracy deciders (:data:`benchmarks.gate.DECIDERS` ``accuracy_drop``, ``agreement``) pair each
artifact's ``predictions`` with ``$.data.labels`` and read the record's ``accuracy``: the record carries the
order accuracy under that name too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from benchmarks.answers import answer_each
from benchmarks.gate_results import require
from benchmarks.gate_rules import GATES, GateInputError
from benchmarks.report import fmt, table
from compress.core.errors import CompressError
from compress.stages.quality import Scorer
from tests.support.toy_task import score

GATE_RULES = {"max_accuracy_drop": "accuracy_drop", "min_agreement": "agreement"}


class OrderScorer(Scorer):
    """One split's pairs in, in-order/swapped out, order accuracy."""

    def read(self, data: Any, split: str) -> None:
        self.inputs = data.texts(split)
        self.gold = data.labels(split)

    def check_outputs(self, predictor: Any, where: str) -> None:
        if predictor.num_labels != 2:
            raise CompressError(f"{where} has {predictor.num_labels} labels; a sentence-order model has 2.")

    def predict(self, predictor: Any, batch_size: int = 32) -> np.ndarray:
        return predictor.logits(self.inputs, batch_size=batch_size).argmax(-1)

    def metrics(self, predictions: Any) -> dict[str, Any]:
        return {"order_accuracy": float((np.asarray(predictions) == self.gold).mean())}

    def agreement(self, predictions: Any, reference: Any) -> float:
        return float((np.asarray(predictions) == np.asarray(reference)).mean())


def split_scorer(data: Any, split: str = "validation") -> OrderScorer:
    return OrderScorer(data, split)


def who() -> str:
    return "a sentence-order model"


def labels_per_text() -> bool:
    """One label per pair, but a pair is no text the load and traffic measurements send."""
    return False


class BenchQuality:
    """Bench's quality section: order accuracy, agreement and each pair's prediction."""

    def __init__(self, data: Any, split: str, reference: Any, memo: Any):
        self.texts, self.labels, self.memo = data.texts(split), data.labels(split), memo

    def score(self, predictors: Mapping[str, Any], reference: str, batch_size: Any = 32,
              progress: bool = True) -> dict[str, dict[str, Any]]:
        logits = answer_each(predictors, reference, batch_size, lambda p, b: p.logits(self.texts, batch_size=b),
                             progress, self.memo)
        out = {}
        for name in predictors:
            metrics = score(logits[name], self.labels, logits[reference])
            out[name] = {**metrics, "accuracy": metrics["order_accuracy"], "agreement": metrics["order_agreement"],
                         "predictions": [int(p) for p in logits[name].argmax(-1)]}
        return out

    def data_record(self) -> dict[str, Any]:
        return {"metric": "order_accuracy", "labels": [int(v) for v in self.labels]}


def bench_quality(data: Any, split: str, reference: Any, memo: Any) -> BenchQuality:
    return BenchQuality(data, split, reference, memo)


def report_quality(arts: Sequence[dict[str, Any]], ref: dict[str, Any]) -> list[str]:
    rows = [[f"`{a['name']}`" + (" (reference)" if a["is_reference"] else ""), a["kind"],
             fmt(a["quality"]["order_accuracy"], pct=True), fmt(a["quality"]["agreement"], pct=True)] for a in arts]
    return table(["artifact", "kind", "order accuracy", "agreement"], rows)


def gate_rules() -> dict[str, str]:
    return dict(GATE_RULES)


def gate_refusal(rule: str) -> str:
    return f"rule {rule} gates {GATES[rule]}; a sentence-order model is gated by max_accuracy_drop or min_agreement."


def gate_records() -> None:
    return None


def check_results_data(doc: dict[str, Any], version: int, path: Path) -> dict[str, Any]:
    labels = require(require(doc, "data", (dict,), "$", path), "labels", (list,), "$.data", path)
    if not labels or not all(v in (0, 1) for v in labels):
        raise GateInputError(f"{path}: $.data.labels should be a non-empty list of 0 and 1.")
    return {"labels": labels}


def check_results_quality(quality: dict[str, Any], facts: dict[str, Any], version: int, where: str,
                          path: Path) -> None:
    predictions = require(quality, "predictions", (list,), where, path)
    if len(predictions) != len(facts["labels"]):
        raise GateInputError(f"{path}: {where}.predictions should hold one prediction per label of $.data.labels.")
