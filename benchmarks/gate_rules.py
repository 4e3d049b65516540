"""The gate's rules file: which rules exist (:data:`RULES`), and reading ``gates.toml`` into :class:`GateRules`.

Every rule's kind, default and meaning are declared here once; a malformed file is one
:class:`GateInputError` naming the file, the line and the fix (exit code 3). The rules themselves are
decided in :mod:`benchmarks.gate`; see ``docs/ci.md`` for each.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compress.core.errors import CompressError

EXIT_PASS, EXIT_FAIL, EXIT_MALFORMED, EXIT_INCONCLUSIVE = 0, 1, 3, 4
#: Float tolerance on comparisons: 0.85 - 0.84 is 0.010000000000000009, which must pass a 0.01 limit.
EPS = 1e-9


class GateInputError(CompressError):
    """A malformed rules or results file (exit code 3), as opposed to a rule that failed (exit code 1)."""


# ----------------------------------------------------------------------------- rule definitions


@dataclass(frozen=True)
class RuleSpec:
    """One key of a rules table: its value type, allowed range and meaning (for messages and docs)."""

    kind: str  # "number", "fraction", "count", "bool", "selector", "confidence"
    help: str


RULES: dict[str, RuleSpec] = {
    "min_speedup": RuleSpec("number", "paired median speedup over the reference (x), at every selected config: "
                                      "the interval's lower bound must reach it"),
    "speedup_batch_size": RuleSpec("selector", "check min_speedup only at this batch size"),
    "speedup_seq_len": RuleSpec("selector", "check min_speedup only at this sequence length"),
    "max_accuracy_drop": RuleSpec("fraction", "reference accuracy minus artifact accuracy, absolute (0.01 = 1 point)"),
    "max_relative_accuracy_drop": RuleSpec("fraction", "accuracy drop as a share of the reference accuracy"),
    "min_agreement": RuleSpec("fraction", "share of inputs where the artifact predicts what the reference predicts"),
    "min_traffic_agreement": RuleSpec("fraction", "min_agreement on the unlabelled texts of bench --traffic-file (the "
                                                  "user's own traffic)"),
    "max_size_mb": RuleSpec("number", "weights on disk, MB (10^6 bytes)"),
    "max_p50_ms": RuleSpec("number", "median latency in ms, at every selected config"),
    "min_throughput": RuleSpec("number", "sequences per second, at every selected config"),
    "latency_batch_size": RuleSpec("selector", "check max_p50_ms, min_throughput, max_regression only at this batch size"),
    "latency_seq_len": RuleSpec("selector", "check max_p50_ms, min_throughput, max_regression only at this sequence length"),
    "max_regression": RuleSpec("fraction", "against --baseline: p50 may grow and accuracy may fall by at most this share"),
    "max_accuracy_regression": RuleSpec("fraction", "against --baseline: accuracy may fall by at most this much, "
                                                    "absolute (0.0 = any significant fall fails), paired on the same "
                                                    "examples"),
    "max_f1_drop": RuleSpec("fraction", "a tagger's reference entity F1 minus the artifact's, absolute (0.01 = 1 point), "
                                        "paired bootstrap over sentences"),
    "max_f1_regression": RuleSpec("fraction", "against --baseline: a tagger's entity F1 may fall by at most this much, "
                                              "absolute, paired over the same sentences"),
    "max_spearman_drop": RuleSpec("fraction", "a sentence encoder's or similarity model's reference Spearman minus the "
                                              "artifact's, absolute (0.01 = 1 point), paired bootstrap over the pairs"),
    "min_neighbour_recall": RuleSpec("fraction", "a sentence encoder's neighbour recall against the reference's "
                                                 "vectors, mean over the held-out texts"),
    "min_fused_attention": RuleSpec("count", "fused attention operators in the ONNX graph"),
    "require_full_attention_fusion": RuleSpec("bool", "every transformer layer has a fused attention operator (ONNX)"),
    "confidence": RuleSpec("confidence", "two-sided confidence of the intervals the rules are decided on (default 0.95)"),
}
#: The quality rules: the F1 rules (benchmarks.f1_rules) and the accuracy rules; which of them gate a results file,
#: and how, its task says (its scoring aspect's gate_rules; the others are refused there).
TAGGING_RULES = ("max_f1_drop", "max_f1_regression")
CLASSIFIER_RULES = ("max_accuracy_drop", "max_relative_accuracy_drop", "max_accuracy_regression", "min_agreement",
                    "min_traffic_agreement")
VECTOR_RULES = ("max_spearman_drop", "min_neighbour_recall")
QUALITY_RULES = TAGGING_RULES + CLASSIFIER_RULES + VECTOR_RULES
#: What each quality rule gates, for the message refusing it on the results of a task it does not apply to.
GATES = {**{rule: "a tagger's or a reader's F1" for rule in TAGGING_RULES},
         **{rule: "a sentence classifier's accuracy" for rule in CLASSIFIER_RULES},
         **{rule: "a sentence encoder's or a similarity model's quality" for rule in VECTOR_RULES}}
SELECTORS = ("speedup_batch_size", "speedup_seq_len", "latency_batch_size", "latency_seq_len")
#: Keys that configure rules rather than being rules (no row of their own).
SETTINGS = SELECTORS + ("confidence",)
DEFAULT_CONFIDENCE = 0.95


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
    status: str  # "pass", "fail", "inconclusive", "skip"
    message: str = ""
    interval: str = ""  # the confidence interval the verdict was decided on, as shown


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
    if spec.kind == "confidence":
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0.5 <= value < 1):
            raise GateInputError(f"{where}: {section}{key} must be a number from 0.5 to below 1 (0.95 means 95%), "
                                 f"got {value!r}. {fix}")
        return float(value)
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
    return {"bool": f"{key} = true", "count": f"{key} = 6", "selector": f"{key} = 1", "confidence": f"{key} = 0.95",
            "fraction": f"{key} = 0.01"}.get(RULES[key].kind, f"{key} = 2.0")


def _check_table(table: Any, path: Path, text: str, header: tuple[str, ...], allow_off: bool) -> dict[str, Any]:
    name = "[" + ".".join(f'"{h}"' if not re.fullmatch(r"[A-Za-z0-9_-]+", h) else h for h in header) + "]"
    if not isinstance(table, dict):
        raise GateInputError(f"{_where(path, text, header[-1], header[:-1] or None)}: {name} must be a table of rules "
                             f"(for example\n{name}\nmin_speedup = 2.0).")
    out = {}
    problems = []
    for key, value in table.items():
        where = _where(path, text, key, header)
        if key not in RULES:
            close = suggest_rule(key)
            hint = f" Did you mean {close!r}? (it checks the {RULES[close].help})" if close else ""
            problems.append(f"{where}: unknown rule {key!r} in {name}.{hint}")
            continue
        try:
            out[key] = _check_value(key, value, where, f"{name} ", allow_off)
        except GateInputError as exc:
            problems.append(str(exc))
    if problems:  # every bad key at once, as a recipe lists its problems (a line each, each naming its line)
        unknown = [i for i, line in enumerate(problems) if "unknown rule" in line]
        if unknown:
            problems[unknown[-1]] += f" Known rules: {', '.join(RULES)} (see docs/ci.md)."
        raise GateInputError("\n".join(problems))
    return out


#: Words users write for what a rule's name says another way (``max_latency_ms`` means ``max_p50_ms``).
_SYNONYMS = {"latency": "p50", "median": "p50", "time": "p50", "acc": "accuracy", "speed": "speedup",
             "faster": "speedup", "mb": "size", "disk": "size", "qps": "throughput", "rps": "throughput",
             "entity": "f1", "drift": "regression", "regress": "regression", "fusion": "fused"}


def suggest_rule(key: str) -> str | None:
    """The known rule a mistyped or reworded ``key`` most likely means: the most words in common (synonyms
    read as the rule's own word, ``max``/``min`` kept apart), else the closest spelling of the same direction."""
    words = {_SYNONYMS.get(w, w) for w in key.lower().split("_") if w}
    direction = next((w for w in ("max", "min") if w in words), None)
    same = [r for r in RULES if direction is None or r.startswith(direction + "_")]
    scored = sorted(((len(words & set(r.split("_"))), r) for r in same), key=lambda x: (-x[0], len(x[1])))
    if scored and scored[0][0] >= 2:
        return scored[0][1]
    close = difflib.get_close_matches(key, same or list(RULES), n=1)
    return close[0] if close else None


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


