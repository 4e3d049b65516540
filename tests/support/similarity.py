"""Scored sentence pairs for the sentence-similarity tests: tables in the STS Benchmark's layout, written in-process.

A pair's score is how many of its words the two sentences share, on the 0..5 scale; the second sentence's other
words come from a vocabulary of their own, so a tiny model learns the score from which words it sees in a few
dozen steps, and the correlation metrics have something to measure.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

WORDS = ("red", "blue", "cat", "dog", "runs", "sleeps", "big", "small", "house", "tree", "car", "man")
#: The words a second sentence has instead of the first one's.
OTHER = ("one", "two", "three", "four", "five", "six", "seven", "eight")


def scored_pairs(n: int, seed: int = 0) -> list[dict]:
    """``n`` rows ``{"sentence1", "sentence2", "score"}``; scores are fractions of 5 (so they read as floats)."""
    rng = np.random.RandomState(seed)
    rows = []
    for _ in range(n):
        first = list(rng.choice(WORDS, size=4, replace=False))
        keep = int(rng.randint(0, 5))
        second = first[:keep] + list(rng.choice(OTHER, size=4 - keep, replace=False))
        rows.append({"sentence1": " ".join(first), "sentence2": " ".join(second),
                     "score": round(5.0 * keep / 4 + float(rng.uniform(-0.2, 0.2)) * (0 < keep < 4), 3)})
    return rows


def write_pairs(path: Path, rows: list[dict]) -> Path:
    """``rows`` as a csv, tsv, jsonl or parquet table (by ``path``'s suffix)."""
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif suffix == ".parquet":
        pd.DataFrame(rows).to_parquet(path)
    else:
        pd.DataFrame(rows).to_csv(path, index=False, sep="\t" if suffix == ".tsv" else ",")
    return path
