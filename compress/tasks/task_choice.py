"""Which task a stage runs: decided from the data, then checked against the model's head.

``bert-compress teacher --data X`` has no ``--task`` flag: the data says what it is. A built-in set
says so in :data:`compress.data.BUILTIN_DATASET_TASKS`; a file says so by its suffix (``.conll``,
``.iob``, ...) or, for suffixes both kinds of data use (``.tsv``, ``.txt``, ``.jsonl``), by its
content: a ``.tsv``/``.txt`` whose first lines end in BIO tags, a ``.jsonl`` whose first object
holds a word list and a tag list. A folder is what its train file is. A hub dataset (``hf:NAME``) says
so by its columns: word and tag lists, or a question, a passage and answers. A column flag a user gives
(``--token-column`` / ``--tag-column``, ``--question-column`` ...) says it outright. Anything else (csv,
parquet) is sequence classification, as before.

The model is then checked against that task *before* transformers loads it: a folder holding a
``BertForTokenClassification`` head given classification data (or the reverse) would otherwise
end in transformers' "You set ``ignore_mismatched_sizes`` to ``False``" traceback, or worse, load
with a freshly initialised head of the wrong kind. Reads ``config.json`` with ``json``; no torch.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any, Mapping

from compress.errors import CompressError
from compress.tasks.registry import Task, get_task, task_for_architectures
from compress.tasks.question_answering.data import ANSWERS_COLUMNS, CONTEXT_COLUMNS, QUESTION_COLUMNS
from compress.tasks.token_classification.data import CONLL_SUFFIXES, JSONL_SUFFIXES, TAG_COLUMNS, TOKEN_COLUMNS
from compress.data import BUILTIN_DATASET_TASKS

SEQUENCE, TOKEN, QA = "sequence-classification", "token-classification", "question-answering"
#: Suffixes only tagging data uses; ``.tsv`` / ``.txt`` / ``.jsonl`` are looked into first.
TAGGING_ONLY_SUFFIXES = tuple(s for s in CONLL_SUFFIXES if s not in (".tsv", ".txt"))
#: How many non-blank lines of an ambiguous file are looked at.
SNIFF_LINES = 50
_TAG = re.compile(r"^(O|[BIES]-\S+)$")
#: How each task is named in messages, as a user would say it.
PLAIN_NAMES = {SEQUENCE: "a sentence classifier", TOKEN: "a tagger", QA: "a span reader (question answering)"}
DATA_NAMES = {SEQUENCE: "classification data (one label per text)", TOKEN: "tagging data (one tag per word)",
              QA: "question-answering data (SQuAD format)"}
#: How much of a ``.json`` file is looked into for SQuAD's ``data -> paragraphs`` layout.
SNIFF_BYTES = 65536


#: The column flags that say the data is tagging data, and those that say it is question-answering data.
TAGGING_COLUMN_FLAGS = frozenset({"token_column", "tag_column"})
QA_COLUMN_FLAGS = frozenset({"question_column", "context_column", "answers_column"})


def data_task(spec: str, columns: Mapping[str, str | None] | None = None) -> str:
    """The task name (``sequence-classification``, ``token-classification`` or ``question-answering``) the
    data ``spec`` is for. ``columns``: the column flags a user gave (``--token-column`` ...); one of
    :data:`TAGGING_COLUMN_FLAGS` or :data:`QA_COLUMN_FLAGS` decides the task. Otherwise a file is looked into
    and a hub dataset (``hf:NAME``) told by its columns (:func:`_hub_task`)."""

    if spec in BUILTIN_DATASET_TASKS:
        return BUILTIN_DATASET_TASKS[spec]
    given = {key: value for key, value in (columns or {}).items() if value}
    if given.keys() & TAGGING_COLUMN_FLAGS:  # the user says what the data is; its loader names a missing column
        return TOKEN
    if given.keys() & QA_COLUMN_FLAGS:
        return QA
    path = Path(spec).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.stem.lower() == "train")
        return _file_task(files[0]) if files else SEQUENCE
    suffix = path.suffix.lower()
    if not path.exists():
        # A missing tagging-only file is a tagging typo: let the tagging loader name it.
        return TOKEN if suffix in TAGGING_ONLY_SUFFIXES else _hub_task(spec)
    return _file_task(path)


def _hub_task(spec: str) -> str:
    """A hub dataset's task from the columns of its first split: word and tag lists make tagging data, a question, a
    passage and answers question-answering data, anything else classification (whose loader names what is
    missing). A spec that is no hub name, or a dataset that cannot be read, is left to the classification
    loader, which says why in one line."""
    from compress import hub

    try:
        named = hub.dataset_spec(spec)
        names = _hub_columns(*named, str(hub.datasets_cache_dir())) if named else None
    except CompressError:
        return SEQUENCE
    if not names:
        return SEQUENCE

    def has(defaults: tuple[str, ...]) -> bool:
        return any(name in names for name in defaults)

    if has(TOKEN_COLUMNS) and has(TAG_COLUMNS):
        return TOKEN
    if has(QUESTION_COLUMNS) and has(CONTEXT_COLUMNS) and has(ANSWERS_COLUMNS):
        return QA
    return SEQUENCE


@functools.lru_cache(maxsize=8)
def _hub_columns(name: str, config: str | None, cache: str) -> tuple[str, ...]:
    """The column names of a hub dataset's first split, read once per process and datasets ``cache`` (the loader
    reads it again from that cache: memory-mapped Arrow files, not a second download)."""
    from compress import hub

    loaded = hub.load_hub_dataset(name, config)
    first = next(iter(loaded.values())) if hasattr(loaded, "values") else loaded
    return tuple(first.column_names)


def _file_task(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in TAGGING_ONLY_SUFFIXES:
        return TOKEN
    if suffix in JSONL_SUFFIXES:
        return TOKEN if _jsonl_is_tagged(path) else SEQUENCE
    if suffix in (".tsv", ".txt"):
        return TOKEN if _lines_end_in_tags(path) else SEQUENCE
    if suffix == ".json":
        return QA if _looks_like_squad(path) else SEQUENCE
    return SEQUENCE


def _looks_like_squad(path: Path) -> bool:
    """A SQuAD-format file: a JSON object whose ``data`` holds ``paragraphs`` (read from its first bytes;
    the QA loader checks the whole file, naming the JSON path of anything wrong)."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError:
        return False
    start = head.lstrip()[:1]
    # a bare list of articles is SQuAD without its {"data": ...} wrapper: the QA loader says so
    return (start == "{" and '"data"' in head or start == "[") and '"paragraphs"' in head


def _head_lines(path: Path) -> list[str]:
    lines: list[str] = []
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as handle:
            for line in handle:
                if line.strip() and not line.lstrip().startswith("-DOCSTART-"):
                    lines.append(line.rstrip("\r\n"))
                    if len(lines) >= SNIFF_LINES:
                        break
    except OSError:
        return []
    return lines


def _lines_end_in_tags(path: Path) -> bool:
    """A CoNLL file: every looked-at line is ``WORD ... TAG`` with a BIO tag last, and some tag is not O
    (a classification table's header ``text<TAB>label`` already fails)."""
    lines = _head_lines(path)
    lasts = []
    for line in lines:
        cols = line.split("\t") if "\t" in line else line.split()
        if len(cols) < 2 or not _TAG.match(cols[-1].strip()):
            return False
        lasts.append(cols[-1].strip())
    return bool(lasts) and any(t != "O" for t in lasts)


def _jsonl_is_tagged(path: Path) -> bool:
    lines = _head_lines(path)
    try:
        row = json.loads(lines[0]) if lines else None
    except ValueError:
        return False
    if not isinstance(row, dict):
        return False
    return (any(isinstance(row.get(k), list) for k in TOKEN_COLUMNS)
            and any(isinstance(row.get(k), list) for k in TAG_COLUMNS))


def model_head(folder: str | Path) -> tuple[Task | None, int | None, list[str] | None]:
    """``(task, labels, label names)`` of the head a model folder's ``config.json`` names; ``(None, ...)``
    for a bare encoder (or a folder without a readable config: the loader reports that)."""
    try:
        raw: dict[str, Any] = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None, None
    if not isinstance(raw, dict):
        return None, None, None
    task = task_for_architectures(raw.get("architectures"))
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
            f"--model {shown}: the model is {PLAIN_NAMES.get(head.name, head.name)} (its config names a "
            f"...{head.head_suffix} head) and --data {data_source} is {DATA_NAMES.get(wanted.name, wanted.name)}. "
            f"Give {DATA_NAMES.get(head.name, head.name)} for this model; for this data, give a bare encoder or "
            f"{PLAIN_NAMES.get(wanted.name, wanted.name)}.")
    if head is not None and num_labels is not None and labels is not None and labels != num_labels:
        raise CompressError(
            f"--model {shown}: the model is {PLAIN_NAMES.get(head.name, head.name)} of {labels} labels but --data "
            f"{data_source} has {num_labels}. Use a model fine-tuned on this label set, or a bare encoder.")
    return head, names
