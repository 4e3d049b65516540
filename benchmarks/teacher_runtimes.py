"""Speedup against the teacher's best runtime: what distillation itself buys, beside what a user sees.

"26x the fp32 PyTorch teacher" mixes two gains: a smaller model (distillation, pruning) and a
faster runtime (ONNX Runtime, INT8, bf16). The teacher can take the second gain too. When the
benchmark holds the teacher in several runtimes (its ONNX export, its INT8 or bf16 form, as well as
the PyTorch fp32 reference), each student's speedup is also reported against the fastest of
those *in the same configuration and the same rounds*: ``teacher_best_i / student_i`` per round,
median over rounds, exactly like the speedup against the reference; and, where the teacher was
measured in the student's own kind (both ONNX INT8, both bf16), against that one too: the same
runtime on both sides, so the ratio is the smaller model alone.

Which artifacts are "the teacher in another runtime" is read from the lineage in ``compress.json``:
an artifact made by a format-only stage (export, quantize, optimize) carries the weights of its
parent, so its parent chain is followed up to the model that made the weights; the artifacts
whose chain ends at the reference's model are the teacher's runtimes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from benchmarks.latency import paired_speedup
from compress.core.artifact import read_meta
from compress.core.errors import CompressError

#: Stages that change how a model is stored or run, never its weights' meaning.
FORMAT_STAGES = ("export", "quantize", "optimize")
_SAMPLE_KEYS = ("rounds_ns", "samples_ns")


def _meta(path: Path) -> dict[str, Any] | None:
    try:
        return read_meta(path) if path.is_dir() else None
    except CompressError:
        return None


def model_root(path: str | Path) -> str:
    """The folder of the model whose weights ``path`` carries: its parents followed through format-only stages."""
    current = Path(path).expanduser().resolve()
    meta = _meta(current)
    seen = {current}
    while meta and meta.get("stage") in FORMAT_STAGES:
        parent = meta.get("parent") or {}
        if not parent.get("path"):
            break
        nxt = Path(parent["path"]).expanduser().resolve()
        if nxt in seen:
            break
        seen.add(nxt)
        current = nxt
        found = _meta(nxt)
        if found is None and parent.get("stage") in FORMAT_STAGES:
            # The intermediate folder is gone: its record travels in the child's parent_meta.
            found = {"stage": parent.get("stage"), "parent": (meta.get("parent_meta") or {}).get("parent")}
        meta = found
    return str(current)


def _samples(entry: dict[str, Any]) -> list[int] | None:
    for key in _SAMPLE_KEYS:
        if entry.get(key):
            return list(entry[key])
    return None


def _entry(latency: Sequence[dict[str, Any]], b: int, s: int) -> dict[str, Any] | None:
    return next((e for e in latency if e["batch_size"] == b and e["seq_len"] == s), None)


def _paired(teacher_entry: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """Speedup of ``entry`` over ``teacher_entry``: per-round ratios when both kept their rounds."""
    theirs, own = _samples(teacher_entry), _samples(entry)
    if theirs and own and len(own) == len(theirs):
        return {**paired_speedup(theirs, own), "method": "median of per-round ratios"}
    # Samples not kept: the ratio of the two paired speedups against the reference (same rounds).
    return {"median": entry["speedup"]["median"] / teacher_entry["speedup"]["median"],
            "method": "ratio of the speedups against the reference"}


def add_teacher_best(artifacts: list[dict[str, Any]], reference: str) -> dict[str, Any] | None:
    """Add ``speedup_vs_teacher_best`` (and ``speedup_vs_teacher_same_kind``) to every non-teacher artifact's
    latency entries (in place).

    ``artifacts`` are results records (``name``, ``path``, ``latency`` with per-round samples when
    measured with them). Returns the summary for ``results.json`` (``teacher_runtimes``), or
    ``None`` when the teacher was measured in fewer than two runtimes (then the second speedup
    would equal the first).
    """
    ref = next((a for a in artifacts if a["name"] == reference), None)
    if ref is None:
        return None
    root = model_root(ref["path"])
    teacher = [a for a in artifacts if model_root(a["path"]) == root]
    if len(teacher) < 2:
        return None
    configs = sorted({(e["batch_size"], e["seq_len"]) for e in ref.get("latency") or []})
    best: dict[str, str] = {}
    for b, s in configs:
        measured = [(a, _entry(a.get("latency") or [], b, s)) for a in teacher]
        measured = [(a, e) for a, e in measured if e is not None]
        if not measured:
            continue
        fastest, fastest_entry = max(measured, key=lambda pair: pair[1]["speedup"]["median"])
        best[f"{b}x{s}"] = fastest["name"]
        same_kind = {}
        for a, e in measured:  # the fastest teacher artifact of each kind
            if a.get("kind") not in same_kind or e["speedup"]["median"] > same_kind[a["kind"]][1]["speedup"]["median"]:
                same_kind[a.get("kind")] = (a, e)
        for art in artifacts:
            if art in teacher:
                continue
            entry = _entry(art.get("latency") or [], b, s)
            if entry is None:
                continue
            entry["speedup_vs_teacher_best"] = {**_paired(fastest_entry, entry), "against": fastest["name"],
                                                "against_kind": fastest.get("kind")}
            if art.get("kind") in same_kind:
                twin, twin_entry = same_kind[art["kind"]]
                entry["speedup_vs_teacher_same_kind"] = {**_paired(twin_entry, entry), "against": twin["name"],
                                                         "against_kind": twin.get("kind")}
    return {"root": root, "artifacts": [a["name"] for a in teacher], "best": best}
