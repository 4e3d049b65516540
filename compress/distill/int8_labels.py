"""Soft labels from the teacher's ONNX Runtime INT8 build, used only where it agrees with the teacher.

Why: on a CPU without native bf16 the teacher's fp32 forward over the training rows and the
transfer set is the largest cost of a distillation run that has no intermediate losses (the demo's
teacher labels 18,452 sentences; docs/results.md has the measured split of the minutes). ONNX
Runtime's dynamic INT8 build of the same teacher gives nearly the same logits several times faster.
"Nearly" is checked, not assumed: the INT8 teacher labels the validation split first, and its labels
are used for the training rows only when its argmax agrees with the PyTorch teacher's on at least
``min_agreement`` of those sentences (99.5% by default). Otherwise the PyTorch teacher labels them,
as before, and the run says why. The validation and test logits that the student is measured
against always come from the PyTorch teacher.

The INT8 build is made once per teacher (keyed by the teacher's weights sha256) in the cache, and
its logits are cached like the PyTorch teacher's under their own precision tag, so they never mix.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from compress.artifact import read_meta
from compress.assets import cache_dir
from compress.config import SOFT_LABELS_AUTO_MIN_ROWS
from compress.device import cpu_flags
from compress.errors import CompressError
from compress.distill.soft_labels import save_logits
from compress.quantize import quantize
from compress.runtime import Predictor
from compress.windows import length_sorted_batches, pad_rows

#: The precision tag of INT8 soft labels in the soft-label cache key (``teacher.soft_label_cache_path``).
INT8_TAG = "onnx-int8"
#: ``auto``'s threshold (declared with the setting in compress.config).
AUTO_MIN_ROWS = SOFT_LABELS_AUTO_MIN_ROWS

#: CPU flags with 8-bit dot products that do not saturate (without them, u8 x s8 products pairwise summed into
#: int16 can overflow, and ONNX Runtime's ``reduce_range`` (7-bit weights) is what keeps the answers).
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


@dataclass
class LabelRuntime:
    """Which runtime labels the training rows, and why (recorded in the student's compress.json)."""

    runtime: str
    reason: str
    agreement: float | None = None
    n: int = 0
    seconds: float = 0.0
    predictor: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"runtime": self.runtime, "reason": self.reason, "validation_agreement": self.agreement,
                "validation_n": self.n, "seconds": round(self.seconds, 1)}


def wants_int8(setting: str, device: str, intermediate: bool, world_size: int, rows: int,
               flags: frozenset[str] | None = None) -> tuple[bool, str]:
    """Whether to try INT8 labels for ``--soft-labels SETTING`` with ``rows`` still to label, and why not.

    ``auto`` tries them where they can only save time: on the CPU (ONNX Runtime's CPU INT8 kernels;
    a GPU runs the PyTorch teacher fast already), with at least :data:`AUTO_MIN_ROWS` rows to label,
    without intermediate losses (those run the PyTorch teacher on every batch anyway, and its logits
    come with it), in one process (a distributed run shards the labelling over its ranks), and on a
    CPU with VNNI (``flags``: the CPU's, read when not given): without it the best INT8 copy of the
    demo's teacher agreed with it on 97.2% of validation, under the 99.5% the labels need, so the
    copy would be built and checked for nothing. ``onnx-int8`` tries them wherever they can run at all.
    """
    if setting == "pytorch":
        return False, "--soft-labels pytorch"
    if intermediate:
        return False, "intermediate losses run the PyTorch teacher on every batch; its logits come with them"
    if world_size > 1:
        return False, "a distributed run labels its rows on every rank with the PyTorch teacher"
    if rows == 0:
        return False, "every row's soft labels are cached"
    if setting == "auto" and not str(device).startswith("cpu"):
        return False, f"the teacher runs on {device}"
    if setting == "auto" and rows < AUTO_MIN_ROWS:
        return False, f"{rows} rows to label: fewer than the {AUTO_MIN_ROWS} that repay building an INT8 copy"
    if setting == "auto" and not (VNNI_FLAGS & (cpu_flags() if flags is None else flags)):
        return False, "this CPU has no VNNI: ONNX Runtime's INT8 products saturate there and its labels disagree"
    return True, ""


def int8_teacher(teacher) -> Path:
    """The teacher's ORT dynamic INT8 artifact, built once per teacher weights in the cache.

    Per-channel weight scales always (they cost no speed); 7-bit weights (``reduce_range``) on a CPU
    without VNNI. Measured on the demo's MPNet teacher on an AVX2-only AMD EPYC, against the fp32
    teacher's answers on the 1,056 validation sentences: per-tensor 92.0% agreement, per-channel with
    reduced range 97.2% (docs/results.md).
    """

    reduce_range = not (VNNI_FLAGS & cpu_flags())
    variant = "per-channel" + ("+reduce-range" if reduce_range else "")
    folder = cache_dir() / "int8-teachers" / f"{teacher.weights_sha256[:32]}-{variant}"
    try:
        meta = read_meta(folder)
    except CompressError:
        meta = None
    if meta is not None and meta.get("kind") == "onnx-int8":
        return folder
    print(f"soft labels: building the teacher's ONNX Runtime INT8 copy in {folder} (once per teacher; its labels "
          "are then checked against the PyTorch teacher's on the validation split)", flush=True)
    # No data: the agreement check below is the accuracy check that matters here (against the PyTorch
    # teacher's own labels, on the split the student is validated on).
    return quantize(teacher.path, folder, method="ort-dynamic", per_channel=True, reduce_range=reduce_range)


def int8_logits(predictor, tokenized, prefix: str = "t_", batch_size: int = 64) -> np.ndarray:
    """The INT8 teacher's logits for every row of ``tokenized`` (its exact token ids), in row order."""

    ids = tokenized[f"{prefix}input_ids"]
    types = tokenized[f"{prefix}token_type_ids"] if f"{prefix}token_type_ids" in tokenized.column_names else None
    out = np.zeros((len(ids), predictor.num_labels), dtype=np.float32)
    pad_id = predictor.tokenizer.pad_token_id if predictor.tokenizer.pad_token_id is not None else 0
    for idx in length_sorted_batches([len(x) for x in ids], batch_size):
        rows = [ids[int(i)] for i in idx]
        row_types = [types[int(i)] for i in idx] if types is not None else None
        out[idx] = predictor.forward(pad_rows(rows, row_types, pad_id, predictor.need_token_types))
    return out


def choose_label_runtime(setting: str, min_agreement: float, teacher, validation, validation_logits: np.ndarray | None,
                         device: str, intermediate: bool, world_size: int, rows: int) -> LabelRuntime:
    """Decide who labels the ``rows`` training rows still unlabelled: the INT8 teacher when it agrees
    enough with the PyTorch teacher on validation, else the PyTorch teacher."""
    wanted, why_not = wants_int8(setting, device, intermediate, world_size, rows)
    if not wanted:
        if setting != "pytorch" and rows >= AUTO_MIN_ROWS:  # a labelling big enough for the choice to matter
            print(f"soft labels: the PyTorch teacher labels the {rows} training rows ({why_not})", flush=True)
        return LabelRuntime("pytorch", why_not)
    if validation is None or validation_logits is None or len(validation) == 0:
        return LabelRuntime("pytorch", "no validation split to check the INT8 teacher's labels against")

    t0 = time.perf_counter()
    try:
        predictor = Predictor.load(int8_teacher(teacher))
    except CompressError as exc:
        if setting == "onnx-int8":
            raise
        print(f"note: soft labels from the PyTorch teacher: its INT8 copy could not be built ({exc})", file=sys.stderr)
        return LabelRuntime("pytorch", f"the INT8 copy could not be built: {exc}")
    agreement = float((int8_logits(predictor, validation).argmax(-1) == validation_logits.argmax(-1)).mean())
    seconds = time.perf_counter() - t0
    n = len(validation)
    if agreement >= min_agreement:
        reason = (f"the INT8 teacher agrees with the PyTorch teacher on {agreement:.2%} of {n} validation sentences "
                  f"(>= {min_agreement:.2%})")
        print(f"soft labels: ONNX Runtime INT8 teacher for the training rows; {reason}", flush=True)
        return LabelRuntime(INT8_TAG, reason, agreement, n, seconds, predictor)
    reason = (f"the INT8 teacher agrees with the PyTorch teacher on only {agreement:.2%} of {n} validation sentences "
              f"(< {min_agreement:.2%})")
    print(f"note: soft labels from the PyTorch teacher: {reason}", file=sys.stderr)
    return LabelRuntime("pytorch", reason, agreement, n, seconds)


def fill_int8_cache(runtime: LabelRuntime, parts: list[tuple[Any, Path]]) -> float:
    """Label every ``(tokenized, cache file)`` part whose cache file is missing; return the seconds spent."""

    t0 = time.perf_counter()
    for tokenized, path in parts:
        if path.exists() or len(tokenized) == 0:
            continue
        save_logits(path, int8_logits(runtime.predictor, tokenized))
        print(f"soft labels ({len(tokenized)} examples): ONNX Runtime INT8 teacher, cached at {path}", flush=True)
    return time.perf_counter() - t0
