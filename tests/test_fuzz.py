"""Fuzz-style checks: random bytes and random table shapes never escape as anything but a
CompressError (one clear message) from the data loader."""

import json
import random
import string

import pytest

from compress.data import load_task_data
from compress.errors import CompressError

SEEDS = range(60)


def _random_value(rng: random.Random):
    kind = rng.randrange(8)
    if kind == 0:
        return None
    if kind == 1:
        return rng.randint(-3, 5)
    if kind == 2:
        return rng.random() * 10 - 5
    if kind == 3:
        return "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 20)))
    if kind == 4:
        return rng.choice(["pos", "neg", "neutral"])
    if kind == 5:
        return [rng.randint(0, 3)]
    if kind == 6:
        return {"nested": rng.random()}
    return rng.choice([True, False])


def _random_rows(rng: random.Random) -> list[dict]:
    columns = rng.sample(["text", "label", "sentence", "y", "extra", ""], rng.randint(0, 4))
    return [{c: _random_value(rng) for c in columns} for _ in range(rng.randint(0, 30))]


@pytest.mark.parametrize("seed", SEEDS)
def test_random_bytes_never_crash(tmp_path, seed):
    rng = random.Random(seed)
    suffix = rng.choice([".csv", ".tsv", ".jsonl", ".json", ".parquet"])
    path = tmp_path / f"data{suffix}"
    path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(0, 400))))
    try:
        load_task_data(str(path))
    except CompressError:
        pass


@pytest.mark.parametrize("seed", SEEDS)
def test_random_table_shapes_never_crash(tmp_path, seed):
    import pandas as pd

    rng = random.Random(1000 + seed)
    rows = _random_rows(rng)
    suffix = rng.choice([".csv", ".tsv", ".jsonl", ".json"])
    path = tmp_path / f"data{suffix}"
    if suffix in (".jsonl", ".json"):
        text = "\n".join(json.dumps(r) for r in rows) if suffix == ".jsonl" else json.dumps(rows)
        path.write_text(text)
    else:
        pd.DataFrame(rows).to_csv(path, sep="\t" if suffix == ".tsv" else ",", index=False)
    try:
        task = load_task_data(str(path))
    except CompressError:
        return
    # whatever loads is a valid task
    assert task.num_labels >= 2 and len(task.splits["train"]) > 0
    assert all(isinstance(t, str) and t.strip() for t in task.splits["train"]["text"][:])
