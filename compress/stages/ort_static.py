"""ONNX Runtime static INT8 (QDQ), calibrated on task texts: the parts :mod:`compress.stages.quantize` calls.

Dynamic INT8 computes every activation's scale at run time (a ``DynamicQuantizeLinear`` before
each integer MatMul); static INT8 fixes those scales ahead of time from calibration data, which
saves that work and, with per-channel weight scales, usually changes fewer answers. What is done:

- **QDQ format, weights per channel** (int8, symmetric), activations uint8 (asymmetric): the
  combination ONNX Runtime's x86 kernels run as U8S8 (VNNI where present).
- **Only MatMuls with a constant weight** (``MatMulConstBOnly``): the two activation-by-activation
  products of attention (QK^T and probabilities x V) stay fp32. They are ~5% of a 6L/384
  student's multiply-adds at sequence 128 and the softmax output's range quantizes badly.
- **Calibration on a few hundred training texts** of the task, tokenized and padded exactly as
  serving does (length-sorted batches), never on the validation or test split that judges it.
- **Shapes and types first**: ORT's fused operators (``SkipLayerNormalization``, ``Attention``) carry
  no output types in the exported graph, and the quantizer silently skips any activation whose
  type it cannot infer: measured here, the fused graph came out with weights in int8 and *no*
  activation quantized (fp32 compute with dequantized weights, slower than fp32). ORT's symbolic
  shape inference (``quant_pre_process`` without its optimizer) runs first, and a result with no
  quantized activation is refused rather than passed off as INT8.
- **Which graph**: QDQ has no quantized form of ORT's fused ``Attention`` operator, so on the
  fused graph the Q/K/V projections stay fp32; the unfused graph exposes them as MatMuls. Both are
  candidates; which one is faster is measured, not assumed (docs/design.md, "Known traps").

This module does not import the quantize stage (that would be an import cycle); the stage owns the
candidate plan, the accuracy check and the fallbacks.
"""

from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from compress.core.errors import CompressError

#: Calibration settings in the order the fallbacks try them: min/max first (exact on the data it saw),
#: then the 99.999th percentile, which ignores the rare outliers that stretch a min/max range.
CALIBRATIONS = ("minmax", "percentile")
DEFAULT_CALIBRATION_SIZE = 256
CALIBRATION_BATCH = 16


def calibration_texts(task, size: int = DEFAULT_CALIBRATION_SIZE, seed: int = 0) -> list[Any]:
    """A seeded sample of ``size`` training texts (all of them when the split is smaller)."""
    if size < 1:
        raise CompressError(f"--calibration-size must be at least 1, got {size}.")
    if "train" not in task.splits:
        raise CompressError(f"{task.source} has no train split; static INT8 calibrates on training texts.")
    texts = task.texts("train")
    if not len(texts):
        raise CompressError(f"{task.source}: the train split is empty; static INT8 needs texts to calibrate on.")
    rng = np.random.default_rng(seed)
    picked = sorted(rng.choice(len(texts), size=min(size, len(texts)), replace=False).tolist())
    return [texts[i] for i in picked]


class TextCalibrationReader:
    """``onnxruntime.quantization.CalibrationDataReader`` over tokenized texts.

    The batches are built by :meth:`compress.runtime.predictor.Predictor.window_batches` (the serving code path:
    a long text as its windows), so the activations seen during calibration have the padding and
    lengths of real use.
    """

    def __init__(self, predictor, texts: Sequence[Any], input_names: Sequence[str], batch_size: int = CALIBRATION_BATCH):
        batches = predictor.window_batches(predictor.windows(list(texts)), batch_size)
        self._feeds = [{n: arrays[n] for n in input_names} for _, arrays in batches]
        self._iter: Iterator[dict[str, np.ndarray]] | None = None
        self.batch_size = batch_size
        pad = predictor.tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else 0

    def uniform(self) -> "TextCalibrationReader":
        """The same rows as batches of one shape: every batch padded to the longest row, and as many rows per
        batch (the last, shorter batch dropped when there are full ones).

        ONNX Runtime's histogram calibration (``percentile``) stacks each tensor's activations over all
        batches with ``np.asarray``, which fails on batches of different lengths ("inhomogeneous shape").
        The padded positions add activations of pad tokens to the histograms; the attention mask keeps
        them out of the real tokens' values, and min/max calibration keeps the unpadded batches."""
        if not self._feeds:
            return self
        width = max(f["input_ids"].shape[1] for f in self._feeds)
        names = list(self._feeds[0])
        rows = {n: np.concatenate([np.pad(f[n], ((0, 0), (0, width - f[n].shape[1])),
                                          constant_values=self.pad_id if n == "input_ids" else 0)
                                   for f in self._feeds]) for n in names}
        total = len(rows[names[0]])
        size = min(self.batch_size, total)
        other = copy.copy(self)
        other._feeds = [{n: rows[n][start:start + size] for n in names} for start in range(0, total - size + 1, size)]
        other._iter = None
        return other

    def __len__(self) -> int:
        return len(self._feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._iter is None:
            self._iter = iter(self._feeds)
        return next(self._iter, None)

    def rewind(self) -> None:
        self._iter = None


def graph_inputs(onnx_file: str | os.PathLike) -> list[str]:
    import onnx

    model = onnx.load(str(onnx_file), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in initializers]


def quantize_static_graph(src: str | os.PathLike, dst: str | os.PathLike, reader: TextCalibrationReader,
                          calibration: str = "minmax", per_channel: bool = True, reduce_range: bool = False,
                          op_types: Sequence[str] = ("MatMul",), exclude: Sequence[str] = ()) -> dict[str, Any]:
    """Write ``dst``, the QDQ static INT8 form of ``src``; returns what was done (for ``compress.json``)."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod

    methods = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile}
    if calibration not in methods:
        raise CompressError(f"calibration {calibration!r} is unknown; use one of {', '.join(methods)}.")
    extra: dict[str, Any] = {
        "MatMulConstBOnly": True,
        "ActivationSymmetric": False,
        "WeightSymmetric": True,
        # The fused graph's com.microsoft operators carry no ONNX type information for some outputs.
        "DefaultTensorType": onnx.TensorProto.FLOAT,
    }
    if calibration == "percentile":
        extra["CalibPercentile"] = 99.999
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if calibration == "percentile":
        reader = reader.uniform()
    reader.rewind()
    with tempfile.TemporaryDirectory(prefix="bert-compress-static-") as tmp:
        typed = Path(tmp) / "typed.onnx"
        try:  # graph unchanged (no optimizer), types and shapes added for every tensor
            quant_pre_process(str(src), str(typed), skip_optimization=True, auto_merge=True)
            inferred = True
        except Exception:  # symbolic inference fails on some graphs; the check below catches what that costs
            typed, inferred = Path(src), False
        _quantize(typed, dst, reader, op_types, per_channel, reduce_range, exclude, methods[calibration], extra)
    counts = qdq_counts(dst)
    if not counts["QuantizeLinear"]:
        raise CompressError(f"static INT8 of {src} quantized no activation (ONNX Runtime could not infer their types"
                            f"{'' if inferred else '; shape inference failed'}): the graph would run in fp32 with "
                            "dequantized weights. Use --graph unfused or --method ort-dynamic.")
    return {"format": "QDQ", "activation_type": "QUInt8", "weight_type": "QInt8", "calibration": calibration,
            "calibration_batches": len(reader), "per_channel": per_channel, "op_types": list(op_types),
            "matmul_const_b_only": True, "shape_inference": inferred, **counts}


def _quantize(src: Path, dst, reader, op_types, per_channel, reduce_range, exclude, method, extra) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    quantize_static(
        str(src), str(dst), reader, quant_format=QuantFormat.QDQ, op_types_to_quantize=list(op_types),
        per_channel=per_channel, reduce_range=reduce_range, activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8, nodes_to_exclude=list(exclude), calibrate_method=method,
        extra_options=extra,
    )


def qdq_counts(onnx_file: str | os.PathLike) -> dict[str, int]:
    """How many QuantizeLinear / DequantizeLinear nodes a graph holds (0 for an fp32 graph)."""
    import onnx

    counts = {"QuantizeLinear": 0, "DequantizeLinear": 0}
    for node in onnx.load(str(onnx_file), load_external_data=False).graph.node:
        if node.op_type in counts:
            counts[node.op_type] += 1
    return counts


def check_calibration_inputs(path: Path) -> None:
    """Refuse a graph that is already quantized (calibrating its integer tensors would be meaningless)."""
    counts = qdq_counts(path)
    if counts["QuantizeLinear"] or counts["DequantizeLinear"]:
        raise CompressError(f"{path} already holds QuantizeLinear/DequantizeLinear nodes; static INT8 needs the fp32 "
                            "graph. Give the export artifact instead.")
