"""The ``choice`` format: a folder that points at the fastest artifact for each batch size.

``bert-compress optimize`` measures several runtimes of one model on the machine at hand and
writes::

    OUT/
      compress.json          kind "choice"; choice.by_batch_size {"1": "onnx-int8-fused", "32": "torch-bf16"},
                             the measured table, the CPU flags, the accuracy of every candidate
      onnx-int8-fused/       a complete artifact (any kind), as quantize or export wrote it
      torch-bf16/            another one

``Predictor.load(OUT)`` opens the chosen artifacts and sends each batch to the one chosen for the
nearest measured batch size (:func:`pick`), so a server that calls with batch 1 and a batch job
that calls with 32 each get the faster runtime without knowing which it is. Every sub-artifact is
also an ordinary artifact folder: ``Predictor.load(OUT / "torch-bf16")`` opens that one alone.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from compress.core.errors import CompressError

CHOICE_KIND = "choice"


def read_choice(folder: str | os.PathLike, meta: dict[str, Any]) -> dict[int, Path]:
    """``{batch size: artifact folder}`` of a choice folder, checked: every batch size maps to a sub-folder."""
    path = Path(folder)
    choice = meta.get("choice") or {}
    table = choice.get("by_batch_size")
    if not isinstance(table, dict) or not table:
        raise CompressError(f"{path / 'compress.json'}: a choice artifact needs choice.by_batch_size (batch size -> "
                            "artifact folder). Run bert-compress optimize again.")
    out: dict[int, Path] = {}
    for key, name in table.items():
        try:
            batch = int(key)
        except (TypeError, ValueError):
            batch = 0
        if batch < 1 or not isinstance(name, str) or not name:
            raise CompressError(f"{path / 'compress.json'}: choice.by_batch_size has the entry {key!r}: {name!r}; "
                                "keys are batch sizes >= 1 and values artifact folder names. Run optimize again.")
        sub = (path / name).resolve()
        if path.resolve() not in sub.parents:
            raise CompressError(f"{path / 'compress.json'}: choice points outside its folder ({name!r}); refusing it.")
        if not (sub / "compress.json").exists() and not (sub / "config.json").exists():
            raise CompressError(f"{path}: the artifact {name!r} chosen for batch {batch} is missing. Copy the whole "
                                "folder that optimize wrote, or run optimize again.")
        out[batch] = sub
    return dict(sorted(out.items()))


def pick(batch_sizes: list[int] | tuple[int, ...], batch_size: int) -> int:
    """The measured batch size nearest ``batch_size`` on a log scale (ties go to the smaller one).

    Speed changes with the logarithm of the batch more than with the batch itself: with 1 and 32
    measured, batches up to 5 are served like 1, 6 and more like 32.
    """
    if not batch_sizes:
        raise CompressError("a choice artifact lists no batch sizes.")
    n = max(1, int(batch_size))
    return min(sorted(batch_sizes), key=lambda b: (abs(math.log2(b) - math.log2(n)), b))
