"""One split's quality, for every task: what quantize's budget check and optimize's eligibility compare.

A compressed artifact is judged against the model it replaces on the same examples, with the
task's primary metric (:attr:`compress.tasks.registry.Task.primary_metric`): accuracy for a
sentence classifier, entity micro F1 for a tagger, SQuAD F1 for a reader. A :class:`Scorer` holds one
split's inputs and gold answers and scores any :class:`compress.runtime.predictor.Predictor` the same way, through the
path serving uses (``Predictor.logits`` / ``Predictor.predict``), so a number here is one a user
would see.

What is the same for every task lives here: the split's checks, a candidate's record against the reference
(:meth:`Scorer.compare`) and its budget verdict (:meth:`Scorer.failures`). What differs (the inputs and gold
answers, how a model's answers are made and scored, a tagger's per-type rules) is the task's: each task's
``scoring`` aspect (:mod:`compress.tasks.protocol.scoring`) subclasses :class:`Scorer`, and
:func:`split_scorer` (also called :data:`SplitScorer`) makes the one of the data's task.
"""

from __future__ import annotations

from typing import Any

from compress.config import MAX_TYPE_F1_DROP
from compress.core.errors import CompressError
from compress.tasks import Task, get_task, task_names

def metric_name(metric: str) -> str:
    """A primary metric as people read it (messages, tables): the label the task that names it gives it."""
    for name in task_names():
        task = get_task(name)
        if task.primary_metric == metric:
            return task.primary_label()
    return metric.replace("_", " ")


def task_of_data(data: Any) -> Task:
    """The registered task of loaded data: its ``task`` (classification's data class names none)."""
    return get_task(getattr(data, "task", "sequence-classification"))


class Scorer:
    """The inputs and gold answers of one split of ``data``, and a candidate's record against a reference.

    A task's subclass fills :meth:`read` (``inputs``, ``gold``), :meth:`predict`, :meth:`metrics` and
    :meth:`agreement`, and where it has more to say :meth:`check_outputs`, :meth:`compare_more` and
    :meth:`type_failures`.
    """

    def __init__(self, data: Any, split: str = "validation"):
        self.task = task_of_data(data)
        self.metric = self.task.primary_metric
        #: The record key of the reference's metric minus the candidate's (``accuracy_drop``, ``entity_f1_drop``).
        self.drop_key = f"{self.metric}_drop"
        self.source = data.source
        if split not in data.splits:
            raise CompressError(f"{data.source} has no {split!r} split (it has {', '.join(data.splits)}); the quality "
                                "check needs one.")
        self.inputs: list[Any] = []
        self.gold: Any = []
        self.read(data, split)
        self.n = len(self.gold)
        if self.n == 0:
            raise CompressError(f"{data.source}: the {split} split is empty; the quality check needs rows there.")

    @property
    def metric_name(self) -> str:
        """The primary metric as people read it (``entity F1``)."""
        return metric_name(self.metric)

    def read(self, data: Any, split: str) -> None:
        """Set ``self.inputs`` (what ``Predictor`` reads) and ``self.gold`` (one answer per input) from ``split``."""
        raise NotImplementedError

    def check_model(self, predictor: Any) -> None:
        """One line when ``predictor`` cannot be scored on this data: another task, too few labels, other tags."""
        where = getattr(predictor, "path", "the model")
        if predictor.task != self.task.name:
            raise CompressError(f"{where} is a {predictor.task} model but {self.source} is {self.task.name} data. "
                                "Give the data the model was trained on.")
        self.check_outputs(predictor, where)

    def check_outputs(self, predictor: Any, where: str) -> None:
        """One line when a model of the right task cannot answer this split (its labels do not cover the gold)."""

    def predict(self, predictor: Any, batch_size: int = 32) -> Any:
        """The predictor's answers to ``self.inputs``, in the task's form (labels, word tags, answer texts)."""
        raise NotImplementedError

    def metrics(self, predictions: Any) -> dict[str, Any]:
        """The task's metrics of ``predictions`` against the gold answers (``self.metric`` among them)."""
        raise NotImplementedError

    def agreement(self, predictions: Any, reference: Any) -> float:
        """The share of answers equal to the reference's."""
        raise NotImplementedError

    def compare(self, predictions: Any, reference: Any, reference_metrics: dict[str, Any] | None = None) -> dict[str, Any]:
        """A candidate's record against the reference model's predictions on the same examples:
        ``{metric, <metric>_drop, agreement, n}`` and what the task adds (:meth:`compare_more`)."""
        ref = reference_metrics if reference_metrics is not None else self.metrics(reference)
        got = self.metrics(predictions)
        out: dict[str, Any] = {self.metric: got[self.metric],
                               self.drop_key: round(ref[self.metric] - got[self.metric], 6),
                               "agreement": self.agreement(predictions, reference), "n": self.n}
        out.update(self.compare_more(predictions, reference, ref, got))
        return out

    def compare_more(self, predictions: Any, reference: Any, ref: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
        """The task's fields of a candidate's record beyond the primary metric (``ref``, ``got``: their metrics)."""
        return {}

    def failures(self, record: dict[str, Any], max_drop: float, min_agreement: float | None = None,
                 max_type_drop: float | None = MAX_TYPE_F1_DROP) -> list[str]:
        """Why a candidate's record is out of budget (empty when it is within). ``max_type_drop`` is a tagger's
        per-type F1 budget (``None``: types are judged for collapse only; other tasks have no types)."""
        reasons = []
        if record[self.drop_key] > max_drop:
            reasons.append(f"{self.metric_name} drop {record[self.drop_key]:.4f} > budget {max_drop:g}")
        if min_agreement is not None and record["agreement"] < min_agreement:
            reasons.append(f"agreement {record['agreement']:.4f} < {min_agreement:g}")
        return reasons + self.type_failures(record, max_type_drop)

    def type_failures(self, record: dict[str, Any], max_type_drop: float | None) -> list[str]:
        """The task's own reasons a record is out of budget (a tagger's collapsed or over-budget types)."""
        return []

    def budgets(self, max_type_drop: float | None) -> dict[str, Any]:
        """The budgets beyond the primary metric's that this task's records were judged on, for the artifact's
        record (a tagger's ``max_type_f1_drop``; none for the others)."""
        return {}


def split_scorer(data: Any, split: str = "validation") -> Scorer:
    """The :class:`Scorer` of ``data``'s task for ``split`` (its ``scoring`` aspect's ``split_scorer``)."""
    return task_of_data(data).aspect("scoring").split_scorer(data, split)


#: The name quantize, optimize and the tests call: a scorer of the data's task.
SplitScorer = split_scorer
