"""The ONNX artifact format: the graph's file name and how an INT8 graph is told from an fp32 one."""

from __future__ import annotations

import os
from pathlib import Path

#: The graph file of an ``onnx-fp32`` or ``onnx-int8`` artifact.
ONNX_FILE = "model.onnx"
#: Operators that only appear in a graph after ONNX Runtime quantization.
INT8_OPS = frozenset({"MatMulInteger", "QAttention", "DynamicQuantizeLinear", "QEmbedLayerNormalization", "QGemm",
                      "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QLinearMatMul", "QuantizeLinear",
                      "DequantizeLinear"})


def is_int8_graph(onnx_file: str | os.PathLike) -> bool:
    """Whether a graph holds any operator of :data:`INT8_OPS`.

    With the ``onnx`` package the node types are read exactly. A serving install has only
    onnxruntime (which does not list a graph's nodes), so there the operator names are looked for
    in the protobuf bytes, where each node stores its ``op_type`` as a plain string; a node *named*
    like an INT8 operator could fool that, which is why artifacts record their kind in
    ``compress.json`` and this is only the fallback for bare ``model.onnx`` folders.
    """
    try:
        import onnx
    except ImportError:
        data = Path(onnx_file).read_bytes()
        return any(op.encode() in data for op in INT8_OPS)
    graph = onnx.load(str(onnx_file), load_external_data=False).graph
    return any(n.op_type in INT8_OPS for n in graph.node)
