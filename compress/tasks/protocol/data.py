"""The ``data``-aspect protocol: what a stage asks of a task's ``data`` module (see :mod:`compress.tasks.protocol`).

``bert-compress teacher --data X`` has no ``--task`` flag: the data says which task it is for. Which task that is,
:func:`compress.tasks.task_choice.data_task` asks every registered task's data aspect, in registration order, in
four rounds: whose built-in set ``X`` is (:meth:`PROTOCOL.builtin_data`), whose column flag the user gave
(:meth:`PROTOCOL.column_flags`), who recognises the data by its suffix, content or hub columns
(:meth:`PROTOCOL.recognises`, given a :class:`DataSource`), and who reads data nobody recognised
(:meth:`PROTOCOL.accepts`: sequence classification's tables). A new task is recognised by adding its aspect; no
stage or ``task_choice`` changes.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Mapping, Protocol

from compress.core.errors import CompressError

#: How many non-blank lines of a file a recogniser looks at.
SNIFF_LINES = 50
#: How many bytes of a file a recogniser looks at (SQuAD's ``data -> paragraphs`` layout).
SNIFF_BYTES = 65536


class PROTOCOL(Protocol):
    """The members every task's ``data`` aspect provides."""

    def builtin_data(self) -> Mapping[str, str]:
        """The built-in data sets this task provides: ``{name: one line saying what it is}`` (help texts, errors)."""

    def column_flags(self) -> tuple[str, ...]:
        """The :class:`compress.config.DataOptions` fields that, when given, say the data is this task's
        (``token_column`` for tagging); the task's loader then names a column the data lacks."""

    def recognises(self, source: "DataSource") -> bool:
        """Whether ``source`` (a local file or folder, or a hub dataset) is this task's data, by its suffix, its first
        lines or its columns. Asked in registration order, so a task claims only what it can tell for sure."""

    def accepts(self, source: "DataSource") -> bool:
        """Whether this task reads ``source`` when no task recognised it (the fallback: classification's tables;
        its loader then says in one line what the data lacks)."""

    def load(self, options: Any, num_labels: int | None = None) -> Any:
        """The task's data (its ``*TaskData``) from ``options`` (:class:`compress.config.DataOptions`: the spec, the
        column flags, ``split_seed``, ``limit``), validated, carved and cut as every stage reads it; ``num_labels``
        (a trained head's size) bounds the labels where the task has classes."""

    def head_fits(self, config: Mapping[str, Any]) -> bool:
        """Whether a model ``config`` (``config.json`` as a mapping) whose architecture names this task's head class
        is this task's model: asked only where tasks share a head class (a classifier and a regression head are both
        ``...ForSequenceClassification``; ``problem_type`` tells them apart)."""

    def claims_model(self, model: str, source: "DataSource") -> bool:
        """Whether ``model`` (a ``--model``/``--teacher`` spec: a folder, a built-in or hub name) is this task's model
        for the data ``source`` whatever the data alone would say: a model made for this task only (a
        sentence-transformers folder is a two-tower encoder). Asked before the data decides
        (:func:`compress.tasks.task_choice.stage_task`); a task told by its data alone answers ``False``."""

    def data_kind(self) -> str:
        """How messages name this task's data, as a user would say it (``tagging data (one tag per word)``)."""

    def model_kind(self) -> str:
        """How messages name a model of this task (``a tagger``)."""


class DataSource:
    """What a recogniser looks at: the ``--data`` spec, the column flags given, and lazily the file to sniff (the
    file itself, or a folder's ``train`` file) and a hub dataset's columns. Each is read once however many tasks
    ask."""

    def __init__(self, spec: str, given: Mapping[str, Any] | None = None, as_is: bool = False):
        self.spec = spec
        #: The model read with this data is to be used as it is, not fine-tuned (``teacher --finetune no``).
        self.as_is = as_is
        self.given = {key: value for key, value in (given or {}).items() if value}
        self.path = Path(spec).expanduser()
        self.exists = self.path.exists()
        self.is_dir = self.path.is_dir()

    @functools.cached_property
    def file(self) -> Path | None:
        """The file whose content says what the data is: the file itself, a folder's ``train`` file (any suffix),
        or ``None`` (a folder without one, a name that is no file)."""
        if self.is_dir:
            files = sorted(p for p in self.path.iterdir() if p.is_file() and p.stem.lower() == "train")
            return files[0] if files else None
        return self.path if self.exists else None

    @property
    def suffix(self) -> str:
        """The lower-case suffix of :attr:`file` (or of the spec, for a name that is no file)."""
        return (self.file or self.path).suffix.lower()

    @functools.cached_property
    def head_lines(self) -> list[str]:
        """The first :data:`SNIFF_LINES` non-blank lines of :attr:`file` (CoNLL's ``-DOCSTART-`` lines skipped)."""
        lines: list[str] = []
        if self.file is None:
            return lines
        try:
            with open(self.file, encoding="utf-8-sig", errors="replace") as handle:
                for line in handle:
                    if line.strip() and not line.lstrip().startswith("-DOCSTART-"):
                        lines.append(line.rstrip("\r\n"))
                        if len(lines) >= SNIFF_LINES:
                            break
        except OSError:
            return []
        return lines

    @functools.cached_property
    def head_text(self) -> str:
        """The first :data:`SNIFF_BYTES` characters of :attr:`file` (empty when it cannot be read)."""
        if self.file is None:
            return ""
        try:
            with open(self.file, encoding="utf-8-sig", errors="replace") as handle:
                return handle.read(SNIFF_BYTES)
        except OSError:
            return ""

    @functools.cached_property
    def first_json_row(self) -> dict | None:
        """The first line of a JSONL :attr:`file` as an object, or ``None``."""
        lines = self.head_lines
        try:
            row = json.loads(lines[0]) if lines else None
        except ValueError:
            return None
        return row if isinstance(row, dict) else None

    @functools.cached_property
    def hub_features(self) -> dict[str, str] | None:
        """``{column: dtype}`` of the first split of the hub dataset the spec names (``hf:NAME``, or a bare name
        that is no file), or ``None`` (a file, no hub name, a dataset that cannot be read: the loader says why)."""
        if self.exists:
            return None
        from compress.core import hub

        try:
            named = hub.dataset_spec(self.spec)
            return dict(_hub_features(*named, str(hub.datasets_cache_dir()))) if named else None
        except CompressError:
            return None

    @property
    def hub_columns(self) -> tuple[str, ...]:
        """The column names of :attr:`hub_features` (empty for no hub dataset)."""
        return tuple(self.hub_features or ())


@functools.lru_cache(maxsize=8)
def _hub_features(name: str, config: str | None, cache: str) -> tuple[tuple[str, str], ...]:
    """The columns and dtypes of a hub dataset's first split, read once per process and datasets ``cache`` (the loader
    reads it again from that cache: memory-mapped Arrow files, not a second download)."""
    from compress.core import hub

    loaded = hub.load_hub_dataset(name, config)
    first = next(iter(loaded.values())) if hasattr(loaded, "values") else loaded
    features = getattr(first, "features", None) or {}
    return tuple((column, str(getattr(features.get(column), "dtype", ""))) for column in first.column_names)
