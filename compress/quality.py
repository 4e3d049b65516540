"""One split's quality, for every task: what quantize's budget check and optimize's eligibility compare.

A compressed artifact is judged against the model it replaces on the same examples, with the
task's primary metric (:attr:`compress.tasks.registry.Task.primary_metric`): accuracy for a
sentence classifier, entity micro F1 for a tagger. :class:`SplitScorer` holds one split's inputs
and gold answers and scores any :class:`compress.runtime.Predictor` the same way, through the
path serving uses (``Predictor.logits`` / ``Predictor.predict``), so a number here is one a user
would see.

For a span reader the inputs are the split's ``(question, passage)`` pairs, the predictions the
answer texts ``Predictor.predict`` decodes, the metric SQuAD's F1 (exact match beside it), and the
agreement the share of questions answered with the very same text as the reference.

For a tagger the split's words are joined by single spaces and tagged by ``Predictor.predict``
(whitespace words, first sub-token; :meth:`compress.tasks.token_classification.data.TokenTaskData.texts`), so
each gold word is one predicted word. Overall F1 can hold while one entity type collapses (INT8 saturating
the logits of a rare tag: onnxruntime issues report a tagger at F1 0.8 falling to 0.05), so two per-type
rules judge each type with at least :data:`compress.config.MIN_TYPE_SUPPORT` gold entities: a candidate fails when the
type keeps less than :data:`COLLAPSE_FRACTION` of the reference's F1 (it *collapsed*), or loses more than
the per-type budget (``max_type_f1_drop``, :data:`compress.config.MAX_TYPE_F1_DROP` by default). Both count
only a loss the split tells from noise: the lower bound of the paired 95% bootstrap interval of the type's
F1 drop over sentences is above zero. One entity moves a type's F1 by ``2 / (predicted + gold)``, 3 to 6
points for a type of 30 gold entities, so a one-entity change alone is never read as a loss.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.stats import type_f1_drop_intervals
from compress.config import MAX_TYPE_F1_DROP, MIN_TYPE_SUPPORT
from compress.errors import CompressError
from compress.tasks import get_task
from compress.tasks.token_classification.metrics import sentence_counts, split_tag, token_agreement

#: How each task's primary metric is named for people (messages, tables).
METRIC_NAMES = {"accuracy": "accuracy", "entity_f1": "entity F1", "f1": "F1"}
#: A type collapses when its F1 falls below this share of the reference model's F1 on it.
COLLAPSE_FRACTION = 0.5


class SplitScorer:
    """The inputs and gold answers of one split of ``data`` (a classification, tagging or QA task)."""

    def __init__(self, data: Any, split: str = "validation"):
        self.task = get_task(getattr(data, "task", "sequence-classification"))
        self.metric = self.task.primary_metric
        #: The record key of the reference's metric minus the candidate's (``accuracy_drop``, ``entity_f1_drop``).
        self.drop_key = f"{self.metric}_drop"
        self.source = data.source
        if split not in data.splits:
            raise CompressError(f"{data.source} has no {split!r} split (it has {', '.join(data.splits)}); the quality "
                                "check needs one.")
        self.tagging = self.task.name == "token-classification"
        self.reading = self.task.name == "question-answering"
        if self.tagging:
            self.label_names = list(data.label_names)
            self.inputs: list[Any] = data.texts(split)
            self.gold: Any = data.tags(split)
        elif self.reading:
            self.inputs = data.texts(split)
            self.gold = data.gold_answers(split)
        else:
            self.inputs = list(data.texts(split))
            self.gold = np.asarray(data.splits[split]["label"], dtype=np.int64)
            self.num_labels = data.num_labels
        self.n = len(self.gold)
        if self.n == 0:
            raise CompressError(f"{data.source}: the {split} split is empty; the quality check needs rows there.")

    def check_model(self, predictor: Any) -> None:
        """One line when ``predictor`` cannot be scored on this data: another task, too few labels, other tags."""
        where = getattr(predictor, "path", "the model")
        if predictor.task != self.task.name:
            raise CompressError(f"{where} is a {predictor.task} model but {self.source} is {self.task.name} data. "
                                "Give the data the model was trained on.")
        # tags are matched by name: a tagger's own label order (CoNLL's is not sorted) scores the same, and a
        # split without some tag (a test split with no I-MISC) is fine; only a tag the model never predicts is not
        missing = [tag for tag in self.label_names if tag not in set(predictor.label_names)] if self.tagging else []
        if missing:
            raise CompressError(f"{self.source} has the tag(s) {', '.join(missing)} that {where} does not predict (its "
                                f"tags: {', '.join(predictor.label_names)}). Give the tagging data the model was "
                                "trained on.")
        if not (self.tagging or self.reading) and self.num_labels > predictor.num_labels:
            raise CompressError(f"{self.source}: labels go up to {self.num_labels - 1} ({self.num_labels} classes) but "
                                f"{where} has {predictor.num_labels} output labels. Use a model fine-tuned on this "
                                "task, or fix the label column.")

    def predict(self, predictor: Any, batch_size: int = 32) -> Any:
        """Predicted labels (classifier: an array), word tags (tagger: one list per sentence) or answer texts
        (reader: one string per question)."""
        if self.reading:
            return [a["answer"] for a in predictor.predict(self.inputs, batch_size=batch_size)]
        if not self.tagging:
            return predictor.logits(self.inputs, batch_size=batch_size).argmax(-1)
        tags = [r["word_tags"] for r in predictor.predict(self.inputs, batch_size=batch_size, word_tags=True)]
        for i, (got, gold) in enumerate(zip(tags, self.gold)):
            if len(got) != len(gold):  # word_texts makes this impossible; a guard against a changed word split
                raise CompressError(f"{self.source}: sentence {i} has {len(gold)} words but {len(got)} were tagged.")
        return tags

    def metrics(self, predictions: Any) -> dict[str, Any]:
        """The task's metrics of ``predictions`` against the gold answers (``self.metric`` among them)."""
        if self.reading:
            scored = self.task.score(predictions, self.gold)
            return {"f1": scored["f1"], "exact_match": scored["exact_match"]}
        if self.tagging:
            scored = self.task.score(predictions, self.gold)
            return {k: scored[k] for k in ("entity_f1", "entity_precision", "entity_recall", "per_type_f1",
                                           "token_accuracy")} | {"support": {t: s["support"] for t, s in
                                                                             scored["per_type"].items()}}
        return {"accuracy": float((np.asarray(predictions) == self.gold).mean())}

    def agreement(self, predictions: Any, reference: Any) -> float:
        """The share of answers (labels; for a tagger, word tags; for a reader, answer texts) equal to the
        reference's."""
        if self.reading:
            return float(np.mean([a == b for a, b in zip(predictions, reference)])) if len(predictions) else 1.0
        if self.tagging:
            return token_agreement(predictions, reference)
        return float((np.asarray(predictions) == np.asarray(reference)).mean())

    def compare(self, predictions: Any, reference: Any, reference_metrics: dict[str, Any] | None = None) -> dict[str, Any]:
        """A candidate's record against the reference model's predictions on the same examples:
        ``{metric, <metric>_drop, agreement, n}``, for a tagger also the per-type F1, its change against
        the reference and the collapsed types."""
        ref = reference_metrics if reference_metrics is not None else self.metrics(reference)
        got = self.metrics(predictions)
        out: dict[str, Any] = {self.metric: got[self.metric],
                               self.drop_key: round(ref[self.metric] - got[self.metric], 6),
                               "agreement": self.agreement(predictions, reference), "n": self.n}
        if self.reading:
            out["exact_match"] = got["exact_match"]
        if self.tagging:
            out["per_type_f1"] = got["per_type_f1"]
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

    def failures(self, record: dict[str, Any], max_drop: float, min_agreement: float | None = None,
                 max_type_drop: float | None = MAX_TYPE_F1_DROP) -> list[str]:
        """Why a candidate's record is out of budget (empty when it is within). ``max_type_drop`` (a tagger's
        per-type F1 budget; ``None``: types are judged for collapse only) fails a type of at least
        :data:`compress.config.MIN_TYPE_SUPPORT` gold entities whose drop is over it with its interval above zero."""
        reasons = []
        name = METRIC_NAMES.get(self.metric, self.metric)
        if record[self.drop_key] > max_drop:
            reasons.append(f"{name} drop {record[self.drop_key]:.4f} > budget {max_drop:g}")
        if min_agreement is not None and record["agreement"] < min_agreement:
            reasons.append(f"agreement {record['agreement']:.4f} < {min_agreement:g}")
        for t, (before, after) in (record.get("collapsed_types") or {}).items():
            reasons.append(f"type {t} collapsed: F1 {before:.3f} -> {after:.3f}")
        if max_type_drop is not None:
            reasons += [f"type {t} lost F1 {drop:.3f} [{low:.3f}, {high:.3f}] > budget {max_type_drop:g}"
                        for t, (drop, low, high) in types_over_budget(record, max_type_drop).items()
                        if t not in (record.get("collapsed_types") or {})]
        return reasons


def types_over_budget(record: dict[str, Any], max_type_drop: float,
                      min_support: int = MIN_TYPE_SUPPORT) -> dict[str, tuple[float, float, float]]:
    """``{type: (drop, low, high)}`` for each type of ``record`` (:meth:`SplitScorer.compare`) with at least
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
