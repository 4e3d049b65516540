"""CI gates: thresholds from a TOML file checked against ``results.json`` -> exit code, JUnit, summary.

``bert-compress gate RESULTS.json --rules gates.toml [--baseline OLD.json] [--junit FILE]``

Exit codes, so CI can tell a model that got worse from a pipeline that is broken:

- 0 every rule passed (rules that do not apply, such as fusion rules on a PyTorch artifact, or
  regression rules without ``--baseline``, are reported as skipped);
- 1 at least one rule failed;
- 3 the rules or a results file is malformed (bad TOML, unknown rule, wrong type, wrong schema,
  missing field, a rule table naming an artifact the results do not hold). The message names the
  file, the key or line, and the fix;
- 2 (from the command line's usual handling) any other input problem, such as an unwritable
  ``--junit`` path.

Rules file::

    [rules]                      # every artifact except the reference
    min_speedup = 2.0            # paired median speedup over the reference, at every measured config
    speedup_batch_size = 1       # ... or only at this batch size (and/or speedup_seq_len)
    max_accuracy_drop = 0.01     # reference accuracy - artifact accuracy (absolute fraction)
    min_agreement = 0.98

    [artifacts."student-int8"]   # overrides for one artifact (the reference too); false turns a rule off
    max_size_mb = 40
    min_speedup = false

Every rule and field is documented in ``docs/ci.md``.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

from compress.errors import CompressError

EXIT_PASS, EXIT_FAIL, EXIT_MALFORMED = 0, 1, 3
SCHEMA = "bert-compress-bench"
SCHEMA_VERSION = 1
#: Float tolerance on comparisons: 0.85 - 0.84 is 0.010000000000000009, which must pass a 0.01 limit.
EPS = 1e-9


class GateInputError(CompressError):
    """A malformed rules or results file (exit code 3), as opposed to a rule that failed (exit code 1)."""


# ----------------------------------------------------------------------------- rule definitions


@dataclass(frozen=True)
class RuleSpec:
    """One key of a rules table: its value type, allowed range and meaning (for messages and docs)."""

    kind: str  # "number", "fraction", "count", "bool", "selector"
    help: str


RULES: dict[str, RuleSpec] = {
    "min_speedup": RuleSpec("number", "paired median speedup over the reference (x), at every selected config"),
    "speedup_batch_size": RuleSpec("selector", "check min_speedup only at this batch size"),
    "speedup_seq_len": RuleSpec("selector", "check min_speedup only at this sequence length"),
    "max_accuracy_drop": RuleSpec("fraction", "reference accuracy minus artifact accuracy, absolute (0.01 = 1 point)"),
    "max_relative_accuracy_drop": RuleSpec("fraction", "accuracy drop as a share of the reference accuracy"),
    "min_agreement": RuleSpec("fraction", "share of inputs where the artifact predicts what the reference predicts"),
    "max_size_mb": RuleSpec("number", "weights on disk, MB (10^6 bytes)"),
    "max_p50_ms": RuleSpec("number", "median latency in ms, at every selected config"),
    "min_throughput": RuleSpec("number", "sequences per second, at every selected config"),
    "latency_batch_size": RuleSpec("selector", "check max_p50_ms, min_throughput, max_regression only at this batch size"),
    "latency_seq_len": RuleSpec("selector", "check max_p50_ms, min_throughput, max_regression only at this sequence length"),
    "max_regression": RuleSpec("fraction", "against --baseline: p50 may grow and accuracy may fall by at most this share"),
    "min_fused_attention": RuleSpec("count", "fused attention operators in the ONNX graph"),
    "require_full_attention_fusion": RuleSpec("bool", "every transformer layer has a fused attention operator (ONNX)"),
}
SELECTORS = ("speedup_batch_size", "speedup_seq_len", "latency_batch_size", "latency_seq_len")


@dataclass
class GateRules:
    """Parsed rules: the global ``[rules]`` table and per-artifact overrides."""

    path: Path
    rules: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def for_artifact(self, name: str, is_reference: bool) -> dict[str, Any]:
        """The rules in force for one artifact: global (not for the reference) overridden per artifact."""
        merged = {} if is_reference else dict(self.rules)
        merged.update(self.artifacts.get(name, {}))
        return {k: v for k, v in merged.items() if v is not False}


@dataclass
class Check:
    """The outcome of one rule on one artifact: one row of the table, one JUnit testcase."""

    artifact: str
    rule: str
    limit: Any
    measured: str
    status: str  # "pass", "fail", "skip"
    message: str = ""


# ----------------------------------------------------------------------------- loading and validation


def _key_pattern(key: str) -> str:
    return rf'(?:"{re.escape(key)}"|\'{re.escape(key)}\'|{re.escape(key)})'


def _header_line(lines: list[str], table: tuple[str, ...]) -> int | None:
    """Index of the ``[a."b"]`` header line of ``table``, or ``None``."""
    header = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(_key_pattern(p) for p in table) + r"\s*\]")
    return next((i for i, line in enumerate(lines) if header.match(line)), None)


def _line_of(text: str, key: str, table: tuple[str, ...] | None = None) -> int | None:
    """Line number (1-based) where ``key`` is set: inside ``table`` when given, else anywhere at the top level.

    tomllib reports positions only for syntax errors; for a well-formed file with a wrong key or
    value this finds the line, so the message can point at it. Best effort: ``None`` when the key
    is written in a form not searched for (an inline table, a dotted key).
    """
    lines = text.splitlines()
    if table is None:
        header = _header_line(lines, (key,))
        if header is not None:
            return header + 1
        start, stop = 0, len(lines)
    else:
        header = _header_line(lines, table)
        if header is None:
            return None
        start = header + 1
        stop = next((i for i in range(start, len(lines)) if re.match(r"^\s*\[", lines[i])), len(lines))
    assign = re.compile(r"^\s*" + _key_pattern(key) + r"\s*=")
    found = next((i for i in range(start, stop) if assign.match(lines[i])), None)
    if found is not None:
        return found + 1
    return header + 1 if table is not None else None


def _where(path: Path, text: str, key: str, table: tuple[str, ...] | None) -> str:
    line = _line_of(text, key, table)
    return f"{path}:{line}" if line else str(path)


def _check_value(key: str, value: Any, where: str, section: str, allow_off: bool) -> Any:
    spec = RULES[key]
    if value is False and allow_off and spec.kind != "bool":
        return False  # an override switching a global rule off
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    fix = f"Write it like {_example(key)}."
    if spec.kind == "bool":
        if not isinstance(value, bool):
            raise GateInputError(f"{where}: {section}{key} must be true or false, got {value!r}. {fix}")
        return value
    if spec.kind in ("count", "selector"):
        if not isinstance(value, int) or isinstance(value, bool) or value < (1 if spec.kind == "selector" else 0):
            raise GateInputError(f"{where}: {section}{key} must be a whole number"
                                 f"{' of 1 or more' if spec.kind == 'selector' else ' (0 or more)'}, got {value!r}. {fix}")
        return value
    if not is_number or not math.isfinite(value):
        raise GateInputError(f"{where}: {section}{key} must be a number, got {value!r} "
                             f"({type(value).__name__}). {fix}")
    if spec.kind == "fraction" and not 0 <= value <= 1:
        raise GateInputError(f"{where}: {section}{key} is a fraction between 0 and 1 (0.01 means one percent), "
                             f"got {value!r}. {fix}")
    if spec.kind == "number" and value <= 0:
        raise GateInputError(f"{where}: {section}{key} must be above 0, got {value!r}. {fix}")
    return float(value)


def _example(key: str) -> str:
    return {"bool": f"{key} = true", "count": f"{key} = 6", "selector": f"{key} = 1",
            "fraction": f"{key} = 0.01"}.get(RULES[key].kind, f"{key} = 2.0")


def _check_table(table: Any, path: Path, text: str, header: tuple[str, ...], allow_off: bool) -> dict[str, Any]:
    name = "[" + ".".join(f'"{h}"' if not re.fullmatch(r"[A-Za-z0-9_-]+", h) else h for h in header) + "]"
    if not isinstance(table, dict):
        raise GateInputError(f"{_where(path, text, header[-1], header[:-1] or None)}: {name} must be a table of rules "
                             f"(for example\n{name}\nmin_speedup = 2.0).")
    out = {}
    for key, value in table.items():
        where = _where(path, text, key, header)
        if key not in RULES:
            close = difflib.get_close_matches(key, list(RULES), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise GateInputError(f"{where}: unknown rule {key!r} in {name}.{hint} Known rules: {', '.join(RULES)} "
                                 "(see docs/ci.md).")
        out[key] = _check_value(key, value, where, f"{name} ", allow_off)
    return out


def load_rules(path: str | os.PathLike) -> GateRules:
    """Parse and validate a rules TOML file; every problem is a :class:`GateInputError` naming file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GateInputError(f"--rules {path}: cannot read it ({exc}). Give the path of a gates TOML file.") from exc
    toml = _toml_module()
    try:
        doc = toml.loads(text)
    except toml.TOMLDecodeError as exc:
        raise GateInputError(f"--rules {path}: not valid TOML: {exc}. Fix the syntax there (strings in quotes, "
                             "one key = value per line, tables as [rules] or [artifacts.\"NAME\"]).") from exc
    for key in doc:
        if key not in ("rules", "artifacts"):
            close = difflib.get_close_matches(key, ["rules", "artifacts"], n=1)
            hint = f" Did you mean [{close[0]}]?" if close else ""
            raise GateInputError(f"{_where(path, text, key, None)}: unknown table or key {key!r}.{hint} A rules file "
                                 "holds a [rules] table and optional [artifacts.\"NAME\"] tables.")
    rules = GateRules(path)
    rules.rules = _check_table(doc.get("rules", {}), path, text, ("rules",), allow_off=False)
    artifacts = doc.get("artifacts", {})
    if not isinstance(artifacts, dict):
        raise GateInputError(f"{_where(path, text, 'artifacts', None)}: 'artifacts' must hold one table per artifact, "
                             'such as [artifacts."student-int8"].')
    for name, table in artifacts.items():
        rules.artifacts[name] = _check_table(table, path, text, ("artifacts", name), allow_off=True)
    return rules


def _toml_module():
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError as exc:
            raise CompressError("reading gates TOML needs Python 3.11+ (tomllib) or the tomli package: "
                                "pip install tomli") from exc
    return tomllib


_NUMBER = (int, float)


def _require(obj: dict, key: str, types: tuple, where: str, path: Path, nullable: bool = False) -> Any:
    if key not in obj:
        raise GateInputError(f"{path}: {where}.{key} is missing. The file is incomplete or was not written by "
                             "bert-compress bench; run the benchmark again.")
    value = obj[key]
    if value is None and nullable:
        return None
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        want = " or ".join(t.__name__ for t in types) + (" or null" if nullable else "")
        raise GateInputError(f"{path}: {where}.{key} should be {want}, got {value!r}. The file was edited or damaged; "
                             "run the benchmark again.")
    return value


def load_results(path: str | os.PathLike, option: str = "RESULTS") -> dict[str, Any]:
    """Read and validate a ``results.json`` (schema ``bert-compress-bench`` v1) for gating."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GateInputError(f"{option} {path}: cannot read it ({exc}). Give the results.json written by "
                             "bert-compress bench.") from exc
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise GateInputError(f"{option} {path}: not JSON ({exc}). Give the results.json that bert-compress bench "
                             "wrote into its --out folder.") from exc
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise GateInputError(f"{option} {path}: not a bert-compress benchmark result (schema {got!r}, expected "
                             f"{SCHEMA!r}). Give the results.json written by bert-compress bench.")
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise GateInputError(f"{option} {path}: schema_version is {version!r}, not a whole number. Run the benchmark again.")
    if version > SCHEMA_VERSION:
        raise GateInputError(f"{option} {path}: schema_version {version} was written by a newer bert-compress; this one "
                             f"reads version {SCHEMA_VERSION}. Upgrade bert-compress where the gate runs.")
    if version != SCHEMA_VERSION:
        raise GateInputError(f"{option} {path}: schema_version {version} is not supported (this bert-compress reads "
                             f"{SCHEMA_VERSION}). Run the benchmark again with this version.")
    reference = _require(doc, "reference", (str,), "$", path)
    artifacts = _require(doc, "artifacts", (list,), "$", path)
    if not artifacts:
        raise GateInputError(f"{path}: $.artifacts is empty; the benchmark measured nothing. Run it again.")
    names = set()
    for i, art in enumerate(artifacts):
        where = f"artifacts[{i}]"
        if not isinstance(art, dict):
            raise GateInputError(f"{path}: {where} should be an object. Run the benchmark again.")
        name = _require(art, "name", (str,), where, path)
        if name in names:
            raise GateInputError(f"{path}: two artifacts are named {name!r}. Run the benchmark again.")
        names.add(name)
        _require(art, "kind", (str,), where, path)
        _require(art, "is_reference", (bool,), where, path)
        _require(art, "size_bytes", (int,), where, path)
        _require(art, "num_hidden_layers", (int,), where, path, nullable=True)
        quality = _require(art, "quality", (dict,), where, path)
        _require(quality, "accuracy", _NUMBER, f"{where}.quality", path)
        _require(quality, "agreement", _NUMBER, f"{where}.quality", path)
        onnx = _require(art, "onnx", (dict,), where, path, nullable=True)
        if onnx is not None:
            _require(onnx, "attention_ops", (int,), f"{where}.onnx", path)
        for j, entry in enumerate(_require(art, "latency", (list,), where, path)):
            w = f"{where}.latency[{j}]"
            if not isinstance(entry, dict):
                raise GateInputError(f"{path}: {w} should be an object. Run the benchmark again.")
            _require(entry, "batch_size", (int,), w, path)
            _require(entry, "seq_len", (int,), w, path)
            _require(entry, "p50_ms", _NUMBER, w, path)
            _require(entry, "throughput_seq_per_s", _NUMBER, w, path, nullable=True)
            speedup = _require(entry, "speedup", (dict,), w, path)
            _require(speedup, "median", _NUMBER, f"{w}.speedup", path)
    if reference not in names:
        raise GateInputError(f"{path}: the reference {reference!r} is not among the artifacts. Run the benchmark again.")
    return doc


# ----------------------------------------------------------------------------- evaluation


def _select(latency: list[dict], batch: int | None, seq: int | None) -> list[dict]:
    return [e for e in latency if (batch is None or e["batch_size"] == batch) and (seq is None or e["seq_len"] == seq)]


def _configs(latency: list[dict]) -> str:
    return ", ".join(f"batch {e['batch_size']} seq {e['seq_len']}" for e in latency) or "none"


def _missing_config(name: str, rule: str, latency: list[dict], batch: int | None, seq: int | None, keys: str) -> Check:
    want = " ".join(p for p in (f"batch {batch}" if batch else "", f"seq {seq}" if seq else "") if p)
    return Check(name, rule, None, "-", "fail",
                 f"no latency measured at {want} (measured: {_configs(latency)}). Run bench with that batch size and "
                 f"sequence length, or change {keys} in the rules.")


def _worst(entries: list[dict], value: Callable[[dict], float], higher_is_better: bool) -> dict:
    return (min if higher_is_better else max)(entries, key=value)


def evaluate(results: dict[str, Any], rules: GateRules, baseline: dict[str, Any] | None = None) -> list[Check]:
    """Every rule in force on every artifact, in the rules' order: one :class:`Check` each."""
    arts = {a["name"]: a for a in results["artifacts"]}
    unknown = [n for n in rules.artifacts if n not in arts]
    if unknown:
        text = rules.path.read_text(encoding="utf-8")
        line = _header_line(text.splitlines(), ("artifacts", unknown[0]))
        where = f"{rules.path}:{line + 1}" if line is not None else str(rules.path)
        raise GateInputError(f"{where}: [artifacts.\"{unknown[0]}\"] names no artifact of the results "
                             f"(they are: {', '.join(arts)}). Use one of those names (the artifact folder's name).")
    ref = arts[results["reference"]]
    base_arts = {a["name"]: a for a in (baseline or {}).get("artifacts", [])}
    checks: list[Check] = []
    for name, art in arts.items():
        active = rules.for_artifact(name, art["is_reference"])
        for rule, limit in active.items():
            if rule in SELECTORS:
                continue
            checks.append(_evaluate_rule(rule, limit, art, ref, active, baseline, base_arts.get(name)))
    return checks


def _evaluate_rule(rule: str, limit: Any, art: dict, ref: dict, active: dict, baseline: dict | None,
                   base: dict | None) -> Check:
    name = art["name"]
    q, rq = art["quality"], ref["quality"]

    def verdict(ok: bool, measured: str, message: str = "") -> Check:
        return Check(name, rule, limit, measured, "pass" if ok else "fail", "" if ok else message)

    if rule == "min_speedup":
        b, s = active.get("speedup_batch_size"), active.get("speedup_seq_len")
        entries = _select(art["latency"], b, s)
        if not entries:
            return _missing_config(name, rule, art["latency"], b, s, "speedup_batch_size/speedup_seq_len")
        e = _worst(entries, lambda e: e["speedup"]["median"], higher_is_better=True)
        measured = f"{e['speedup']['median']:.2f}x at batch {e['batch_size']} seq {e['seq_len']}"
        return verdict(e["speedup"]["median"] >= limit - EPS, measured,
                       f"speedup {measured} is below {limit:g}x (worst of {len(entries)} config(s))")
    if rule == "max_accuracy_drop":
        drop = rq["accuracy"] - q["accuracy"]
        measured = f"{drop:+.4f} ({q['accuracy']:.4f} vs {rq['accuracy']:.4f})"
        return verdict(drop <= limit + EPS, measured, f"accuracy fell by {drop:.4f}, more than {limit:g}")
    if rule == "max_relative_accuracy_drop":
        drop = (rq["accuracy"] - q["accuracy"]) / rq["accuracy"] if rq["accuracy"] > 0 else 0.0
        measured = f"{100 * drop:+.2f}% of {rq['accuracy']:.4f}"
        return verdict(drop <= limit + EPS, measured, f"accuracy fell by {100 * drop:.2f}% of the reference's, more "
                                                      f"than {100 * limit:g}%")
    if rule == "min_agreement":
        measured = f"{q['agreement']:.4f}"
        return verdict(q["agreement"] >= limit - EPS, measured, f"agreement {measured} is below {limit:g}")
    if rule == "max_size_mb":
        mb = art["size_bytes"] / 1e6
        return verdict(mb <= limit + EPS, f"{mb:.2f} MB", f"size {mb:.2f} MB is over {limit:g} MB")
    if rule in ("max_p50_ms", "min_throughput"):
        b, s = active.get("latency_batch_size"), active.get("latency_seq_len")
        entries = _select(art["latency"], b, s)
        if not entries:
            return _missing_config(name, rule, art["latency"], b, s, "latency_batch_size/latency_seq_len")
        if rule == "max_p50_ms":
            e = _worst(entries, lambda e: e["p50_ms"], higher_is_better=False)
            measured = f"{e['p50_ms']:.3f} ms at batch {e['batch_size']} seq {e['seq_len']}"
            return verdict(e["p50_ms"] <= limit + EPS, measured, f"p50 {measured} is over {limit:g} ms")
        e = _worst(entries, lambda e: e["throughput_seq_per_s"] or 0.0, higher_is_better=True)
        value = e["throughput_seq_per_s"] or 0.0
        measured = f"{value:.1f} seq/s at batch {e['batch_size']} seq {e['seq_len']}"
        return verdict(value >= limit - EPS, measured, f"throughput {measured} is below {limit:g} seq/s")
    if rule == "max_regression":
        return _regression(art, limit, active, baseline, base)
    if rule in ("min_fused_attention", "require_full_attention_fusion"):
        onnx = art.get("onnx")
        if onnx is None:
            return Check(name, rule, limit, "-", "skip", f"{art['kind']} artifact: fusions apply to ONNX graphs only")
        ops = onnx["attention_ops"]
        if rule == "min_fused_attention":
            return verdict(ops >= limit, f"{ops} attention ops", f"{ops} fused attention operators, fewer than {limit}")
        layers = art.get("num_hidden_layers")
        if layers is None:
            return Check(name, rule, limit, f"{ops} attention ops", "fail",
                         "the layer count is unknown (no num_hidden_layers in config.json), so full fusion cannot "
                         "be shown; export the model again with bert-compress export")
        return verdict(ops == layers, f"{ops} of {layers} layers",
                       f"{ops} fused attention operators for {layers} layers: the unfused layers run as separate "
                       "MatMul/Softmax operators. Export with bert-compress export (eager attention, dynamo=False)")
    raise AssertionError(f"unhandled rule {rule}")  # RULES and this function are kept in step by the tests


def comparability(results: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    """Why absolute latencies of two runs may not be comparable: another CPU, thread count or data."""
    notes = []
    pairs = [("CPU", ("machine", "cpu_model")), ("threads", ("settings", "threads")),
             ("data", ("data", "fingerprint")), ("quick", ("settings", "quick"))]
    for label, (section, key) in pairs:
        new, old = (results.get(section) or {}).get(key), (baseline.get(section) or {}).get(key)
        if new is not None and old is not None and new != old:
            shown = "differs" if key == "fingerprint" else f"{old!r} -> {new!r}"
            notes.append(f"the baseline was measured with other {label} ({shown}); max_regression compares "
                         "absolute numbers, which then differ for reasons other than the model")
    return notes


def _regression(art: dict, limit: float, active: dict, baseline: dict | None, base: dict | None) -> Check:
    name, rule = art["name"], "max_regression"
    if baseline is None:
        return Check(name, rule, limit, "-", "skip", "no --baseline given")
    if base is None:
        return Check(name, rule, limit, "-", "skip", "not in the baseline (a new artifact)")
    b, s = active.get("latency_batch_size"), active.get("latency_seq_len")
    old = {(e["batch_size"], e["seq_len"]): e for e in base["latency"]}
    pairs = [(e, old[(e["batch_size"], e["seq_len"])]) for e in _select(art["latency"], b, s)
             if (e["batch_size"], e["seq_len"]) in old]
    problems, parts = [], []
    if pairs:
        e, o = max(pairs, key=lambda p: p[0]["p50_ms"] / p[1]["p50_ms"] if p[1]["p50_ms"] > 0 else 0.0)
        growth = e["p50_ms"] / o["p50_ms"] - 1 if o["p50_ms"] > 0 else 0.0
        parts.append(f"p50 {growth:+.1%} at batch {e['batch_size']} seq {e['seq_len']}")
        if growth > limit + EPS:
            problems.append(f"p50 latency at batch {e['batch_size']} seq {e['seq_len']} grew {growth:.1%} "
                            f"({o['p50_ms']:.3f} -> {e['p50_ms']:.3f} ms), more than {limit:.0%}")
    old_acc, new_acc = base["quality"]["accuracy"], art["quality"]["accuracy"]
    fall = (old_acc - new_acc) / old_acc if old_acc > 0 else 0.0
    parts.append(f"accuracy {-fall:+.1%}")
    if fall > limit + EPS:
        problems.append(f"accuracy fell {fall:.1%} ({old_acc:.4f} -> {new_acc:.4f}), more than {limit:.0%}")
    measured = "; ".join(parts) + ("" if pairs else " (no latency config in common with the baseline)")
    return Check(name, rule, limit, measured, "fail" if problems else "pass", "; ".join(problems))


# ----------------------------------------------------------------------------- output


def _limit_text(check: Check) -> str:
    if check.limit is True:
        return "required"
    return f"{check.limit:g}" if isinstance(check.limit, (int, float)) else str(check.limit)


def format_table(checks: list[Check]) -> str:
    """A plain-text pass/fail table for the log."""
    head = ["artifact", "rule", "limit", "measured", "result"]
    rows = [[c.artifact, c.rule, _limit_text(c), c.measured, c.status.upper()] for c in checks]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    for c in checks:
        if c.status != "pass" and c.message:
            lines.append(f"{c.status.upper()}: {c.artifact} {c.rule}: {c.message}")
    return "\n".join(lines)


def _counts(checks: list[Check]) -> tuple[int, int, int]:
    fails = sum(c.status == "fail" for c in checks)
    skips = sum(c.status == "skip" for c in checks)
    return len(checks) - fails - skips, fails, skips


def junit_xml(checks: list[Check], error: str | None = None, name: str = "bert-compress gate") -> str:
    """JUnit XML: one testcase per artifact x rule (``<failure>``/``<skipped>``), or one ``<error>`` for bad input."""
    passed, fails, skips = _counts(checks)
    errors = 1 if error else 0
    tests = len(checks) + errors
    root = ET.Element("testsuites", name=name, tests=str(tests), failures=str(fails), errors=str(errors),
                      skipped=str(skips))
    suite = ET.SubElement(root, "testsuite", name=name, tests=str(tests), failures=str(fails), errors=str(errors),
                          skipped=str(skips))
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname=f"gate.{c.artifact}", name=c.rule, time="0")
        if c.status == "fail":
            node = ET.SubElement(case, "failure", message=c.message, type="GateFailure")
            node.text = f"{c.artifact} {c.rule}: limit {_limit_text(c)}, measured {c.measured}\n{c.message}"
        elif c.status == "skip":
            ET.SubElement(case, "skipped", message=c.message)
        out = ET.SubElement(case, "system-out")
        out.text = f"limit {_limit_text(c)}; measured {c.measured}"
    if error:
        case = ET.SubElement(suite, "testcase", classname="gate", name="inputs", time="0")
        node = ET.SubElement(case, "error", message=error, type="GateInputError")
        node.text = error
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def markdown_summary(checks: list[Check], error: str | None = None) -> str:
    """The GitHub step summary: a headline and the table, with a mark per result."""
    if error:
        return f"## bert-compress gate: input error\n\n```\n{error}\n```\n"
    passed, fails, skips = _counts(checks)
    mark = {"pass": "✅ pass", "fail": "❌ fail", "skip": "⏭️ skip"}
    lines = [f"## bert-compress gate: {'FAILED' if fails else 'passed'} ({passed} passed, {fails} failed, "
             f"{skips} skipped)", "", "| artifact | rule | limit | measured | result | note |",
             "|---|---|---:|---|---|---|"]
    for c in checks:
        note = c.message.replace("|", "\\|")
        lines.append(f"| `{c.artifact}` | {c.rule} | {_limit_text(c)} | {c.measured} | {mark[c.status]} | {note} |")
    return "\n".join(lines) + "\n"


def _write(path: str | os.PathLike, text: str, option: str, append: bool = False) -> None:
    try:
        path = Path(path)
        if not append:
            path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a" if append else "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise CompressError(f"{option} {path}: cannot write it ({exc}). Give a writable path.") from exc


def run_gate(results: str | os.PathLike, rules: str | os.PathLike, baseline: str | os.PathLike | None = None,
             junit: str | os.PathLike | None = None, step_summary: str | None = None,
             out: TextIO | None = None) -> int:
    """Check ``results`` against ``rules``; print the table, write JUnit and the step summary; return the exit code.

    ``step_summary`` defaults to ``$GITHUB_STEP_SUMMARY``. Malformed input returns 3 after printing
    the problem (and recording it in the JUnit file and the step summary, so CI shows it).
    """
    out = out or sys.stdout
    step_summary = step_summary if step_summary is not None else os.environ.get("GITHUB_STEP_SUMMARY")
    try:
        parsed_rules = load_rules(rules)
        doc = load_results(results)
        base = load_results(baseline, option="--baseline") if baseline else None
        checks = evaluate(doc, parsed_rules, base)
        if base is not None:
            for note in comparability(doc, base):
                print(f"warning: {note}", file=sys.stderr)
    except GateInputError as exc:
        message = str(exc)
        print(f"error: {message}", file=sys.stderr)
        if junit:
            _write(junit, junit_xml([], error=message), "--junit")
        if step_summary:
            _write(step_summary, markdown_summary([], error=message), "$GITHUB_STEP_SUMMARY", append=True)
        return EXIT_MALFORMED
    passed, fails, skips = _counts(checks)
    if checks:
        print(format_table(checks), file=out)
    else:
        print(f"warning: no rule of {rules} applies to any artifact of {results}; nothing was checked.", file=sys.stderr)
    print(f"gate: {'FAILED' if fails else 'passed'}: {passed} passed, {fails} failed, {skips} skipped", file=out)
    if junit:
        _write(junit, junit_xml(checks), "--junit")
    if step_summary:
        _write(step_summary, markdown_summary(checks), "$GITHUB_STEP_SUMMARY", append=True)
    return EXIT_FAIL if fails else EXIT_PASS
