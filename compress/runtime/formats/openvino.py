"""The OpenVINO artifact format: an OpenVINO IR (``openvino_model.xml`` + ``.bin``) beside the tokenizer.

On Intel CPUs OpenVINO (with NNCF for INT8) is the runtime a user of BERT-family encoders picks;
on an Intel Xeon with AVX-512 VNNI but no AMX it ran the 6L/384 student 1.9x (batch 1) and 2.3x
(batch 32) faster than ONNX Runtime INT8 (issue 24). So it is a runtime kind of its own:

- ``openvino-fp32``: the exported fp32 ONNX graph converted to IR (:func:`convert_onnx`), weights
  kept in fp32 (``compress_to_fp16=False``: OpenVINO's default would halve them);
- ``openvino-int8``: the same IR after NNCF post-training quantization, calibrated on task texts
  (the quantize stage does that; this module only stores and opens IRs).

Both are run with ``INFERENCE_PRECISION_HINT=f32``: on CPUs with AMX or AVX-512 BF16 OpenVINO
would otherwise compute an "fp32" model in bf16 and change its answers without saying so.
Serving needs ``openvino``, ``tokenizers`` and ``numpy`` only: ``import openvino`` does not import
torch (tests/unit/compress/runtime/formats/test_openvino.py runs it with torch unimportable). OpenVINO is an optional
dependency (``pip install -e '.[openvino]'``); :func:`openvino_missing` says why it cannot run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from compress.core.errors import CompressError, first_line
from compress.core.signal_stack import ensure_signal_stack

#: The IR files of an OpenVINO artifact (optimum-intel's names, so its tools recognise the folder).
OPENVINO_XML = "openvino_model.xml"
OPENVINO_BIN = "openvino_model.bin"
OPENVINO_KINDS = ("openvino-fp32", "openvino-int8")
#: The versions this format was tested with (pyproject.toml's ``openvino`` extra pins them).
TESTED_VERSIONS = {"openvino": "2026.4.1", "nncf": "3.4.0"}
INSTALL_HINT = "pip install -e '.[openvino]' (openvino==2026.4.1, nncf==3.4.0)"
#: Operator types that only appear in an IR after NNCF INT8 quantization.
INT8_IR_OPS = ("FakeQuantize", "FakeConvert")


def openvino_missing(need_nncf: bool = False) -> str | None:
    """Why OpenVINO (and NNCF, to quantize) cannot be used here, or ``None`` when it can."""
    import importlib.util

    missing = [name for name in ("openvino",) + (("nncf",) if need_nncf else ()) if importlib.util.find_spec(name) is None]
    if missing:
        return f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed; {INSTALL_HINT}"
    return None


def require_openvino(who: str, need_nncf: bool = False):
    """``import openvino``, or one clear error naming ``who`` needed it and how to install it."""
    reason = openvino_missing(need_nncf)
    if reason:
        raise CompressError(f"{who} needs OpenVINO: {reason}.")
    import openvino

    return openvino


def convert_onnx(onnx_file: str | os.PathLike):
    """An ``openvino.Model`` read from an fp32 ONNX graph (OpenVINO's ONNX front end, no torch)."""
    ov = require_openvino(f"converting {onnx_file}")
    try:
        return ov.convert_model(str(onnx_file))
    except Exception as exc:
        raise CompressError(f"{onnx_file}: OpenVINO could not convert it ({first_line(exc)}). Export the "
                            "model again with bert-compress export --no-optimize.") from exc


def save_ir(model, folder: str | os.PathLike) -> Path:
    """Write ``model`` as ``openvino_model.xml`` + ``.bin`` in ``folder``, weights as they are (no fp16)."""
    ov = require_openvino("saving an OpenVINO IR")
    path = Path(folder) / OPENVINO_XML
    ov.save_model(model, str(path), compress_to_fp16=False)
    return path


def is_int8_ir(xml_file: str | os.PathLike) -> bool:
    """Whether an IR holds NNCF's INT8 operators (read from the XML text; the fallback when ``compress.json``
    does not record the kind)."""
    text = Path(xml_file).read_text(encoding="utf-8", errors="replace")
    return any(f'type="{op}"' in text for op in INT8_IR_OPS)


def compile_ir(folder: str | os.PathLike, threads: int | None = None, spinning: bool = True,
               max_tokens: int | None = None) -> tuple[Any, list[str]]:
    """Open ``folder``'s IR on the CPU: ``(compiled model, input names)``.

    One stream with the latency hint (one request at a time, as the benchmark and a batch-1 server
    call it), ``threads`` inference threads, fp32 inference precision (see the module docstring).
    ``spinning=False`` turns CPU pinning off, so that runtimes interleaved in one process on a few
    cores (the benchmark) do not fight over pinned cores. ``max_tokens`` (the model's position limit)
    bounds the sequence axis, which the exported IR leaves unbounded (OpenVINO's CPU documentation: upper
    bounds on dynamic dimensions let the plugin reuse memory across shapes). Measured on the NER student
    (INT8, Intel Xeon with AMX, 500 WNUT-17 test sentences at their real lengths, batch 1): p50 9.8 ms
    unbounded, 7.3 ms bounded at 512, identical logits (docs/lab/ner.md).
    """
    ov = require_openvino(f"{folder}, an OpenVINO artifact,")
    xml = Path(folder) / OPENVINO_XML
    if not xml.exists() or not (Path(folder) / OPENVINO_BIN).exists():
        raise CompressError(f"{folder}: {OPENVINO_XML} or {OPENVINO_BIN} is missing; the OpenVINO artifact is "
                            "incomplete. Build it again with bert-compress quantize --method openvino-int8 (or "
                            "openvino-fp32).")
    config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1", "INFERENCE_PRECISION_HINT": "f32"}
    if threads is not None:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    if not spinning:
        config["ENABLE_CPU_PINNING"] = False
    core = ov.Core()
    try:
        model = core.read_model(str(xml))
        if max_tokens is not None:
            shapes = {i.get_any_name(): i.get_partial_shape() for i in model.inputs}
            model.reshape({name: ov.PartialShape([ov.Dimension(), ov.Dimension(1, int(max_tokens))])
                           for name, shape in shapes.items() if shape.rank.is_static and shape.rank.get_length() == 2})
        compiled = core.compile_model(model, "CPU", config)
    except Exception as exc:
        raise CompressError(f"{xml}: OpenVINO {ov.__version__} could not open it ({first_line(exc)}). "
                            f"It was tested with {TESTED_VERSIONS['openvino']}; build the artifact again.") from exc
    finally:
        ensure_signal_stack()  # compile_model swaps the thread's alternate signal stack (compress.core.signal_stack)
    return compiled, [i.get_any_name() for i in compiled.inputs]
