"""Soft gold labels: a data set's own label probabilities as a training target (``distill --gold-labels``).

Why: some data sets know more than one hard label per row. Every built-in movie-review sentence carries the
mean of about 20 human ratings on a -4..+4 scale; a sentence rated +0.1 and one rated +3.6 share the hard label
``positive``, but the raters did not agree on them equally. A student can be trained toward that agreement
(soft cross-entropy at T=1, beside or instead of the hard label) as well as toward the teacher.

A gold-label column holds, per row, either

- **probabilities**: a list of one number per label, in label order, each >= 0 and summing to 1 (a JSON
  list such as ``[0.2, 0.8]`` in a CSV cell), or
- **a score** (one number, two-label tasks only), turned into ``[1 - p, p]`` with
  ``p = sigmoid(score / scale)``: a score of 0 is undecided, positive leans to the second label. A
  probability ``q`` of the second label is the score ``log(q / (1 - q))`` at scale 1.

A missing value (empty cell, null) means the row has no gold probabilities: it still learns from its hard
label and the teacher. Rows are stored as lists of ``num_labels`` floats; a missing one as :data:`ABSENT`
in every place, which the loss skips.
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

from compress.tasks.tables import TaskData, is_missing
from compress.core.errors import CompressError

#: The value of every entry of a row without gold probabilities.
ABSENT = -1.0
#: The data column that distillation reads the converted probabilities from.
COLUMN = "gold"
#: How far from 1 a row of probabilities may sum (rounded CSV cells) before it is refused.
_SUM_TOLERANCE = 1e-3


def _missing(value: Any) -> bool:
    """An empty cell as the loaders see one, or blank text."""
    return is_missing(value) or (isinstance(value, str) and not value.strip())


def _parse(value: Any) -> Any:
    """A cell as a number or a list of numbers (JSON text is decoded); anything else is returned as it is."""
    if isinstance(value, str):
        text = value.strip()
        try:
            return json.loads(text)
        except ValueError:
            return value
    if hasattr(value, "tolist"):  # numpy arrays and scalars (pandas, parquet)
        return value.tolist()
    return value


def gold_row(value: Any, num_labels: int, scale: float) -> list[float]:
    """One cell as ``num_labels`` probabilities; ``ValueError`` with the reason when it cannot be one."""
    value = _parse(value)
    if isinstance(value, bool):
        raise ValueError(f"expected a score or a list of {num_labels} probabilities, got {value!r}")
    if isinstance(value, (int, float)):
        if num_labels != 2:
            raise ValueError(f"a single score applies to two-label tasks only; this task has {num_labels} labels, so "
                             f"give a list of {num_labels} probabilities")
        if not math.isfinite(value):
            raise ValueError(f"the score {value!r} is not a finite number")
        p = 1.0 / (1.0 + math.exp(-float(value) / scale))
        return [1.0 - p, p]
    if isinstance(value, (list, tuple)):
        if len(value) != num_labels or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            raise ValueError(f"expected {num_labels} probabilities (one per label, in label order), got {value!r}")
        probs = [float(v) for v in value]
        if any(not math.isfinite(v) or v < 0 for v in probs) or abs(sum(probs) - 1.0) > _SUM_TOLERANCE:
            raise ValueError(f"probabilities must be >= 0 and sum to 1, got {value!r} (sum {sum(probs):.4f})")
        total = sum(probs)
        return [v / total for v in probs]
    raise ValueError(f"expected a score or a list of {num_labels} probabilities, got {value!r}")


def gold_probabilities(values: Sequence[Any], num_labels: int, scale: float, where: str,
                       column: str) -> tuple[list[list[float]], int]:
    """Every cell of a gold-label column as probabilities, and how many were missing.

    ``where`` names the file (or split) in the error, which also gives the data row and the fix."""
    if not scale > 0:
        raise CompressError(f"--gold-scale must be > 0, got {scale}")
    rows, missing = [], 0
    for number, value in enumerate(values):
        if _missing(value):
            rows.append([ABSENT] * num_labels)
            missing += 1
            continue
        try:
            rows.append(gold_row(value, num_labels, scale))
        except ValueError as exc:
            raise CompressError(f"{where}: column {column!r}, data row {number}: {exc}. Fix that cell, or leave it "
                                "empty for a row without gold probabilities.") from None
    return rows, missing


def with_gold(task: Any, column: str, scale: float) -> Any:
    """``task`` (a :class:`compress.tasks.tables.TaskData`) with a :data:`COLUMN` of probabilities made from ``column`` in
    every split that has it; the training split must. Prints how many training rows have none."""
    if column not in task.splits["train"].column_names:
        extra = [c for c in task.splits["train"].column_names if c not in ("text", "text_pair", "label")]
        raise CompressError(f"{task.source}: no column {column!r} in the training data for --gold-labels (other "
                            f"columns: {', '.join(extra) or 'none'}). Name the column of label probabilities or "
                            "scores.")
    splits = {}
    for name, split in task.splits.items():
        if column in split.column_names:
            rows, missing = gold_probabilities(split[column][:], task.num_labels, scale, f"{task.source} [{name}]",
                                               column)
            if missing and name == "train":
                print(f"note: --gold-labels {column}: {missing} of {len(rows)} training rows have no value; they learn "
                      "from the hard label and the teacher only")
            if COLUMN in split.column_names:  # the user's own column is named "gold": replaced by its probabilities
                split = split.remove_columns(COLUMN)
            split = split.add_column(COLUMN, rows)
        splits[name] = split
    from datasets import DatasetDict

    return TaskData(DatasetDict(splits), task.label_names, task.source, task.is_pair, task.fingerprint, task.notes)
