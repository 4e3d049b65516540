"""The ``scoring`` aspect of sequence classification (:mod:`compress.tasks.protocol.scoring`): a classifier's quality.

**One split** (quantize, optimize: :class:`ClassifierScorer`): the split's texts (or text pairs) read through
``Predictor.logits``, the argmax against the integer labels: accuracy, and agreement with the reference's argmax.

**Bench** (:func:`evaluate_quality`): accuracy, macro-F1, agreement with the reference and the per-example
predictions the gate pairs on. Agreement (the share of inputs where an artifact's argmax equals the reference's)
says how faithfully a compressed model reproduces the one it replaces, which accuracy alone hides: two models at
85% can disagree on a quarter of the inputs. The texts go through the same ``Predictor.logits`` path serving uses
(dynamic padding; a text longer than the artifact's window is read in overlapping windows whose logits are
pooled, never cut), not the fixed-shape benchmark inputs, so the numbers are those of real use.

**Gate**: the accuracy rules of :mod:`benchmarks.gate`, decided from each artifact's ``predictions`` against
``$.data.labels``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from benchmarks.accuracy import mcnemar_p, split_texts_and_labels
from benchmarks.answers import Answers, answer_each
from benchmarks.gate_results import require
from benchmarks.gate_rules import GATES, GateInputError
from benchmarks.report import ci_pct, fmt, table
from compress.core.stats import accuracy_drop_interval, detectable_drop, proportion_interval
from compress.tasks.tables import check_labels_fit
from compress.core.errors import CompressError
from compress.runtime.modeling import classification_metrics
from compress.stages.quality import Scorer

#: The gate's quality rules on a classifier's results, each with how it is decided (:data:`benchmarks.gate.DECIDERS`).
GATE_RULES = {"max_accuracy_drop": "accuracy_drop", "max_relative_accuracy_drop": "accuracy_drop",
              "max_accuracy_regression": "accuracy_regression", "min_agreement": "agreement",
              "min_traffic_agreement": "traffic_agreement", "max_regression": "accuracy_regression"}


class ClassifierScorer(Scorer):
    """A classification split: texts in, argmax labels out, accuracy."""

    def read(self, data: Any, split: str) -> None:
        self.inputs = list(data.texts(split))
        self.gold = np.asarray(data.splits[split]["label"], dtype=np.int64)
        self.num_labels = data.num_labels

    def check_outputs(self, predictor: Any, where: str) -> None:
        if self.num_labels > predictor.num_labels:
            raise CompressError(f"{self.source}: labels go up to {self.num_labels - 1} ({self.num_labels} classes) but "
                                f"{where} has {predictor.num_labels} output labels. Use a model fine-tuned on this "
                                "task, or fix the label column.")

    def predict(self, predictor: Any, batch_size: int = 32) -> np.ndarray:
        """Predicted labels, an array."""
        return predictor.logits(self.inputs, batch_size=batch_size).argmax(-1)

    def metrics(self, predictions: Any) -> dict[str, Any]:
        return {"accuracy": float((np.asarray(predictions) == self.gold).mean())}

    def agreement(self, predictions: Any, reference: Any) -> float:
        """The share of labels equal to the reference's."""
        return float((np.asarray(predictions) == np.asarray(reference)).mean())


def split_scorer(data: Any, split: str = "validation") -> ClassifierScorer:
    """The scorer of one classification split (:class:`ClassifierScorer`)."""
    return ClassifierScorer(data, split)


def who() -> str:
    """Who a classifier's results belong to, in messages."""
    return "a sentence classifier"


def labels_per_text() -> bool:
    """A classifier answers one label per text: what ``bench --load-clients`` and ``--traffic-file`` measure."""
    return True


# ----------------------------------------------------------------------------- bench


def evaluate_quality(predictors: Mapping[str, Any], reference: str, texts: Sequence[Any], labels: np.ndarray,
                     batch_size: int | Mapping[str, int] = 32, progress: bool = True,
                     memo: Answers | None = None) -> dict[str, dict[str, Any]]:
    """``{name: {accuracy, macro_f1, agreement, n, predictions, ...intervals}}`` for every predictor; the
    reference agrees with itself. ``batch_size``: one for all, or one per name; ``memo``: answers already made
    in this run (:mod:`benchmarks.answers`)."""
    logits: dict[str, np.ndarray] = answer_each(predictors, reference, batch_size,
                                                lambda p, b: p.logits(texts, batch_size=b), progress, memo)
    out = {}
    ref_correct = logits[reference].argmax(-1) == labels
    for name in predictors:
        out[name] = classification_metrics(logits[name], labels, reference_logits=logits[reference])
        if name != reference:
            out[name]["mcnemar_p"] = mcnemar_p(logits[name].argmax(-1) == labels, ref_correct)
        out[name].update(quality_intervals(logits[name].argmax(-1), logits[reference].argmax(-1), labels,
                                           is_reference=name == reference))
    return out


def quality_intervals(predictions: np.ndarray, reference_predictions: np.ndarray, labels: np.ndarray,
                      is_reference: bool = False, confidence: float = 0.95) -> dict[str, Any]:
    """The per-example predictions (what the gate's paired statistics need) and 95% intervals for the report.

    ``accuracy_ci`` and ``agreement_ci`` are Clopper-Pearson; ``accuracy_drop`` is the paired-bootstrap
    interval of ``reference accuracy - this accuracy`` on the same examples, and ``detectable_drop``
    the smallest true drop this test set finds with 80% power (see :mod:`compress.core.stats`).
    """

    pred = np.asarray(predictions)
    ref_pred = np.asarray(reference_predictions)
    labels = np.asarray(labels)
    correct, ref_correct = pred == labels, ref_pred == labels
    acc = proportion_interval(int(correct.sum()), len(labels), confidence)
    out: dict[str, Any] = {"predictions": [int(p) for p in pred], "accuracy_ci": [acc.low, acc.high]}
    if not is_reference:
        agree = proportion_interval(int((pred == ref_pred).sum()), len(labels), confidence)
        out["agreement_ci"] = [agree.low, agree.high]
        out["accuracy_drop"] = accuracy_drop_interval(ref_correct, correct, confidence).as_dict()
        out["detectable_drop"] = detectable_drop(ref_correct, correct, confidence)
    return out


class BenchQuality:
    """Bench's quality section on a classification split: accuracy and the per-example predictions."""

    def __init__(self, data: Any, split: str, reference: Any, memo: Any):
        check_labels_fit(data, reference.num_labels, who=f"the reference {reference.path}")
        self.texts, self.labels = split_texts_and_labels(data, split)
        self.memo = memo

    def score(self, predictors: Mapping[str, Any], reference: str, batch_size: int | Mapping[str, int] = 32,
              progress: bool = True) -> dict[str, dict[str, Any]]:
        return evaluate_quality(predictors, reference, self.texts, self.labels, batch_size=batch_size,
                                progress=progress, memo=self.memo)

    def data_record(self) -> dict[str, Any]:
        return {"metric": "accuracy", "labels": [int(v) for v in self.labels]}


def bench_quality(data: Any, split: str, reference: Any, memo: Any) -> BenchQuality:
    """Bench's quality section of a classifier (:class:`BenchQuality`)."""
    return BenchQuality(data, split, reference, memo)


def report_quality(arts: Sequence[dict[str, Any]], ref: dict[str, Any]) -> list[str]:
    """The classifier's quality table: accuracy, the paired difference, macro-F1, agreement, McNemar."""
    out: list[str] = []
    ref_acc = ref["quality"]["accuracy"]
    rows = []
    for a in arts:
        q = a["quality"]
        diff = None if a["is_reference"] else round(100 * (q["accuracy"] - ref_acc), 1) + 0.0  # no "-0.0"
        drop = q.get("accuracy_drop")
        vs = "-" if diff is None else f"{diff:+.1f} pt" + (
            f" [{-100 * drop['high']:+.1f}, {-100 * drop['low']:+.1f}]" if drop else "")
        rows.append([f"`{a['name']}`" + (" (reference)" if a["is_reference"] else ""), a["kind"],
                     fmt(q["accuracy"], pct=True) + ci_pct(q.get("accuracy_ci")), vs,
                     "-" if q.get("detectable_drop") is None else f"{100 * q['detectable_drop']:.1f} pt",
                     fmt(q.get("macro_f1"), pct=True), fmt(q.get("agreement"), pct=True) + ci_pct(q.get("agreement_ci")),
                     "-" if q.get("mcnemar_p") is None else f"{q['mcnemar_p']:.3g}"])
    out += table(["artifact", "kind", "accuracy [95%]", "vs reference [95%, paired]", "detectable", "macro-F1",
                  "agreement [95%]", "McNemar p"], rows)
    out += ["", "Intervals: accuracy and agreement Clopper-Pearson; the difference with the reference a paired "
            "bootstrap over the same examples. Detectable: the smallest true accuracy difference this test set "
            "finds with 80% power. McNemar p: exact paired test of the accuracy difference; above 0.05 the difference "
            "may well be chance."]
    return out


# ----------------------------------------------------------------------------- gate


def gate_rules() -> dict[str, str]:
    """The gate's quality rules on a classifier's results: the accuracy rules and agreement of the argmax."""
    return dict(GATE_RULES)


def gate_refusal(rule: str) -> str:
    """Why a quality rule of another task does not gate a classifier's results, and which to use."""
    return (f"rule {rule} gates {GATES[rule]}, but these results are a sentence classifier's (accuracy): use max_accuracy_drop / max_accuracy_regression in the "
            "rules file.")


def gate_records() -> None:
    """None: the gate's accuracy rules read a classifier's per-example ``predictions`` against ``$.data.labels``."""
    return None


def check_results_data(doc: dict[str, Any], version: int, path: Path) -> dict[str, Any]:
    """The labels a classifier's ``results.json`` pairs its predictions on (``$.data.labels``; none in version 1)."""
    if version < 2:
        return {"labels": []}
    labels = require(require(doc, "data", (dict,), "$", path), "labels", (list,), "$.data", path)
    if not labels or not all(isinstance(v, int) and not isinstance(v, bool) for v in labels):
        raise GateInputError(f"{path}: $.data.labels should be a non-empty list of whole numbers. The file was "
                             "edited or damaged; run the benchmark again.")
    return {"labels": labels}


def check_results_quality(quality: dict[str, Any], facts: dict[str, Any], version: int, where: str,
                          path: Path) -> None:
    """A classifier's per-example predictions (version 2): one whole number per label of ``$.data.labels``."""
    if version < 2:
        return
    labels = facts["labels"]
    predictions = require(quality, "predictions", (list,), where, path)
    if len(predictions) != len(labels) or not all(isinstance(p, int) and not isinstance(p, bool)
                                                   for p in predictions):
        raise GateInputError(f"{path}: {where}.predictions should be {len(labels)} whole numbers (one "
                             "per example of $.data.labels). The file was edited or damaged; run the benchmark "
                             "again.")
