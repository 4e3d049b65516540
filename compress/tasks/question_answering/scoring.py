"""The ``scoring`` aspect of extractive question answering (:mod:`compress.tasks.protocol.scoring`): a reader's quality.

**One split** (quantize, optimize: :class:`ReaderScorer`). The inputs are the split's ``(question, passage)``
pairs, the predictions the answer texts ``Predictor.predict`` decodes, the metric SQuAD's F1 (exact match
beside it), and the agreement the share of questions answered with the very same text as the reference.

**Bench** (:func:`evaluate_reading_quality`, the counterpart of :mod:`benchmarks.accuracy`). Every artifact
answers the split's questions through ``Predictor.predict`` (the passage in the windows the reader was trained
with, n-best decoding, the best span over all windows: the serving path) and is scored with the official SQuAD
v1.1 normalisation (:mod:`compress.tasks.question_answering.metrics`). What the gate's statistics need is kept
per question: F1 and exact match (a paired bootstrap over questions resamples both models' scores of the same
questions, :func:`compress.core.stats.mean_drop_interval`) and whether the answer is the reference's very text
(``same_answer``, what ``min_agreement`` reads).

**Gate** (:class:`QuestionRecords`): the F1 rules of :mod:`benchmarks.f1_rules`, with the question as the unit
resampled, F1 being a mean over questions (a seed group's mean by :func:`compress.core.stats.mean_over_seeds_interval`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from benchmarks.answers import answer_each
from benchmarks.gate_results import NUMBER, require
from benchmarks.gate_rules import GATES, GateInputError
from benchmarks.report import ci_pct, fmt, table
from compress.core.stats import mean_drop_interval, mean_interval, mean_over_seeds_interval, unpaired_mean_drop_interval
from compress.stages.quality import Scorer
from compress.tasks.question_answering.metrics import question_scores

#: The gate's quality rules on a reader's results, each with how it is decided (:data:`benchmarks.gate.DECIDERS`).
GATE_RULES = {"max_f1_drop": "f1_drop", "max_f1_regression": "f1_regression", "min_agreement": "unit_agreement",
              "max_regression": "f1_regression"}


class ReaderScorer(Scorer):
    """A question-answering split: ``(question, passage)`` pairs in, answer texts out, SQuAD F1."""

    def read(self, data: Any, split: str) -> None:
        self.inputs = data.texts(split)
        self.gold = data.gold_answers(split)

    def predict(self, predictor: Any, batch_size: int = 32) -> list[str]:
        """Answer texts, one string per question."""
        return [a["answer"] for a in predictor.predict(self.inputs, batch_size=batch_size)]

    def metrics(self, predictions: Any) -> dict[str, Any]:
        scored = self.task.score(predictions, self.gold)
        return {"f1": scored["f1"], "exact_match": scored["exact_match"]}

    def agreement(self, predictions: Any, reference: Any) -> float:
        """The share of questions answered with the reference's very text."""
        return float(np.mean([a == b for a, b in zip(predictions, reference)])) if len(predictions) else 1.0

    def compare_more(self, predictions: Any, reference: Any, ref: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
        return {"exact_match": got["exact_match"]}


def split_scorer(data: Any, split: str = "validation") -> ReaderScorer:
    """The scorer of one question-answering split (:class:`ReaderScorer`)."""
    return ReaderScorer(data, split)


def who() -> str:
    """Who a reader's results belong to, in messages."""
    return "a reader"


def labels_per_text() -> bool:
    """A reader's answer is a span of a passage, not one label per text."""
    return False


# ----------------------------------------------------------------------------- bench


def evaluate_reading_quality(predictors: Mapping[str, Any], reference: str, scorer: Any,
                             batch_size: int | Mapping[str, int] = 32, progress: bool = True,
                             memo: Any = None) -> dict[str, dict[str, Any]]:
    """``{name: quality}`` for every predictor (see the module docstring); the reference agrees with itself.
    ``batch_size``: one for all, or one per name; ``memo``: answers already made in this run
    (:class:`benchmarks.answers.Answers`)."""
    names = [reference] + [n for n in predictors if n != reference]
    answers = answer_each(predictors, reference, batch_size, lambda p, b: scorer.predict(p, batch_size=b), progress,
                          memo, check=scorer.check_model)
    per = {name: question_scores(answers[name], scorer.gold) for name in names}
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        f1, em = per[name]["f1"], per[name]["exact_match"]
        same = [int(a == b) for a, b in zip(answers[name], answers[reference])]
        against_ref = question_scores(answers[name], [[a] for a in answers[reference]])
        interval = mean_interval(f1)
        q: dict[str, Any] = {
            "metric": "f1", "f1": float(f1.mean()), "f1_ci": [interval.low, interval.high],
            "exact_match": float(em.mean()), "agreement": sum(same) / len(same) if same else 1.0,
            "reference_f1": float(against_ref["f1"].mean()), "n": scorer.n,
            "question_f1": [round(float(v), 6) for v in f1], "question_exact_match": [int(v) for v in em],
            "same_answer": same,
        }
        if name != reference:
            agree = mean_interval(same)
            q["agreement_ci"] = [agree.low, agree.high]
            q["f1_drop"] = mean_drop_interval(per[reference]["f1"], f1).as_dict()
            q["exact_match_drop"] = mean_drop_interval(per[reference]["exact_match"], em).as_dict()
        out[name] = q
    return {name: out[name] for name in predictors}


class BenchQuality:
    """Bench's quality section on a question-answering split: SQuAD F1 and exact match per question."""

    def __init__(self, data: Any, split: str, memo: Any):
        self.scorer = ReaderScorer(data, split)
        self.texts = self.scorer.inputs
        self.memo = memo

    def score(self, predictors: Mapping[str, Any], reference: str, batch_size: int | Mapping[str, int] = 32,
              progress: bool = True) -> dict[str, dict[str, Any]]:
        return evaluate_reading_quality(predictors, reference, self.scorer, batch_size=batch_size, progress=progress,
                                        memo=self.memo)

    def data_record(self) -> dict[str, Any]:
        return {"metric": "f1"}


def bench_quality(data: Any, split: str, reference: Any, memo: Any) -> BenchQuality:
    """Bench's quality section of a reader (:class:`BenchQuality`)."""
    return BenchQuality(data, split, memo)


def report_quality(arts: Sequence[dict[str, Any]], ref: dict[str, Any]) -> list[str]:
    """A reader's quality table: SQuAD F1 with its interval, the paired drop, exact match, answer agreement."""
    rows = []
    for a in arts:
        q = a["quality"]
        drop = q.get("f1_drop")
        vs = "-" if drop is None else (f"{-100 * drop['estimate']:+.1f} pt [{-100 * drop['high']:+.1f}, "
                                       f"{-100 * drop['low']:+.1f}]")
        rows.append([f"`{a['name']}`" + (" (reference)" if a["is_reference"] else ""), a["kind"],
                     fmt(q["f1"], pct=True) + ci_pct(q.get("f1_ci")), vs, fmt(q.get("exact_match"), pct=True),
                     fmt(q.get("reference_f1"), pct=True),
                     fmt(q.get("agreement"), pct=True) + ci_pct(q.get("agreement_ci"))])
    out = table(["artifact", "kind", "F1 [95%]", "vs reference [95%, paired]", "exact match",
                 "F1 against the reference", "same answer [95%]"], rows)
    return out + ["", "F1 and exact match: the official SQuAD v1.1 normalisation, best over each question's gold "
                  "answers, averaged over questions. Intervals: bootstrap over questions; the difference with the "
                  "reference paired over the same questions. Same answer: questions answered with the reference's "
                  "very text."]


# ----------------------------------------------------------------------------- gate


class QuestionRecords:
    """How the gate reads a reader's per-question records: ``question_f1`` (F1 against the gold answers) and
    ``same_answer`` (1 where the answer is the reference's very text)."""

    metric_name = "F1"
    unit_name = "questions"
    agreed = "of answers identical"

    def units(self, q: dict[str, Any]) -> Any:
        return q["question_f1"]

    def f1(self, q: dict[str, Any]) -> float:
        return float(q["f1"])

    def agreement_units(self, q: dict[str, Any]) -> Any:
        return [[int(v), 1] for v in q["same_answer"]]

    def drop(self, reference: Any, artifact: Any, confidence: float) -> Any:
        """The paired interval of ``F1(reference) - F1(artifact)`` from their per-question F1."""
        return mean_drop_interval(reference, artifact, confidence)

    def unpaired_drop(self, old: Any, new: Any, confidence: float) -> Any:
        return unpaired_mean_drop_interval(old, new, confidence)

    def drop_over_seeds(self, reference: dict[str, Any], members: list[dict[str, Any]], confidence: float) -> Any:
        return mean_over_seeds_interval(np.asarray([np.asarray(reference["question_f1"]) - np.asarray(m["question_f1"])
                                                    for m in members]), confidence)


def gate_rules() -> dict[str, str]:
    """The gate's quality rules on a reader's results: the F1 rules and ``min_agreement`` over answers."""
    return dict(GATE_RULES)


def gate_refusal(rule: str) -> str:
    """Why a quality rule of another task does not gate a reader's results, and which to use."""
    return (f"rule {rule} gates {GATES[rule]}, but these results are a reader's (SQuAD F1): use max_f1_drop / max_f1_regression in the "
            "rules file.")


def gate_records() -> QuestionRecords:
    return QuestionRecords()


def check_results_data(doc: dict[str, Any], version: int, path: Path) -> dict[str, Any]:
    """The question count a reader's ``results.json`` declares (``$.data.n``)."""
    return {"n": require(doc["data"], "n", (int,), "$.data", path)}


def check_results_quality(quality: dict[str, Any], facts: dict[str, Any], version: int, where: str,
                          path: Path) -> None:
    """A reader's per-question F1 (``n`` numbers in [0, 1]) and same-answer flags (``n`` of 0 or 1)."""
    n = facts["n"]
    scores = require(quality, "question_f1", (list,), where, path)
    same = require(quality, "same_answer", (list,), where, path)
    ok = (len(scores) == n and all(isinstance(v, NUMBER) and not isinstance(v, bool) and 0 <= v <= 1 for v in scores)
          and len(same) == n and all(v in (0, 1) and not isinstance(v, bool) for v in same))
    if not ok:
        raise GateInputError(f"{path}: {where}.question_f1 should be {n} scores from 0 to 1 and {where}.same_answer {n} "
                             "flags (0 or 1), one per question. The file was edited or damaged; run the benchmark "
                             "again.")
