"""Quality on a held-out split: accuracy, macro-F1 and agreement with the reference.

Agreement (the share of inputs where an artifact's argmax equals the reference's) says how
faithfully a compressed model reproduces the one it replaces, which accuracy alone hides: two
models at 85% can disagree on a quarter of the inputs. The texts go through the same
``Predictor.logits`` path serving uses (dynamic padding, the artifact's own truncation), not the
fixed-shape benchmark inputs, so the numbers are those of real use.
"""

from __future__ import annotations

import sys
from typing import Any, Mapping, Sequence

import numpy as np

from compress.errors import CompressError
from compress.modeling import classification_metrics


def split_texts_and_labels(task, split: str) -> tuple[list[Any], np.ndarray]:
    """Texts (or text pairs) and integer labels of one split, refusing a missing or empty split."""
    if split not in task.splits:
        raise CompressError(f"--split {split}: {task.source} has no {split!r} split (it has "
                            f"{', '.join(task.splits)}). Pick one of those.")
    texts = task.texts(split)
    labels = np.asarray(task.splits[split]["label"], dtype=np.int64)
    if len(labels) == 0:
        raise CompressError(f"--split {split}: the {split} split of {task.source} is empty; give data with rows there.")
    return list(texts), labels


def evaluate_quality(predictors: Mapping[str, Any], reference: str, texts: Sequence[Any], labels: np.ndarray,
                     batch_size: int = 32, progress: bool = True) -> dict[str, dict[str, float]]:
    """``{name: {accuracy, macro_f1, agreement, n}}`` for every predictor; the reference agrees with itself."""
    from tqdm.auto import tqdm

    if reference not in predictors:
        raise CompressError(f"the reference {reference!r} is not among the loaded artifacts.")
    logits: dict[str, np.ndarray] = {}
    names = [reference] + [n for n in predictors if n != reference]
    for name in tqdm(names, desc="quality", unit="artifact", disable=not progress, file=sys.stderr, leave=False):
        logits[name] = predictors[name].logits(texts, batch_size=batch_size)
    return {name: classification_metrics(logits[name], labels, reference_logits=logits[reference])
            for name in predictors}
