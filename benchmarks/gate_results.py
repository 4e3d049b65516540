"""The gate's input: a ``results.json`` of ``bert-compress bench``, read and checked before any rule is decided.

A damaged or hand-edited file (a missing field, a per-example list of the wrong length, rounds that
are not paired) is one :class:`benchmarks.gate_rules.GateInputError` naming the file and the field,
never a rule that passes for lack of numbers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from benchmarks.gate_rules import GateInputError
from compress.core.errors import CompressError
from compress.tasks import get_task, task_names

#: The results format bench writes (``results.json``; docs/bench-schema.md): its name and version. Version 2
#: keeps every round's timing and every example's prediction, so the gate can compute intervals.
SCHEMA = "bert-compress-bench"
SCHEMA_VERSION = 2
#: Versions this gate reads. Version 1 files hold no per-round timings or per-example predictions: the
#: statistical rules on them are inconclusive (with a message saying why), the others work as before.
READABLE_VERSIONS = (1, 2)

#: The JSON number types a numeric field may hold.
NUMBER = (int, float)


def require(obj: dict, key: str, types: tuple, where: str, path: Path, nullable: bool = False) -> Any:
    """``obj[key]``, refused in one line naming the file and the field when missing or of another type."""
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


def results_device(doc: dict[str, Any]) -> str:
    """The device a results.json was measured on; results older than the ``device`` setting ran on the CPU."""
    return str((doc.get("settings") or {}).get("device") or "cpu")


def device_mismatch(doc: dict[str, Any], base: dict[str, Any]) -> str | None:
    """How the devices of two results differ (``cuda:0`` and ``cuda:1`` count as the same kind), or ``None``."""
    now, then = results_device(doc), results_device(base)
    if now.split(":")[0] == then.split(":")[0]:
        return None
    return f"the baseline was measured on {then} and these results on {now}"


def results_task(doc: dict[str, Any], path: str | os.PathLike | None = None) -> Any:
    """The registered task a ``results.json`` is of: ``$.data.task`` (the registry name), or, in a file written
    before bench recorded it, the task whose primary metric is ``$.data.metric`` (version 1 files: accuracy)."""
    data = doc.get("data") if isinstance(doc.get("data"), dict) else {}
    name = data.get("task")
    try:
        if name is not None:
            return get_task(name)
    except CompressError as exc:
        raise GateInputError(f"{path or 'the results'}: $.data.task {name!r} is not a task this bert-compress knows "
                             f"({exc}). Gate it with the bert-compress that has that task.") from exc
    metric = (data.get("metric") if doc.get("schema_version", 1) >= 2 else None) or "accuracy"
    for known in task_names():
        if get_task(known).primary_metric == metric:
            return get_task(known)
    raise GateInputError(f"{path or 'the results'}: $.data.metric {metric!r} is no task's primary metric. The file "
                         "was edited or damaged; run the benchmark again.")


def load_results(path: str | os.PathLike, option: str = "RESULTS") -> dict[str, Any]:
    """Read and validate a ``results.json`` (schema ``bert-compress-bench`` v1 or v2) for gating."""
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
                             f"reads versions {READABLE_VERSIONS[0]} to {SCHEMA_VERSION}. Upgrade bert-compress where the "
                             "gate runs.")
    if version not in READABLE_VERSIONS:
        raise GateInputError(f"{option} {path}: schema_version {version} is not supported (this bert-compress reads "
                             f"{', '.join(map(str, READABLE_VERSIONS))}). Run the benchmark again with this version.")
    reference = require(doc, "reference", (str,), "$", path)
    artifacts = require(doc, "artifacts", (list,), "$", path)
    task = results_task(doc, path)
    scoring = task.aspect("scoring")
    facts = scoring.check_results_data(doc, version, path)
    # the measure the data allowed (bench's $.data.metric: a sentence encoder on text alone has no Spearman)
    measured = (doc.get("data") or {}).get("metric") if version >= 2 else None
    measured = measured if isinstance(measured, str) and measured else task.primary_metric
    if not artifacts:
        raise GateInputError(f"{path}: $.artifacts is empty; the benchmark measured nothing. Run it again.")
    names = set()
    for i, art in enumerate(artifacts):
        where = f"artifacts[{i}]"
        if not isinstance(art, dict):
            raise GateInputError(f"{path}: {where} should be an object. Run the benchmark again.")
        name = require(art, "name", (str,), where, path)
        if name in names:
            raise GateInputError(f"{path}: two artifacts are named {name!r}. Run the benchmark again.")
        names.add(name)
        require(art, "kind", (str,), where, path)
        require(art, "is_reference", (bool,), where, path)
        require(art, "size_bytes", (int,), where, path)
        require(art, "num_hidden_layers", (int,), where, path, nullable=True)
        quality = require(art, "quality", (dict,), where, path)
        require(quality, measured, NUMBER, f"{where}.quality", path)
        # null where no agreement is defined (a sentence encoder of another width than its reference)
        require(quality, "agreement", NUMBER, f"{where}.quality", path, nullable=True)
        scoring.check_results_quality(quality, facts, version, f"{where}.quality", path)
        if art.get("traffic_agreement") is not None:  # bench --traffic-file (optional)
            traffic = require(art, "traffic_agreement", (dict,), where, path)
            predictions = require(traffic, "predictions", (list,), f"{where}.traffic_agreement", path)
            if not predictions or not all(isinstance(p, int) and not isinstance(p, bool) for p in predictions):
                raise GateInputError(f"{path}: {where}.traffic_agreement.predictions should be a non-empty list of "
                                     "whole numbers. The file was edited or damaged; run the benchmark again.")
        onnx = require(art, "onnx", (dict,), where, path, nullable=True)
        if onnx is not None:
            require(onnx, "attention_ops", (int,), f"{where}.onnx", path)
        for j, entry in enumerate(require(art, "latency", (list,), where, path)):
            w = f"{where}.latency[{j}]"
            if not isinstance(entry, dict):
                raise GateInputError(f"{path}: {w} should be an object. Run the benchmark again.")
            require(entry, "batch_size", (int,), w, path)
            require(entry, "seq_len", (int,), w, path)
            require(entry, "p50_ms", NUMBER, w, path)
            require(entry, "throughput_seq_per_s", NUMBER, w, path, nullable=True)
            speedup = require(entry, "speedup", (dict,), w, path)
            require(speedup, "median", NUMBER, f"{w}.speedup", path)
            if version >= 2:
                rounds = require(entry, "rounds_ns", (list,), w, path)
                if not rounds or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in rounds):
                    raise GateInputError(f"{path}: {w}.rounds_ns should be a non-empty list of whole nanoseconds. The "
                                         "file was edited or damaged; run the benchmark again.")
    if reference not in names:
        raise GateInputError(f"{path}: the reference {reference!r} is not among the artifacts. Run the benchmark again.")
    if version >= 2:
        # Paired statistics divide round i of the reference by round i of each artifact: equal counts, checked here
        # where the file is known, not in the middle of an evaluation.
        ref_rounds = {(e["batch_size"], e["seq_len"]): len(e["rounds_ns"])
                      for e in next(a for a in artifacts if a["name"] == reference)["latency"]}
        for i, art in enumerate(artifacts):
            for j, entry in enumerate(art["latency"]):
                want = ref_rounds.get((entry["batch_size"], entry["seq_len"]))
                if want is not None and len(entry["rounds_ns"]) != want:
                    raise GateInputError(
                        f"{path}: artifacts[{i}].latency[{j}].rounds_ns holds {len(entry['rounds_ns'])} rounds but the "
                        f"reference's at batch {entry['batch_size']} seq {entry['seq_len']} holds {want}: the rounds "
                        "are not paired. The file was edited or damaged; run the benchmark again.")
    groups = doc.get("groups") or []
    if not isinstance(groups, list):
        raise GateInputError(f"{path}: $.groups should be a list. The file was edited or damaged; run the benchmark again.")
    for i, group in enumerate(groups):
        members = group.get("members") if isinstance(group, dict) else None
        if not (isinstance(group, dict) and isinstance(group.get("name"), str) and isinstance(members, list)
                and len(members) >= 2 and all(m in names for m in members)):
            raise GateInputError(f"{path}: $.groups[{i}] should name a group and two or more of the artifacts as its "
                                 "members. The file was edited or damaged; run the benchmark again.")
        if group["name"] in names:
            raise GateInputError(f"{path}: seed group {group['name']!r} has the name of an artifact; give the group "
                                 "another name (bench --seeds NAME=...).")
    return doc
