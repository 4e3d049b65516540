"""Extractive question-answering data: SQuAD-format JSON, hub datasets, and the built-in SQuAD v1.1 dev set.

A QA task is a :class:`QATaskData`: ``train``/``validation``/``test`` splits, each a
``datasets.Dataset`` in the shape of the hub's ``squad`` (``id``, ``title``, ``context``,
``question``, ``answers`` = ``{"text": [...], "answer_start": [...]}``), so code written for the
hub's dataset reads ours. A question with no answer (SQuAD 2.0's ``is_impossible``) has empty
``answers`` lists; that is the one place the fact is kept. The sources, all ending in the same checks:

- **SQuAD-format JSON** (``.json``): ``{"data": [{"title", "paragraphs": [{"context", "qas":
  [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}], "version"}``,
  v1.1 or v2.0. ``is_impossible: true`` needs empty ``answers`` (v2.0's ``plausible_answers`` are
  ignored: they are not answers); a question with empty answers must say ``is_impossible: true``.
  ``title`` may be missing (the article is then named ``article N``).
- **A ``datasets`` Dataset** in the hub's ``squad``/``squad_v2`` shape (``hf:NAME`` through
  :func:`compress.core.hub.load_hub_dataset`); columns are picked by :func:`pick_qa_columns`, and an
  empty ``answers`` list means no answer, as in ``squad_v2``.
- A folder holding ``train``/``validation`` (or ``dev``)/``test`` ``.json`` files, or one file.
- ``squad-dev``: SQuAD v1.1's dev set, shipped inside the package and checked against its
  recorded sha256 at every load (:func:`squad_dev`).

**Splits by article.** A split that is missing is carved out of the training file *by article*
(:func:`split_by_article`): articles (``title``; articles that share a passage are kept together)
are sorted by title, shuffled with ``numpy.random.RandomState(seed)`` and cut 80/10/10 (floor,
at least one article each for validation and test), so no passage, and no question about it, is
in two splits. A split by question would put the same passage in train and test, and a reader
that memorised a passage would look better than it is.

Bad input is one :class:`CompressError` line naming the file, the JSON path of the offending
item (``data[3].paragraphs[0].qas[2].answers[0]``) and the fix: an ``answer_start`` whose text
is not at that place in the context, a missing field, an empty context or question, a wrong
type, a repeated question id.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from compress.core.errors import CompressError
from compress.tasks.sources import check_builtin_file, folder_splits, hub_splits
from compress.tasks.tables import _fingerprint

SPLIT_NAMES = ("train", "validation", "test")
JSON_SUFFIXES = (".json",)
#: Column names tried, in order, when a dataset's columns are not named.
QUESTION_COLUMNS = ("question",)
CONTEXT_COLUMNS = ("context", "passage")
ANSWERS_COLUMNS = ("answers",)
#: Shares of the articles that go to train / validation / test when splits are carved out.
SPLIT_FRACTIONS = (0.8, 0.1, 0.1)

#: The built-in SQuAD v1.1 dev set: its 48 articles in two files (see builtin_data/squad11/README.md).
SQUAD_DEV_FILES = ("dev-v1.1.part1.json", "dev-v1.1.part2.json")
SQUAD_DEV_DIR = Path(__file__).resolve().parents[2] / "builtin_data" / "squad11"
SQUAD_DEV_ARTICLES, SQUAD_DEV_QUESTIONS = 48, 10570


@dataclass(frozen=True)
class QAExample:
    """One question about one passage, as read; ``where`` is ``file: JSON path`` (or ``origin row N``)."""

    id: str
    title: str
    context: str
    question: str
    answers: tuple[tuple[str, int], ...]  # (text, answer_start); empty: no answer
    where: str

    @property
    def is_impossible(self) -> bool:
        return not self.answers


@dataclass
class QATaskData:
    """A validated QA task: splits in the hub's ``squad`` shape (see the module docstring)."""

    splits: Any  # datasets.DatasetDict
    source: str
    files: dict[str, str]
    version: str = "1.1"
    fingerprint: str = ""
    notes: list[str] = field(default_factory=list)

    task = "question-answering"

    def sizes(self) -> dict[str, int]:
        return {name: len(split) for name, split in self.splits.items()}

    @property
    def with_impossible(self) -> bool:
        """Whether any split holds a question without an answer (SQuAD 2.0 style)."""
        return any(not a["text"] for split in self.splits.values() for a in split["answers"])

    def texts(self, split: str) -> list[tuple[str, str]]:
        """Each question of ``split`` as the ``(question, passage)`` pair a reader's Predictor takes: what
        static INT8 calibrates on and the benchmark times (the question's leading spaces dropped, as read)."""
        ds = self.splits[split]
        return [(q.lstrip(), c) for q, c in zip(ds["question"][:], ds["context"][:])]

    def gold_answers(self, split: str) -> list[list[str]]:
        """The gold answer texts of every question of a split (empty: no answer), what the metrics take."""
        return [list(a["text"]) for a in self.splits[split]["answers"]]

    def subset(self, limit: int | None, seed: int = 0) -> "QATaskData":
        """The first ``limit`` questions of each split (after a seeded shuffle), for quick runs."""
        if not limit:
            return self
        from datasets import DatasetDict

        cut = DatasetDict({name: split.shuffle(seed=seed).select(range(min(limit, len(split))))
                           for name, split in self.splits.items()})
        return QATaskData(cut, f"{self.source}[:{limit}]", self.files, self.version, _fingerprint(cut), self.notes)

    def describe(self) -> dict[str, Any]:
        """What ``compress.json`` records about the data."""
        return {"task": self.task, "source": self.source, "fingerprint": self.fingerprint, "sizes": self.sizes(),
                "version": self.version, "with_impossible": self.with_impossible,
                "articles": {s: len(set(d["title"])) for s, d in self.splits.items()}}


# ----------------------------------------------------------------------------- checks of one item


def _fix_start(context: str, text: str, start: int) -> str:
    """The fix to suggest for an answer that is not at ``start``: where the text does occur, if it does."""
    found = [i for i in range(len(context)) if context.startswith(text, i)] if text else []
    if not found:
        return "the text does not occur in the context at all; correct the answer text or the context"
    nearest = min(found, key=lambda i: abs(i - start))
    return f"the text occurs at {nearest}" + (f" (and {len(found) - 1} other place(s))" if len(found) > 1 else "") + \
        "; set answer_start to the character offset of the answer in the context"


def _need(obj: dict, key: str, kind: type | tuple[type, ...], where: str, what: str) -> Any:
    """``obj[key]``, which must exist and be of ``kind`` (one error line otherwise)."""
    if key not in obj:
        keys = ", ".join(map(repr, obj)) or "none"
        raise CompressError(f"{where}: no {key!r} field (fields: {keys}). Give {what}.")
    value = obj[key]
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise CompressError(f"{where}.{key}: expected {names}, got {type(value).__name__} ({str(value)[:40]!r}). "
                            f"Give {what}.")
    return value


def _check_answer(context: str, text: Any, start: Any, where: str) -> tuple[str, int]:
    if not isinstance(text, str):
        raise CompressError(f"{where}.text: expected str, got {type(text).__name__}. Give the answer's text as it "
                            "appears in the context.")
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)):
        raise CompressError(f"{where}.answer_start: expected a whole number, got {type(start).__name__} "
                            f"({str(start)[:20]!r}). Give the character offset of the answer in the context.")
    if not text.strip():
        raise CompressError(f"{where}.text: the answer is empty. Give the answer's text, or mark the question "
                            "is_impossible: true with no answers.")
    start = int(start)
    if not 0 <= start <= len(context) - len(text) or context[start:start + len(text)] != text:
        at = context[max(0, start):start + len(text)]
        raise CompressError(f"{where}: answer_start {start} does not point at the answer {text[:40]!r} (the context "
                            f"has {at[:40]!r} there): {_fix_start(context, text, start)}.")
    return text, start


def _check_text(value: str, where: str, what: str) -> str:
    if not value.strip():
        raise CompressError(f"{where}: the {what} is empty. Give a non-empty {what}, or remove the item.")
    return value


# ----------------------------------------------------------------------------- SQuAD JSON


def examples_from_squad(obj: Any, origin: str) -> tuple[str, list[QAExample]]:
    """``(version, examples)`` of a parsed SQuAD-format object; ``origin`` (the file) starts every message."""
    if isinstance(obj, list) and obj and all(isinstance(a, dict) and "paragraphs" in a for a in obj[:5]):
        raise CompressError(f"{origin}: this looks like SQuAD's list of articles without the wrapper around it. Wrap "
                            'it as {"version": "1.1", "data": [...the list...]} (the official files\' layout).')
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), list):
        got = type(obj).__name__ if not isinstance(obj, dict) else f"an object with fields {', '.join(obj) or 'none'}"
        raise CompressError(f"{origin}: not SQuAD-format JSON (got {got}). The file holds "
                            '{"data": [{"title": ..., "paragraphs": [{"context": ..., "qas": [...]}]}], "version": ...}.')
    version = str(obj.get("version", "1.1"))
    out: list[QAExample] = []
    for a, article in enumerate(obj["data"]):
        where_a = f"{origin}: data[{a}]"
        if not isinstance(article, dict):
            raise CompressError(f"{where_a}: expected an object with 'title' and 'paragraphs', got "
                                f"{type(article).__name__}.")
        title = article.get("title", f"article {a}")
        if not isinstance(title, str):
            raise CompressError(f"{where_a}.title: expected str, got {type(title).__name__}. Give the article's title.")
        paragraphs = _need(article, "paragraphs", list, where_a, "the article's paragraphs as a list")
        for p, paragraph in enumerate(paragraphs):
            where_p = f"{where_a}.paragraphs[{p}]"
            if not isinstance(paragraph, dict):
                raise CompressError(f"{where_p}: expected an object with 'context' and 'qas', got "
                                    f"{type(paragraph).__name__}.")
            context = _check_text(_need(paragraph, "context", str, where_p, "the passage as a string"),
                                  f"{where_p}.context", "context")
            qas = _need(paragraph, "qas", list, where_p, "the questions about the passage as a list")
            for q, qa in enumerate(qas):
                where_q = f"{where_p}.qas[{q}]"
                if not isinstance(qa, dict):
                    raise CompressError(f"{where_q}: expected an object with 'id', 'question' and 'answers', got "
                                        f"{type(qa).__name__}.")
                out.append(_example(qa, title, context, where_q))
    if not out:
        raise CompressError(f"{origin}: no questions in it (data -> paragraphs -> qas is empty). Give at least one "
                            "question with its answers.")
    _check_unique_ids(out)
    return version, out


def _example(qa: dict, title: str, context: str, where: str) -> QAExample:
    qid = _need(qa, "id", (str, int), where, "each question a unique id")
    question = _check_text(_need(qa, "question", str, where, "the question as a string"), f"{where}.question",
                           "question")
    answers = _need(qa, "answers", list, where, "the answers as a list of {\"text\", \"answer_start\"} (empty for "
                    "a question with no answer)")
    impossible = qa.get("is_impossible", False)
    if not isinstance(impossible, bool):
        raise CompressError(f"{where}.is_impossible: expected true or false, got {type(impossible).__name__}.")
    if impossible and answers:
        raise CompressError(f"{where}: is_impossible is true but the question has {len(answers)} answer(s). Move them "
                            "to plausible_answers, or set is_impossible to false.")
    if not impossible and not answers:
        raise CompressError(f"{where}: the question has no answers. Give at least one {{\"text\", \"answer_start\"}}, "
                            "or set is_impossible: true (SQuAD 2.0) if the passage does not answer it.")
    checked = []
    for k, answer in enumerate(answers):
        where_k = f"{where}.answers[{k}]"
        if not isinstance(answer, dict):
            raise CompressError(f"{where_k}: expected an object with 'text' and 'answer_start', got "
                                f"{type(answer).__name__}.")
        _need(answer, "text", str, where_k, "the answer's text as it appears in the context")
        _need(answer, "answer_start", int, where_k, "the character offset of the answer in the context")
        checked.append(_check_answer(context, answer["text"], answer["answer_start"], where_k))
    return QAExample(str(qid), title, context, question, tuple(checked), where)


def _check_unique_ids(examples: Sequence[QAExample]) -> None:
    seen: dict[str, str] = {}
    for ex in examples:
        if ex.id in seen:
            raise CompressError(f"{ex.where}.id: the id {ex.id!r} is used again (first at {seen[ex.id]}). Give every "
                                "question its own id: scores are kept per question.")
        seen[ex.id] = ex.where


def read_squad_json(path: str | Path) -> tuple[str, list[QAExample]]:
    """``(version, examples)`` of a SQuAD-format file; errors name the file and the JSON path."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CompressError(f"{path}: cannot read it ({exc.strerror}). Check the path and its permissions.") from exc
    try:
        obj = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise CompressError(f"{path}: not valid UTF-8 (byte {exc.start}). Save the file as UTF-8.") from exc
    except json.JSONDecodeError as exc:
        raise CompressError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno}). A SQuAD file is "
                            "one JSON object.") from exc
    return examples_from_squad(obj, str(path))


# ----------------------------------------------------------------------------- datasets


def pick_column(column_names: Sequence[str], names: Sequence[str], origin: str, what: str, fix: str) -> str:
    """The first of ``names`` among ``column_names``, or one line naming the columns there are and ``fix``."""
    found = next((n for n in names if n in column_names), None)
    if found is None:
        cols = ", ".join(map(str, column_names)) or "none"
        raise CompressError(f"{origin}: no {what} column {' or '.join(map(repr, names))} (columns: {cols}). {fix}")
    return found


def pick_qa_columns(column_names: Sequence[str], origin: str, question_column: str | None = None,
                    context_column: str | None = None, answers_column: str | None = None) -> tuple[str, str, str]:
    """The question, context and answers columns of a dataset: the ones named, else the first of
    :data:`QUESTION_COLUMNS` / :data:`CONTEXT_COLUMNS` / :data:`ANSWERS_COLUMNS` present."""
    chosen = []
    for given, candidates, option, what in ((question_column, QUESTION_COLUMNS, "--question-column", "question"),
                                            (context_column, CONTEXT_COLUMNS, "--context-column", "passage"),
                                            (answers_column, ANSWERS_COLUMNS, "--answers-column", "answers")):
        chosen.append(pick_column(column_names, (given,) if given else candidates, origin, what,
                                  f"Pass {option} NAME to choose the column that holds the {what}."))
    return chosen[0], chosen[1], chosen[2]


def _answer_lists(value: Any, where: str) -> tuple[list, list]:
    """``(texts, starts)`` of a row's answers: the hub's ``{"text": [...], "answer_start": [...]}`` or a list of
    ``{"text", "answer_start"}`` objects."""
    if isinstance(value, dict):
        texts, starts = value.get("text"), value.get("answer_start")
        if not isinstance(texts, (list, tuple)) or not isinstance(starts, (list, tuple)) or len(texts) != len(starts):
            raise CompressError(f"{where}.answers: expected {{'text': [...], 'answer_start': [...]}} with one start per "
                                f"text, got {str(value)[:60]!r}.")
        return list(texts), list(starts)
    if isinstance(value, (list, tuple)) and all(isinstance(a, dict) for a in value):
        return [a.get("text") for a in value], [a.get("answer_start") for a in value]
    raise CompressError(f"{where}.answers: expected {{'text': [...], 'answer_start': [...]}} (the squad shape), got "
                        f"{type(value).__name__}.")


def examples_from_dataset(ds: Any, origin: str, question_column: str | None = None, context_column: str | None = None,
                          answers_column: str | None = None) -> list[QAExample]:
    """Questions of one ``datasets.Dataset`` split in the hub's ``squad`` shape; ``row N`` (1-based) in messages.

    ``id`` and ``title`` are used when present (else the row number, and one article per distinct
    context); an empty answer list is a question without an answer, as in ``squad_v2``.
    """
    q_col, c_col, a_col = pick_qa_columns(ds.column_names, origin, question_column, context_column, answers_column)
    columns = ds.column_names
    ids = ds["id"][:] if "id" in columns else None
    titles = ds["title"][:] if "title" in columns else None
    out = []
    for n, (question, context, answers) in enumerate(zip(ds[q_col][:], ds[c_col][:], ds[a_col][:])):
        where = f"{origin} row {n + 1}"
        for value, what in ((question, q_col), (context, c_col)):
            if not isinstance(value, str):
                raise CompressError(f"{where}.{what}: expected str, got {type(value).__name__}.")
        _check_text(context, f"{where}.{c_col}", "context")
        _check_text(question, f"{where}.{q_col}", "question")
        texts, starts = _answer_lists(answers, where)
        checked = tuple(_check_answer(context, t, s, f"{where}.answers[{k}]") for k, (t, s) in enumerate(zip(texts, starts)))
        title = str(titles[n]) if titles is not None else "passage " + hashlib.sha1(context.encode()).hexdigest()[:12]
        out.append(QAExample(str(ids[n]) if ids is not None else str(n + 1), title, context, question, checked, where))
    if not out:
        raise CompressError(f"{origin}: the split has no rows.")
    _check_unique_ids(out)
    return out


# ----------------------------------------------------------------------------- splitting and building


def article_groups(examples: Sequence[QAExample]) -> list[list[int]]:
    """Indices of the examples grouped by article; articles that share a passage are one group.

    Sorted by the group's first title, so the grouping does not depend on the order of the file.
    """
    parent: dict[str, str] = {}

    def root(t: str) -> str:
        while parent.setdefault(t, t) != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    title_of_context: dict[str, str] = {}
    for ex in examples:
        root(ex.title)
        other = title_of_context.setdefault(ex.context, ex.title)
        if other != ex.title:
            parent[root(ex.title)] = root(other)
    groups: dict[str, list[int]] = {}
    for i, ex in enumerate(examples):
        groups.setdefault(root(ex.title), []).append(i)
    return [groups[k] for k in sorted(groups, key=lambda k: min(examples[i].title for i in groups[k]))]


def split_by_article(examples: Sequence[QAExample], seed: int = 0, need: Sequence[str] = ("validation", "test"),
                     where: str = "the data") -> dict[str, list[QAExample]]:
    """``train`` and the ``need``-ed splits, cut by article (module docstring): sorted, shuffled with
    ``RandomState(seed)``, 80% / 10% / 10% of the articles (floor, at least one for each carved split)."""
    groups = article_groups(examples)
    need = [s for s in ("validation", "test") if s in need]
    if len(groups) < len(need) + 1:
        titles = len({ex.title for ex in examples})
        shared = (f"{titles} titles, but they share passages, so they are {len(groups)} group(s) (a passage's "
                  "questions stay in one split)" if titles > len(groups) else f"{len(groups)} article(s)")
        raise CompressError(f"{where}: {shared}: too few to split by article into train"
                            f"{''.join(', ' + s for s in need)}. Give more articles (titles with passages of their "
                            "own), or separate train/validation/test files.")
    order = np.random.RandomState(seed).permutation(len(groups))
    sizes = {s: max(1, int(len(groups) * SPLIT_FRACTIONS[SPLIT_NAMES.index(s)])) for s in need}
    out: dict[str, list[QAExample]] = {}
    at = 0
    for split in need:
        out[split] = [examples[i] for g in order[at:at + sizes[split]] for i in groups[g]]
        at += sizes[split]
    out["train"] = [examples[i] for g in order[at:] for i in groups[g]]
    return {s: out[s] for s in SPLIT_NAMES if s in out}


def _rows(examples: Sequence[QAExample]) -> dict[str, list]:
    return {"id": [e.id for e in examples], "title": [e.title for e in examples],
            "context": [e.context for e in examples], "question": [e.question for e in examples],
            "answers": [{"text": [t for t, _ in e.answers], "answer_start": [s for _, s in e.answers]}
                        for e in examples]}


def build_qa_task(splits: dict[str, list[QAExample]], files: dict[str, str], source: str, seed: int = 0,
                  version: str = "1.1", notes: list[str] | None = None) -> QATaskData:
    """Splits of checked examples as a :class:`QATaskData`; missing validation/test splits are carved
    out of train by article; a passage found in two given splits is noted (not an error: the user chose them)."""
    files, notes = dict(files), list(notes or [])
    missing = [s for s in ("validation", "test") if s not in splits]
    if missing:
        carved = split_by_article(splits["train"], seed, missing, files["train"])
        splits = {**splits, **carved}
        for split in missing:
            files[split] = files["train"]
    seen: dict[str, str] = {}
    for split in SPLIT_NAMES:
        for context in {e.context for e in splits.get(split, [])}:
            if seen.setdefault(context, split) != split:
                notes.append(f"a passage of {split} is also in {seen[context]}")
    ids: dict[str, str] = {}
    for split in SPLIT_NAMES:
        for e in splits.get(split, []):
            if ids.setdefault(e.id, split) != split:
                raise CompressError(f"{e.where}.id: the id {e.id!r} is also a question of the {ids[e.id]} split. Give "
                                    "every question its own id.")
    from datasets import Dataset, DatasetDict

    dd = DatasetDict({s: Dataset.from_dict(_rows(splits[s])) for s in SPLIT_NAMES if s in splits})
    return QATaskData(dd, source, files, version, _fingerprint(dd), notes)


# ----------------------------------------------------------------------------- loading


def _read_folder(path: Path) -> dict[str, Path]:
    return folder_splits(path, JSON_SUFFIXES, "A QA data folder needs train.json (SQuAD format), and may hold "
                         "validation (or dev) and test .json files.", stem_prefix=True)


def load_qa_data(spec: str, seed: int = 0, question_column: str | None = None, context_column: str | None = None,
                 answers_column: str | None = None) -> QATaskData:
    """A QA task from ``squad-dev``, a SQuAD-format file or folder, or a hub dataset (``hf:NAME[:CONFIG]``)."""
    if spec == "squad-dev":
        return squad_dev(seed)
    path = Path(spec).expanduser()
    if path.is_dir():
        found = _read_folder(path)
        read = {s: read_squad_json(p) for s, p in found.items()}
        version = max(v for v, _ in read.values())
        return build_qa_task({s: ex for s, (_, ex) in read.items()}, {s: str(p) for s, p in found.items()}, str(path),
                             seed, version)
    if path.exists():
        if path.suffix.lower() not in JSON_SUFFIXES:
            raise CompressError(f"{path}: unsupported file type {path.suffix!r} for question answering. Give a "
                                "SQuAD-format .json file.")
        version, examples = read_squad_json(path)
        return build_qa_task({"train": examples}, {"train": str(path)}, str(path), seed, version)
    from compress.core import hub

    named = None if path.suffix.lower() in JSON_SUFFIXES else hub.dataset_spec(spec)
    if named is None:
        raise CompressError(f"data {spec!r} is neither the built-in squad-dev nor an existing file or folder. Give a "
                            "SQuAD-format .json file, a folder with train/validation/test .json files, or a Hugging "
                            "Face dataset in the squad shape as hf:NAME.")
    name, config = named
    loaded = hub.load_hub_dataset(name, config)
    return dataset_qa_data(loaded, f"hf:{name}" + (f":{config}" if config else ""), seed, question_column,
                           context_column, answers_column)


def dataset_qa_data(loaded: Any, origin: str, seed: int = 0, question_column: str | None = None,
                    context_column: str | None = None, answers_column: str | None = None) -> QATaskData:
    """A ``datasets.DatasetDict`` (or one Dataset, taken as train) in the squad shape as a QA task."""
    found, notes = hub_splits(loaded, origin)
    files = {split: label for split, (label, _) in found.items()}
    splits = {split: examples_from_dataset(ds, label, question_column, context_column, answers_column)
              for split, (label, ds) in found.items()}
    impossible = any(e.is_impossible for ex in splits.values() for e in ex)
    return build_qa_task(splits, files, origin, seed, "2.0" if impossible else "1.1", notes)


def squad_dev(seed: int = 0) -> QATaskData:
    """The built-in SQuAD v1.1 dev set (Rajpurkar et al. 2016; CC BY-SA 4.0; builtin_data/squad11/README.md).

    Its 48 articles and 10,570 questions, read from the two files shipped in the package after
    checking their sha256, split by article into train / validation / test (:func:`split_by_article`,
    ``seed`` 0 unless given: 40 / 4 / 4 articles).
    """
    examples: list[QAExample] = []
    for name in SQUAD_DEV_FILES:
        path = SQUAD_DEV_DIR / name
        check_builtin_file(path, f"squad11/{name}", "SQuAD")
        version, part = read_squad_json(path)
        if version != "1.1":
            raise CompressError(f"{path}: version {version!r}, expected '1.1'. Reinstall bert-compress.")
        examples += part
    _check_unique_ids(examples)
    articles = len({e.title for e in examples})
    if (articles, len(examples)) != (SQUAD_DEV_ARTICLES, SQUAD_DEV_QUESTIONS):
        raise CompressError(f"{SQUAD_DEV_DIR}: {articles} articles and {len(examples)} questions, expected "
                            f"{SQUAD_DEV_ARTICLES} and {SQUAD_DEV_QUESTIONS}. Reinstall bert-compress.")
    files = {"train": str(SQUAD_DEV_DIR)}
    return build_qa_task({"train": examples}, files, "squad-dev", seed, "1.1")


# ----------------------------------------------------------------------------- the data aspect (compress.tasks.protocol.data)


def builtin_data() -> dict[str, str]:
    """The built-in question-answering set."""
    return {"squad-dev": "SQuAD v1.1 dev (extractive QA; 48 articles, 10,570 questions, split by article; "
                         "CC BY-SA 4.0), shipped in the package"}


def column_flags() -> tuple[str, ...]:
    """``--question-column`` / ``--context-column`` / ``--answers-column`` say the data is question-answering data."""
    return ("question_column", "context_column", "answers_column")


def recognises(source: Any) -> bool:
    """A SQuAD-format ``.json`` file (a folder's train file), or a hub dataset with question, passage and answers
    columns."""
    if source.file is None:
        columns = source.hub_columns
        return all(any(c in columns for c in names) for names in (QUESTION_COLUMNS, CONTEXT_COLUMNS, ANSWERS_COLUMNS))
    return source.suffix == ".json" and _looks_like_squad(source.head_text)


def _looks_like_squad(head: str) -> bool:
    """A JSON object whose ``data`` holds ``paragraphs`` (read from the file's first bytes; the QA loader checks the
    whole file, naming the JSON path of anything wrong)."""
    start = head.lstrip()[:1]
    # a bare list of articles is SQuAD without its {"data": ...} wrapper: the QA loader says so
    return (start == "{" and '"data"' in head or start == "[") and '"paragraphs"' in head


def accepts(source: Any) -> bool:
    """Question-answering data is recognised or not at all."""
    return False


def load(options: Any, num_labels: int | None = None) -> QATaskData:
    """The question-answering data ``options`` name (:meth:`compress.config.DataOptions.load_qa`)."""
    return options.load_qa()


def data_kind() -> str:
    return "question-answering data (SQuAD format)"


def model_kind() -> str:
    return "a span reader (question answering)"


def head_fits(config: Any) -> bool:
    """Every question-answering head is one (no other task shares its head class)."""
    return True


def claims_model(model: str, source: Any) -> bool:
    """Never: a reader is told by its data, and a model's head is checked against it afterwards."""
    return False
