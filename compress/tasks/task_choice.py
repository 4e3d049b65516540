"""Which task a stage runs: decided from the data, then checked against the model's head.

``bert-compress teacher --data X`` has no ``--task`` flag: the data says what it is. :func:`data_task` asks every
registered task's data aspect (:mod:`compress.tasks.protocol.data`), in registration order: whose built-in set
``X`` is, whose column flag (``--token-column``, ``--question-column`` ...) the user gave, who recognises the file,
the folder's train file or the hub dataset's columns (a ``.conll`` file, a SQuAD ``.json``, a table with a float
score), and last who reads what nobody recognised (classification's tables). A new task is recognised by its
aspect alone.

The model is then checked against that task *before* transformers loads it: a folder holding a
``BertForTokenClassification`` head given classification data (or the reverse) would otherwise
end in transformers' "You set ``ignore_mismatched_sizes`` to ``False``" traceback, or worse, load
with a freshly initialised head of the wrong kind. Reads ``config.json`` with ``json``; no torch.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any, Mapping

from compress.core.errors import CompressError
from compress.tasks.protocol.data import DataSource
from compress.tasks.registry import Task, get_task, task_for_architectures, task_names

SEQUENCE, TOKEN, QA = "sequence-classification", "token-classification", "question-answering"


def _data_aspects() -> list[tuple[str, Any]]:
    """``(task name, data aspect)`` of every registered task that reads data of its own, in registration order (a task
    whose package has no ``data`` module yet is never chosen from data)."""
    found = []
    for name in task_names():
        task = get_task(name)
        try:
            found.append((name, task.aspect("data")))
        except CompressError:
            if importlib.util.find_spec(f"{task.package}.data") is not None:
                raise
    return found


def builtin_datasets() -> dict[str, str]:
    """Every task's built-in data sets, ``{name: what it is}``, in registration order."""
    return {name: what for _, data in _data_aspects() for name, what in data.builtin_data().items()}


def builtin_dataset_tasks() -> dict[str, str]:
    """The task of each built-in data set."""
    return {name: task for task, data in _data_aspects() for name in data.builtin_data()}


def column_flags() -> tuple[str, ...]:
    """Every task's column flags (:class:`compress.config.DataOptions` fields that say the task), in order."""
    return tuple(flag for _, data in _data_aspects() for flag in data.column_flags())


def data_task(spec: str, columns: Mapping[str, Any] | None = None) -> str:
    """The registered task name the data ``spec`` is for. ``columns``: the column flags a user gave
    (``--token-column`` ...), one of which decides the task; otherwise the file, the folder's train file or the hub
    dataset (``hf:NAME``) is looked into (:class:`compress.tasks.protocol.data.DataSource`)."""
    aspects = _data_aspects()
    for name, data in aspects:
        if spec in data.builtin_data():
            return name
    given = {key for key, value in (columns or {}).items() if value}
    for name, data in aspects:  # the user says what the data is; its loader names a missing column
        if given & set(data.column_flags()):
            return name
    source = DataSource(spec, columns)
    for name, data in aspects:
        if data.recognises(source):
            return name
    for name, data in aspects:
        if data.accepts(source):
            return name
    raise CompressError(f"--data {spec}: no task reads this data (tasks: {', '.join(task_names())}). Give a file, "
                        "folder or hub dataset one of them reads.")


def stage_task(spec: str, columns: Mapping[str, Any] | None = None, model: str | None = None,
               as_is: bool = False) -> str:
    """The registered task a stage runs for the data ``spec`` and the ``model`` it starts from (``--model``,
    ``--teacher``, an artifact): the first task whose data aspect claims the model for this data
    (:meth:`~compress.tasks.protocol.data.PROTOCOL.claims_model`: a sentence-transformers folder is a two-tower
    encoder; ``as_is``: the model is to be used without fine-tuning), else the data's own task (:func:`data_task`)."""
    if model:
        source = DataSource(spec, columns, as_is=as_is)
        for name, data in _data_aspects():
            if data.claims_model(str(model), source):
                return name
    return data_task(spec, columns)


def data_kind(task: str) -> str:
    """How messages name ``task``'s data."""
    return get_task(task).aspect("data").data_kind()


def model_kind(task: str) -> str:
    """How messages name a model of ``task``."""
    return get_task(task).aspect("data").model_kind()


def head_task(config: Mapping[str, Any]) -> Task | None:
    """The task of the head a model ``config`` (``config.json`` as a mapping) names, ``None`` for a bare encoder.
    Tasks that share a head class (a classifier and a regression head are both ``...ForSequenceClassification``) are
    told apart by their data aspect's :meth:`~compress.tasks.protocol.data.PROTOCOL.head_fits`, in registration
    order."""
    first = task_for_architectures(config.get("architectures"))
    if first is None:
        return None
    sharing = [get_task(name) for name in task_names() if get_task(name).head_suffix == first.head_suffix]
    if len(sharing) == 1:
        return first
    return next((task for task in sharing if task.aspect("data").head_fits(config)), first)


def recorded_task(folder: str | Path, config: Mapping[str, Any]) -> Task | None:
    """The task an artifact's ``compress.json`` records, when it is registered and its head is the one ``config``
    names: a head class several tasks share is then read as the task that trained it, not the first that fits."""
    try:
        meta = json.loads((Path(folder) / "compress.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = meta.get("task") if isinstance(meta, dict) else None
    if not isinstance(name, str) or name not in set(task_names()) | {a for t in task_names() for a in get_task(t).aliases}:
        return None
    task = get_task(name)
    return task if task.has_head(config.get("architectures")) else None


def model_head(folder: str | Path) -> tuple[Task | None, int | None, list[str] | None]:
    """``(task, labels, label names)`` of the head a model folder's ``config.json`` names; ``(None, ...)``
    for a bare encoder (or a folder without a readable config: the loader reports that)."""
    try:
        raw: dict[str, Any] = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None, None
    if not isinstance(raw, dict):
        return None, None, None
    task = recorded_task(folder, raw) or head_task(raw)
    id2label = raw.get("id2label")
    if isinstance(id2label, dict) and id2label:
        names = [str(id2label.get(str(i), id2label.get(i, i))) for i in range(len(id2label))]
        return task, len(names), names
    n = raw.get("num_labels")
    return task, (int(n) if isinstance(n, int) else None), None


def check_model_task(folder: str | Path, task_name: str, data_source: str, model_name: str | None = None,
                     num_labels: int | None = None) -> tuple[Task | None, list[str] | None]:
    """Refuse, in one line, a model whose head is for another task, or for another number of labels.

    Returns ``(head task or None, the head's label names or None)`` when the model fits.
    """
    wanted = get_task(task_name)
    head, labels, names = model_head(folder)
    shown = model_name or str(folder)
    if head is not None and head.name != wanted.name:
        raise CompressError(
            f"--model {shown}: the model is {model_kind(head.name)} (its config names a "
            f"...{head.head_suffix} head) and --data {data_source} is {data_kind(wanted.name)}. "
            f"Give {data_kind(head.name)} for this model; for this data, give a bare encoder or "
            f"{model_kind(wanted.name)}.")
    if head is not None and num_labels is not None and labels is not None and labels != num_labels:
        raise CompressError(
            f"--model {shown}: the model is {model_kind(head.name)} of {labels} labels but --data "
            f"{data_source} has {num_labels}. Use a model fine-tuned on this label set, or a bare encoder.")
    return head, names
