"""Mutation fuzzers for every file a user hands the toolkit: a data table, a benchmark results.json, a
gates rules TOML, a recipe YAML.

Each starts from a VALID file and applies one or two small, seeded mutations (delete, duplicate or
rename a field, change a type, put a number out of range, blank a cell, truncate, break a byte), so
most cases get past parsing to the checks behind it. For every case: the file loads, or the loader
raises a CompressError naming the file (and the line or the field, where there is one); any other
exception fails. Each case's outcome is sorted into the check that decided it (the error family, or
"loaded"), and the share of cases reaching each check must be above a stated minimum: a fuzzer that
stops at the first decode error, or never gets a file through, fails.

No torch: the four loaders are pure Python over pandas/datasets, tomllib and yaml. A failure names
the seed and the mutations, so ``_data_case(seed)`` (etc.) reproduces it.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any, Callable


from compress.core.errors import CompressError
from tests.conftest import sentiment_rows

CASES = 150


class Tally:
    """Outcomes per family; ``check`` asserts the minimum share of cases reaching each family."""

    def __init__(self, families: list[tuple[str, str]]):
        self.families = [(name, re.compile(pattern)) for name, pattern in families]
        self.counts: Counter[str] = Counter()
        self.cases = 0

    def family(self, message: str) -> str:
        return next((name for name, pattern in self.families if pattern.search(message)), "other")

    def record(self, outcome: str) -> None:
        self.counts[outcome] += 1
        self.cases += 1

    def check(self, minimums: dict[str, float], maximums: dict[str, float] | None = None) -> None:
        shares = {k: v / self.cases for k, v in self.counts.items()}
        table = ", ".join(f"{k} {v:.0%}" for k, v in sorted(shares.items(), key=lambda kv: -kv[1]))
        print(f"{self.cases} cases: {table}")  # with -s: where the cases went
        for name, least in minimums.items():
            assert shares.get(name, 0.0) >= least, f"only {shares.get(name, 0.0):.1%} of cases reached {name!r} " \
                                                   f"(minimum {least:.0%}); outcomes: {table}"
        for name, most in (maximums or {}).items():
            assert shares.get(name, 0.0) <= most, f"{shares.get(name, 0.0):.1%} of cases stopped at {name!r} " \
                                                  f"(maximum {most:.0%}); outcomes: {table}"


def _run(load: Callable[[], Any], what: str) -> CompressError | None:
    """``None`` when ``load`` succeeds, its CompressError when it refuses; anything else fails the test."""
    try:
        load()
    except CompressError as exc:
        assert str(exc).strip() and "Traceback" not in str(exc), what
        return exc
    except Exception as exc:  # noqa: BLE001 - the point of the fuzzer
        raise AssertionError(f"{what}: {type(exc).__name__} escaped instead of a CompressError: {exc}") from exc
    return None


def _break_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """One byte-level mutation: truncate, an invalid UTF-8 byte, a flipped byte, a deleted or doubled line."""
    kind = rng.choice(["truncate", "bad-utf8", "flip", "drop-line", "double-line"])
    if not data:
        return data, "empty"
    at = rng.randrange(len(data))
    if kind == "truncate":
        return data[:at], f"truncated at byte {at}"
    if kind == "bad-utf8":
        return data[:at] + b"\xff\xfe" + data[at:], f"invalid UTF-8 at byte {at}"
    if kind == "flip":
        return data[:at] + bytes([rng.choice(b'"{}[],:=\n\t\\\'#x0 -')]) + data[at + 1:], f"byte {at} changed"
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    if kind == "drop-line":
        return b"\n".join(lines[:i] + lines[i + 1:]), f"line {i + 1} deleted"
    return b"\n".join(lines[:i + 1] + lines[i:]), f"line {i + 1} doubled"


# ----------------------------------------------------------------------------- data tables

DATA_FAMILIES = [
    ("parse", r"could not read it as|expected a table of rows|is not valid JSON|not a JSON object"),
    ("column", r"no column '"),
    ("text", r"empty or missing text in \d+ row\(s\) \((line|row) \d"),
    ("label-missing", r"missing labels in \d+ row\(s\) \((line|row) \d"),
    ("label-value", r"non-integer label|label of type|negative label|mixes numbers and text|holds numbers, but"),
    ("single-class", r"has a single class"),
    ("rows", r"has no rows|too few to carve"),
]


def _data_rows(rng: random.Random) -> tuple[list[dict], str]:
    """Valid rows with one structural mutation (or none: a valid file must load too)."""
    rows = [dict(r) for r in sentiment_rows(rng.randint(24, 40), seed=rng.randrange(1000))]
    kind = rng.choice(["none", "drop-column", "rename-column", "blank-text", "missing-label", "float-label",
                       "negative-label", "word-label", "one-class", "few-rows", "no-rows", "nested-label",
                       "class-names", "extra-column", "number-text", "duplicate-row", "big-label"])
    i = rng.randrange(len(rows))
    col = rng.choice(["text", "label"])
    if kind == "drop-column":
        rows = [{k: v for k, v in r.items() if k != col} for r in rows]
    elif kind == "rename-column":
        rows = [{(col.upper() if k == col else k): v for k, v in r.items()} for r in rows]
    elif kind == "blank-text":
        rows[i]["text"] = rng.choice(["", "   ", None])
    elif kind == "missing-label":
        rows[i]["label"] = None
    elif kind == "float-label":
        rows[i]["label"] = 0.5
    elif kind == "negative-label":
        rows[i]["label"] = -1
    elif kind == "word-label":
        rows[i]["label"] = "positive"
    elif kind == "one-class":
        rows = [{**r, "label": 1} for r in rows]
    elif kind == "few-rows":
        rows = [{**r, "label": n % 2} for n, r in enumerate(rows[:rng.randint(2, 9)])]
    elif kind == "no-rows":
        rows = []
    elif kind == "nested-label":
        rows[i]["label"] = rng.choice([[1], {"y": 1}])
    elif kind == "class-names":
        rows = [{**r, "label": ["neg", "pos"][r["label"]]} for r in rows]
    elif kind == "extra-column":
        rows = [{**r, "id": n} for n, r in enumerate(rows)]
    elif kind == "number-text":
        rows[i]["text"] = 12345
    elif kind == "duplicate-row":
        rows.insert(i, dict(rows[i]))
    elif kind == "big-label":
        rows[i]["label"] = 4
    return rows, kind


def _write_table(path: Path, rows: list[dict]) -> None:
    if path.suffix in (".jsonl", ".json"):
        text = "\n".join(json.dumps(r) for r in rows) if path.suffix == ".jsonl" else json.dumps(rows)
        path.write_text(text + ("\n" if rows else ""), encoding="utf-8")
        return
    import pandas as pd

    frame = pd.DataFrame(rows, columns=list(rows[0]) if rows else ["text", "label"])
    frame.to_csv(path, sep="\t" if path.suffix == ".tsv" else ",", index=False)


def _data_case(seed: int, folder: Path) -> tuple[Path, str]:
    rng = random.Random(seed)
    path = folder / f"data-{seed}{rng.choice(['.csv', '.tsv', '.jsonl', '.json'])}"
    rows, how = _data_rows(rng)
    _write_table(path, rows)
    if rng.random() < 0.25:
        data, broke = _break_bytes(rng, path.read_bytes())
        path.write_bytes(data)
        how += f" + {broke}"
    return path, how


def test_data_tables_fuzz(tmp_path):
    from compress.tasks.tables import load_task_data

    tally = Tally(DATA_FAMILIES)
    for seed in range(CASES):
        path, how = _data_case(seed, tmp_path)
        what = f"seed {seed} ({how}), {path.name}"
        error = _run(lambda: load_task_data(str(path)), what)
        if error is None:
            task = load_task_data(str(path))
            assert task.num_labels >= 2 and len(task.splits["train"]) > 0, what
            assert all(isinstance(t, str) and t.strip() for t in task.splits["train"]["text"][:]), what
            tally.record("loaded")
            continue
        message = str(error)
        assert str(path) in message, f"{what}: the message does not name the file: {message}"
        family = tally.family(message)
        if family in ("column", "text", "label-missing", "label-value", "single-class"):
            assert re.search(r"column '\w+'", message), f"{what}: the message does not name the column: {message}"
        tally.record(family)
    tally.check({"loaded": 0.15, "column": 0.05, "text": 0.03, "label-missing": 0.02, "label-value": 0.1,
                 "single-class": 0.02, "rows": 0.05, "parse": 0.02}, {"other": 0.0, "parse": 0.3})


# ----------------------------------------------------------------------------- results.json


def _latency_entry(b: int, ref_ms: float, speedup: float, rounds: int, rng: random.Random) -> dict:
    times = [int(ref_ms / speedup * 1e6 * (1 + 0.02 * rng.random())) for _ in range(rounds)]
    p50 = sorted(times)[rounds // 2] / 1e6
    return {"batch_size": b, "seq_len": 64, "runs": rounds, "p50_ms": p50, "p90_ms": p50 * 1.1, "p99_ms": p50 * 1.2,
            "mean_ms": p50, "min_ms": p50 * 0.9, "max_ms": p50 * 1.3, "throughput_seq_per_s": b * 1000 / p50,
            "speedup": {"median": speedup, "p10": speedup * 0.95, "p90": speedup * 1.05, "n": rounds},
            "rounds_ns": times}


def valid_results(rounds: int = 24, n: int = 80) -> dict:
    """A small schema-2 results.json as bench writes it: a reference, a student, an ONNX INT8 artifact."""
    rng = random.Random(0)
    labels = [i % 2 for i in range(n)]

    def art(name: str, kind: str, speedup: float, wrong: int, onnx: bool = False) -> dict:
        preds = [1 - y if i < wrong else y for i, y in enumerate(labels)]
        return {"name": name, "path": f"/runs/{name}", "kind": kind, "is_reference": name == "teacher",
                "stage": "distill", "model_type": "bert", "parameters": 1000, "size_bytes": int(40_000_000 // speedup),
                "num_hidden_layers": 4, "max_length": 64,
                "onnx": {"fused_ops": {"Attention": 4}, "attention_ops": 4, "recorded_fused_ops": None,
                         "optimized": True} if onnx else None,
                "quality": {"accuracy": 1 - wrong / n, "macro_f1": 1 - wrong / n, "agreement": 1.0, "n": n,
                            "predictions": preds},
                "memory": None, "latency": [_latency_entry(b, 10.0 * b, speedup, rounds, rng) for b in (1, 8)],
                "group": None}

    return {"schema": "bert-compress-bench", "schema_version": 2, "run_id": "r0", "created": "2026-01-01T00:00:00Z",
            "git_commit": None, "versions": {}, "machine": {"cpu_model": "test", "available_cpus": 2},
            "settings": {"device": "cpu", "threads": 2, "warmup": 2, "runs": rounds, "batch_sizes": [1, 8],
                         "seq_lens": [64], "quick": False, "split": "test"},
            "data": {"source": "d.csv", "fingerprint": "f", "split": "test", "n": n, "labels": labels},
            "reference": "teacher",
            "artifacts": [art("teacher", "pytorch", 1.0, 4), art("student", "pytorch", 3.0, 6),
                          art("student-int8", "onnx-int8", 8.0, 7, onnx=True)],
            "groups": []}


#: Every rule at once, so an evaluation after a successful load reads every field a rule reads.
ALL_RULES = """[rules]
min_speedup = 1.5
max_accuracy_drop = 0.2
max_relative_accuracy_drop = 0.3
min_agreement = 0.5
max_size_mb = 100
max_p50_ms = 1000
min_throughput = 1
max_regression = 0.5
max_accuracy_regression = 0.2

[artifacts."student-int8"]
min_fused_attention = 4
require_full_attention_fusion = true
speedup_batch_size = 1
"""

RESULTS_FAMILIES = [
    ("not-json", r"not JSON|cannot read it"),
    ("schema", r"schema|not a bert-compress benchmark"),
    ("top-level", r"\$\.(reference|artifacts|data|groups)\b|the reference .* is not among|seed group"),
    ("quality", r"artifacts\[\d+\]\.quality\.(accuracy|agreement|predictions)"),
    ("latency", r"artifacts\[\d+\]\.latency\b|rounds are not paired"),
    ("artifact", r"artifacts\[\d+\](\.(name|kind|is_reference|size_bytes|num_hidden_layers|onnx|quality)\b| should be an)"
                 r"|two artifacts are named"),
    ("evaluation", r"names no artifact or seed group"),
]


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path into a JSON document (list indexes included), long lists sampled."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i in sorted({0, len(node) - 1, len(node) // 2}) if node else []:
            out += _paths(node[i], prefix + (i,))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _mutate_json(rng: random.Random, doc: dict) -> str:
    """One structured mutation of ``doc`` in place, weighted towards the fields the gate reads."""
    paths = _paths(doc)
    # the checks in the order load_results makes them; a uniform pick among them reaches each one
    areas = [[p for p in paths if p[:1] in (("reference",), ("data",), ("groups",), ("schema_version",))],
             [p for p in paths if p[:1] == ("artifacts",) and "quality" not in p and "latency" not in p],
             [p for p in paths if "quality" in p and p[-1] in ("accuracy", "agreement", "predictions", 0, 40, 79)],
             [p for p in paths if "latency" in p], paths]
    path = rng.choice(rng.choice(areas))
    parent, key = _get(doc, path[:-1]), path[-1]
    kind = rng.choice(["delete", "type", "type", "range", "duplicate", "empty"])
    value = parent[key]
    if kind == "delete":
        del parent[key]
    elif kind == "type":
        parent[key] = rng.choice([None, True, "7", 1.5, -3, [], {}, [1, "x"]])
    elif kind == "range":
        parent[key] = rng.choice([-1, 0, 10 ** 30, 2.5, float("nan"), float("inf")])
    elif kind == "duplicate" and isinstance(parent, list):
        parent.insert(key, copy.deepcopy(value))
    elif kind == "empty":
        parent[key] = type(value)() if isinstance(value, (list, dict, str)) else None
    else:
        kind = "type"
        parent[key] = "x"
    return f"{kind} $" + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path)


def _results_case(seed: int, folder: Path) -> tuple[Path, str]:
    rng = random.Random(10_000 + seed)
    doc = valid_results()
    hows = [_mutate_json(rng, doc) for _ in range(rng.choice([0, 1, 1, 1, 2]))]
    path = folder / f"results-{seed}.json"
    path.write_text(json.dumps(doc))  # NaN and Infinity written as JSON's non-standard tokens, as a bad tool might
    if rng.random() < 0.1:
        data, broke = _break_bytes(rng, path.read_bytes())
        path.write_bytes(data)
        hows.append(broke)
    return path, " + ".join(hows) or "unchanged"


def test_results_json_fuzz(tmp_path):
    """Mutated results reach the artifact, quality, latency and prediction checks; a file that loads is then
    gated on every rule against the valid file as baseline, which must not crash either."""
    from benchmarks.gate import evaluate, load_results, load_rules

    rules = load_rules(_write(tmp_path / "all.toml", ALL_RULES))
    baseline = valid_results()
    tally = Tally(RESULTS_FAMILIES)
    for seed in range(CASES):
        path, how = _results_case(seed, tmp_path)
        what = f"seed {seed} ({how})"
        loaded: list[dict] = []
        error = _run(lambda: loaded.append(load_results(path)), what)
        if error is None:
            error = _run(lambda: evaluate(loaded[0], rules, baseline), f"{what}, evaluating")
        if error is None:
            tally.record("gated")
            continue
        message = str(error)
        named = str(path) in message or (str(rules.path) in message and "names no artifact" in message)
        assert named, f"{what}: the message does not name the file: {message}"
        family = tally.family(message)
        if family in ("top-level", "artifact", "quality", "latency"):
            assert re.search(r"\$\.\w+|artifacts\[\d+\]|two artifacts|the reference|seed group", message), \
                f"{what}: the message does not name the field: {message}"
        tally.record(family)
    tally.check({"gated": 0.15, "artifact": 0.04, "quality": 0.03, "latency": 0.1, "top-level": 0.05},
                {"other": 0.0, "not-json": 0.2, "schema": 0.2})


# ----------------------------------------------------------------------------- gates rules TOML

VALID_RULES = ALL_RULES + """confidence = 0.9

[artifacts.teacher]
max_size_mb = 500
"""

#: Values of the wrong type or out of range for some rule kind, and valid ones.
TOML_VALUES = ["0", "-1", "0.5", "1.5", "2", "100", "true", "false", '"2.0"', "[1, 2]", "{ a = 1 }", "nan", "inf",
               "1e400", "0.99", "1", "2024-01-01"]

RULES_FAMILIES = [
    ("syntax", r"not valid TOML"),
    ("unknown-key", r"unknown rule|unknown table or key"),
    ("type", r"must be a number|must be true or false|must be a whole number|must be a table of rules"),
    ("range", r"is a fraction between 0 and 1|must be above 0|must be a number from 0\.5"),
    ("artifact-name", r"names no artifact or seed group"),
    ("unreadable", r"cannot read it"),
]


def _mutate_toml(rng: random.Random, text: str) -> tuple[str, str, int | None]:
    """One line-level mutation; returns the text, what was done, and the line the error must name (or None)."""
    lines = text.split("\n")
    assignments = [i for i, line in enumerate(lines) if "=" in line]
    i = rng.choice(assignments)
    key, _, _ = lines[i].partition("=")
    kind = rng.choice(["value", "value", "value", "rename", "delete", "duplicate", "header", "header", "syntax",
                       "bytes"])
    if kind == "value":
        lines[i] = f"{key.strip()} = {rng.choice(TOML_VALUES)}"
        return "\n".join(lines), f"line {i + 1} value: {lines[i]}", i + 1
    if kind == "rename":
        new = rng.choice([key.strip()[:-1], key.strip() + "s", "min_sped", "bogus", key.strip().upper()])
        lines[i] = lines[i].replace(key.strip(), new, 1)
        return "\n".join(lines), f"line {i + 1} key renamed: {lines[i]}", i + 1
    if kind == "delete":
        del lines[i]
        return "\n".join(lines), f"line {i + 1} deleted", None
    if kind == "duplicate":
        lines.insert(i, lines[i])
        return "\n".join(lines), f"line {i + 1} doubled", None
    if kind == "header":
        headers = [j for j, line in enumerate(lines) if line.startswith("[")]
        j = rng.choice(headers)
        lines[j] = rng.choice(["[rule]", "[artifacts.\"no-such-artifact\"]", "[artifacts.studnet]", "[artifacts]",
                               "[[rules]]", "[artifacts.\"student\".extra]"])
        return "\n".join(lines), f"line {j + 1} header: {lines[j]}", None
    if kind == "syntax":
        lines[i] = lines[i].replace("=", rng.choice(["", "==", ": "]), 1)
        return "\n".join(lines), f"line {i + 1} broken: {lines[i]}", i + 1
    data, broke = _break_bytes(rng, text.encode())
    return data.decode("utf-8", errors="surrogateescape"), broke, None


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
    return path


def test_rules_toml_fuzz(tmp_path):
    """Each mutated key line is named by its line number; a rules file that loads is then gated."""
    from benchmarks.gate import evaluate, load_rules

    results = valid_results()
    tally = Tally(RULES_FAMILIES)
    for seed in range(CASES):
        rng = random.Random(20_000 + seed)
        text, how, line = _mutate_toml(rng, VALID_RULES)
        path = _write(tmp_path / f"gates-{seed}.toml", text)
        what = f"seed {seed} ({how})"
        rules: list = []
        error = _run(lambda: rules.append(load_rules(path)), what)
        if error is None:
            error = _run(lambda: evaluate(results, rules[0], None), f"{what}, evaluating")
        if error is None:
            tally.record("loaded")
            continue
        message = str(error)
        assert str(path) in message, f"{what}: the message does not name the file: {message}"
        family = tally.family(message)
        if line is not None and family in ("type", "range", "unknown-key"):
            assert f"{path}:{line}:" in message, f"{what}: the message does not name line {line}: {message}"
        if family == "syntax":
            assert re.search(r"line \d+|end of document", message), f"{what}: the TOML error names no line: {message}"
        tally.record(family)
    tally.check({"loaded": 0.1, "syntax": 0.05, "unknown-key": 0.05, "type": 0.1, "range": 0.05,
                 "artifact-name": 0.01}, {"other": 0.0, "syntax": 0.35})


# ----------------------------------------------------------------------------- recipe YAML

VALID_RECIPE = """out: {out}
data:
  data: {data}
  limit: 200
teacher:
  model: minilm
  epochs: 2
  lr: 1.0e-4
  max_length: 64
distill:
  student: 3x384
  init: teacher-layers
  epochs: 2
  temperature: 2.0
  alpha_kd: 1.0
  intermediate: true
prune:
  heads: 0.5
  ffn: 0.25
export:
  opset: 17
quantize:
  method: ort-dynamic
  max_accuracy_drop: 0.02
bench:
  batch_sizes: [1, 8]
  seq_lens: [64]
  runs: 10
gate:
  rules:
    max_accuracy_drop: 0.08
    min_agreement: 0.85
    onnx-int8:
      min_speedup: 2.0
      max_size_mb: 40
"""

YAML_VALUES = ["-1", "-5", "0", "1.0e+9", "100000", "abc", "true", "[1, 2]", "{a: 1}", "null", "''", "0.5", "2", "64",
               "\"3\"", "nan", "ort-dynamic", "3x384"]

RECIPE_FAMILIES = [
    ("syntax", r"not valid YAML|a recipe is a mapping"),
    ("unreadable", r"cannot read the recipe"),
    ("unknown-key", r"unknown key|unknown [\w.]+ setting"),
    ("gate-rules", r"gate\.rules"),
    ("value", r"must be >=|must be >|must be <|must be a share|must be one of|is not one of|is neither a preset"
              r"|must be between|is too old"),
    ("type", r"must be an? \w+|must be true or false|takes a mapping|must be a name/path"),
    ("wiring", r"needs a teacher stage|is required|is set by|names no stage"),
    ("data", r"neither a built-in dataset"),
]


def _mutate_yaml(rng: random.Random, text: str) -> tuple[str, str, int | None]:
    lines = text.split("\n")
    keyed = [i for i, line in enumerate(lines) if re.match(r"^\s*[\w-]+:\s*\S", line) and not line.startswith("out:")]
    i = rng.choice(keyed)
    indent, key, _ = re.match(r"^(\s*)([\w-]+):(.*)$", lines[i]).groups()
    kind = rng.choice(["value", "value", "value", "rename", "delete", "duplicate", "indent", "section", "bytes"])
    if kind == "value":
        lines[i] = f"{indent}{key}: {rng.choice(YAML_VALUES)}"
        return "\n".join(lines), f"line {i + 1} value: {lines[i].strip()}", i + 1
    if kind == "rename":
        lines[i] = f"{indent}{rng.choice([key + 's', key[:-1], 'bogus', key.replace('_', '')])}:" + lines[i].split(":", 1)[1]
        return "\n".join(lines), f"line {i + 1} key renamed: {lines[i].strip()}", i + 1
    if kind == "delete":
        del lines[i]
        return "\n".join(lines), f"line {i + 1} deleted", None
    if kind == "duplicate":
        lines.insert(i, lines[i])
        return "\n".join(lines), f"line {i + 1} doubled", None
    if kind == "indent":
        lines[i] = (" " if indent else "  ") + lines[i]
        return "\n".join(lines), f"line {i + 1} re-indented", None
    if kind == "section":
        sections = [j for j, line in enumerate(lines) if re.match(r"^[a-z]+:\s*$", line)]
        j = rng.choice(sections)
        action = rng.choice(["rename", "scalar", "delete"])
        if action == "rename":
            lines[j] = rng.choice(["teachr:", "distil:", "pruning:", "gates:"])
        elif action == "scalar":
            lines[j] = lines[j].rstrip(":") + ": 3"
        else:
            end = next((k for k in range(j + 1, len(lines)) if lines[k] and not lines[k].startswith(" ")), len(lines))
            del lines[j:end]
        return "\n".join(lines), f"section at line {j + 1}: {action}", None
    data, broke = _break_bytes(rng, text.encode())
    return data.decode("utf-8", errors="surrogateescape"), broke, None


def test_recipe_yaml_fuzz(tmp_path):
    """Each problem of a mutated recipe is reported as FILE:LINE, the mutated key's line among them."""
    from compress.pipeline import load_recipe

    data = tmp_path / "rows.csv"
    data.write_text("text,label\n" + "\n".join(f"row {i},{i % 2}" for i in range(20)) + "\n")
    valid = VALID_RECIPE.format(out=tmp_path / "runs", data=data)
    tally = Tally(RECIPE_FAMILIES)
    for seed in range(CASES):
        rng = random.Random(30_000 + seed)
        text, how, line = _mutate_yaml(rng, valid) if seed else (valid, "unchanged", None)
        path = _write(tmp_path / f"recipe-{seed}.yaml", text)
        what = f"seed {seed} ({how})"
        error = _run(lambda: load_recipe(path), what)
        if error is None:
            tally.record("loaded")
            continue
        message = str(error)
        assert str(path) in message, f"{what}: the message does not name the file: {message}"
        problems = message.split("\n")[1:] if re.match(r"recipe \S+ has \d+ problem", message) else [message]
        for problem in problems:
            assert re.match(rf"\s*{re.escape(str(path))}(:\d+)?: ", problem), \
                f"{what}: a problem does not start with FILE:LINE: {problem}"
        family = tally.family(message)
        if family == "syntax" and "not valid YAML" in message:
            assert re.match(rf"{re.escape(str(path))}:\d+: ", message) and "\n" not in message, \
                f"{what}: a YAML error is not one line naming FILE:LINE: {message}"
        if line is not None and family in ("type", "value", "unknown-key", "gate-rules") and len(problems) == 1:
            assert re.search(rf"{re.escape(str(path))}:{line}\b", message), \
                f"{what}: the problem does not name line {line}: {message}"
        tally.record(family)
    tally.check({"loaded": 0.1, "syntax": 0.03, "unknown-key": 0.05, "type": 0.05, "value": 0.04, "wiring": 0.005,
                 "gate-rules": 0.02}, {"other": 0.0, "syntax": 0.35})


def test_valid_seed_files_load(tmp_path):
    """The fuzzers' starting points are valid: an unmutated file of each kind loads (and gates)."""
    from benchmarks.gate import evaluate, load_results, load_rules
    from compress.tasks.tables import load_task_data

    rows = sentiment_rows(30)
    for suffix in (".csv", ".tsv", ".jsonl", ".json"):
        _write_table(tmp_path / f"d{suffix}", rows)
        assert load_task_data(str(tmp_path / f"d{suffix}")).sizes() == {"train": 24, "validation": 3, "test": 3}
    results = load_results(_write(tmp_path / "r.json", json.dumps(valid_results())))
    checks = evaluate(results, load_rules(_write(tmp_path / "g.toml", VALID_RULES)), valid_results())
    assert {c.status for c in checks} <= {"pass", "skip"} and len(checks) >= 20
