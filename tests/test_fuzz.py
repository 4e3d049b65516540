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


def _random_toml(rng: random.Random) -> str:
    keys = ["min_speedup", "max_accuracy_drop", "min_agreement", "max_size_mb", "bogus", "speedup_batch_size",
            "require_full_attention_fusion", "max_regression", ""]
    values = ["1", "0.5", "-2", "true", '"x"', "[1, 2]", "{a = 1}", "nan", "inf", "", "1e400"]
    lines = []
    for _ in range(rng.randint(0, 8)):
        kind = rng.randrange(4)
        if kind == 0:
            lines.append(rng.choice(["[rules]", "[artifacts.\"onnx\"]", "[other]", "[rules", "[[rules]]"]))
        elif kind == 1:
            lines.append(f"{rng.choice(keys)} = {rng.choice(values)}")
        elif kind == 2:
            lines.append("".join(rng.choice(string.printable) for _ in range(rng.randint(0, 30))))
        else:
            lines.append("")
    return "\n".join(lines)


def _random_json(rng: random.Random, depth: int = 0):
    kind = rng.randrange(7 if depth < 3 else 4)
    if kind == 0:
        return rng.choice([None, True, 1, -1.5, "x"])
    if kind == 1:
        return rng.random()
    if kind == 2:
        return rng.choice(["bert-compress-bench", "1", ""])
    if kind == 3:
        return rng.randint(-2, 3)
    if kind == 4:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = ["schema", "schema_version", "artifacts", "reference", "settings", "name", "latency", "quality", "x"]
    return {rng.choice(keys): _random_json(rng, depth + 1) for _ in range(rng.randint(0, 6))}


@pytest.mark.parametrize("seed", SEEDS)
def test_gates_parser_never_crashes(tmp_path, seed):
    from benchmarks.gate import load_results, load_rules

    rng = random.Random(2000 + seed)
    rules = tmp_path / "gates.toml"
    rules.write_bytes(_random_toml(rng).encode() if seed % 3 else bytes(rng.randrange(256) for _ in range(200)))
    try:
        load_rules(rules)
    except CompressError:
        pass
    results = tmp_path / "results.json"
    doc = _random_json(rng)
    if isinstance(doc, dict) and seed % 2:
        doc.update({"schema": "bert-compress-bench", "schema_version": 1})
    results.write_text(json.dumps(doc) if seed % 5 else "{not json")
    try:
        load_results(results)
    except CompressError:
        pass
