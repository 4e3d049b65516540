"""The toy task's ``data`` aspect: a ``.stories`` file, one story per line, its sentences separated by `` / ``.

Each story's consecutive sentences make two rows: the pair in the story's order (label 0, ``in-order``) and
swapped (label 1). Stories, not rows, are split 80/10/10 with ``--split-seed``, so a pair and its swap stay in one
split. The rows are ``text``/``text_pair``/``label`` columns, the names the shared tokenizer and collator read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from compress.core.errors import CompressError
from compress.tasks.tables import _fingerprint
from tests.support.toy_task import LABEL_NAMES, NAME

SUFFIX = ".stories"
SEPARATOR = " / "


@dataclass
class OrderTaskData:
    """Sentence pairs with an order label, per split (a ``datasets.DatasetDict``)."""

    splits: Any
    source: str
    fingerprint: str

    task = NAME
    is_pair = True
    num_labels = 2
    label_names = LABEL_NAMES

    def texts(self, split: str) -> list[tuple[str, str]]:
        ds = self.splits[split]
        return list(zip(ds["text"][:], ds["text_pair"][:]))

    def labels(self, split: str) -> np.ndarray:
        return np.asarray(self.splits[split]["label"][:], dtype=np.int64)

    def sizes(self) -> dict[str, int]:
        return {name: len(split) for name, split in self.splits.items()}

    def describe(self) -> dict[str, Any]:
        """What ``compress.json`` records of the data."""
        return {"task": NAME, "source": self.source, "fingerprint": self.fingerprint, "sizes": self.sizes()}


def read_stories(path: Path) -> list[list[str]]:
    """The stories of a ``.stories`` file; a line of fewer than two sentences is one error naming it."""
    stories = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        sentences = [s.strip() for s in line.split(SEPARATOR.strip())]
        if len(sentences) < 2 or not all(sentences):
            raise CompressError(f"{path}: line {number}: a story needs two or more sentences separated by "
                                f"{SEPARATOR!r}.")
        stories.append(sentences)
    if len(stories) < 10:
        raise CompressError(f"{path}: {len(stories)} stories; give at least 10 to carve validation and test.")
    return stories


def _rows(stories: list[list[str]]) -> dict[str, list]:
    rows: dict[str, list] = {"text": [], "text_pair": [], "label": []}
    for story in stories:
        for first, second in zip(story, story[1:]):
            for a, b, label in ((first, second, 0), (second, first, 1)):
                rows["text"].append(a)
                rows["text_pair"].append(b)
                rows["label"].append(label)
    return rows


def load_order_data(path: Path, seed: int = 0, limit: int | None = None) -> OrderTaskData:
    """The splits of a ``.stories`` file, carved by story (80/10/10, ``seed``); ``limit`` rows per split at most."""
    from datasets import Dataset, DatasetDict

    stories = read_stories(path)
    order = np.random.RandomState(seed).permutation(len(stories))
    n_val = n_test = max(1, len(stories) // 10)
    parts = {"validation": order[:n_val], "test": order[n_val:n_val + n_test], "train": order[n_val + n_test:]}
    splits = {}
    for name, picked in parts.items():
        rows = _rows([stories[i] for i in picked])
        splits[name] = Dataset.from_dict({k: v[:limit] if limit else v for k, v in rows.items()})
    dd = DatasetDict(splits)
    return OrderTaskData(dd, str(path), _fingerprint(dd))


# ----------------------------------------------------------------------------- the data aspect


def builtin_data() -> dict[str, str]:
    return {}


def column_flags() -> tuple[str, ...]:
    return ()


def recognises(source: Any) -> bool:
    """A ``.stories`` file (or a folder whose train file is one)."""
    return source.file is not None and source.suffix == SUFFIX


def accepts(source: Any) -> bool:
    return False


def load(options: Any, num_labels: int | None = None) -> OrderTaskData:
    if num_labels is not None and num_labels != 2:
        raise CompressError(f"a sentence-order model has 2 labels ({', '.join(LABEL_NAMES)}), not {num_labels}.")
    path = Path(options.data).expanduser()
    if path.is_dir():
        path = next(p for p in sorted(path.iterdir()) if p.stem.lower() == "train")
    return load_order_data(path, options.split_seed, options.checked_limit())


def claims_model(model: str, source: Any) -> bool:
    """Never: the data says the task, the model's head is checked against it afterwards."""
    return False


def head_fits(config: Mapping[str, Any]) -> bool:
    """No other task has a next-sentence head: any is this task's."""
    return True


def data_kind() -> str:
    return "sentence-order data (stories)"


def model_kind() -> str:
    return "a sentence-order model"
