"""The ``scoring`` aspect of a sentence encoder (:mod:`compress.tasks.protocol.scoring`).

Here, as for every task's quality in quantize, optimize, bench and the gate, a metric is a fraction (STS Spearman
0.85; tables show it x100, the scale of the teacher's and distill's records, :func:`.metrics.sts_scores`), so a
budget reads as everywhere: ``--max-accuracy-drop 0.005`` is half a point of Spearman.

**One split** (quantize, optimize: :class:`EncoderScorer`): the split's scored pairs, each side embedded alone
through ``Predictor.encode``, the pairs' cosines against the gold scores: STS Spearman, the primary metric.
A candidate (an INT8 copy) is compared with the model it replaces on the vectors themselves: ``agreement`` is the
mean cosine between the two models' vectors of the same text (the issue's "INT8 checked on the vectors"), and the
record adds the lowest such cosine and, with more than ten texts, neighbour recall@10 of the candidate against the
reference. Text without scores cannot be scored this way (no Spearman to budget): quantize needs pairs here.

**Bench** (:class:`BenchQuality`): every artifact embeds the split's texts (the pairs' sentences, or the held-out
texts of unlabelled data); each record holds the STS Spearman and Pearson (pairs), the paired bootstrap interval
of the Spearman drop against the reference, neighbour recall@10 against the reference with its interval and the
per-text recalls (what a gate rule pairs two artifacts on: :func:`.metrics.recall_difference_interval`), and the
cosine agreement where the widths match. The report shows them in one table.

**Gate**: ``min_neighbour_recall`` (the mean of the per-text recalls, its interval over texts) and
``max_spearman_drop`` (the paired bootstrap over pairs, decided as the F1 drops are: :mod:`benchmarks.f1_rules`),
through :func:`gate_records`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from compress.core.errors import CompressError
from compress.stages.quality import Scorer
from compress.tasks.sentence_embedding.metrics import (DEFAULT_K, neighbour_recall, neighbour_recalls, spearman,
                                                       spearman_drop_interval, sts_scores)
from compress.tasks.sentence_embedding.vectors import row_cosines


class EncoderScorer(Scorer):
    """A split of scored pairs: both sides embedded, Spearman of the cosines; agreement is vector cosine."""

    def read(self, data: Any, split: str) -> None:
        if not hasattr(data, "scores"):
            raise CompressError(f"{data.source}: text without similarity scores; scoring a sentence encoder on one "
                                "split needs scored sentence pairs (sentence1, sentence2, score: stsb-captions or "
                                "your own). Give --data with pairs.")
        self.inputs = list(data.texts(split))
        self.gold = np.asarray(data.scores(split), dtype=np.float64)

    def predict(self, predictor: Any, batch_size: int = 32) -> tuple[np.ndarray, np.ndarray]:
        """The vectors of the pairs' first and second sentences, ``(a, b)``, each ``(n, dim)``."""
        n = len(self.inputs)
        vectors = predictor.encode([a for a, _ in self.inputs] + [b for _, b in self.inputs], batch_size=batch_size)
        return vectors[:n], vectors[n:]

    def metrics(self, predictions: Any) -> dict[str, Any]:
        a, b = predictions
        return _fractions(sts_scores(a, b, self.gold))

    def agreement(self, predictions: Any, reference: Any) -> float:
        """The mean cosine between the candidate's and the reference's vector of each text (1: the same vectors)."""
        return float(_cosines(predictions, reference).mean())

    def compare_more(self, predictions: Any, reference: Any, ref: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
        """The lowest vector cosine to the reference, Pearson beside Spearman, and neighbour recall@10."""
        out: dict[str, Any] = {"min_cosine": float(_cosines(predictions, reference).min()), "pearson": got["pearson"]}
        texts, theirs = np.concatenate(predictions), np.concatenate(reference)
        if len(texts) > DEFAULT_K:
            out["neighbour_recall"] = neighbour_recall(texts, theirs, DEFAULT_K)
        return out


def _fractions(scored: dict[str, Any]) -> dict[str, Any]:
    """:func:`.metrics.sts_scores`' x100 correlations as fractions, the scale of every task's quality records."""
    return {k: (v / 100.0 if k in ("spearman", "pearson") else v) for k, v in scored.items()}


def _cosines(predictions: Any, reference: Any) -> np.ndarray:
    ours, theirs = np.concatenate(predictions), np.concatenate(reference)
    if ours.shape != theirs.shape:
        raise CompressError(f"vectors of width {ours.shape[-1]} against a reference of width {theirs.shape[-1]}: a "
                            "compressed copy is compared with the model it was made from, which has its width.")
    return row_cosines(ours, theirs)


def split_scorer(data: Any, split: str = "validation") -> EncoderScorer:
    """The scorer of one split of scored pairs (:class:`EncoderScorer`)."""
    return EncoderScorer(data, split)


def who() -> str:
    """Who a sentence encoder's results belong to, in messages."""
    return "a sentence encoder"


def labels_per_text() -> bool:
    """An encoder answers a vector, not a label: ``bench --load-clients`` and ``--traffic-file`` do not apply."""
    return False


# ----------------------------------------------------------------------------- bench


class BenchQuality:
    """Bench's quality section of a sentence encoder on ``split``: STS on pairs, neighbour recall on any texts."""

    def __init__(self, data: Any, split: str, reference: Any, memo: Any):
        if split not in data.splits:
            held = "" if hasattr(data, "scores") else " (text alone: its held-out texts are --split validation)"
            raise CompressError(f"{data.source} has no {split!r} split (it has {', '.join(data.splits)}){held}.")
        self.gold = np.asarray(data.scores(split), dtype=np.float64) if hasattr(data, "scores") else None
        if self.gold is not None:
            pairs = data.texts(split)
            self.texts = list(dict.fromkeys(t for pair in pairs for t in pair))
            where = {t: i for i, t in enumerate(self.texts)}
            self.sides = (np.array([where[a] for a, _ in pairs]), np.array([where[b] for _, b in pairs]))
        else:
            self.texts = list(data.splits[split])
        if len(self.texts) <= DEFAULT_K:
            raise CompressError(f"{data.source}: the {split} split holds {len(self.texts)} texts; neighbour recall@"
                                f"{DEFAULT_K} needs more than {DEFAULT_K}.")

    def score(self, predictors: Mapping[str, Any], reference: str, batch_size: int | Mapping[str, int] = 32,
              progress: bool = True) -> dict[str, dict[str, Any]]:
        sizes = batch_size if isinstance(batch_size, Mapping) else {}
        vectors = {name: p.encode(self.texts, batch_size=sizes.get(name, 32) if sizes else batch_size)
                   for name, p in predictors.items()}
        ref = vectors[reference] if reference in vectors else None
        return {name: self._record(v, ref, name == reference) for name, v in vectors.items()}

    def _cosines(self, v: np.ndarray) -> np.ndarray:
        return row_cosines(v[self.sides[0]], v[self.sides[1]])

    def _record(self, v: np.ndarray, ref: np.ndarray | None, is_reference: bool) -> dict[str, Any]:
        from compress.core.stats import mean_interval

        out: dict[str, Any] = {"n_texts": len(self.texts)}
        if self.gold is not None:
            out.update(_fractions(sts_scores(v[self.sides[0]], v[self.sides[1]], self.gold)))
            out["n_pairs"] = out.pop("n")
            out["units"] = np.c_[self._cosines(v), self.gold].round(6).tolist()  # [cosine, gold] per pair: the gate's
            if ref is not None and not is_reference:
                out["spearman_drop"] = _fraction(spearman_drop_interval(self._cosines(ref), self._cosines(v),
                                                                        self.gold)).as_dict()
        if ref is not None:
            recalls = neighbour_recalls(v, ref, DEFAULT_K)
            out["neighbour_recall"] = float(recalls.mean())
            out["neighbour_recall_ci"] = mean_interval(recalls, unit="texts").as_dict()
            out["neighbour_recalls"] = [round(float(r), 4) for r in recalls]
            out["agreement"] = out["min_cosine"] = None  # vectors of another width: no common space to compare in
            if v.shape == ref.shape:
                cosines = row_cosines(v, ref)
                out["agreement"], out["min_cosine"] = float(cosines.mean()), float(cosines.min())
        return out

    def data_record(self) -> dict[str, Any]:
        return {"metric": "spearman" if self.gold is not None else "neighbour_recall", "texts": len(self.texts),
                "pairs": int(len(self.gold)) if self.gold is not None else 0, "k": DEFAULT_K}


def bench_quality(data: Any, split: str, reference: Any, memo: Any) -> BenchQuality:
    """Bench's quality section of a sentence encoder (:class:`BenchQuality`)."""
    return BenchQuality(data, split, reference, memo)


def _pct(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{100 * value:.{digits}f}%"


def report_quality(arts: Sequence[dict[str, Any]], ref: dict[str, Any]) -> list[str]:
    """The encoder's quality table: STS Spearman and its paired drop, neighbour recall@10, cosine agreement."""
    rows = []
    for a in arts:
        q = a["quality"]
        drop = q.get("spearman_drop")
        vs = "-" if drop is None else (f"{-100 * drop['estimate']:+.1f} [{-100 * drop['high']:+.1f}, "
                                       f"{-100 * drop['low']:+.1f}]")
        ci = q.get("neighbour_recall_ci")
        recall = _pct(q.get("neighbour_recall")) + (f" [{_pct(ci['low'])}, {_pct(ci['high'])}]" if ci else "")
        agreement = "-" if q.get("agreement") is None else f"{q['agreement']:.4f} (min {q['min_cosine']:.4f})"
        rows.append([f"`{a['name']}`" + (" (reference)" if a["is_reference"] else ""), a["kind"],
                     "-" if q.get("spearman") is None else f"{100 * q['spearman']:.1f}", vs, recall, agreement])
    header = ["artifact", "kind", "STS Spearman", "vs reference [95%, paired]", "neighbour recall@10 [95%]",
              "cosine to reference"]
    from benchmarks.report import table

    return table(header, rows) + ["", "Spearman x100 of the pairs' cosines against the gold scores; its difference with the reference "
                        "a paired bootstrap over pairs. Neighbour recall@10: the share of each text's 10 nearest "
                        "texts under the reference that the artifact also ranks among its 10 (interval: bootstrap over "
                        "texts). Cosine: between the artifact's and the reference's vector of the same text."]


# ----------------------------------------------------------------------------- gate


#: The gate's rules for a sentence encoder, by the decider of benchmarks.gate that judges each.
GATE_RULES = {"min_neighbour_recall": "unit_mean", "max_spearman_drop": "f1_drop"}


def gate_rules() -> dict[str, str]:
    """Neighbour recall@10 (its mean over held-out texts, :func:`benchmarks.gate._unit_mean`) and the STS Spearman
    drop (a paired bootstrap over pairs, decided as the F1 drops are: :mod:`benchmarks.f1_rules`)."""
    return dict(GATE_RULES)


def gate_refusal(rule: str) -> str:
    """Why a quality rule of another task does not gate a sentence encoder's results, and which to use."""
    return (f"rule {rule} gates another task's quality, but these results are a sentence encoder's (STS Spearman, "
            "neighbour recall@10): use min_neighbour_recall (0..1) or max_spearman_drop (0.01 = 1 point) in the rules "
            "file.")


class GateRecords:
    """How the gate reads an encoder's records. Neighbour recall: one recall per held-out text
    (``neighbour_recalls``). The Spearman drop: units are pairs, each ``[cosine, gold]`` (``units``), the "F1" the
    STS Spearman as a fraction."""

    metric_name = "Spearman"
    unit_name = "pairs"
    agreed = "cosine to the reference"
    mean_name = f"neighbour recall@{DEFAULT_K}"
    mean_unit = "texts"

    def mean_units(self, q: dict[str, Any]) -> np.ndarray:
        return np.asarray(q["neighbour_recalls"], dtype=np.float64)

    def units(self, q: dict[str, Any]) -> np.ndarray:
        if "units" not in q:
            raise CompressError("max_spearman_drop needs scored pairs: bench these artifacts with --data of sentence "
                                "pairs with scores, or gate min_neighbour_recall.")
        return np.asarray(q["units"], dtype=np.float64).reshape(-1, 2)

    def f1(self, q: dict[str, Any]) -> float:
        units = self.units(q)
        return spearman(units[:, 0], units[:, 1])

    def agreement_units(self, q: dict[str, Any]) -> Any:
        raise CompressError("min_agreement does not gate a sentence encoder's results; use min_neighbour_recall.")

    def drop(self, ref_units: np.ndarray, units: np.ndarray, confidence: float) -> Any:
        ref_units, units = np.asarray(ref_units), np.asarray(units)
        return _fraction(spearman_drop_interval(ref_units[:, 0], units[:, 0], units[:, 1], confidence=confidence))

    def drop_over_seeds(self, ref_q: dict[str, Any], member_qs: Sequence[dict[str, Any]], confidence: float) -> Any:
        """The reference's Spearman minus the members' mean Spearman, on the mean of the members' cosines."""
        ref = self.units(ref_q)
        mean = np.mean([self.units(q)[:, 0] for q in member_qs], axis=0)
        return _fraction(spearman_drop_interval(ref[:, 0], mean, ref[:, 1], confidence=confidence))


def _fraction(interval: Any) -> Any:
    """An interval of Spearman points (x100) as a fraction, the scale of the gate's limits (0.01 = 1 point)."""
    import dataclasses

    return dataclasses.replace(interval, estimate=interval.estimate / 100, low=interval.low / 100,
                               high=interval.high / 100)


def gate_records() -> GateRecords:
    """The records the gate's rules read (:class:`GateRecords`)."""
    return GateRecords()


def check_results_data(doc: dict[str, Any], version: int, path: Path) -> dict[str, Any]:
    """The counts an encoder's records are checked against: ``$.data.texts`` and ``$.data.pairs``."""
    from benchmarks.gate_results import require

    data = require(doc, "data", (dict,), "$", path)
    return {"texts": require(data, "texts", (int,), "$.data", path),
            "pairs": require(data, "pairs", (int,), "$.data", path)}


def check_results_quality(quality: dict[str, Any], facts: dict[str, Any], version: int, where: str,
                          path: Path) -> None:
    """One per-text recall per text of ``$.data.texts``, and a Spearman where the data had pairs."""
    from benchmarks.gate_results import require
    from benchmarks.gate_rules import GateInputError

    recalls = require(quality, "neighbour_recalls", (list,), where, path)
    if len(recalls) != facts["texts"] or not all(isinstance(r, (int, float)) and 0 <= r <= 1 for r in recalls):
        raise GateInputError(f"{path}: {where}.neighbour_recalls should be {facts['texts']} numbers from 0 to 1 (one "
                             "per text of $.data.texts). The file was edited or damaged; run the benchmark again.")
    if facts["pairs"]:
        require(quality, "spearman", (int, float), where, path)
        units = require(quality, "units", (list,), where, path)
        if len(units) != facts["pairs"]:
            raise GateInputError(f"{path}: {where}.units should be {facts['pairs']} [cosine, gold] pairs (one per pair "
                                 "of $.data.pairs). The file was edited or damaged; run the benchmark again.")
