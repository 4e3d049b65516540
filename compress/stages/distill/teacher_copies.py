"""Soft labels from a faster copy of the teacher, used only where it agrees with the teacher and is faster.

Why: on a CPU without native bf16 the teacher's fp32 forward over the training rows and the
transfer set is the largest cost of a distillation run that has no intermediate losses (the demo's
teacher labels 18,452 sentences; docs/results.md has the measured split of the minutes). A copy of
the same teacher in another runtime may do it faster:

- ``onnx-int8``: ONNX Runtime's dynamic INT8 build: several times faster, but its answers move
  (96.7-97.2% agreement with the demo's teacher on the CPUs measured, under the 99.5% asked).
- ``openvino-fp32``: the teacher's fp32 graph compiled by OpenVINO (``INFERENCE_PRECISION_HINT=f32``):
  the same logits up to float rounding. In the demo on the Intel Xeon with AMX in fp32 (oneDNN capped
  below bf16) it labelled 256 validation sentences in 5.92 s against the PyTorch teacher's 6.07 s:
  2.5% faster, less than building and checking it costs, so ``auto`` does not try it; ask for it where
  it measures faster (the run prints both times).

Neither is assumed: the copy labels a sample of the validation split beside the PyTorch teacher first,
timed, and then the whole split. Its labels are used for the training rows only when its argmax agrees
with the PyTorch teacher's on at least ``min_agreement`` of the validation sentences (99.5% by
default) and, when ``auto`` chose it, it ran the sample faster. Otherwise the PyTorch teacher labels
them, as before, and the run says why. The validation and test logits that the student is measured
against always come from the PyTorch teacher.

A copy is built once per teacher (keyed by the teacher's weights sha256) in the cache, and its
logits are cached like the PyTorch teacher's under the copy's own tag, so they never mix.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from compress.core.artifact import read_meta
from compress.core.assets import cache_dir
from compress.config import SOFT_LABELS_AUTO_MIN_ROWS
from compress.core.device import cpu_flags
from compress.core.errors import CompressError
from compress.stages.distill.soft_labels import save_logits
from compress.stages.quantize import quantize
from compress.runtime.predictor import Predictor
from compress.core.windows import length_sorted_batches, pad_rows

#: The copies, by their ``--soft-labels`` name, which is also their tag in the soft-label cache key
#: (``teacher.soft_label_cache_path``).
INT8_TAG = "onnx-int8"
OPENVINO_FP32_TAG = "openvino-fp32"
COPIES = (OPENVINO_FP32_TAG, INT8_TAG)
#: ``auto``'s threshold (declared with the setting in compress.config).
AUTO_MIN_ROWS = SOFT_LABELS_AUTO_MIN_ROWS
#: Validation rows the copy and the PyTorch teacher both label, timed, before the copy is chosen.
SPEED_SAMPLE = 256

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
    #: Seconds the PyTorch teacher and the copy took over the same validation rows (at most :data:`SPEED_SAMPLE`),
    #: and how many (``rows``).
    sample_seconds: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"runtime": self.runtime, "reason": self.reason, "validation_agreement": self.agreement,
                "validation_n": self.n, "seconds": round(self.seconds, 1), "sample_seconds": self.sample_seconds}


def wants_copy(setting: str, device: str, intermediate: bool, world_size: int, rows: int, precision: str = "fp32",
               flags: frozenset[str] | None = None) -> tuple[str | None, str]:
    """Which copy to try for ``--soft-labels SETTING`` with ``rows`` still to label (``None``: none), and why not.

    ``auto`` tries the INT8 copy where it can only save time: on the CPU (a GPU runs the PyTorch teacher
    fast already), with at least :data:`AUTO_MIN_ROWS` rows to label, without intermediate losses (those
    run the PyTorch teacher on every batch anyway, and its logits come with it), in one process (a
    distributed run shards the labelling over its ranks), where the teacher would label in fp32 (in
    native bf16 the PyTorch teacher is the fast one), and on a CPU with VNNI (``flags``: the CPU's, read
    when not given): without it the best INT8 copy of the demo's teacher agreed with it on 97.2% of
    validation, under the 99.5% the labels need, so the copy would be built and checked for nothing.
    A copy named explicitly (``onnx-int8``, ``openvino-fp32``) is tried wherever it can run at all.
    """
    if setting == "pytorch":
        return None, "--soft-labels pytorch"
    if intermediate:
        return None, "intermediate losses run the PyTorch teacher on every batch; its logits come with them"
    if world_size > 1:
        return None, "a distributed run labels its rows on every rank with the PyTorch teacher"
    if rows == 0:
        return None, "every row's soft labels are cached"
    if setting in COPIES:
        return setting, ""
    if not str(device).startswith("cpu"):
        return None, f"the teacher runs on {device}"
    if rows < AUTO_MIN_ROWS:
        return None, f"{rows} rows to label: fewer than the {AUTO_MIN_ROWS} that repay building a copy of the teacher"
    if precision != "fp32":
        return None, f"the teacher runs in native {precision} here"
    if not VNNI_FLAGS & (cpu_flags() if flags is None else flags):
        return None, "this CPU has no VNNI: ONNX Runtime's INT8 products saturate there and its labels disagree"
    return INT8_TAG, ""


def teacher_copy(teacher, copy: str) -> Path:
    """The teacher's ``copy`` (:data:`COPIES`) artifact, built once per teacher weights in the cache.

    The INT8 copy has per-channel weight scales always (they cost no speed) and 7-bit weights
    (``reduce_range``) on a CPU without VNNI. Measured on the demo's MPNet teacher on an AVX2-only AMD
    EPYC, against the fp32 teacher's answers on the 1,056 validation sentences: per-tensor 92.0%
    agreement, per-channel with reduced range 97.2% (docs/results.md).
    """
    if copy == INT8_TAG:
        reduce_range = not (VNNI_FLAGS & cpu_flags())
        variant = "per-channel" + ("+reduce-range" if reduce_range else "")
        folder = cache_dir() / "int8-teachers" / f"{teacher.weights_sha256[:32]}-{variant}"
        build = dict(method="ort-dynamic", per_channel=True, reduce_range=reduce_range)
        name = "ONNX Runtime INT8"
    else:
        folder = cache_dir() / "teacher-copies" / f"{teacher.weights_sha256[:32]}-{copy}"
        build = dict(method=copy)
        name = "OpenVINO fp32"
    try:
        meta = read_meta(folder)
    except CompressError:
        meta = None
    if meta is not None and meta.get("kind") == copy:
        return folder
    print(f"soft labels: building the teacher's {name} copy in {folder} (once per teacher; its labels are then "
          "checked against the PyTorch teacher's on the validation split)", flush=True)
    # No data: the agreement check below is the accuracy check that matters here (against the PyTorch
    # teacher's own labels, on the split the student is validated on).
    return quantize(teacher.path, folder, **build)


def copy_logits(predictor, tokenized, prefix: str = "t_", batch_size: int = 64) -> np.ndarray:
    """The copy's logits for every row of ``tokenized`` (the teacher's exact token ids), in row order."""

    ids = tokenized[f"{prefix}input_ids"]
    types = tokenized[f"{prefix}token_type_ids"] if f"{prefix}token_type_ids" in tokenized.column_names else None
    out = np.zeros((len(ids), predictor.num_labels), dtype=np.float32)
    pad_id = predictor.tokenizer.pad_token_id if predictor.tokenizer.pad_token_id is not None else 0
    for idx in length_sorted_batches([len(x) for x in ids], batch_size):
        rows = [ids[int(i)] for i in idx]
        row_types = [types[int(i)] for i in idx] if types is not None else None
        out[idx] = predictor.forward(pad_rows(rows, row_types, pad_id, predictor.need_token_types))
    return out


def _sample_seconds(teacher, predictor, validation, precision: str) -> dict[str, float]:
    """Seconds the PyTorch teacher and the copy take over the same validation rows (``rows`` of them), each after
    a warm-up batch."""
    from compress.runtime.modeling import predict_logits

    sample = validation.select(range(min(SPEED_SAMPLE, len(validation))))
    warm = sample.select(range(min(8, len(sample))))
    pad_id = teacher.tokenizer.pad_token_id or 0
    out = {"rows": len(sample)}
    for name, run in (("pytorch", lambda ds: predict_logits(teacher.model, ds, precision=precision, prefix="t_",
                                                            pad_id=pad_id, progress=False)),
                      ("copy", lambda ds: copy_logits(predictor, ds))):
        run(warm)
        t0 = time.perf_counter()
        run(sample)
        out[name] = round(time.perf_counter() - t0, 2)
    return out


def choose_label_runtime(setting: str, min_agreement: float, teacher, validation, validation_logits: np.ndarray | None,
                         device: str, intermediate: bool, world_size: int, rows: int,
                         precision: str = "fp32") -> LabelRuntime:
    """Decide who labels the ``rows`` training rows still unlabelled: a copy of the teacher when it agrees
    enough with the PyTorch teacher on validation and runs faster, else the PyTorch teacher."""
    copy, why_not = wants_copy(setting, device, intermediate, world_size, rows, precision)
    if copy is None:
        if setting != "pytorch" and rows >= AUTO_MIN_ROWS:  # a labelling big enough for the choice to matter
            print(f"soft labels: the PyTorch teacher labels the {rows} training rows ({why_not})", flush=True)
        return LabelRuntime("pytorch", why_not)
    if validation is None or validation_logits is None or len(validation) == 0:
        return LabelRuntime("pytorch", f"no validation split to check the {copy} teacher's labels against")

    t0 = time.perf_counter()
    try:
        predictor = Predictor.load(teacher_copy(teacher, copy))
    except CompressError as exc:
        if setting == copy:
            raise
        print(f"note: soft labels from the PyTorch teacher: its {copy} copy could not be built ({exc})", file=sys.stderr)
        return LabelRuntime("pytorch", f"the {copy} copy could not be built: {exc}")
    timed = _sample_seconds(teacher, predictor, validation, precision)
    agreement = float((copy_logits(predictor, validation).argmax(-1) == validation_logits.argmax(-1)).mean())
    seconds = time.perf_counter() - t0
    n = len(validation)
    wins, reason = copy_wins(copy, agreement, n, min_agreement, timed, explicit=setting == copy)
    if wins:
        print(f"soft labels: the {copy} teacher labels the training rows; {reason}", flush=True)
        return LabelRuntime(copy, reason, agreement, n, seconds, predictor, timed)
    print(f"note: soft labels from the PyTorch teacher: {reason}", file=sys.stderr)
    return LabelRuntime("pytorch", reason, agreement, n, seconds, None, timed)


def copy_wins(copy: str, agreement: float, n: int, min_agreement: float, timed: dict[str, float],
              explicit: bool) -> tuple[bool, str]:
    """Whether the copy labels the training rows, and the reason recorded: it must agree with the PyTorch
    teacher on ``min_agreement`` of the ``n`` validation sentences, and, when ``auto`` chose it rather than the
    user (``explicit``), have labelled the timed sample faster (``timed``: seconds of each, same rows)."""
    agrees = (f"the {copy} teacher agrees with the PyTorch teacher on {agreement:.2%} of {n} validation sentences "
              f"({'>=' if agreement >= min_agreement else '<'} {min_agreement:.2%})")
    pace = f"labelled {timed['rows']} of them in {timed['copy']:.2f} s against the PyTorch teacher's {timed['pytorch']:.2f} s"
    faster = timed["copy"] < timed["pytorch"]
    if agreement < min_agreement:
        return False, f"{agrees}, though it {pace}"
    if not faster and not explicit:
        return False, f"{agrees}, but it {pace}: no faster"
    return True, f"{agrees}, and {pace}" + ("" if faster else " (--soft-labels asked for it)")


def fill_copy_cache(runtime: LabelRuntime, parts: list[tuple[Any, Path]]) -> float:
    """Label every ``(tokenized, cache file)`` part whose cache file is missing; return the seconds spent."""

    t0 = time.perf_counter()
    for tokenized, path in parts:
        if path.exists() or len(tokenized) == 0:
            continue
        save_logits(path, copy_logits(runtime.predictor, tokenized))
        print(f"soft labels ({len(tokenized)} examples): the {runtime.runtime} teacher, cached at {path}", flush=True)
    return time.perf_counter() - t0
