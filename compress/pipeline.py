"""Recipes: one YAML file that chains the stages, validated up front, resumable, skipping done work.

A recipe names the stages to run; each stage's settings are exactly the flags of its own
``bert-compress`` command (``batch_size`` or ``batch-size`` for ``--batch-size``), so anything a
user learnt on the command line carries over. The pipeline wires the stages together (which folder
is whose teacher or model) and fills in the paths::

    out: runs/default               # every artifact goes under here
    data: movie-reviews             # or a mapping of the data flags: {data: x.csv, text_column: body}
    pretrain: {model: mpnet-base, unlabeled: movie-reviews-unlabeled}   # optional: the teacher starts from it
    teacher:  {model: mpnet-base, epochs: 2, precision: auto}          # (no model: with pretrain)
    distill:  {student: tinybert-6l-384, init: minilm, epochs: 3}
    prune:    {heads: 0.5, ffn: 0.5, recover_epochs: 1}      # optional
    export:   {}                                              # ONNX + fusions
    quantize: {method: ort-dynamic}
    optimize: {batch_sizes: [1, 32], runs: 30}               # optional: the fastest runtime per batch size
    bench:    {batch_sizes: [1, 32], seq_lens: [128]}
    gate:     {rules: {min_speedup: 10, max_accuracy_drop: 0.02}}

The stages run in that order, whatever the order of the keys; the registry
(:mod:`compress.stages.registry`) holds the order, each stage's output folder (``pretrained/``,
``teacher/``, ``student/``, ``pruned/``, ``onnx/``, ``onnx-int8/`` or ``torch-int8/``,
``optimized/``, ``bench/``) and its wiring: distill's teacher is the teacher, prune, export and
optimize start from the latest PyTorch model (pruned, else student, else teacher), ort-dynamic
quantize from the ONNX export when there is one, and bench measures everything after the teacher
against it (the ``optimized`` choice artifact too).

Every section goes through its stage config's ``from_dict`` (:mod:`compress.config`), the same
configs the command line builds, and the stage functions are called with them. Before anything
runs, the whole recipe is checked (unknown keys, wrong types, impossible values, missing data, the
gate's rules through the gate's own loader) and every problem is reported at once with its line.

A finished stage records its identity: its config and the content fingerprints of its inputs
(data file sha256, parent artifact weights sha256; :mod:`compress.stages.fingerprint`). A re-run skips a
stage whose output is complete and whose identity is unchanged, so editing a data file in place
re-runs the stages that read it, and touching it does not. A run killed in the middle resumes at
the unfinished stage, a training stage from its last checkpoint when that checkpoint was made
under the same settings and inputs (otherwise it is set aside and the stage starts over).

``budget: 30m`` and ``elastic:`` (the knobs a plan may scale, with bounds and costs) are parsed here
(:mod:`compress.budget.duration`, :mod:`compress.budget.knobs`); the plan itself is decided by
:mod:`compress.budget.decide` before :func:`run_recipe`, which records it in each artifact it writes.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from compress.core.artifact import META_FILE, now_iso
from compress.budget.duration import parse_budget
from compress.budget.knobs import ElasticKnob, parse_elastic
from compress.config import DATA_KEYS, ConfigBase, ConfigError, DataOptions, GateConfig, Problem, canonical_sha256
from compress.core.errors import CompressError
from compress.stages.registry import Outputs, all_stages, get, names
from benchmarks.gate import GateInputError, load_rules, run_gate as gate
from compress.tasks.tables import BUILTIN_DATASETS
from compress.stages.fingerprint import stage_identity
from compress.run_stage import run_in_fresh_process, run_stage

RECORD_DIR = ".bert-compress-run"
#: Set by the pipeline in every stage (the stage's output folder); a recipe may not set it.
OUT_KEY = "out"


@dataclass
class StageCall:
    """One stage of a recipe: its config (wiring filled in), where it writes, and what it reads."""

    stage: str
    config: ConfigBase
    output: Path


@dataclass
class Recipe:
    """A parsed, validated recipe: the output folder, the data, and each stage's config in order."""

    path: Path
    out: Path
    data: DataOptions
    calls: list[StageCall]
    lines: dict[tuple[str, ...], int] = field(default_factory=dict)
    #: ``budget:`` in seconds (``None``: none), and the knobs ``elastic:`` lets a plan scale (compress.budget).
    budget_s: float | None = None
    elastic: list[ElasticKnob] = field(default_factory=list)

    @property
    def stages(self) -> dict[str, ConfigBase]:
        return {c.stage: c.config for c in self.calls}


def _yaml_lines(node, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    import yaml

    lines: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            path = prefix + (str(key.value).replace("-", "_"),)
            lines[path] = key.start_mark.line + 1
            lines.update(_yaml_lines(value, path))
    return lines


class _Where:
    """``recipe.yaml:LINE`` for a key path, falling back to its section's line, then to the file."""

    def __init__(self, path: Path, lines: dict[tuple[str, ...], int]):
        self.path, self.lines = path, lines

    def __call__(self, *keys: str) -> str:
        keys = tuple(k.replace("-", "_") for k in keys)
        for n in range(len(keys), 0, -1):
            line = self.lines.get(keys[:n])
            if line:
                return f"{self.path}:{line}"
        return str(self.path)


def _mapping(value: Any) -> dict[str, Any] | None:
    if value is None:
        return {}
    if not isinstance(value, dict):
        return None
    return {str(k).replace("-", "_"): v for k, v in value.items()}


def _report(problems: list[str], where: _Where, section: tuple[str, ...], error: ConfigError, stage: str = "") -> None:
    """A config's problems as recipe lines: type and key problems name themselves, value problems get the stage."""
    for p in error.problems:
        message = p.message if p.named or not stage else f"{stage}: {p.message}"
        problems.append(f"{where(*section, *p.keys)}: {message}")


def load_recipe(path: str | os.PathLike, out: str | None = None, data: str | None = None) -> Recipe:
    """Parse and validate a recipe; raise one error listing every problem with its line.

    ``out`` and ``data`` replace the recipe's ``out:`` and its data name or path (other keys of a ``data:`` mapping
    stay), so one recipe runs on a user's own file: ``bert-compress run recipes/ner.yaml --data my.conll``."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise CompressError(f"recipe {path} does not exist. Give a YAML file such as recipes/quick.yaml.")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CompressError(f"{path}: cannot read the recipe ({exc}). Save it as UTF-8 text.") from exc
    try:
        node = yaml.compose(text)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # One line naming the file and line: the parser's own text says "<unicode string>", line N.
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        what = " ".join(str(p) for p in (getattr(exc, "problem", None), getattr(exc, "context", None)) if p) or str(exc)
        raise CompressError(f"{where}: not valid YAML: {what}. Check the indentation and the ':' after each key "
                            "there.") from exc
    if not isinstance(raw, dict):
        raise CompressError(f"{path}: a recipe is a mapping of stages (teacher:, distill:, ...), got {type(raw).__name__}")
    lines = _yaml_lines(node)
    where = _Where(path, lines)
    problems: list[str] = []

    norm = {str(k).replace("-", "_"): v for k, v in raw.items()}
    stage_names = names()
    for key in norm:
        if key not in stage_names and key not in ("out", "data", "budget", "elastic"):
            problems.append(f"{where(key)}: unknown key {key!r}; a recipe has out, data, budget, elastic and the "
                            f"stages {', '.join(stage_names)}")
    if data is not None:
        if not _data_exists(data):
            raise CompressError(f"--data {data!r} is neither a built-in dataset ({', '.join(BUILTIN_DATASETS)}) nor "
                                "an existing file or folder. Check the path.")
        given = norm.get("data")
        norm["data"] = {**given, "data": data} if isinstance(given, dict) else data
    data = _data_section(norm.get("data", "movie-reviews"), where, problems)
    out_dir = Path(out or norm.get("out") or Path("runs") / path.stem)

    # Stage by stage in recipe order: what the earlier ones wrote fills this one's wired settings.
    outputs = Outputs(out_dir, data)
    sections: dict[str, dict[str, Any]] = {}
    planned: list[tuple[str, Path, dict[str, Any]]] = []
    for stage in all_stages():
        name = stage.name
        if name not in norm:
            continue
        settings = _mapping(norm[name])
        if settings is None:
            problems.append(f"{where(name)}: stage {name!r} takes a mapping of its command's flags")
            continue
        wiring = stage.wire(outputs, settings)
        output = out_dir / stage.folder(settings)
        outputs.add(output, stage.provides)
        for key in list(settings):
            if key == OUT_KEY or key in wiring or key in DATA_KEYS:
                what = "the recipe's data: section" if key in DATA_KEYS else "the pipeline"
                problems.append(f"{where(name, key)}: {name}.{key} is set by {what}; remove it here")
                del settings[key]
        sections[name] = settings
        planned.append((name, output, wiring))
    if not sections:
        problems.append(f"{path}: the recipe names no stage; add at least one of {', '.join(stage_names)}")
    for name, _, _ in planned:
        for need, why in get(name).needs.items():
            if need not in sections:
                problems.append(f"{where(name)}: {name} needs a {need} stage ({why})")
    for name, _, wiring in planned:
        for key, what in get(name).required.items():
            if key not in sections[name] and key not in wiring:
                problems.append(f"{where(name)}: {name}.{key} is required: {what}")

    calls: list[StageCall] = []
    for name, output, wiring in planned:
        hidden = {OUT_KEY, *wiring, *DATA_KEYS}
        try:
            config = get(name).config.from_dict({**sections[name], **wiring}, where=name, hidden=hidden)
        except ConfigError as exc:
            _report(problems, where, (name,), exc, name)
            continue
        if isinstance(config, GateConfig):
            problems += _gate_problems(config, where)
        calls.append(StageCall(name, config, output))
    budget_s = None
    if norm.get("budget") is not None:
        try:
            budget_s = parse_budget(norm["budget"])
        except ValueError as exc:
            problems.append(f"{where('budget')}: {exc}")
    elastic, found = parse_elastic(norm.get("elastic"), where, {c.stage: c.config for c in calls})
    problems += found
    if problems:
        raise CompressError(f"recipe {path} has {len(problems)} problem(s):\n  " + "\n  ".join(problems))
    return Recipe(path, out_dir, data, calls, lines, budget_s, elastic)


def _data_exists(spec: str) -> bool:
    """Whether a data name or path names something: a built-in dataset or an existing file or folder."""
    return spec in BUILTIN_DATASETS or Path(spec).expanduser().exists()


def _data_section(value: Any, where: _Where, problems: list[str]) -> DataOptions:
    """The recipe's ``data:`` (a name/path or a mapping of the data flags), checked like ``--data``."""

    section = {"data": value} if isinstance(value, str) else _mapping(value)
    if section is None:
        problems.append(f"{where('data')}: data must be a name/path or a mapping of {', '.join(DATA_KEYS)}")
        return DataOptions()
    prefix = () if isinstance(value, str) else ("data",)
    data, found = DataOptions.build(section, where="data")
    if found:
        _report(problems, where, prefix, ConfigError(found))
    spec = data.data
    if not _data_exists(spec):
        problems.append(f"{where('data', *(('data',) if prefix else ()))}: data {spec!r} is neither a built-in dataset "
                        f"({', '.join(BUILTIN_DATASETS)}) nor an existing file or folder")
    return data


def plan(recipe: Recipe) -> list[StageCall]:
    """The stages of a validated recipe, in the order they run, each with its wired config."""
    return list(recipe.calls)


# ----------------------------------------------------------------------------- gate rules


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def rules_toml(rules: dict[str, Any]) -> tuple[str, dict[int, tuple[str, ...]]]:
    """A recipe's inline rules as a gates TOML file, and which recipe key each TOML line came from.

    Top-level entries are the ``[rules]`` table; a mapping is the override table of the artifact
    it is named after (``onnx-int8: {min_speedup: 8}`` is ``[artifacts."onnx-int8"]``).
    """
    lines = ["# written by `bert-compress run` from the recipe's gate.rules", "[rules]"]
    origin: dict[int, tuple[str, ...]] = {2: ()}
    tables = []
    for key, value in rules.items():
        if isinstance(value, dict):
            tables.append((str(key), value))
        else:
            lines.append(f"{key} = {_toml_value(value)}")
            origin[len(lines)] = (str(key),)
    for name, table in tables:
        lines.append("")
        lines.append(f"[{name}]" if name.startswith("artifacts.") else f'[artifacts."{name}"]')
        origin[len(lines)] = (name,)
        for k, v in table.items():
            lines.append(f"{k} = {_toml_value(v)}")
            origin[len(lines)] = (name, str(k))
    return "\n".join(lines) + "\n", origin


def _gate_problems(config: GateConfig, where: _Where) -> list[str]:
    """The rules checked by the gate's own loader now, not after the training stages ran."""

    if isinstance(config.rules, str):
        rules_path = Path(config.rules).expanduser()
        if not rules_path.is_file():
            return [f"{where('gate', 'rules')}: gate.rules: {config.rules} is not a file; give a gates TOML file "
                    "(see docs/ci.md) or the rules inline"]
        try:
            load_rules(rules_path)
        except GateInputError as exc:
            return [f"{where('gate', 'rules')}: gate.rules: {exc}"]
        return []
    text, origin = rules_toml(config.rules)
    with tempfile.TemporaryDirectory(prefix="bert-compress-gate-") as tmp:
        file = Path(tmp) / "gates.toml"
        file.write_text(text, encoding="utf-8")
        try:
            load_rules(file)
        except GateInputError as exc:
            message = str(exc)
            found = re.match(re.escape(str(file)) + r"(?::(\d+))?: (.*)", message, re.S)
            keys = origin.get(int(found.group(1)), ()) if found and found.group(1) else ()
            detail = (found.group(2) if found else message).replace(str(file), "gate.rules")
            return [f"{where('gate', 'rules', *keys)}: gate.rules: {detail}"]
    return []


# ----------------------------------------------------------------------------- running


def _why(previous: dict[str, Any], identity: dict[str, Any]) -> str:
    """Why a stage runs again, in a few words (settings or inputs that changed)."""
    if not previous:
        return ""
    old = previous.get("identity") or {}
    changed = [f"input {k}" for k, v in identity["inputs"].items() if (old.get("inputs") or {}).get(k) != v]
    settings = [k for k, v in identity["config"].items() if (old.get("config") or {}).get(k) != v]
    if settings:
        changed.append("settings " + ", ".join(settings))
    return f" ({'; '.join(changed)} changed)" if changed else ""


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _stamp_plan(output: Path, record: dict[str, Any]) -> None:
    """Add the budget plan a stage ran under to its artifact's ``compress.json`` (atomically; weights untouched,
    so the artifact's fingerprint does not change). Outputs without one (bench's results, the gate's file) keep
    theirs."""
    meta_file = output / META_FILE
    if not meta_file.is_file():
        return
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    _write_json(meta_file, {**meta, "budget_plan": record})


def run_recipe(recipe: Recipe, force: tuple[str, ...] = (), debug: bool = False, budget_plan: Any = None
               ) -> list[dict[str, Any]]:
    """Run (or skip) every stage of a validated recipe; return one status row per stage.

    A stage's own error propagates (its message, and its traceback under ``--debug``); the gate's
    verdict is a status (``failed (exit 1)``), not an error. ``budget_plan`` (a :class:`compress.budget.plan.Plan`,
    applied to ``recipe`` already) adds each stage's estimate to its row and its record to each artifact.
    """

    records = recipe.out / RECORD_DIR
    records.mkdir(parents=True, exist_ok=True)
    status = []
    for call in plan(recipe):
        stage = get(call.stage)
        config = call.config
        if stage.trains:
            config = replace(config, resume=True)  # continue from the last checkpoint if a run was killed
        record_file = records / f"{call.stage}.json"
        identity = stage_identity(config)
        digest = canonical_sha256(identity)
        previous = json.loads(record_file.read_text(encoding="utf-8")) if record_file.exists() else {}
        if call.stage not in force and previous.get("hash") == digest and stage.complete(call.output):
            print(f"[{call.stage}] up to date ({call.output}); skipping")
            status.append({"stage": call.stage, "status": "skipped", "seconds": 0.0, "output": str(call.output)})
            continue
        print(f"[{call.stage}] running -> {call.output}{_why(previous, identity)}", flush=True)
        started = time.perf_counter()
        try:
            if stage.timed:
                # A fresh process: the training stages' memory and thread pools do not colour the timings,
                # and OpenMP starts with idle threads sleeping (see compress.run_stage).
                run_in_fresh_process(call.stage, config, call.output, records, debug=debug)
                result = None
            else:
                result = run_stage(call.stage, config, call.output)
        except (CompressError, KeyboardInterrupt):
            print(f"[{call.stage}] stopped; fix the problem and run the recipe again: finished stages are skipped, "
                  "an interrupted training stage resumes", file=sys.stderr)
            raise
        seconds = round(time.perf_counter() - started, 1)
        # A check (the gate) returns its exit code: 0 passed, 4 inconclusive, anything else failed.
        code = result if isinstance(result, int) and not isinstance(result, bool) else 0
        if code != 0:
            verdict = "inconclusive" if code == 4 else "failed"
            status.append({"stage": call.stage, "status": f"{verdict} (exit {code})", "seconds": seconds,
                           "output": str(call.output)})
            break
        if budget_plan is not None:  # before the record: a stage counted finished carries its plan
            _stamp_plan(call.output, budget_plan.artifact_record(call.stage))
        _write_json(record_file, {"hash": digest, "identity": identity, "finished": now_iso(), "seconds": seconds})
        status.append({"stage": call.stage, "status": "ran", "seconds": seconds, "output": str(call.output)})
    if budget_plan is not None:
        for row in status:
            row["estimate_s"] = budget_plan.estimates.get(row["stage"])
    return status


def run_gate(config: GateConfig, out: str | os.PathLike | None = None) -> int:
    """The gate stage (``bert-compress gate`` and a recipe's ``gate:``): its exit code.

    A recipe's inline rules (a mapping) are written as a gates TOML file beside ``out`` first
    (``OUT/gates.toml`` beside ``OUT/gate-junit.xml``), so the run leaves the rules it checked.
    """

    rules = config.rules
    if isinstance(rules, dict):
        if out is None:
            raise CompressError("gate: inline rules need a folder to write gates.toml in; give --rules a TOML file")
        text, _ = rules_toml(rules)
        folder = Path(out).parent
        folder.mkdir(parents=True, exist_ok=True)
        rules = str(folder / "gates.toml")
        Path(rules).write_text(text, encoding="utf-8")
    return gate(config.results, rules, baseline=config.baseline, junit=config.junit,
                on_inconclusive=config.on_inconclusive, history=config.history, window=config.window,
                history_threshold=config.history_threshold, history_test=config.history_test,
                allow_device_mismatch=config.allow_device_mismatch)


__all__ = ["Problem", "Recipe", "StageCall", "load_recipe", "plan", "rules_toml", "run_gate", "run_recipe"]
