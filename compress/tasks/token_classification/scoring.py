"""The ``scoring`` aspect of token classification (:mod:`compress.tasks.protocol.scoring`): a tagger's quality.

**One split** (quantize, optimize: :class:`TaggerScorer`). The split's words are joined by single spaces and tagged
by ``Predictor.predict`` (whitespace words, first sub-token;
:meth:`compress.tasks.token_classification.data.TokenTaskData.texts`), so each gold word is one predicted word.
Overall F1 can hold while one entity type collapses (INT8 saturating the logits of a rare tag: onnxruntime issues
report a tagger at F1 0.8 falling to 0.05), so two per-type rules judge each type with at least
:data:`compress.config.MIN_TYPE_SUPPORT` gold entities: a candidate fails when the type keeps less than
:data:`COLLAPSE_FRACTION` of the reference's F1 (it *collapsed*), or loses more than the per-type budget
(``max_type_f1_drop``, :data:`compress.config.MAX_TYPE_F1_DROP` by default). Both count only a loss the split tells
from noise: the lower bound of the paired 95% bootstrap interval of the type's F1 drop over sentences is above zero.
One entity moves a type's F1 by ``2 / (predicted + gold)``, 3 to 6 points for a type of 30 gold entities, so a
one-entity change alone is never read as a loss.

**Bench** (:func:`evaluate_tagging_quality`, the counterpart of :mod:`benchmarks.accuracy`). Every artifact tags
the split's sentences through the serving path. Entities are scored with strict span-and-type matching
(:mod:`compress.tasks.token_classification.metrics`, equal to seqeval's default). What the gate's statistics need
is kept per sentence: the ``(correct, predicted, gold)`` entity counts per type (a paired bootstrap over
sentences resamples both models' counts of the same sentences, :func:`compress.core.stats.f1_drop_interval`; per
type, :func:`compress.core.stats.type_f1_drop_intervals`) and, against the reference, how many of each sentence's
words got the reference's tag.

**Gate** (:class:`EntityRecords`): the F1 rules of :mod:`benchmarks.f1_rules`, with the sentence as the unit
resampled (a sentence's entities and words are not independent of one another).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from benchmarks.answers import answer_each
from benchmarks.gate_results import require
from benchmarks.gate_rules import GATES, GateInputError
from benchmarks.report import ci_pct, fmt, table
from compress.core.stats import (f1_drop_interval, f1_interval, mean_f1_drop_over_seeds_interval, ratio_interval,
                              type_f1_drop_intervals, unpaired_f1_drop_interval)
from compress.config import MIN_TYPE_SUPPORT
from compress.core.errors import CompressError
from compress.stages.quality import Scorer
from compress.tasks.token_classification.metrics import (scores_from_counts, sentence_counts, split_tag,
                                                         token_agreement)

#: A type collapses when its F1 falls below this share of the reference model's F1 on it.
COLLAPSE_FRACTION = 0.5
#: The gate's quality rules on a tagger's results, each with how it is decided (:data:`benchmarks.gate.DECIDERS`).
GATE_RULES = {"max_f1_drop": "f1_drop", "max_f1_regression": "f1_regression", "min_agreement": "unit_agreement",
              "max_regression": "f1_regression"}


class TaggerScorer(Scorer):
    """A tagging split: space-joined sentences in, word tags out, entity F1 and the per-type rules."""

    def read(self, data: Any, split: str) -> None:
        self.label_names = list(data.label_names)
        self.inputs = data.texts(split)
        self.gold = data.tags(split)

    def check_outputs(self, predictor: Any, where: str) -> None:
        # tags are matched by name: a tagger's own label order (CoNLL's is not sorted) scores the same, and a
        # split without some tag (a test split with no I-MISC) is fine; only a tag the model never predicts is not
        missing = [tag for tag in self.label_names if tag not in set(predictor.label_names)]
        if missing:
            raise CompressError(f"{self.source} has the tag(s) {', '.join(missing)} that {where} does not predict (its "
                                f"tags: {', '.join(predictor.label_names)}). Give the tagging data the model was "
                                "trained on.")

    def predict(self, predictor: Any, batch_size: int = 32) -> list[list[str]]:
        """Word tags, one list per sentence."""
        tags = [r["word_tags"] for r in predictor.predict(self.inputs, batch_size=batch_size, word_tags=True)]
        for i, (got, gold) in enumerate(zip(tags, self.gold)):
            if len(got) != len(gold):  # word_texts makes this impossible; a guard against a changed word split
                raise CompressError(f"{self.source}: sentence {i} has {len(gold)} words but {len(got)} were tagged.")
        return tags

    def metrics(self, predictions: Any) -> dict[str, Any]:
        scored = self.task.score(predictions, self.gold)
        return {k: scored[k] for k in ("entity_f1", "entity_precision", "entity_recall", "per_type_f1",
                                       "token_accuracy")} | {"support": {t: s["support"] for t, s in
                                                                         scored["per_type"].items()}}

    def agreement(self, predictions: Any, reference: Any) -> float:
        """The share of words tagged as the reference tagged them."""
        return token_agreement(predictions, reference)

    def compare_more(self, predictions: Any, reference: Any, ref: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
        """The per-type F1, its change against the reference and the collapsed types."""
        out: dict[str, Any] = {"per_type_f1": got["per_type_f1"]}
        out["per_type_f1_drop"] = {t: round(f - got["per_type_f1"].get(t, 0.0), 6)
                                   for t, f in ref["per_type_f1"].items()}
        out["per_type_support"] = dict(ref["support"])
        out["per_type_f1_drop_interval"] = self.type_drop_intervals(predictions, reference, ref["support"])
        # A type the reference barely finds (2 or 3 of 40 entities) "falls under half" by losing one or two;
        # like the per-type budget, a collapse counts only where its loss is above zero at 95%.
        out["collapsed_types"] = {t: pair for t, pair in collapsed_types(
            ref["per_type_f1"], got["per_type_f1"], ref["support"]).items()
            if out["per_type_f1_drop_interval"][t][0] > 0}
        return out

    def type_drop_intervals(self, predictions: Any, reference: Any, support: dict[str, int]) -> dict[str, list[float]]:
        """``{type: [low, high]}``: the paired 95% bootstrap interval over sentences of the F1 drop (reference
        minus candidate) of each type with gold entities (``support``); a type never gold is not judged."""
        types = sorted({split_tag(tag)[1] for tag in self.label_names} - {""})  # every type a model can predict
        _, ref_counts = sentence_counts(self.gold, reference, types=types)
        _, got_counts = sentence_counts(self.gold, predictions, types=types)
        return {t: [round(i.low, 6), round(i.high, 6)]
                for t, i in type_f1_drop_intervals(types, ref_counts, got_counts).items() if support.get(t, 0) > 0}

    def type_failures(self, record: dict[str, Any], max_type_drop: float | None) -> list[str]:
        """Each collapsed type, and (``max_type_drop`` not ``None``) each type of at least
        :data:`compress.config.MIN_TYPE_SUPPORT` gold entities whose drop is over it with its interval above zero."""
        collapsed = record.get("collapsed_types") or {}
        reasons = [f"type {t} collapsed: F1 {before:.3f} -> {after:.3f}" for t, (before, after) in collapsed.items()]
        if max_type_drop is not None:
            reasons += [f"type {t} lost F1 {drop:.3f} [{low:.3f}, {high:.3f}] > budget {max_type_drop:g}"
                        for t, (drop, low, high) in types_over_budget(record, max_type_drop).items()
                        if t not in collapsed]
        return reasons

    def budgets(self, max_type_drop: float | None) -> dict[str, Any]:
        return {"max_type_f1_drop": max_type_drop}


def types_over_budget(record: dict[str, Any], max_type_drop: float,
                      min_support: int = MIN_TYPE_SUPPORT) -> dict[str, tuple[float, float, float]]:
    """``{type: (drop, low, high)}`` for each type of ``record`` (:meth:`TaggerScorer.compare`) with at least
    ``min_support`` gold entities whose F1 drop is over ``max_type_drop`` and whose 95% interval lies above
    zero (a loss the split tells from noise)."""
    out = {}
    support = record.get("per_type_support") or {}
    for t, (low, high) in (record.get("per_type_f1_drop_interval") or {}).items():
        drop = record["per_type_f1_drop"].get(t, 0.0)
        if support.get(t, 0) >= min_support and drop > max_type_drop and low > 0:
            out[t] = (drop, low, high)
    return out


def collapsed_types(reference: dict[str, float], candidate: dict[str, float], support: dict[str, int],
                    fraction: float = COLLAPSE_FRACTION, min_support: int = MIN_TYPE_SUPPORT) -> dict[str, list[float]]:
    """``{type: [reference F1, candidate F1]}`` for each type with ``min_support`` gold entities or more
    whose F1 fell below ``fraction`` of the reference's."""
    out = {}
    for t, before in reference.items():
        after = candidate.get(t, 0.0)
        if support.get(t, 0) >= min_support and before > 0 and after < fraction * before:
            out[t] = [before, after]
    return out


def split_scorer(data: Any, split: str = "validation") -> TaggerScorer:
    """The scorer of one tagging split (:class:`TaggerScorer`)."""
    return TaggerScorer(data, split)


def who() -> str:
    """Who a tagger's results belong to, in messages."""
    return "a tagger"


def labels_per_text() -> bool:
    """A tagger's answer is a tag per word, not one label per text."""
    return False


# ----------------------------------------------------------------------------- bench


def evaluate_tagging_quality(predictors: Mapping[str, Any], reference: str, scorer: Any, types: list[str],
                             batch_size: int | Mapping[str, int] = 32, progress: bool = True,
                             memo: Any = None) -> dict[str, dict[str, Any]]:
    """``{name: quality}`` for every predictor (see the module docstring); the reference agrees with itself.
    ``batch_size``: one for all, or one per name; ``memo``: answers already made in this run
    (:class:`benchmarks.answers.Answers`)."""
    names = [reference] + [n for n in predictors if n != reference]
    tags = answer_each(predictors, reference, batch_size, lambda p, b: scorer.predict(p, batch_size=b), progress, memo,
                       check=scorer.check_model)
    counts = {name: sentence_counts(scorer.gold, tags[name], types)[1] for name in names}
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        scores = scores_from_counts(types, counts[name])
        same = [[sum(a == b for a, b in zip(mine, ref)), len(ref)] for mine, ref in zip(tags[name], tags[reference])]
        f1 = f1_interval(counts[name])
        q: dict[str, Any] = {
            "metric": "entity_f1", "entity_f1": scores["f1"], "entity_f1_ci": [f1.low, f1.high],
            "entity_precision": scores["precision"], "entity_recall": scores["recall"],
            "per_type_f1": {t: s["f1"] for t, s in scores["per_type"].items()},
            "per_type_support": {t: s["support"] for t, s in scores["per_type"].items()},
            "token_accuracy": token_agreement(tags[name], scorer.gold),
            "agreement": token_agreement(tags[name], tags[reference]), "n": scorer.n,
            "entity_counts": counts[name].tolist(), "word_agreement": same,
        }
        if name != reference:
            agree = ratio_interval(same)
            q["agreement_ci"] = [agree.low, agree.high]
            q["entity_f1_drop"] = f1_drop_interval(counts[reference], counts[name]).as_dict()
            ref_types = out[reference]["per_type_f1"]
            q["per_type_f1_drop"] = {t: round(f - q["per_type_f1"].get(t, 0.0), 6) for t, f in ref_types.items()}
            q["per_type_f1_drop_interval"] = {t: [i.low, i.high] for t, i in type_f1_drop_intervals(
                types, counts[reference], counts[name]).items() if scores["per_type"][t]["support"]}
        out[name] = q
    return {name: out[name] for name in predictors}


class BenchQuality:
    """Bench's quality section on a tagging split: entity F1 per sentence, no integer labels."""

    def __init__(self, data: Any, split: str, memo: Any):
        self.scorer = TaggerScorer(data, split)
        self.types = data.entity_types
        self.texts = self.scorer.inputs
        self.memo = memo

    def score(self, predictors: Mapping[str, Any], reference: str, batch_size: int | Mapping[str, int] = 32,
              progress: bool = True) -> dict[str, dict[str, Any]]:
        return evaluate_tagging_quality(predictors, reference, self.scorer, self.types, batch_size=batch_size,
                                        progress=progress, memo=self.memo)

    def data_record(self) -> dict[str, Any]:
        return {"metric": "entity_f1", "types": self.types}


def bench_quality(data: Any, split: str, reference: Any, memo: Any) -> BenchQuality:
    """Bench's quality section of a tagger (:class:`BenchQuality`)."""
    return BenchQuality(data, split, memo)


def report_quality(arts: Sequence[dict[str, Any]], ref: dict[str, Any]) -> list[str]:
    """A tagger's quality table: entity F1 with its interval, the paired drop, P/R, word agreement, per type."""
    types = sorted(ref["quality"].get("per_type_f1") or {})
    rows = []
    for a in arts:
        q = a["quality"]
        drop = q.get("entity_f1_drop")
        vs = "-" if drop is None else (f"{-100 * drop['estimate']:+.1f} pt [{-100 * drop['high']:+.1f}, "
                                       f"{-100 * drop['low']:+.1f}]")
        rows.append([f"`{a['name']}`" + (" (reference)" if a["is_reference"] else ""), a["kind"],
                     fmt(q["entity_f1"], pct=True) + ci_pct(q.get("entity_f1_ci")), vs,
                     fmt(q.get("entity_precision"), pct=True), fmt(q.get("entity_recall"), pct=True),
                     fmt(q.get("agreement"), pct=True) + ci_pct(q.get("agreement_ci"))]
                    + [fmt((q.get("per_type_f1") or {}).get(t), pct=True) for t in types])
    out = table(["artifact", "kind", "entity F1 [95%]", "vs reference [95%, paired]", "precision", "recall",
                 "word agreement [95%]"] + [f"F1 {t}" for t in types], rows)
    support = ", ".join(f"{t} {n}" for t, n in sorted((ref["quality"].get("per_type_support") or {}).items()))
    return out + ["", "Entity F1: strict span-and-type matching (seqeval's default), micro over types. Intervals: "
                  "bootstrap over sentences; the difference with the reference paired over the same sentences. Word "
                  f"agreement: words tagged as the reference tagged them. Gold entities per type: {support}."]


# ----------------------------------------------------------------------------- gate


class EntityRecords:
    """How the gate reads a tagger's per-sentence records: ``entity_counts`` (per type, ``(correct, predicted,
    gold)``) and ``word_agreement`` (``(same, words)``)."""

    metric_name = "entity F1"
    unit_name = "sentences"
    agreed = "of words"

    def units(self, q: dict[str, Any]) -> Any:
        return q["entity_counts"]

    def f1(self, q: dict[str, Any]) -> float:
        return float(q["entity_f1"])

    def agreement_units(self, q: dict[str, Any]) -> Any:
        return q["word_agreement"]

    def drop(self, reference: Any, artifact: Any, confidence: float) -> Any:
        """The paired interval of ``F1(reference) - F1(artifact)`` from their units on the same sentences."""
        return f1_drop_interval(reference, artifact, confidence)

    def unpaired_drop(self, old: Any, new: Any, confidence: float) -> Any:
        return unpaired_f1_drop_interval(old, new, confidence)

    def drop_over_seeds(self, reference: dict[str, Any], members: list[dict[str, Any]], confidence: float) -> Any:
        return mean_f1_drop_over_seeds_interval(reference["entity_counts"], [m["entity_counts"] for m in members],
                                                confidence)


def gate_rules() -> dict[str, str]:
    """The gate's quality rules on a tagger's results: the F1 rules and ``min_agreement`` over words."""
    return dict(GATE_RULES)


def gate_refusal(rule: str) -> str:
    """Why a quality rule of another task does not gate a tagger's results, and which to use."""
    return (f"rule {rule} gates {GATES[rule]}, but these results are a tagger's (entity F1): use max_f1_drop / max_f1_regression in the "
            "rules file.")


def gate_records() -> EntityRecords:
    return EntityRecords()


def check_results_data(doc: dict[str, Any], version: int, path: Path) -> dict[str, Any]:
    """The entity types and sentence count a tagger's ``results.json`` declares (``$.data.types``, ``$.data.n``)."""
    types = require(doc["data"], "types", (list,), "$.data", path)
    return {"types": types, "n": require(doc["data"], "n", (int,), "$.data", path)}


def check_results_quality(quality: dict[str, Any], facts: dict[str, Any], version: int, where: str,
                          path: Path) -> None:
    """A tagger's per-sentence entity counts ``(n, types, 3)`` and word agreement ``(n, 2)``, whole numbers."""
    def whole(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    n, n_types = facts["n"], len(facts["types"])
    counts = require(quality, "entity_counts", (list,), where, path)
    agree = require(quality, "word_agreement", (list,), where, path)
    ok = (len(counts) == n and all(isinstance(row, list) and len(row) == n_types and all(
        isinstance(c, list) and len(c) == 3 and all(whole(v) for v in c) for c in row) for row in counts)
        and len(agree) == n and all(isinstance(r, list) and len(r) == 2 and all(whole(v) for v in r) for r in agree))
    if not ok:
        raise GateInputError(f"{path}: {where}.entity_counts should be {n} sentences of {n_types} types of (correct, "
                             f"predicted, gold) counts and {where}.word_agreement {n} (same, words) pairs. The file was "
                             "edited or damaged; run the benchmark again.")
