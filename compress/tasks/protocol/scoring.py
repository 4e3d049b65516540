"""The ``scoring``-aspect protocol: what a stage asks of a task's ``scoring`` module (:mod:`compress.tasks.protocol`).

Three stages score a task's models, each through these members only:

- quantize and optimize judge a candidate against the model it replaces on one split:
  :func:`compress.stages.quality.split_scorer` (``SplitScorer``) hands them the task's :class:`compress.stages.quality.Scorer` (``split_scorer``);
- bench (:mod:`benchmarks.suite`) scores every artifact on ``--split`` and writes what the gate pairs on
  (``bench_quality``, ``labels_per_text``), and its report shows the task's quality table (``report_quality``);
- the gate (:mod:`benchmarks.gate`, :mod:`benchmarks.gate_results`, :mod:`benchmarks.f1_rules`) checks a
  ``results.json`` of the task (``check_results_data``, ``check_results_quality``), decides the quality rules the
  task says apply to it (``gate_rules``, ``gate_refusal``), and reads its per-unit records (``gate_records``).

A ``results.json`` names its task in ``$.data.task`` (the registry name); :func:`benchmarks.gate_results.results_task`
reads older files by their ``$.data.metric``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence


class PROTOCOL(Protocol):
    """The members every task's ``scoring`` aspect provides."""

    def split_scorer(self, data: Any, split: str = "validation") -> Any:
        """A :class:`compress.stages.quality.Scorer` subclass instance for ``split`` of ``data`` (loaded data of this task):
        its ``inputs`` and ``gold``, ``check_model``, ``predict``, ``metrics``, ``agreement``, ``compare`` and
        ``failures``. Raises :class:`compress.core.errors.CompressError` for a missing or empty split."""

    def who(self) -> str:
        """Who this task's results belong to, in messages (``"a tagger"``)."""

    def labels_per_text(self) -> bool:
        """Whether a model of this task answers one label per text, which ``bench --load-clients`` and
        ``--traffic-file`` measure (they are refused where it does not)."""

    def bench_quality(self, data: Any, split: str, reference: Any, memo: Any) -> Any:
        """Bench's quality section on ``split`` of ``data``, the reference ``Predictor`` and the run's
        :class:`benchmarks.answers.Answers` given: an object with ``texts`` (the inputs latency and memory are
        measured on), ``score(predictors, reference, batch_size=32, progress=True)`` (``{name: quality record}``,
        the reference's name given) and ``data_record()`` (the keys of ``$.data`` the gate reads: ``metric`` and
        what the records are paired on)."""

    def report_quality(self, arts: Sequence[dict[str, Any]], ref: dict[str, Any]) -> list[str]:
        """The lines of ``report.md``'s quality section (a Markdown table and its notes) for ``results.json``'s
        artifacts and the reference among them."""

    def gate_rules(self) -> Mapping[str, str]:
        """``{rule: how}`` for each gate quality rule that applies to this task's results, ``how`` naming the decider
        in :data:`benchmarks.gate.DECIDERS`; ``max_regression``, where given, to the decider of its quality half
        (:data:`benchmarks.gate.FALLS`; without it ``max_regression`` judges latency only)."""

    def gate_refusal(self, rule: str) -> str:
        """The message of the malformed-rules error for a quality ``rule`` that does not apply to this task."""

    def gate_records(self) -> Any:
        """How the F1 rules (:mod:`benchmarks.f1_rules`) read this task's per-unit quality records: an object with
        ``metric_name``, ``unit_name``, ``agreed``, ``units(q)``, ``f1(q)``, ``agreement_units(q)``,
        ``drop(ref_units, units, confidence)``, ``unpaired_drop(old, new, confidence)`` and
        ``drop_over_seeds(ref_q, member_qs, confidence)`` (the ``f1_*`` and ``unit_agreement`` deciders), and for the
        ``unit_mean`` decider ``mean_units(q)`` (one score in [0, 1] per unit), ``mean_name`` and ``mean_unit``;
        ``None`` for a task that no such rule decides. A decider reads only the members it needs."""

    def check_results_data(self, doc: dict[str, Any], version: int, path: Path) -> dict[str, Any]:
        """Check ``$.data`` of a ``results.json`` of this task (schema ``version``) and return what the artifacts'
        records are checked against; a :class:`benchmarks.gate_rules.GateInputError` naming ``path`` if malformed."""

    def check_results_quality(self, quality: dict[str, Any], facts: dict[str, Any], version: int, where: str,
                              path: Path) -> None:
        """Check one artifact's quality record (``where``: its place in the file) against ``facts``
        (:meth:`check_results_data`); a :class:`benchmarks.gate_rules.GateInputError` if malformed."""
