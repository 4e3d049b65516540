"""Every artifact's answers on the bench's split, each predictor run once per batch size in one bench run.

Each task's bench quality section (its scoring aspect's ``bench_quality``: a classifier's, a tagger's, a
reader's) starts the same way: the reference answers, then every other artifact, each in batches of its
size. ``bench`` calls it more than once in a run: once for the rows, then again for each runtime a choice
serves (:func:`benchmarks.suite.score_served_runtimes`), each time beside the reference. The reference's answers
in batches of 32 do not change between those calls, and the reference is usually the slowest model there (the
teacher), so an :class:`Answers` kept for the run hands them back instead of running it again.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Mapping

from compress.core.errors import CompressError
from compress.core.progress import bars_enabled


class Answers:
    """Answers by (predictor, batch size), for one bench run over one split.

    Keyed by the predictor object itself (held here, so its ``id`` is not reused while the memo lives): two
    artifacts never share answers, and one asked again at another batch size runs again (ONNX Runtime's dynamic
    INT8 sets its activation scales per batch, so its batch-1 answers are not its batch-32 answers).
    """

    def __init__(self) -> None:
        self._kept: dict[tuple[int, int], tuple[Any, Any]] = {}

    def get(self, predictor: Any, batch_size: int, predict: Callable[[Any, int], Any]) -> Any:
        """``predict(predictor, batch_size)``, or what it returned the first time it was asked."""
        key = (id(predictor), batch_size)
        if key not in self._kept:
            self._kept[key] = (predictor, predict(predictor, batch_size))
        return self._kept[key][1]


def answer_each(predictors: Mapping[str, Any], reference: str, batch_size: int | Mapping[str, int],
                predict: Callable[[Any, int], Any], progress: bool = True,
                memo: Answers | None = None, check: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """``{name: predict(predictor, batch)}``, the reference first; ``batch_size`` is one for all or one per name;
    ``memo`` (one per bench run) reuses answers already made at the same batch size. ``check`` (a scorer's
    ``check_model``) sees every predictor before the first pass, so a model that cannot answer the split fails
    before the slow reference has run, not after."""
    from tqdm.auto import tqdm

    if reference not in predictors:
        raise CompressError(f"the reference {reference!r} is not among the loaded artifacts.")
    if check is not None:
        for predictor in predictors.values():
            check(predictor)
    memo = memo if memo is not None else Answers()
    names = [reference] + [n for n in predictors if n != reference]
    out: dict[str, Any] = {}
    for name in tqdm(names, desc="quality", unit="artifact", disable=not progress or not bars_enabled(),
                     file=sys.stderr, leave=False):
        batch = batch_size if isinstance(batch_size, int) else batch_size[name]
        out[name] = memo.get(predictors[name], batch, predict)
    return out
