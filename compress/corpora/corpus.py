"""Unlabelled corpora for distillation: read a file or the built-in corpus, then filter it.

Empty rows are dropped and counted; duplicates, held-out texts (validation/test) and labelled
training texts are removed before anything is soft-labelled.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from compress.tasks.tables import BUILTIN_UNLABELED
from compress.core.errors import CompressError
from compress.corpora.builtin import movie_reviews_unlabeled, movie_reviews_unlabeled_stats
from compress.corpora.similarity import most_similar
from compress.corpora.texts import HeldOutRuns, text_key
from compress.corpora.wnut_raw import wnut17_unlabeled, wnut17_unlabeled_stats
from compress.tasks.tables import read_table, require_column

#: The group of a row whose ``--unlabeled-balance`` cell is empty.
NO_GROUP = "(none)"
UNLABELED_SUFFIXES = (".txt", ".csv", ".tsv", ".jsonl", ".json", ".parquet")
#: The loader of each built-in corpus of :data:`compress.tasks.tables.BUILTIN_UNLABELED` (a ``text`` Dataset).
BUILTIN_CORPORA = {"movie-reviews-unlabeled": movie_reviews_unlabeled, "wnut17-unlabeled": wnut17_unlabeled}
#: How each built-in corpus was prepared (its ``stats.json``), for the artifacts' records.
BUILTIN_CORPUS_STATS = {"movie-reviews-unlabeled": movie_reviews_unlabeled_stats,
                        "wnut17-unlabeled": wnut17_unlabeled_stats}


@dataclass
class UnlabeledCorpus:
    """Texts (and second texts, for sentence pairs) read from a corpus, with what was dropped."""

    texts: list[str]
    pairs: list[str] | None
    source: str
    stats: dict[str, int] = field(default_factory=dict)
    #: Each text's value in the ``--unlabeled-balance`` column (its source, channel or domain), or ``None``:
    #: a ``limit`` sample is then drawn evenly across these values (:func:`balanced_sample`).
    groups: list[str] | None = None


def _present(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, float) and value != value:
        return False
    text = str(value)
    return bool(text.strip()) and text != "<NA>"


def read_unlabeled(path: str | os.PathLike, text_column: str = "text", text_pair_column: str | None = None,
                   balance_column: str | None = None) -> UnlabeledCorpus:
    """Read a text-only corpus: ``.txt`` (one text a line) or a csv/tsv/jsonl/json/parquet table.

    Empty texts are dropped (and counted) rather than refused: a scraped corpus has blank lines,
    and an unlabelled row carries no label that could be lost with it. ``balance_column`` names a
    column of the table (a source or channel) whose values the sample is balanced over; an empty
    cell there is its own group, ``(none)``.
    """

    path = Path(path).expanduser()
    if not path.exists():
        raise CompressError(
            f"--unlabeled {path}: no such file. Give a .txt file (one text a line), a csv/tsv/jsonl/parquet file with "
            f"a text column, or a built-in corpus: {', '.join(BUILTIN_UNLABELED)}."
        )
    if path.is_dir():
        raise CompressError(f"--unlabeled {path} is a folder; give one file (.txt, .csv, .tsv, .jsonl or .parquet).")
    suffix = path.suffix.lower()
    if suffix not in UNLABELED_SUFFIXES:
        raise CompressError(f"--unlabeled {path}: unsupported file type {suffix!r}. Use one of "
                            f"{', '.join(UNLABELED_SUFFIXES)}.")
    if suffix == ".txt":
        if balance_column:
            raise CompressError(f"--unlabeled {path}: a .txt corpus has no columns to balance over "
                                f"(--unlabeled-balance {balance_column}). Give a csv/tsv/jsonl/parquet file with a "
                                "text column and that column, or drop --unlabeled-balance.")
        if text_pair_column:
            raise CompressError(f"--unlabeled {path}: a .txt corpus holds one text a line, but this is a sentence-pair "
                                "task. Give a csv/tsv/jsonl/parquet file and name its columns with "
                                "--unlabeled-text-column and --unlabeled-text-pair-column.")
        try:
            with open(path, encoding="utf-8-sig") as handle:
                lines = [line.strip() for line in handle]
        except UnicodeDecodeError as exc:
            raise CompressError(f"--unlabeled {path}: not UTF-8 text ({exc.reason} at byte {exc.start}). "
                                "Convert it to UTF-8.") from exc
        texts = [line for line in lines if line]
        return UnlabeledCorpus(texts, None, str(path), {"rows": len(lines), "empty": len(lines) - len(texts)})
    frame = read_table(path)
    values = require_column(frame, text_column, "--unlabeled-text-column", str(path)).tolist()
    seconds = None
    if text_pair_column:
        seconds = require_column(frame, text_pair_column, "--unlabeled-text-pair-column", str(path)).tolist()
    kinds = None
    if balance_column:
        kinds = require_column(frame, balance_column, "--unlabeled-balance", str(path)).tolist()
    keep = [i for i, v in enumerate(values) if _present(v) and (seconds is None or _present(seconds[i]))]
    texts = [str(values[i]).strip() for i in keep]
    pairs = [str(seconds[i]).strip() for i in keep] if seconds is not None else None
    groups = [str(kinds[i]).strip() if _present(kinds[i]) else NO_GROUP for i in keep] if kinds is not None else None
    if not texts:
        raise CompressError(f"--unlabeled {path}: column {text_column!r} holds no text in any of its {len(values)} rows.")
    return UnlabeledCorpus(texts, pairs, str(path), {"rows": len(values), "empty": len(values) - len(texts)}, groups)


def load_unlabeled(spec: str, text_column: str = "text", text_pair_column: str | None = None,
                   is_pair: bool = False, balance_column: str | None = None) -> UnlabeledCorpus:
    """A built-in corpus name or a file, read into an :class:`UnlabeledCorpus` (nothing filtered yet);
    ``balance_column`` (``--unlabeled-balance``) is read beside the texts, from the file or the built-in corpus."""
    if is_pair and not text_pair_column:
        raise CompressError(
            f"--unlabeled {spec}: the task is a sentence-pair task, so the unlabelled corpus must hold pairs too. "
            "Give a csv/tsv/jsonl/parquet file and name its second column with --unlabeled-text-pair-column."
        )
    if not is_pair and text_pair_column:
        raise CompressError("--unlabeled-text-pair-column is set but the task has single texts; drop the option, "
                            "or give the task's --text-pair-column too.")
    if spec in BUILTIN_UNLABELED:
        if is_pair:
            raise CompressError(f"--unlabeled {spec} holds single sentences; a sentence-pair task needs a pair corpus.")
        ds = BUILTIN_CORPORA[spec]()
        groups = None
        if balance_column:
            if balance_column not in ds.column_names:
                others = [c for c in ds.column_names if c != "text"]
                has = f"its columns to balance over: {', '.join(others)}" if others else "it has only its text"
                raise CompressError(f"--unlabeled-balance {balance_column}: the built-in corpus {spec} has no such "
                                    f"column ({has}). Drop --unlabeled-balance or name one of those.")
            groups = [str(g) for g in ds[balance_column][:]]
        return UnlabeledCorpus(ds["text"][:], None, spec, {"rows": len(ds), "empty": 0}, groups)
    return read_unlabeled(spec, text_column, text_pair_column, balance_column)


def balanced_sample(groups: list[str], limit: int, seed: int = 0) -> list[int]:
    """``limit`` indices drawn evenly across the values of ``groups``, in corpus order.

    Every group gets an equal share; a group with fewer rows than its share gives all of them and the
    rest is shared out among the others (water-filling), so the sample has ``limit`` rows whenever the
    corpus does. Within a group the rows are a seeded random sample. This is the draw to make when the
    corpus mixes sources in other proportions than the traffic it stands for: a raw corpus that is 57%
    one platform would otherwise teach the student mostly that platform's text.
    """
    members: dict[str, list[int]] = {}
    for i, group in enumerate(groups):
        members.setdefault(group, []).append(i)
    quota = {group: 0 for group in members}
    left, open_groups = limit, sorted(members, key=lambda g: len(members[g]))
    while left > 0 and open_groups:
        share = left // len(open_groups)
        extra = left - share * len(open_groups)
        for rank, group in enumerate(list(open_groups)):
            want = share + (1 if rank >= len(open_groups) - extra else 0)
            take = min(want, len(members[group]) - quota[group])
            quota[group] += take
            left -= take
        open_groups = [g for g in open_groups if quota[g] < len(members[g])]
    rng = random.Random(seed)
    chosen: list[int] = []
    for group in sorted(members):
        rows = members[group]
        chosen += rows if quota[group] == len(rows) else rng.sample(rows, quota[group])
    return sorted(chosen)


def held_out_overlap(source: str, held_out_texts: list[str]) -> HeldOutRuns | None:
    """The run-based leak check (:class:`HeldOutRuns`) of a user's corpus against the task's validation and
    test texts; ``None`` for a built-in corpus, which was filtered that way against its own built-in task when
    it was prepared (``compress/builtin_data/*/README.md``), so its kept lines and the demo's numbers stay."""
    return None if source in BUILTIN_UNLABELED else HeldOutRuns.of(held_out_texts)


def filter_unlabeled(corpus: UnlabeledCorpus, held_out: set[str], labelled: set[str], limit: int | None = None,
                     seed: int = 0, overlap: HeldOutRuns | None = None,
                     similar_to: Sequence[str] | None = None) -> tuple[list[str], list[str] | None, dict[str, Any]]:
    """Drop duplicates, texts equal to a validation/test text (``held_out``) or to a labelled one, and with
    ``overlap`` (:func:`held_out_overlap`) texts that repeat a validation/test text inside a longer line.

    A corpus row equal to a held-out text would leak it into training, and so would a user's line that
    quotes one (a test sentence cut from a longer comment whose whole text is in the corpus); one equal to a
    training text would count that example twice. ``limit`` then keeps a seeded sample of the rest, drawn
    evenly across the corpus's ``groups`` when it has them (:func:`balanced_sample`); ``stats`` then has the
    rows kept per group (``kept_by_group``). With ``similar_to`` (the labelled training texts; ``--unlabeled-select
    similar``) the ``limit`` texts kept are instead those most like them (:func:`compress.corpora.similarity
    .most_similar`), and ``stats["similarity"]`` summarises the scores.
    """
    if similar_to is not None and corpus.groups is not None:
        raise CompressError("--unlabeled-select similar keeps the texts most like the task's and --unlabeled-balance "
                            "draws evenly across groups: choose one")
    stats = dict(corpus.stats)
    stats.update(duplicates=0, in_validation_or_test=0, in_training=0)
    if overlap is not None:
        stats["overlaps_validation_or_test"] = 0
    seen: set[str] = set()
    texts: list[str] = []
    pairs: list[str] | None = [] if corpus.pairs is not None else None
    groups: list[str] | None = [] if corpus.groups is not None else None
    for i, text in enumerate(corpus.texts):
        pair = corpus.pairs[i] if corpus.pairs is not None else None
        key = text_key(text, pair)
        if key in seen:
            stats["duplicates"] += 1
            continue
        seen.add(key)
        if key in held_out:
            stats["in_validation_or_test"] += 1
            continue
        if overlap is not None and (overlap.repeats(text) or (pair is not None and overlap.repeats(pair))):
            stats["overlaps_validation_or_test"] += 1
            continue
        if key in labelled:
            stats["in_training"] += 1
            continue
        texts.append(text)
        if pairs is not None:
            pairs.append(pair)
        if groups is not None:
            groups.append(corpus.groups[i])
    if limit is not None and len(texts) > limit:
        if similar_to is not None:  # a pair is compared as its two texts together
            scored = texts if pairs is None else [f"{t} {p}" for t, p in zip(texts, pairs)]
            chosen, stats["similarity"] = most_similar(similar_to, scored, limit)
        elif groups is not None:
            chosen = balanced_sample(groups, limit, seed)
        else:
            chosen = sorted(random.Random(seed).sample(range(len(texts)), limit))
        texts = [texts[i] for i in chosen]
        pairs = [pairs[i] for i in chosen] if pairs is not None else None
        groups = [groups[i] for i in chosen] if groups is not None else None
        stats["limited_to"] = limit
        stats["selected"] = "similar" if similar_to is not None else "balanced" if groups is not None else "random"
    stats["kept"] = len(texts)
    if groups is not None:
        stats["kept_by_group"] = {g: groups.count(g) for g in sorted(set(groups))}
    return texts, pairs, stats
