"""Sentence-similarity data: sentence pairs with a number saying how alike they are (the STS Benchmark's layout).

A similarity task is a :class:`SimilarityTaskData`: ``train``/``validation``/``test`` splits, each a
``datasets.Dataset`` of ``text`` and ``text_pair`` (the two sentences, the names the shared tokenizer and collator
read) and a float ``label`` (the score). The sources, all ending in the same checks:

- a table (csv, tsv, jsonl, parquet) with two sentence columns and a score column: by default the first of
  :data:`SENTENCE1_COLUMNS`, :data:`SENTENCE2_COLUMNS` and :data:`SCORE_COLUMNS` it has (``sentence1``,
  ``sentence2``, ``score``), else the ones ``--sentence1-column`` / ``--sentence2-column`` / ``--score-column`` name;
  one file is split 80/10/10 with ``--split-seed``, as a classification file is;
- a folder of ``train``/``validation`` (or ``dev``)/``test`` tables;
- a Hugging Face dataset (``hf:NAME[:CONFIG]``, :mod:`compress.core.hub`), its splits picked by name;
- ``stsb-captions``, shipped in the package and checked against its recorded sha256 at every load
  (:func:`stsb_captions`; builtin_data/stsb/README.md says why only the caption pairs).

Every score must be a number within the stated range (``--score-range LO,HI``, 0 to 5 by default, the STS scale).
A bad row (a sentence missing or empty, a score missing, not a number or out of range) is one
:class:`CompressError` line naming the file, the line and the fix.

Such data is recognised (:func:`recognises`) by a score column holding a number that is not an integer beside the
two sentence columns: a column of integers stays a classification label, so every classification table keeps
being one.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from compress.core.errors import CompressError
from compress.tasks.tables import (SUPPORTED_SUFFIXES, _fingerprint, _split_rows, file_line, is_missing, read_table,
                           require_column)
from compress.tasks.sources import check_builtin_file, folder_splits, hub_splits

#: Column names tried, in order, when a column flag is not given.
SENTENCE1_COLUMNS = ("sentence1", "sentence_a", "text")
SENTENCE2_COLUMNS = ("sentence2", "sentence_b", "text_pair")
SCORE_COLUMNS = ("score", "similarity_score", "relatedness_score", "label")
#: The scale a score must lie on unless ``--score-range`` states another: the STS Benchmark's.
DEFAULT_SCORE_RANGE = (0.0, 5.0)
SPLIT_NAMES = ("train", "validation", "test")
#: Tables a folder's splits may be.
TABLE_SUFFIXES = tuple(s for s in SUPPORTED_SUFFIXES if s != ".json")
#: How many rows of a table recognition looks at.
SNIFF_ROWS = 50

#: The built-in STS Benchmark caption pairs (compress/builtin_data/stsb), one raw benchmark file per split, named as
#: the benchmark's own archive names them (a folder holding those files is read as the benchmark).
STSB_DIR = Path(__file__).resolve().parents[2] / "builtin_data" / "stsb"
STSB_FILES = {"train": "sts-train.csv", "validation": "sts-dev.csv", "test": "sts-test.csv"}
STSB_NAME = "stsb-captions"


@dataclass
class SimilarityTaskData:
    """Validated sentence-similarity data: splits with ``text``, ``text_pair`` and a float ``label``."""

    splits: Any  # datasets.DatasetDict
    source: str
    files: dict[str, str]
    score_range: tuple[float, float] = DEFAULT_SCORE_RANGE
    fingerprint: str = ""
    notes: list[str] = field(default_factory=list)

    task = "sentence-similarity"
    #: Both sentences go through the model together (the shared tokenizer reads ``text_pair``).
    is_pair = True
    #: One output: the score.
    num_labels = 1
    label_names = ["score"]

    def sizes(self) -> dict[str, int]:
        return {name: len(split) for name, split in self.splits.items()}

    def texts(self, split: str) -> list[tuple[str, str]]:
        """The pairs of ``split`` as ``Predictor.predict`` takes them."""
        ds = self.splits[split]
        return list(zip(ds["text"][:], ds["text_pair"][:]))

    def scores(self, split: str) -> np.ndarray:
        """The gold scores of ``split``, float64."""
        return np.asarray(self.splits[split]["label"][:], dtype=np.float64)

    def subset(self, limit: int | None, seed: int = 0) -> "SimilarityTaskData":
        """The first ``limit`` pairs of each split (after a seeded shuffle), for quick runs."""
        if not limit:
            return self
        from datasets import DatasetDict

        cut = DatasetDict({name: split.shuffle(seed=seed).select(range(min(limit, len(split))))
                           for name, split in self.splits.items()})
        return SimilarityTaskData(cut, f"{self.source}[:{limit}]", self.files, self.score_range, _fingerprint(cut),
                                  self.notes)

    def describe(self) -> dict[str, Any]:
        """What ``compress.json`` records about the data."""
        return {"task": self.task, "source": self.source, "fingerprint": self.fingerprint, "sizes": self.sizes(),
                "score_range": list(self.score_range), "sentence_pair": True}


# ----------------------------------------------------------------------------- reading and checking


def parse_score_range(text: str | Sequence[float] | None) -> tuple[float, float]:
    """``"LO,HI"`` (or a pair, or ``None`` for 0..5) as two floats, LO < HI, or one line saying what is wrong."""
    if text is None or text == "":
        return DEFAULT_SCORE_RANGE
    parts = text.split(",") if isinstance(text, str) else list(text)
    try:
        lo, hi = (float(p) for p in parts)
    except (TypeError, ValueError):
        raise CompressError(f"--score-range {text!r}: give two numbers LO,HI (e.g. 0,5 or -1,1).") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise CompressError(f"--score-range {text!r}: LO must be a number below HI (e.g. 0,5).")
    return lo, hi


def pick_column(columns: Sequence[str], given: str | None, defaults: Sequence[str], flag: str, what: str,
                origin: str) -> str:
    """The column ``given`` names (it must exist) or the first of ``defaults`` there is; one line otherwise."""
    names = [str(c) for c in columns]
    if given:
        if given not in names:
            raise CompressError(f"{origin}: no {what} column {given!r} (columns: {', '.join(names) or 'none'}). Pass "
                                f"{flag} NAME to choose the column.")
        return given
    found = next((c for c in defaults if c in names), None)
    if found is None:
        raise CompressError(f"{origin}: no {what} column (looked for {', '.join(defaults)}; columns: "
                            f"{', '.join(names) or 'none'}). Pass {flag} NAME to choose the column.")
    return found


def _sentences(values: Sequence[Any], column: str, flag: str, path: str) -> list[str]:
    for i, v in enumerate(values):
        if is_missing(v) or not isinstance(v, str) or not v.strip():
            shown = "missing" if is_missing(v) else f"{v!r}"
            raise CompressError(f"{path}: {file_line(path, i)}: column {column!r} holds no sentence ({shown}). Fill "
                                f"it in or remove the row (or pass {flag} NAME for the right column).")
    return [str(v) for v in values]


def _number(value: Any) -> float | None:
    """A cell as a float, or ``None`` when it is not a number (``True`` is not a score)."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _scores(values: Sequence[Any], column: str, score_range: tuple[float, float], path: str) -> list[float]:
    lo, hi = score_range
    out = []
    for i, v in enumerate(values):
        if is_missing(v):
            raise CompressError(f"{path}: {file_line(path, i)}: column {column!r} has no score. Score the pair or "
                                "remove the row.")
        number = _number(v)
        if number is None or not math.isfinite(number):
            raise CompressError(f"{path}: {file_line(path, i)}: score {v!r} in column {column!r} is not a number. "
                                f"Write it as a number from {lo:g} to {hi:g} (or pass --score-column NAME for the "
                                "right column).")
        if not lo <= number <= hi:
            raise CompressError(f"{path}: {file_line(path, i)}: score {number:g} in column {column!r} is outside the "
                                f"stated range {lo:g} to {hi:g}. Fix the score, or state the data's scale with "
                                "--score-range LO,HI.")
        out.append(number)
    return out


def frame_rows(frame: Any, origin: str, sentence1_column: str | None = None, sentence2_column: str | None = None,
               score_column: str | None = None, score_range: tuple[float, float] = DEFAULT_SCORE_RANGE
               ) -> dict[str, list]:
    """One table (a pandas frame, ``attrs["path"]`` naming it) as checked ``text``/``text_pair``/``label`` rows."""
    path = frame.attrs.get("path", origin)
    if len(frame) == 0:
        raise CompressError(f"{path}: no rows. Give at least one scored sentence pair.")
    columns = list(frame.columns)
    first = pick_column(columns, sentence1_column, SENTENCE1_COLUMNS, "--sentence1-column", "first-sentence", path)
    second = pick_column(columns, sentence2_column, SENTENCE2_COLUMNS, "--sentence2-column", "second-sentence", path)
    scored = pick_column(columns, score_column, SCORE_COLUMNS, "--score-column", "score", path)
    return {"text": _sentences(require_column(frame, first, "--sentence1-column", path).tolist(), first,
                               "--sentence1-column", path),
            "text_pair": _sentences(require_column(frame, second, "--sentence2-column", path).tolist(), second,
                                    "--sentence2-column", path),
            "label": _scores(require_column(frame, scored, "--score-column", path).tolist(), scored, score_range, path)}


def looks_like_sts_benchmark(lines: Sequence[str]) -> bool:
    """The STS Benchmark's own layout (its ``sts-*.csv`` as released): no header, every line at least 7 tab-separated
    fields, the fifth a number."""
    if not lines:
        return False
    for line in lines:
        fields = line.split("\t")
        if len(fields) < 7 or _number(fields[4]) is None:
            return False
    return True


def read_sts_benchmark(path: Path, score_range: tuple[float, float] = DEFAULT_SCORE_RANGE) -> dict[str, list]:
    """A file of the STS Benchmark as released (tab-separated, no header: genre, file, year, id, score, sentence 1,
    sentence 2, and on some lines licence fields after them) as checked ``text``/``text_pair``/``label`` rows; a bad
    line is one error naming it."""
    rows: dict[str, list] = {"text": [], "text_pair": [], "label": []}
    lo, hi = score_range
    with open(path, encoding="utf-8", newline="") as handle:
        for number, line in enumerate(handle, 1):
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) < 7:
                raise CompressError(f"{path}: line {number}: expected 7 tab-separated fields (genre, file, year, id, "
                                    f"score, sentence 1, sentence 2), got {len(fields)}. Fix the line or remove it.")
            score = _number(fields[4])
            if score is None or not math.isfinite(score) or not lo <= score <= hi:
                raise CompressError(f"{path}: line {number}: score {fields[4]!r} is not a number from {lo:g} to {hi:g}. "
                                    "Fix the score, or state the data's scale with --score-range LO,HI.")
            if not fields[5].strip() or not fields[6].strip():
                raise CompressError(f"{path}: line {number}: a sentence is empty. Fill it in or remove the line.")
            rows["text"].append(fields[5])
            rows["text_pair"].append(fields[6])
            rows["label"].append(score)
    return rows


def _table_rows(path: Path, columns: tuple) -> dict[str, list]:
    """One file's checked rows: the STS Benchmark's own layout, or a table with named columns."""
    if path.suffix.lower() in (".csv", ".tsv") and looks_like_sts_benchmark(_first_lines(path)):
        return read_sts_benchmark(path, columns[3])
    return frame_rows(read_table(path), str(path), *columns)


def _first_lines(path: Path, count: int = SNIFF_ROWS) -> list[str]:
    lines: list[str] = []
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as handle:
            for line in handle:
                if line.strip():
                    lines.append(line.rstrip("\r\n"))
                    if len(lines) >= count:
                        break
    except OSError:
        return []
    return lines


def build_similarity_task(rows: dict[str, dict[str, list]], files: dict[str, str], source: str, seed: int = 0,
                          score_range: tuple[float, float] = DEFAULT_SCORE_RANGE,
                          notes: Sequence[str] = ()) -> SimilarityTaskData:
    """Checked rows per split as a task; missing validation/test splits carved out of train (80/10/10, seeded)."""
    if "validation" not in rows or "test" not in rows:
        rows = _split_rows(rows, seed, where=files.get("train", source))
    from datasets import Dataset, DatasetDict

    dd = DatasetDict({split: Dataset.from_dict(rows[split]) for split in SPLIT_NAMES if split in rows})
    return SimilarityTaskData(dd, source, files, score_range, _fingerprint(dd), list(notes))


def load_similarity_data(spec: str, sentence1_column: str | None = None, sentence2_column: str | None = None,
                         score_column: str | None = None, score_range: str | Sequence[float] | None = None,
                         seed: int = 0) -> SimilarityTaskData:
    """A similarity task from ``stsb-captions``, a table, a folder of tables, or a hub dataset (``hf:NAME``)."""
    limits = parse_score_range(score_range)
    columns = (sentence1_column, sentence2_column, score_column, limits)
    if spec == STSB_NAME:
        return stsb_captions(seed)
    path = Path(spec).expanduser()
    if path.is_dir() and (path / STSB_FILES["train"]).is_file():  # the benchmark's extracted folder
        found = {split: path / name for split, name in STSB_FILES.items() if (path / name).is_file()}
        rows = {split: _table_rows(p, columns) for split, p in found.items()}
        return build_similarity_task(rows, {s: str(p) for s, p in found.items()}, str(path), seed, limits)
    if path.is_dir():
        found = folder_splits(path, TABLE_SUFFIXES, "A similarity data folder needs train.csv (or .tsv/.jsonl/"
                              ".parquet) with sentence1, sentence2 and score columns, and may hold validation (or dev) "
                              "and test files.")
        rows = {split: _table_rows(p, columns) for split, p in found.items()}
        return build_similarity_task(rows, {s: str(p) for s, p in found.items()}, str(path), seed, limits)
    if path.exists():
        rows = {"train": _table_rows(path, columns)}
        return build_similarity_task(rows, {"train": str(path)}, str(path), seed, limits)
    from compress.core import hub

    named = None if path.suffix.lower() in SUPPORTED_SUFFIXES else hub.dataset_spec(spec)
    if named is None:
        raise CompressError(f"data {spec!r} is neither the built-in {STSB_NAME} nor an existing file or folder. Give "
                            "a csv, tsv, jsonl or parquet table of sentence1, sentence2 and score, a folder of "
                            "train/validation/test tables, or a Hugging Face dataset as hf:NAME.")
    name, config = named
    origin = f"hf:{name}" + (f":{config}" if config else "")
    found, notes = hub_splits(hub.load_hub_dataset(name, config), origin)
    rows = {}
    for split, (label, ds) in found.items():
        frame = ds.to_pandas()
        frame.attrs["path"] = label
        rows[split] = frame_rows(frame, label, *columns)
    for note in notes:
        print(f"note: {origin}: {note}")
    return build_similarity_task(rows, {s: label for s, (label, _) in found.items()}, origin, seed, limits, notes)


def stsb_captions(seed: int = 0) -> SimilarityTaskData:
    """The built-in STS Benchmark caption pairs (CC BY-SA; builtin_data/stsb/README.md): 1,000 / 375 / 375 pairs in
    the benchmark's own train / dev / test splits, read after checking their sha256 (``seed`` is unused: the
    splits are the benchmark's)."""
    rows, files = {}, {}
    for split, name in STSB_FILES.items():
        path = STSB_DIR / name
        check_builtin_file(path, f"stsb/{name}", "STS Benchmark")
        rows[split] = read_sts_benchmark(path)  # checked by its sha256 and by each line
        files[split] = str(path)
    return build_similarity_task(rows, files, STSB_NAME, seed, DEFAULT_SCORE_RANGE)


# ----------------------------------------------------------------------------- the data aspect (compress.tasks.protocol.data)


def builtin_data() -> dict[str, str]:
    """The built-in similarity set."""
    return {STSB_NAME: "STS Benchmark caption pairs (sentence similarity 0-5; images and track5.en-en, 1,000 / 375 / "
                       "375 pairs; CC BY-SA), shipped in the package"}


def column_flags() -> tuple[str, ...]:
    """``--sentence1-column`` / ``--sentence2-column`` / ``--score-column`` say the data is similarity data."""
    return ("sentence1_column", "sentence2_column", "score_column")


def _head_rows(path: Path) -> Any:
    """The first :data:`SNIFF_ROWS` rows of a table as a pandas frame, or ``None`` when it cannot be read."""
    import pandas as pd

    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".tsv"):
            return pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",", nrows=SNIFF_ROWS, keep_default_na=False,
                               na_values=[""], quoting=3 if suffix == ".tsv" else 0)
        if suffix == ".jsonl":
            rows = []
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    if line.strip():
                        rows.append(json.loads(line))
                        if len(rows) >= SNIFF_ROWS:
                            break
            return pd.DataFrame([r for r in rows if isinstance(r, dict)])
        if suffix == ".parquet":
            return pd.read_parquet(path).head(SNIFF_ROWS)
    except Exception:  # a table pandas cannot read is left to the loader that reads it, which says why
        return None
    return None


def _fractional(values: Sequence[Any]) -> bool:
    numbers = [_number(v) for v in values if not is_missing(v)]
    return any(n is not None and math.isfinite(n) and not float(n).is_integer() for n in numbers)


def recognises(source: Any) -> bool:
    """A table (a folder's train table) with two sentence columns and a score column holding a number that is not
    an integer, or a hub dataset with those columns and a float score column. The column flags, given, name them."""
    given = source.given
    if source.is_dir and (source.path / STSB_FILES["train"]).is_file():
        return True
    if source.file is not None and source.suffix in (".csv", ".tsv") and looks_like_sts_benchmark(source.head_lines):
        return True
    if source.file is None:
        features = source.hub_features or {}
        try:
            picked = [pick_column(list(features), given.get(flag), defaults, "", "", "")
                      for flag, defaults in (("sentence1_column", SENTENCE1_COLUMNS),
                                             ("sentence2_column", SENTENCE2_COLUMNS), ("score_column", SCORE_COLUMNS))]
        except CompressError:
            return False
        return features[picked[2]].startswith("float")
    if source.suffix not in TABLE_SUFFIXES:
        return False
    frame = _head_rows(source.file)
    if frame is None or not len(frame):
        return False
    try:
        first, second, scored = (pick_column(list(frame.columns), given.get(flag), defaults, "", "", "")
                                 for flag, defaults in (("sentence1_column", SENTENCE1_COLUMNS),
                                                        ("sentence2_column", SENTENCE2_COLUMNS),
                                                        ("score_column", SCORE_COLUMNS)))
    except CompressError:
        return False
    return len({first, second, scored}) == 3 and _fractional(frame[scored].tolist())


def accepts(source: Any) -> bool:
    """Similarity data is recognised or not at all (a score column of integers is a classification label)."""
    return False


def load(options: Any, num_labels: int | None = None) -> SimilarityTaskData:
    """The similarity data ``options`` name, with its column flags and ``--score-range``, carved with
    ``split_seed`` and cut to ``limit``."""
    data = load_similarity_data(options.data, getattr(options, "sentence1_column", None),
                                getattr(options, "sentence2_column", None), getattr(options, "score_column", None),
                                getattr(options, "score_range", None), options.split_seed)
    return data.subset(options.checked_limit(), seed=options.split_seed)


def head_fits(config: Mapping[str, Any]) -> bool:
    """A regression head: ``problem_type`` ``regression``, or a single output with no problem type."""
    if config.get("problem_type") == "regression":
        return True
    id2label = config.get("id2label")
    outputs = len(id2label) if isinstance(id2label, dict) and id2label else config.get("num_labels")
    return config.get("problem_type") is None and outputs == 1


def data_kind() -> str:
    return "similarity data (a score per sentence pair)"


def model_kind() -> str:
    return "a similarity scorer (a cross-encoder)"


def claims_model(model: str, source: Any) -> bool:
    """Never: a cross-encoder is told by its data (scored pairs), and a model's head is checked against it afterwards."""
    return False
