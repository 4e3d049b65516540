"""The data aspect of sentence embedding (:mod:`compress.tasks.protocol.data`): the user's text, or scored pairs.

A two-tower student learns the teacher's vectors, so its training data is text alone: a ``.txt`` file (one text a
line) or a csv/tsv/jsonl/parquet table's ``--text-column``, or a built-in unlabelled corpus (read by
:func:`compress.corpora.corpus.load_unlabeled`). A seeded tenth (at least :data:`MIN_HELD_OUT` texts) is held
out for the label-free quality measure, neighbour recall against the teacher. Scored sentence pairs (the STS
layout, ``stsb-captions``: what :mod:`compress.tasks.sentence_similarity.data` reads) are read by that loader and
held as :class:`EmbeddingPairs`, the data an encoder is scored on by STS Spearman.

Such text looks like any classification table without its labels, and scored sentence pairs are the cross-encoder's
data too, so this task recognises nothing by content and accepts nothing by default: it is chosen by its model (a
sentence-transformers folder) or by name, never by guessing from a file.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compress.core.errors import CompressError

#: The held-out share of the texts, and the fewest held out (neighbour recall@10 needs more than 10).
HELD_OUT_SHARE, MIN_HELD_OUT = 0.1, 50


@dataclass
class EmbeddingData:
    """Texts to distil on (``train``) and texts held out for neighbour recall (``held_out``), from ``source``."""

    train: list[str]
    held_out: list[str]
    source: str
    stats: dict[str, int] = field(default_factory=dict)
    task: str = "sentence-embedding"

    @property
    def splits(self) -> dict[str, list[str]]:
        """``train`` and the held-out texts as ``validation``, by the split names the stages use."""
        return {"train": self.train, "validation": self.held_out}

    def describe(self) -> dict[str, Any]:
        """What results.json and compress.json record of the data: its source, split sizes and text counts."""
        return {"source": self.source, "task": self.task, "splits": {k: len(v) for k, v in self.splits.items()},
                **self.stats}


class EmbeddingPairs:
    """Scored sentence pairs (a :class:`compress.tasks.sentence_similarity.data.SimilarityTaskData`) read as a
    two-tower encoder's data: each side of a pair is embedded alone, the pair's cosine scored against its score."""

    task = "sentence-embedding"

    def __init__(self, pairs: Any) -> None:
        self.pairs = pairs
        self.splits = pairs.splits
        self.source = pairs.source

    def texts(self, split: str) -> list[tuple[str, str]]:
        """The pairs of ``split``."""
        return self.pairs.texts(split)

    def scores(self, split: str) -> Any:
        """The gold scores of ``split``, float64."""
        return self.pairs.scores(split)

    def describe(self) -> dict[str, Any]:
        return {**self.pairs.describe(), "task": self.task}


def split_texts(texts: list[str], seed: int = 0, limit: int | None = None, source: str = "the texts") -> EmbeddingData:
    """Unique texts shuffled with ``seed``, a held-out slice cut off (a tenth, at least :data:`MIN_HELD_OUT`), and
    the training part cut to ``limit``. A text never lands on both sides."""
    unique = list(dict.fromkeys(t for t in texts if t.strip()))
    if len(unique) < 2 * MIN_HELD_OUT:
        raise CompressError(f"{source}: {len(unique)} distinct texts; distilling an encoder and holding out "
                            f"{MIN_HELD_OUT} for neighbour recall needs at least {2 * MIN_HELD_OUT}. Give more text.")
    random.Random(seed).shuffle(unique)
    n_held = max(MIN_HELD_OUT, int(round(HELD_OUT_SHARE * len(unique))))
    held_out, train = unique[:n_held], unique[n_held:]
    if limit is not None:
        train = train[:limit]
    return EmbeddingData(train, held_out, source, {"texts": len(texts), "unique": len(unique)})


def builtin_data() -> dict[str, str]:
    """None of its own: the built-in unlabelled corpora (``movie-reviews-unlabeled`` ...) are read by name."""
    return {}


def column_flags() -> tuple[str, ...]:
    """None: ``--text-column`` has a default every table task reads, so it claims nothing."""
    return ()


def recognises(source: Any) -> bool:
    """Never by content: text alone is also classification data without labels (see the module docstring)."""
    return False


def accepts(source: Any) -> bool:
    """Never as a fallback: classification reads what nobody recognised."""
    return False


def load(options: Any, num_labels: int | None = None) -> EmbeddingData | EmbeddingPairs:
    """Scored pairs when ``options.data`` is similarity data (:class:`EmbeddingPairs`), else the texts it names
    (``text_column`` of a table) split by ``split_seed``, cut to ``limit``. ``num_labels`` bounds nothing: an
    encoder has no classes (a stage passes the size of a model's head, which a bare encoder's config defaults)."""
    from compress.tasks.protocol.data import DataSource
    from compress.tasks.sentence_similarity import data as similarity
    from compress.corpora.corpus import load_unlabeled

    given = {flag: getattr(options, flag, None) for flag in similarity.column_flags()}
    if options.data in similarity.builtin_data() or similarity.recognises(DataSource(options.data, given)):
        return EmbeddingPairs(similarity.load(options))
    corpus = load_unlabeled(options.data, text_column=options.text_column)
    return split_texts(corpus.texts, seed=options.split_seed, limit=options.checked_limit(), source=str(options.data))


def _text_alone(source: Any) -> bool:
    """Whether ``source`` is unlabelled text: a ``.txt`` file (one text a line) or a built-in unlabelled corpus."""
    from compress.tasks.tables import BUILTIN_UNLABELED

    return source.spec in BUILTIN_UNLABELED or (source.file is not None and source.suffix == ".txt")


def _recorded_task(folder: Path) -> str | None:
    """The task an artifact's ``compress.json`` records (its registry name; an alias of an old one read as it)."""
    import json

    from compress.tasks.registry import get_task

    try:
        name = json.loads((folder / "compress.json").read_text(encoding="utf-8")).get("task")
        return get_task(name).name if isinstance(name, str) else None
    except (OSError, ValueError, AttributeError, CompressError):
        return None


def claims_model(model: str, source: Any) -> bool:
    """A model this task wrote (its ``compress.json`` records ``sentence-embedding``) always; a sentence-transformers
    folder (``modules.json``) for unlabelled text or scored pairs; a built-in sentence model (``minilm``,
    ``mpnet-base``) for unlabelled text, and for scored pairs only when it is to be used as it is (``teacher
    --finetune no``, ``source.as_is``: recipes/embedding.yaml), since otherwise given scored pairs the built-ins are
    the cross-encoder's encoder under a new head (``recipes/similarity.yaml``; a bare encoder kept as it is has no
    trained head there). Labelled tables keep a sentence-transformers folder an encoder under a new head."""
    from compress.tasks.sentence_embedding import NAME
    from compress.tasks.sentence_embedding.folder import BUILTIN, builtin_name, is_sentence_transformers

    folder = Path(model).expanduser()
    if folder.is_dir() and _recorded_task(folder) == NAME:
        return True
    if model in BUILTIN or (folder.is_dir() and builtin_name(folder) is not None):
        return _text_alone(source) or (getattr(source, "as_is", False) and _scored_pairs(source))
    if not (folder.is_dir() and is_sentence_transformers(folder)):
        return False
    return _scored_pairs(source) or _text_alone(source)


def _scored_pairs(source: Any) -> bool:
    """Whether ``source`` is scored sentence pairs (the cross-encoder's data: a built-in set or a recognised table)."""
    from compress.tasks.sentence_similarity import data as similarity

    return source.spec in similarity.builtin_data() or similarity.recognises(source)


def data_kind() -> str:
    return "text to embed (one text a line, or a text column)"


def model_kind() -> str:
    return "a sentence encoder (two-tower)"


def head_fits(config: Any) -> bool:
    """No transformers head is this task's (its models are bare encoders), so none fits."""
    return False
