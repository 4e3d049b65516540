"""A side-by-side table of artifacts from their ``compress.json``: what ``make demo`` ends with.

It reads only what each stage measured and recorded (no model is loaded), so it is instant and
shows exactly the numbers that travel with the artifacts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from compress.core.artifact import folder_size_bytes, read_meta
from compress.core.errors import CompressError


def summary_rows(folders: list[str | os.PathLike]) -> list[dict[str, Any]]:
    rows = []
    for folder in folders:
        meta = read_meta(folder)
        if meta is None:
            raise CompressError(f"{folder} has no compress.json: it was not written by bert-compress.")
        test = meta.get("metrics", {}).get("test", {})
        val = meta.get("metrics", {}).get("validation", {})
        rows.append({
            "artifact": Path(folder).name,
            "stage": meta.get("stage"),
            "parameters_m": round(meta.get("parameters", 0) / 1e6, 1),
            "size_mb": round(folder_size_bytes(folder) / 1e6, 1),
            "val_accuracy": val.get("accuracy"),
            "test_accuracy": test.get("accuracy"),
            "test_macro_f1": test.get("macro_f1"),
            "test_agreement": test.get("agreement"),
            "wall_s": meta.get("timings", {}).get("total_s"),
        })
    return rows


def _fmt(value: Any, pct: bool = False) -> str:
    if value is None:
        return "-"
    if pct:
        return f"{100 * value:.1f}%"
    return str(value)


def format_table(rows: list[dict[str, Any]], markdown: bool = False) -> str:
    head = ["artifact", "stage", "params (M)", "size (MB)", "val acc", "test acc", "test macro-F1",
            "agreement w/ teacher", "wall time (s)"]
    body = [[r["artifact"], r["stage"], _fmt(r["parameters_m"]), _fmt(r["size_mb"]), _fmt(r["val_accuracy"], True),
             _fmt(r["test_accuracy"], True), _fmt(r["test_macro_f1"], True), _fmt(r["test_agreement"], True),
             _fmt(r["wall_s"])] for r in rows]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines)
    widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in body]
    return "\n".join(lines)
