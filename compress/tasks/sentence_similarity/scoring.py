"""The ``scoring`` aspect of a cross-encoder (:mod:`compress.tasks.protocol.scoring`): how well a model's scores rank
the pairs as the gold scores do.

Here, as for every task's quality in quantize, optimize, bench and the gate, a metric is a fraction (Spearman 0.85;
tables show it as 85.0%, the "x100" of the teacher's and distill's records, :func:`compress.tasks.sentence_similarity.score`),
so a budget reads as everywhere: ``--max-accuracy-drop 0.005`` is half a point of Spearman.

**One split** (quantize, optimize: :class:`SimilarityScorer`): the pairs' scores through ``Predictor.predict``,
Spearman (the primary metric) and Pearson against the gold scores. Agreement with the reference is the Spearman of
the candidate's scores against the reference's (1: the same ranking).

**Bench** (:class:`BenchQuality`): the same per artifact, with each pair's ``[score, gold]`` (what the gate pairs
on) and the paired bootstrap interval of the reference's Spearman minus the artifact's, resampling pairs.

**Gate**: ``max_spearman_drop`` is the Spearman drop, decided on that paired interval as the F1 drops are
(:mod:`benchmarks.f1_rules`, through :func:`gate_records`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from compress.core.errors import CompressError
from compress.stages.quality import Scorer
from compress.tasks.sentence_similarity import TASK, spearman

#: How many bootstrap resamples of the pairs make an interval, and their seed (the gate's: compress.core.stats).
RESAMPLES, SEED = 2000, 20240515
#: The gate's quality rules on a cross-encoder's results, each with its decider (:data:`benchmarks.gate.DECIDERS`).
GATE_RULES = {"max_spearman_drop": "f1_drop"}


class SimilarityScorer(Scorer):
    """A similarity split: pairs in, scores out, Spearman x100."""

    def read(self, data: Any, split: str) -> None:
        self.inputs = list(data.texts(split))
        self.gold = data.scores(split)

    def check_outputs(self, predictor: Any, where: str) -> None:
        if predictor.num_labels != 1:
            raise CompressError(f"{where} has {predictor.num_labels} outputs; a sentence-similarity model has one "
                                "(the score). Give the cross-encoder trained on this data.")

    def predict(self, predictor: Any, batch_size: int = 32) -> np.ndarray:
        """Each pair's score."""
        return np.asarray(predictor.predict(self.inputs, batch_size=batch_size), dtype=np.float64)

    def metrics(self, predictions: Any) -> dict[str, Any]:
        return _fractions(TASK.score(predictions, self.gold))

    def agreement(self, predictions: Any, reference: Any) -> float:
        """Spearman of the scores against the reference's, a fraction (1.0: the same order of the pairs)."""
        return float(spearman(predictions, reference))

    def compare_more(self, predictions: Any, reference: Any, ref: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
        diff = np.asarray(predictions, dtype=np.float64) - np.asarray(reference, dtype=np.float64)
        return {"pearson": got["pearson"], "mse_to_reference": float(np.mean(diff ** 2))}


def _fractions(scored: dict[str, Any]) -> dict[str, Any]:
    """The task's x100 correlations (:func:`compress.tasks.sentence_similarity.score`) as fractions."""
    return {k: (v / 100.0 if k != "n" else v) for k, v in scored.items()}


def split_scorer(data: Any, split: str = "validation") -> SimilarityScorer:
    """The scorer of one similarity split (:class:`SimilarityScorer`)."""
    return SimilarityScorer(data, split)


def who() -> str:
    """Who a cross-encoder's results belong to, in messages."""
    return "a sentence-similarity model (a cross-encoder)"


def labels_per_text() -> bool:
    """A cross-encoder answers a score per pair, not a label per text: the load and traffic measurements refuse it."""
    return False


# ----------------------------------------------------------------------------- intervals


def _bootstrap(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, n, size=(resamples, n))


def spearman_drop_interval(gold: Sequence[float], reference: Sequence[float], scores: Sequence[float],
                           confidence: float = 0.95) -> Any:
    """Reference Spearman minus artifact Spearman (fractions), with its paired percentile bootstrap interval over the
    pairs (the same resampled pairs for both models)."""
    from compress.core.stats import Interval

    gold, reference, scores = (np.asarray(x, dtype=np.float64) for x in (gold, reference, scores))
    estimate = spearman(reference, gold) - spearman(scores, gold)
    drops = np.array([spearman(reference[i], gold[i]) - spearman(scores[i], gold[i]) for i in _bootstrap(len(gold))])
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(drops, [tail, 100 - tail])
    return Interval(float(estimate), float(low), float(high), confidence, "paired percentile bootstrap over pairs")


def _unpaired_interval(old: np.ndarray, new: np.ndarray, confidence: float) -> Any:
    from compress.core.stats import Interval

    def replicates(units: np.ndarray, seed: int) -> np.ndarray:
        return np.array([spearman(units[i, 0], units[i, 1]) for i in _bootstrap(len(units), seed=seed)])

    estimate = spearman(old[:, 0], old[:, 1]) - spearman(new[:, 0], new[:, 1])
    drops = replicates(old, SEED) - replicates(new, SEED + 1)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(drops, [tail, 100 - tail])
    return Interval(float(estimate), float(low), float(high), confidence, "two independent bootstraps over pairs")


# ----------------------------------------------------------------------------- bench


class BenchQuality:
    """Bench's quality section on a similarity split: Spearman, Pearson, and each pair's ``[score, gold]``."""

    def __init__(self, data: Any, split: str, reference: Any, memo: Any):
        if split not in data.splits or not len(data.splits[split]):
            raise CompressError(f"{data.source} has no {split!r} pairs to score (splits: {', '.join(data.splits)}).")
        self.texts = data.texts(split)
        self.gold = data.scores(split)
        self.memo = memo

    def score(self, predictors: Mapping[str, Any], reference: str, batch_size: int | Mapping[str, int] = 32,
              progress: bool = True) -> dict[str, dict[str, Any]]:
        from benchmarks.answers import answer_each

        scores = answer_each(predictors, reference, batch_size,
                             lambda p, b: np.asarray(p.predict(self.texts, batch_size=b), dtype=np.float64),
                             progress, self.memo)
        out = {}
        for name in predictors:
            record = _fractions(TASK.score(scores[name], self.gold, reference=scores[reference]))
            record["agreement"] = record["reference_spearman"]
            record["units"] = [[float(s), float(g)] for s, g in zip(scores[name], self.gold)]
            if name != reference:
                record["spearman_drop"] = spearman_drop_interval(self.gold, scores[reference], scores[name]).as_dict()
            out[name] = record
        return out

    def data_record(self) -> dict[str, Any]:
        return {"metric": "spearman", "scores": [float(g) for g in self.gold]}


def bench_quality(data: Any, split: str, reference: Any, memo: Any) -> BenchQuality:
    """Bench's quality section of a cross-encoder (:class:`BenchQuality`)."""
    return BenchQuality(data, split, reference, memo)


def report_quality(arts: Sequence[dict[str, Any]], ref: dict[str, Any]) -> list[str]:
    """The cross-encoder's quality table: Spearman, its paired difference with the reference, Pearson, and the
    Spearman of each artifact's scores against the reference's."""
    head = ["artifact", "kind", "Spearman", "vs reference [95%, paired]", "Pearson", "Spearman to reference"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for a in arts:
        q = a["quality"]
        drop = q.get("spearman_drop")
        vs = "-" if a["is_reference"] or not drop else (
            f"{-100 * drop['estimate']:+.2f} [{-100 * drop['high']:+.2f}, {-100 * drop['low']:+.2f}]")
        cells = [f"`{a['name']}`" + (" (reference)" if a["is_reference"] else ""), str(a.get("kind", "-")),
                 f"{100 * q['spearman']:.2f}", vs, f"{100 * q['pearson']:.2f}",
                 "-" if a["is_reference"] else f"{100 * q.get('reference_spearman', float('nan')):.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + ["", "Spearman and Pearson x100 of the predicted against the gold scores. The difference with the "
                        "reference: a paired bootstrap over the same pairs."]


# ----------------------------------------------------------------------------- gate


def gate_rules() -> dict[str, str]:
    """The Spearman drop, decided as the F1 drops are (:mod:`benchmarks.f1_rules`) on this task's records."""
    return dict(GATE_RULES)


def gate_refusal(rule: str) -> str:
    """Why a quality rule of another task does not gate a cross-encoder's results, and which to use."""
    return (f"rule {rule} gates another task's quality, but these results are a sentence-similarity model's "
            "(Spearman): use max_spearman_drop (the Spearman drop, 0.01 = 1 point) in the rules file.")


class GateRecords:
    """How :mod:`benchmarks.f1_rules` reads a cross-encoder's records: its units are pairs, each ``[score, gold]``;
    its "F1" is Spearman (a fraction)."""

    metric_name = "Spearman"
    unit_name = "pairs"
    agreed = "Spearman to the reference"

    def units(self, q: dict[str, Any]) -> np.ndarray:
        return np.asarray(q["units"], dtype=np.float64).reshape(-1, 2)

    def f1(self, q: dict[str, Any]) -> float:
        return float(q["spearman"])

    def agreement_units(self, q: dict[str, Any]) -> Any:
        raise CompressError("min_agreement does not gate a sentence-similarity model's results; use "
                            "max_spearman_drop.")

    def drop(self, ref_units: np.ndarray, units: np.ndarray, confidence: float) -> Any:
        ref_units, units = np.asarray(ref_units), np.asarray(units)
        return spearman_drop_interval(units[:, 1], ref_units[:, 0], units[:, 0], confidence)

    def unpaired_drop(self, old: np.ndarray, new: np.ndarray, confidence: float) -> Any:
        return _unpaired_interval(np.asarray(old), np.asarray(new), confidence)

    def drop_over_seeds(self, ref_q: dict[str, Any], member_qs: Sequence[dict[str, Any]], confidence: float) -> Any:
        """The reference's Spearman minus the members' mean, resampling pairs (the seeds' spread adds to it)."""
        from compress.core.stats import Interval

        ref = self.units(ref_q)
        members = [self.units(q) for q in member_qs]
        gold = ref[:, 1]
        estimate = spearman(ref[:, 0], gold) - float(np.mean([spearman(m[:, 0], gold) for m in members]))
        drops = np.array([spearman(ref[i, 0], gold[i]) - np.mean([spearman(m[i, 0], gold[i]) for m in members])
                          for i in _bootstrap(len(gold))])
        spread = float(np.std([spearman(m[:, 0], gold) for m in members], ddof=1)) if len(members) > 1 else 0.0
        tail = 100 * (1 - confidence) / 2
        low, high = np.percentile(drops, [tail, 100 - tail])
        return Interval(float(estimate), float(low) - spread, float(high) + spread, confidence,
                        "paired bootstrap over pairs, widened by the seeds' spread")


def gate_records() -> GateRecords:
    """The records the Spearman drop is decided on (:class:`GateRecords`)."""
    return GateRecords()


def check_results_data(doc: dict[str, Any], version: int, path: Path) -> dict[str, Any]:
    """The gold scores a cross-encoder's ``results.json`` pairs its records on (``$.data.scores``)."""
    from benchmarks.gate_results import require
    from benchmarks.gate_rules import GateInputError

    scores = require(require(doc, "data", (dict,), "$", path), "scores", (list,), "$.data", path)
    if not scores or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in scores):
        raise GateInputError(f"{path}: $.data.scores should be a non-empty list of numbers. The file was edited or "
                             "damaged; run the benchmark again.")
    return {"scores": scores}


def check_results_quality(quality: dict[str, Any], facts: dict[str, Any], version: int, where: str,
                          path: Path) -> None:
    """One artifact's ``spearman`` and its ``units``: one ``[score, gold]`` per pair of ``$.data.scores``."""
    from benchmarks.gate_results import require
    from benchmarks.gate_rules import GateInputError

    require(quality, "spearman", (int, float), where, path)
    units = require(quality, "units", (list,), where, path)
    if len(units) != len(facts["scores"]) or not all(
            isinstance(u, list) and len(u) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                        for v in u) for u in units):
        raise GateInputError(f"{path}: {where}.units should be {len(facts['scores'])} [score, gold] pairs of numbers "
                             "(one per pair of $.data.scores). The file was edited or damaged; run the benchmark "
                             "again.")
