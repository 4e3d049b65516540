"""The data aspect of sequence classification (:mod:`compress.tasks.protocol.data`): its tables are read by
:mod:`compress.tasks.tables` (:func:`compress.tasks.tables.load_task_data`), which every other task's reader shares its table
helpers with; this module says which data is classification data.
"""

from __future__ import annotations

from typing import Any


def builtin_data() -> dict[str, str]:
    """The built-in classification set."""
    return {"movie-reviews": "10,566 Rotten Tomatoes sentences (binary sentiment) from the vaderSentiment 3.3.2 sdist"}


def column_flags() -> tuple[str, ...]:
    """None: ``--text-column`` and ``--label-column`` have defaults every table task may read, so they claim nothing."""
    return ()


def recognises(source: Any) -> bool:
    """Classification data has no mark of its own: it is what no other task recognises (:func:`accepts`)."""
    return False


def accepts(source: Any) -> bool:
    """Any data no task recognised: a csv/parquet table, a hub dataset, a name the loader then explains."""
    return True


def load(options: Any, num_labels: int | None = None) -> Any:
    """The classification data ``options`` name (:meth:`compress.config.DataOptions.load`)."""
    return options.load(num_labels)


def data_kind() -> str:
    return "classification data (one label per text)"


def model_kind() -> str:
    return "a sentence classifier"


def head_fits(config: Any) -> bool:
    """A classifier's head: a ``...ForSequenceClassification`` config of two or more classes that is no regression
    head (``problem_type``)."""
    id2label = config.get("id2label")
    outputs = len(id2label) if isinstance(id2label, dict) and id2label else config.get("num_labels")
    return config.get("problem_type") != "regression" and outputs != 1


def claims_model(model: str, source: Any) -> bool:
    """Never: a classifier is told by its data, and a model's head is checked against it afterwards."""
    return False
