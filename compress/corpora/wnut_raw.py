"""The built-in unlabelled corpus ``wnut17-unlabeled``: the raw text WNUT-17's sentences were drawn from.

The WNUT-17 repository (leondz/emerging_entities_17, CC BY 4.0) keeps, beside the annotated files,
the unannotated text its annotators sampled from (``source/raw_data/``): tweets around four 2016/17
events, Reddit comments, Stack Exchange titles and comments, YouTube comments. That is in-domain
text for a WNUT tagger, so the teacher's per-word soft labels on it are transfer data
(``distill --unlabeled wnut17-unlabeled``) and masked-LM text (``pretrain``).

Because the validation and test sentences were drawn *from these files*, an exact-match filter is
not enough: measured on the shipped files, 1,349 raw lines equal a test sentence and, after those
are dropped, 829 more share a run of six words with one (a test sentence cut from a longer Reddit
comment, say). :class:`compress.corpora.texts.HeldOutRuns` drops both kinds, for the validation and
test splits (a leak) and for the training split (a sentence counted twice). What is left is
deduplicated and lines of fewer than :data:`compress.corpora.builtin.MIN_WORDS` words are dropped;
the counts go to ``stats.json`` beside the prepared corpus.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

from compress.core.assets import SHA256, cache_dir
from compress.tasks.tables import WNUT17_UNLABELED_VERSION
from compress.core.errors import CompressError
from compress.tasks.token_classification.data import WNUT17_DIR, wnut17
from compress.corpora.builtin import MIN_WORDS, save_prepared_corpus, word_count
from compress.corpora.texts import HeldOutRuns, normalize_text

#: The raw files of leondz/emerging_entities_17 ``source/raw_data/`` (commit e52a2d2), gzip-compressed in
#: the package; their sha256 (of the uncompressed bytes, as upstream) are in :data:`compress.core.assets.SHA256`.
RAW_FILES = ("gurez.10000", "ile.10000", "palm.10000", "rigo.10000", "redd.tok.uniq", "stacko-src", "yt-filter")
RAW_DIR = WNUT17_DIR / "raw"
#: The platform each raw file holds: the corpus's ``source`` column, which ``--unlabeled-balance source`` draws
#: evenly over (the four tweet files are one platform, collected around four events).
RAW_SOURCE = {"gurez.10000": "twitter", "ile.10000": "twitter", "palm.10000": "twitter", "rigo.10000": "twitter",
              "redd.tok.uniq": "reddit", "stacko-src": "stackexchange", "yt-filter": "youtube"}
#: A corpus line sharing a run of this many words with a WNUT sentence is dropped.
OVERLAP_WORDS = 6


def raw_lines(name: str) -> list[str]:
    """The non-empty lines of one shipped raw file, after checking its sha256 against upstream's."""
    path = RAW_DIR / f"{name}.gz"
    if not path.is_file():
        raise CompressError(f"{path}: the built-in WNUT-17 raw text is missing from the installed package. Reinstall "
                            "bert-compress (pip install --force-reinstall .).")
    data = gzip.decompress(path.read_bytes())
    actual, expected = hashlib.sha256(data).hexdigest(), SHA256[f"wnut17/raw/{name}"]
    if actual != expected:
        raise CompressError(f"{path}: sha256 {actual} of its text does not match upstream's {expected}: the package's "
                            "copy was changed. Reinstall bert-compress (pip install --force-reinstall .).")
    lines = (line.strip() for line in data.decode("utf-8").split("\n"))
    return [line for line in lines if line]


def _prepared() -> Path:
    return cache_dir() / "datasets" / f"wnut17-unlabeled-v{WNUT17_UNLABELED_VERSION}"


def wnut17_unlabeled():
    """``wnut17-unlabeled`` as a ``datasets.Dataset`` with ``text`` and ``source`` columns (prepared once, then
    cached); ``source`` is the platform of the line's raw file (:data:`RAW_SOURCE`)."""
    from datasets import Dataset

    final = _prepared()
    if not (final / "stats.json").exists():
        task = wnut17()
        sentences = {name: [" ".join(words) for words in split["tokens"]] for name, split in task.splits.items()}
        held_out = HeldOutRuns.of(sentences.get("validation", []) + sentences.get("test", []), OVERLAP_WORDS)
        labelled = HeldOutRuns.of(sentences["train"], OVERLAP_WORDS)
        stats: dict[str, int] = {"lines": 0, "short": 0, "duplicates": 0, "repeats_validation_or_test": 0,
                                 "repeats_training": 0}
        seen: set[str] = set()
        keep: list[str] = []
        sources: list[str] = []
        for name in RAW_FILES:
            lines = raw_lines(name)
            stats[f"lines_{name}"] = len(lines)
            stats["lines"] += len(lines)
            for line in lines:
                if word_count(line) < MIN_WORDS:
                    stats["short"] += 1
                    continue
                key = normalize_text(line)
                if key in seen:
                    stats["duplicates"] += 1
                    continue
                seen.add(key)
                if held_out.repeats(line):
                    stats["repeats_validation_or_test"] += 1
                elif labelled.repeats(line):
                    stats["repeats_training"] += 1
                else:
                    keep.append(line)
                    sources.append(RAW_SOURCE[name])
        save_prepared_corpus(final, keep, stats, {"source": sources})
    return Dataset.load_from_disk(str(final))


def wnut17_unlabeled_stats() -> dict[str, int]:
    """How ``wnut17-unlabeled`` was made: lines per file, dropped (short, duplicate, repeating a WNUT sentence), kept."""
    wnut17_unlabeled()
    return json.loads((_prepared() / "stats.json").read_text(encoding="utf-8"))
