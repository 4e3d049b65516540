"""INT8 and bf16 quantization, checked against the fp32 model, with fallbacks and no silent losses.

Four methods:

- ``ort-dynamic``: ONNX Runtime ``quantize_dynamic`` on the exported (fused) fp32 graph. A PyTorch
  folder is exported first (into a temporary folder). It quantizes the word-embedding table too
  (through ``EmbedLayerNormalization`` or ``Gather``), so the file is about a quarter of fp32.
- ``torch-dynamic``: PyTorch dynamic INT8 of every ``nn.Linear``. It is a CPU runtime of its own:
  PyTorch-quantized models cannot be exported to ONNX (pytorch #123555). It is saved without
  pickle, as int8 tensors + scales in ``model_int8.safetensors``, and reloaded by rebuilding the
  fp32 model from ``config.json``, quantizing it the same way and loading the tensors back.
- ``ort-static``: ONNX Runtime static INT8 (QDQ, per-channel weights) calibrated on a few hundred
  training texts of ``data`` (:mod:`compress.stages.ort_static`); by default on the unfused graph, where
  every weight MatMul (Q/K/V included) can be quantized.
- ``torch-bf16``: the PyTorch model with its weights in bfloat16 (:mod:`compress.runtime.formats.bf16`),
  run in bf16: the fast path on CPUs with AMX or AVX-512 BF16, and on GPUs.
- ``openvino-int8``: NNCF post-training INT8 of the unfused fp32 graph converted to an OpenVINO IR
  (:mod:`compress.runtime.formats.openvino`), calibrated on a few hundred training texts of ``data`` like
  ``ort-static``; fallbacks: NNCF's ``mixed`` preset (asymmetric activations), then the sensitive
  layers kept in fp32. ``openvino-fp32`` converts without quantizing (the fp32 IR, accuracy-checked
  too). Both need the optional ``openvino`` extra.

``graph`` (fused/unfused) and ``op_types`` choose the ONNX graph and the operator types quantized;
:mod:`compress.stages.optimize` builds several such variants and keeps the fastest on the machine.

With ``data``, the validation accuracy of fp32 and INT8 are measured. When the drop exceeds
``max_accuracy_drop``, fallbacks are tried in order (per-channel scales, reduced range, the
sensitive layers kept in fp32) and the best candidate is written whatever happens, with every
candidate's numbers in ``compress.json``: tuners that miss the goal and save nothing
(neural-compressor #2261), and INT8 accuracy that drops silently (onnxruntime #11286), are the two
complaints this module exists to prevent.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from compress.core.artifact import folder_size_bytes, read_meta, weights_sha256, write_artifact
from compress.config import MAX_TYPE_F1_DROP, QUANTIZE_GRAPHS, QUANTIZE_METHODS, DataOptions, QuantizeConfig
from compress.core.errors import CompressError, describe
from compress.stages.export import (PARITY_PAIRS, PARITY_TEXTS, carry_model_files, check_out_is_not_input,
                                    count_fused_ops, export_onnx)
from compress.runtime.formats.onnx import INT8_OPS, ONNX_FILE
from compress.runtime.formats.torch_int8 import save_torch_int8
from compress.stages.ort_static import DEFAULT_CALIBRATION_SIZE
from compress.core.quiet import quiet_torch_ao
from compress.runtime.predictor import Predictor, artifact_kind, reading_settings
from compress.tasks import get_task
from compress.core.device import PrecisionChoice, device_name, resolve_device, resolve_precision
from compress.runtime.formats.bf16 import save_bf16
from compress.runtime.formats.openvino import OPENVINO_BIN, OPENVINO_XML, convert_onnx, require_openvino, save_ir
from compress.runtime.modeling import load_classifier
from compress.stages.ort_static import TextCalibrationReader, check_calibration_inputs, graph_inputs, quantize_static_graph
from compress.stages.quality import SplitScorer

METHODS = QUANTIZE_METHODS
#: The artifact kind each method writes.
METHOD_KINDS = {"ort-dynamic": "onnx-int8", "ort-static": "onnx-int8", "torch-dynamic": "torch-int8",
                "torch-bf16": "torch-bf16", "openvino-fp32": "openvino-fp32", "openvino-int8": "openvino-int8"}
ONNX_METHODS = ("ort-dynamic", "ort-static")
#: Methods that convert the unfused fp32 ONNX graph to an OpenVINO IR (optional dependency).
OPENVINO_METHODS = ("openvino-fp32", "openvino-int8")
GRAPHS = QUANTIZE_GRAPHS
#: Static INT8 quantizes the MatMuls with constant weights (see compress.stages.ort_static).
ORT_STATIC_OP_TYPES = ["MatMul"]
#: Operator types each ORT method can quantize here (its registry, narrowed to what BERT graphs hold).
_ORT_QUANTIZABLE = {"ort-dynamic": {"MatMul", "Attention", "Gather", "EmbedLayerNormalization"},
                    "ort-static": {"MatMul", "Gather", "Gemm"}}
#: ORT operator types quantized. Gather / EmbedLayerNormalization carry the word-embedding table,
#: the largest single tensor of a small model; Gemm nodes are rewritten to MatMul by ORT first.
ORT_OP_TYPES = ["MatMul", "Attention", "Gather", "EmbedLayerNormalization"]
#: Files never copied from the fp32 folder into an INT8 one: weights, lineage, training state.
_NOT_COPIED_SUFFIXES = (".onnx", ".safetensors", ".bin", ".pt", ".pth", ".data")
_NOT_COPIED = ("compress.json", "model.safetensors.index.json", "pytorch_model.bin.index.json")


@dataclass(frozen=True)
class CandidateSpec:
    """One way of quantizing: what a fallback changes."""

    per_channel: bool
    reduce_range: bool
    exclude_sensitive: bool
    calibration: str | None = None  # ort-static: minmax or percentile
    precision: str = "int8"  # int8, or bf16 (torch-bf16: nothing else to choose)

    @property
    def name(self) -> str:
        if self.precision != "int8":
            return self.precision + ("+sensitive-fp32" if self.exclude_sensitive else "")
        parts = ["per-channel" if self.per_channel else "per-tensor"]
        if self.calibration:
            parts.append(f"static-{self.calibration}")
        if self.reduce_range:
            parts.append("reduce-range")
        if self.exclude_sensitive:
            parts.append("sensitive-fp32")
        return "+".join(parts)


def candidate_plan(method: str, per_channel: bool = False, reduce_range: bool = False) -> list[CandidateSpec]:
    """The requested setting first, then the fallbacks in the order they are tried.

    Per-channel scales fix most of the loss at no speed cost; reduced (7-bit) range helps CPUs
    without VNNI, where 8-bit products can saturate; keeping the last layer, the pooler and the
    classifier in fp32 costs a little speed and size but protects the layers nearest the logits.
    PyTorch's dynamic kernels always reduce the activation range, so its plan has no such step.
    """
    if method == "ort-dynamic":
        plan = [CandidateSpec(per_channel, reduce_range, False), CandidateSpec(True, reduce_range, False),
                CandidateSpec(True, True, False), CandidateSpec(True, reduce_range, True)]
    elif method == "ort-static":
        # Per-channel weights always (the point of static INT8 here); then a calibration that ignores
        # outliers; then the layers nearest the logits kept in fp32.
        plan = [CandidateSpec(True, reduce_range, False, "minmax"), CandidateSpec(True, reduce_range, False, "percentile"),
                CandidateSpec(True, reduce_range, True, "percentile")]
    elif method == "torch-bf16":
        plan = [CandidateSpec(False, False, False, precision="bf16")]
    elif method == "openvino-fp32":
        plan = [CandidateSpec(False, False, False, precision="fp32")]
    elif method == "openvino-int8":
        # NNCF's transformer recipe: per-channel symmetric weights; the presets choose the activations'
        # scheme (performance: symmetric, mixed: asymmetric, which fits GELU outputs better).
        plan = [CandidateSpec(True, False, False, "nncf-performance"), CandidateSpec(True, False, False, "nncf-mixed"),
                CandidateSpec(True, False, True, "nncf-mixed")]
    else:
        plan = [CandidateSpec(per_channel, False, False), CandidateSpec(True, False, False),
                CandidateSpec(True, False, True)]
    seen: list[CandidateSpec] = []
    for spec in plan:
        if spec not in seen:
            seen.append(spec)
    return seen


def quantize_stage(cfg: QuantizeConfig, out: str | os.PathLike) -> Path:
    """The quantize stage as the pipeline and the command line run it: a validated config in, an artifact out."""
    cfg.validate()
    op_types = [x.strip() for x in cfg.op_types.split(",") if x.strip()] if cfg.op_types else None
    return quantize(cfg.model, out, method=cfg.method, data=cfg.data, max_accuracy_drop=cfg.max_accuracy_drop,
                    max_type_f1_drop=cfg.max_type_f1_drop,
                    per_channel=cfg.per_channel, reduce_range=cfg.reduce_range, graph=cfg.graph, op_types=op_types,
                    calibration_size=cfg.calibration_size, device=cfg.device, precision=cfg.precision)


def quantize(model_dir: str | os.PathLike, out: str | os.PathLike, method: str = "ort-dynamic",
             data: DataOptions | None = None,
             max_accuracy_drop: float = 0.01, per_channel: bool = False, reduce_range: bool = False,
             graph: str | None = None, op_types: Sequence[str] | None = None,
             calibration_size: int = DEFAULT_CALIBRATION_SIZE, device: str = "auto", precision: str = "fp32",
             max_type_f1_drop: float = MAX_TYPE_F1_DROP) -> Path:
    """Quantize an fp32 artifact to INT8 (or bf16) and write it at ``out``.

    ``model_dir`` is a PyTorch fp32 folder (any method) or an ``onnx-fp32`` artifact
    (``ort-dynamic``, ``ort-static``). ``data`` (a :class:`compress.config.DataOptions`) enables the accuracy check
    on its validation split and the fallbacks; ``max_accuracy_drop`` is in accuracy points
    (0.01 = one percentage point; a negative budget forces every fallback to be tried); for a tagger
    ``max_type_f1_drop`` is the per-type budget (:func:`compress.stages.quality.types_over_budget`; 1 turns it off).
    ``graph`` picks the fp32 ONNX graph quantized by the ORT methods (``fused``: ORT's transformer
    fusions, the ort-dynamic default; ``unfused``: plain MatMuls, the ort-static default);
    ``op_types`` the ONNX operator types quantized; ``calibration_size`` how many training texts
    of ``data`` calibrate ``ort-static``. ``device`` (``--device``) is where the accuracy check runs the
    fp32 model and the candidates (ONNX ones on its ONNX Runtime provider; PyTorch INT8 on the CPU);
    ``precision`` (``--precision``) the autocast of a PyTorch fp32 model there (auto: bf16 only where
    the device runs it natively; the default, fp32, as before ``--precision`` existed), decided once,
    printed unless it is that default, and recorded.

    The settings stay one keyword argument per :class:`~compress.config.QuantizeConfig` field because
    :func:`quantize_stage`, :mod:`compress.stages.optimize`, the teacher copies of distillation and the
    tests call this by keyword; inside, they travel as that config (``_Job.settings``), which is also what
    ``compress.json`` records. The steps: the checks (:func:`_check_request`), the fp32 reference and the
    method's builder (:func:`_fp32_inputs`), the fallback ladder (:func:`_try_candidates`, :func:`_keep_one`),
    and the artifact (:func:`_quantization_record`, :func:`_artifact_meta`, :func:`_write`).
    """

    started = time.perf_counter()
    run_on = device_name(resolve_device(device))
    decided = resolve_precision(precision, run_on, announce=precision != "fp32")
    settings = QuantizeConfig(model=str(model_dir), method=method, data=data, max_accuracy_drop=max_accuracy_drop,
                              max_type_f1_drop=max_type_f1_drop, per_channel=per_channel, reduce_range=reduce_range,
                              graph=graph, op_types=",".join(op_types) if op_types else None,
                              calibration_size=calibration_size, device=device, precision=precision)
    source = Path(model_dir)
    kind, parent_meta, op_types = _check_request(settings, source, out, op_types)

    out_path = Path(out).expanduser().resolve()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out_path.name}.quantize-", dir=out_path.parent))
    job = _Job(settings, source, kind, parent_meta, op_types, run_on, decided, work)
    try:
        inputs = _fp32_inputs(job)
        candidates, built = _try_candidates(job, inputs)
        chosen = _keep_one(job, inputs, candidates, built)
        quantization = _quantization_record(job, inputs, candidates, chosen)
        job.timings["total_s"] = round(time.perf_counter() - started, 2)
        chosen_dir = built[chosen["name"]]
        path = _write(out_path, job, inputs, chosen_dir, _artifact_meta(job, inputs, quantization, chosen, chosen_dir))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _report(path, quantization)
    return path


@dataclass
class _Job:
    """One :func:`quantize` run: its settings, what the checks found out about ``--model``, and the
    timings and notes its steps add for ``compress.json``."""

    settings: QuantizeConfig  # as given (compress.json's config)
    source: Path
    kind: str
    parent_meta: dict[str, Any]
    op_types: list[str] | None  # the ONNX operator types quantized: the method's default where none was given
    run_on: str
    decided: PrecisionChoice
    work: Path  # scratch folder next to ``out``, removed at the end
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class _Inputs:
    """The fp32 reference the candidates are measured against, and how they are built."""

    fp32_dir: Path
    exported: dict[str, Any] | None  # the export's compress.json when the fp32 graph was exported here
    graph: str | None  # the ONNX graph actually quantized
    builder: _Builder
    fp32: Predictor
    evaluation: _Evaluation | None  # None without data: nothing measured, no fallback


def _check_request(s: QuantizeConfig, source: Path, out: str | os.PathLike,
                   op_types: Sequence[str] | None) -> tuple[str, dict[str, Any], list[str] | None]:
    """Refuse, in one line each, what cannot work, before anything is exported or built.

    Returns ``(kind of --model, its compress.json, the operator types)``: for the ONNX methods the
    ones given or the method's default, otherwise ``op_types`` as given.
    """
    method, graph, reduce_range, data, calibration_size = s.method, s.graph, s.reduce_range, s.data, s.calibration_size
    if method not in METHODS:
        raise CompressError(f"--method {method!r} is unknown; use one of {', '.join(METHODS)}.")
    if not isinstance(s.max_accuracy_drop, (int, float)) or not math.isfinite(s.max_accuracy_drop):
        raise CompressError(f"--max-accuracy-drop must be a finite number (0.01 = one point), got "
                            f"{s.max_accuracy_drop!r}.")
    if not source.is_dir():
        raise CompressError(f"--model {source} does not exist or is not a folder. Give a PyTorch fp32 artifact or an "
                            "onnx-fp32 artifact from bert-compress export.")
    check_out_is_not_input(source, out)
    kind = artifact_kind(source)
    parent_meta = read_meta(source) or {}
    if kind.endswith("-int8"):
        grand = (parent_meta.get("parent") or {}).get("path")
        raise CompressError(
            f"--model {source} is already quantized (kind {kind}); quantizing INT8 weights again only loses accuracy. "
            f"Quantize its fp32 parent instead{f' ({grand})' if grand else ''}."
        )
    if kind in ("torch-bf16", "choice"):
        grand = (parent_meta.get("parent") or {}).get("path")
        raise CompressError(f"--model {source} is a {kind} artifact, not an fp32 model; quantizing it again only loses "
                            f"accuracy. Quantize its fp32 parent instead{f' ({grand})' if grand else ''}.")
    if kind.startswith("openvino-"):
        grand = (parent_meta.get("parent") or {}).get("path")
        raise CompressError(f"--model {source} is an OpenVINO artifact ({kind}), which is converted, not converted "
                            f"again. Give the fp32 model it was made from{f' ({grand})' if grand else ''}.")
    if method in OPENVINO_METHODS:
        require_openvino(f"--method {method}", need_nncf=method == "openvino-int8")
        if graph is not None or op_types or reduce_range:
            raise CompressError(f"--method {method} converts the unfused fp32 graph and lets NNCF choose what is "
                                "quantized; drop --graph, --op-types and --reduce-range.")
    if method in ("torch-dynamic", "torch-bf16") and kind != "pytorch":
        raise CompressError(f"--method {method} needs the PyTorch fp32 folder, but {source} is {kind}. Give the "
                            "folder it was exported from, or use --method ort-dynamic on this one.")
    if method in ("torch-dynamic", "torch-bf16") and reduce_range:
        raise CompressError(f"--reduce-range applies to the ONNX Runtime methods only, not --method {method} (PyTorch's "
                            "dynamic INT8 kernels already reduce the activation range). Drop the flag.")
    if method not in ONNX_METHODS and (graph is not None or op_types):
        raise CompressError(f"--graph and --op-types choose an ONNX graph and its quantized operators; --method {method} "
                            "runs PyTorch. Drop them, or use --method ort-dynamic or ort-static.")
    if graph is not None and graph not in GRAPHS:
        raise CompressError(f"--graph {graph!r} is unknown; use {' or '.join(GRAPHS)}.")
    if method in ("ort-static", "openvino-int8") and data is None:
        raise CompressError(f"--method {method} calibrates on training texts of the task: pass --data (and the column "
                            "flags of your data).")
    if method in ("ort-static", "openvino-int8") and (not isinstance(calibration_size, int) or calibration_size < 1):
        raise CompressError(f"--calibration-size must be a whole number of at least 1, got {calibration_size!r}.")
    if method in ONNX_METHODS:
        op_types = list(op_types) if op_types else list(ORT_OP_TYPES if method == "ort-dynamic" else ORT_STATIC_OP_TYPES)
        known = _ORT_QUANTIZABLE[method]
        unknown = [op for op in op_types if op not in known]
        if unknown:
            raise CompressError(f"--op-types {','.join(unknown)}: {method} cannot quantize these; choose among "
                                f"{', '.join(sorted(known))}.")
    return kind, parent_meta, op_types


def _fp32_inputs(job: _Job) -> _Inputs:
    """The method's fp32 model (an ONNX graph exported here when needed), loaded, measured on validation
    when there is data, and the builder of its candidates."""
    s, method, source = job.settings, job.settings.method, job.source
    exported: dict[str, Any] | None = None
    graph = s.graph
    if method in ONNX_METHODS:
        fp32_dir, exported, graph = _fp32_graph(source, job.kind, job.parent_meta, graph, method, job.work, job.timings,
                                                job.notes)
        builder: _Builder | None = _OrtBuilder(fp32_dir, job.op_types) if method == "ort-dynamic" else None
    elif method in OPENVINO_METHODS:
        # The unfused graph: plain ONNX operators, which OpenVINO fuses its own way and NNCF's transformer
        # patterns recognise (ORT's com.microsoft fusions would hide the MatMuls from them).
        fp32_dir, exported, graph = _fp32_graph(source, job.kind, job.parent_meta, "unfused", method, job.work,
                                                job.timings, job.notes)
        builder = _OpenVinoBuilder(fp32_dir) if method == "openvino-fp32" else None
    elif method == "torch-bf16":
        fp32_dir = source
        builder = _Bf16Builder(source)
    else:
        fp32_dir = source
        builder = _TorchBuilder(source)

    fp32 = Predictor.load(fp32_dir, device=job.run_on, precision=job.decided.precision)
    evaluation = _Evaluation(s.data.load_any(model=str(source)), fp32) if s.data is not None else None
    if method == "ort-static":
        from compress.stages.ort_static import calibration_texts

        builder = _OrtStaticBuilder(fp32_dir, job.op_types, fp32, calibration_texts(evaluation.data, s.calibration_size))
    elif method == "openvino-int8":
        from compress.stages.ort_static import calibration_texts

        builder = _OpenVinoBuilder(fp32_dir, fp32, calibration_texts(evaluation.data, s.calibration_size))
    if evaluation is None:
        print("warning: no --data given: INT8 accuracy is not measured and no fallback is tried; pass --data to "
              "check the accuracy change against fp32", file=sys.stderr)
    return _Inputs(fp32_dir, exported, graph, builder, fp32, evaluation)


def _try_candidates(job: _Job, inputs: _Inputs) -> tuple[list[dict[str, Any]], dict[str, Path]]:
    """Build and measure the candidates of :func:`candidate_plan` in order, stopping at the first within
    budget (at the first built one without data): ``(every candidate's record, folder of each one built)``.

    A candidate that fails to build is recorded with its error and the next one is tried.
    """
    s, fp32, evaluation = job.settings, inputs.fp32, inputs.evaluation
    probe = _ProbeTexts(fp32)
    first_per_channel = s.per_channel
    if s.method == "ort-dynamic" and not s.per_channel and get_task(fp32.task).int8_per_channel:
        first_per_channel = True
        job.notes.append(f"per-channel weight scales from the first candidate: the {fp32.task} default (per-tensor "
                         "scales lost more of its metric; compress.tasks)")
    candidates: list[dict[str, Any]] = []
    built: dict[str, Path] = {}
    t0 = time.perf_counter()
    for i, spec in enumerate(candidate_plan(s.method, first_per_channel, s.reduce_range)):
        folder = job.work / f"candidate-{i}"
        record: dict[str, Any] = {"name": spec.name, **asdict(spec)}
        candidates.append(record)
        try:
            c0 = time.perf_counter()
            record["excluded"] = inputs.builder.build(spec, folder)
            record["size_bytes"] = folder_size_bytes(folder)
            _record_task(folder, fp32.task)
            candidate = Predictor.load(folder, max_length=fp32.max_length, device=job.run_on, stride=fp32.stride,
                                       pooling=fp32.pooling)
            record["max_abs_logit_diff"] = probe.max_diff(candidate)
            if evaluation is not None:
                record.update(evaluation.score(candidate))
                over = evaluation.scorer.failures(record, s.max_accuracy_drop, max_type_drop=s.max_type_f1_drop)
                record["within_budget"] = not over
                record["failed_checks"] = over  # what the warning and the report name if it is kept anyway
            record["seconds"] = round(time.perf_counter() - c0, 2)
        except CompressError:
            raise
        except Exception as exc:  # a quantizer failure on one setting must not lose the others
            record["error"] = describe(exc)
            print(f"warning: candidate {spec.name} failed: {record['error']}", file=sys.stderr)
            continue
        built[spec.name] = folder
        if evaluation is None or record["within_budget"]:
            break
        print(f"quantize: candidate {spec.name}: {'; '.join(over)}; trying the next fallback", file=sys.stderr)
    job.timings["candidates_s"] = round(time.perf_counter() - t0, 2)
    return candidates, built


def _keep_one(job: _Job, inputs: _Inputs, candidates: list[dict[str, Any]], built: dict[str, Path]) -> dict[str, Any]:
    """The candidate written (:func:`_choose`); refused when none was built, and named in a warning when
    it is kept although it failed the checks."""
    evaluation = inputs.evaluation
    good = [c for c in candidates if c["name"] in built]
    if not good:
        errors = "; ".join(f"{c['name']}: {c.get('error')}" for c in candidates)
        raise CompressError(f"every INT8 candidate for {job.source} failed ({errors}); nothing was written. "
                            "Re-export the model (bert-compress export) and try again, or try the other --method.")
    metric = evaluation.scorer.metric if evaluation else "accuracy"
    chosen = _choose(good, metric)
    within = chosen.get("within_budget") if evaluation is not None else None
    if evaluation is not None and not within:
        # Name what the kept one failed: a tagger's can be a type's loss with the overall drop within budget.
        job.notes.append(f"no candidate passed the checks on validation; kept the best one on {metric} "
                         f"({chosen['name']}, drop {chosen[evaluation.scorer.drop_key]:.4f}: "
                         f"{'; '.join(chosen['failed_checks'])})")
        print(f"warning: {job.notes[-1]}", file=sys.stderr)
    return chosen


def _quantization_record(job: _Job, inputs: _Inputs, candidates: list[dict[str, Any]],
                         chosen: dict[str, Any]) -> dict[str, Any]:
    """``compress.json``'s ``quantization``: every candidate's numbers, the one kept, and fp32 against it."""
    s, evaluation = job.settings, inputs.evaluation
    metric = evaluation.scorer.metric if evaluation else "accuracy"
    within = chosen.get("within_budget") if evaluation is not None else None
    fp32_size = folder_size_bytes(inputs.fp32_dir)
    return {
        "method": s.method, "weight_type": {"torch-bf16": "BF16", "openvino-fp32": "FP32"}.get(s.method, "QInt8"),
        "candidates": candidates,
        "chosen": chosen["name"],
        "max_accuracy_drop": s.max_accuracy_drop, "within_budget": within,
        "failed_checks": chosen.get("failed_checks") or [],
        **(evaluation.scorer.budgets(s.max_type_f1_drop) if evaluation else {}),
        # The task's primary metric: accuracy_fp32/int8/drop for a classifier, entity_f1_... for a tagger.
        "metric": metric, f"{metric}_fp32": evaluation.fp32 if evaluation else None,
        f"{metric}_int8": chosen.get(metric), f"{metric}_drop": chosen.get(f"{metric}_drop"),
        "split": "validation" if evaluation else None,
        "size_bytes_fp32": fp32_size, "size_bytes_int8": chosen["size_bytes"],
        "size_ratio": round(chosen["size_bytes"] / fp32_size, 4) if fp32_size else None,
    }


def _artifact_meta(job: _Job, inputs: _Inputs, quantization: dict[str, Any], chosen: dict[str, Any],
                   chosen_dir: Path) -> dict[str, Any]:
    """The artifact's ``compress.json`` (less ``weights_sha256``, which :func:`_write` adds)."""
    s, fp32, evaluation, parent_meta = job.settings, inputs.fp32, inputs.evaluation, job.parent_meta
    method, metric = s.method, quantization["metric"]
    meta: dict[str, Any] = {
        "stage": "quantize",
        "kind": METHOD_KINDS[method],
        "model_type": getattr(fp32.config, "model_type", None),
        "parameters": fp32.num_parameters,
        "max_length": fp32.max_length,
        "parent": {"path": str(job.source.resolve()), "kind": job.kind, "stage": parent_meta.get("stage"),
                   "weights_sha256": parent_meta.get("weights_sha256") or weights_sha256(job.source)},
        "parent_meta": {k: parent_meta.get(k) for k in ("stage", "kind", "data", "metrics", "config", "parent",
                                                        "onnx", "parity") if k in parent_meta},
        **reading_settings(parent_meta),
        "config": s.to_dict(),
        "device": job.run_on,
        "precision": job.decided.to_dict(),
        "data": evaluation.data.describe() if evaluation else parent_meta.get("data"),
        "task": fp32.task,
        "quantization": quantization,
        "timings": job.timings,
        "notes": job.notes,
    }
    if evaluation is not None:
        meta["metrics"] = {"validation": {metric: chosen[metric], "agreement": chosen["agreement"],
                                          f"fp32_{metric}": evaluation.fp32, "n": evaluation.n,
                                          **{k: chosen[k] for k in ("per_type_f1", "per_type_f1_drop") if k in chosen}}}
    if inputs.exported is not None:
        meta["export"] = {k: inputs.exported.get(k) for k in ("onnx", "parity", "config")}
    if method in ONNX_METHODS:
        meta["onnx"] = {"file": ONNX_FILE, "fused_ops_fp32": count_fused_ops(inputs.fp32_dir / ONNX_FILE),
                        "int8_ops": _int8_op_counts(chosen_dir / ONNX_FILE), "graph": inputs.graph,
                        "op_types": job.op_types, "optimized": inputs.graph == "fused"}
    if method in OPENVINO_METHODS:
        meta["openvino"] = inputs.builder.describe(chosen)
    if evaluation is not None:
        # What a user sees as churn: how many answers the deployed artifact changes against its parent.
        meta["agreement_with_parent"] = {"split": "validation", "agreement": chosen.get("agreement"),
                                         "n": evaluation.n}
    return meta


def _write(out_path: Path, job: _Job, inputs: _Inputs, chosen_dir: Path, meta: dict[str, Any]) -> Path:
    """The kept candidate's files and the task's model files at ``out_path``, with ``meta``."""

    def fill(tmp: Path) -> None:
        for item in chosen_dir.iterdir():
            if item.is_file():
                shutil.copyfile(item, tmp / item.name)
        carry_model_files(get_task(inputs.fp32.task), inputs.fp32_dir, tmp)
        meta["weights_sha256"] = weights_sha256(tmp)

    return write_artifact(out_path, fill, meta)


def _choose(good: list[dict[str, Any]], metric: str = "accuracy") -> dict[str, Any]:
    """The first candidate within budget; else the best on ``metric`` (the task's primary one; ties: the
    earlier, simpler one)."""
    within = [c for c in good if c.get("within_budget")]
    if within:
        return within[0]
    if any(metric in c for c in good):
        return max(good, key=lambda c: (c.get(metric, -1.0), -good.index(c)))
    return good[0]


def _report(path: Path, q: dict[str, Any]) -> None:
    size = f"{q['size_bytes_fp32'] / 1e6:.1f} MB -> {q['size_bytes_int8'] / 1e6:.1f} MB"
    m = q.get("metric", "accuracy")
    if q[f"{m}_fp32"] is None:
        print(f"quantize: {path} ({q['chosen']}; {size}; accuracy not measured)")
        return
    weights = {"BF16": "bf16", "FP32": "fp32"}.get(q.get("weight_type"), "int8")
    verdict = (f"within budget {q['max_accuracy_drop']:g}" if q["within_budget"] else
               "failed: " + "; ".join(q["failed_checks"]))
    print(f"quantize: {path} ({q['chosen']}; {size}; validation {m.replace('_', ' ')} fp32 {q[f'{m}_fp32']:.4f} -> "
          f"{weights} {q[f'{m}_int8']:.4f}, drop {q[f'{m}_drop']:.4f}, {verdict})")


class _Evaluation:
    """The fp32 model's validation quality (the task's primary metric: accuracy, entity F1), and each
    candidate's against it on the same examples (:class:`compress.stages.quality.SplitScorer`)."""

    def __init__(self, data, fp32: Predictor):
        self.data = data
        self.scorer = SplitScorer(data, "validation")
        self.scorer.check_model(fp32)
        self.n = self.scorer.n
        self.pred_fp32 = self.scorer.predict(fp32)
        self.metrics_fp32 = self.scorer.metrics(self.pred_fp32)
        self.fp32 = self.metrics_fp32[self.scorer.metric]

    def score(self, candidate: Predictor) -> dict[str, Any]:
        return self.scorer.compare(self.scorer.predict(candidate), self.pred_fp32, self.metrics_fp32)


class _ProbeTexts:
    """The export parity texts: a cheap logit-level comparison even when no data is given."""

    def __init__(self, fp32: Predictor):
        self.texts = fp32.decoding.probe_inputs(PARITY_TEXTS, PARITY_PAIRS)  # a reader reads pairs
        self.reference = np.concatenate([o.reshape(-1) for o in fp32.outputs(self.texts)])

    def max_diff(self, candidate: Predictor) -> float:
        got = np.concatenate([o.reshape(-1) for o in candidate.outputs(self.texts)])
        return float(np.max(np.abs(got - self.reference)))


# ----------------------------------------------------------------------------- builders


class _Builder:
    def build(self, spec: CandidateSpec, folder: Path) -> list[str]:
        """Write a loadable candidate folder; return what was kept in fp32."""
        raise NotImplementedError


def _record_task(folder: Path, task: str) -> None:
    """Name the fp32 model's task in a candidate folder (a ``compress.json`` of the task alone), so the candidate is
    loaded for that task even where its ``config.json`` names no head (a sentence encoder's is a bare encoder); the
    artifact's own ``compress.json`` replaces it."""
    import json

    (folder / "compress.json").write_text(json.dumps({"task": task, "complete": True}), encoding="utf-8")


def _copy_side_files(src: Path, dst: Path) -> None:
    """Tokenizer and config.json go with every candidate: same tokenizer in every artifact."""
    dst.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        if item.is_file() and item.name not in _NOT_COPIED and not item.name.endswith(_NOT_COPIED_SUFFIXES):
            shutil.copyfile(item, dst / item.name)


def _fp32_graph(source: Path, kind: str, parent_meta: dict[str, Any], graph: str | None, method: str, work: Path,
                timings: dict[str, float], notes: list[str]) -> tuple[Path, dict[str, Any] | None, str]:
    """The fp32 ONNX graph to quantize: ``(folder, export metadata when exported here, graph actually used)``.

    A PyTorch folder is exported (fused or unfused as asked). An ONNX artifact is used as it is when
    its graph is the one asked for; otherwise its PyTorch parent, when still on disk, is exported
    again the other way (a fused graph cannot be unfused).
    """
    wanted = graph or ("unfused" if method == "ort-static" else None)
    if kind == "onnx-fp32":
        meta_onnx = parent_meta.get("onnx") or {}
        have = "fused" if meta_onnx.get("optimized", True) else "unfused"
        if wanted in (None, have):
            return source, None, have
        recorded = (parent_meta.get("parent") or {}).get("path")
        origin = Path(recorded) if recorded else None
        if origin is None or not (origin / "config.json").is_file():
            how = "bert-compress export" if wanted == "fused" else "bert-compress export --no-optimize"
            raise CompressError(f"--graph {wanted}: {source} holds the {have} graph, and its PyTorch parent "
                                f"({recorded or 'not recorded'}) is not on disk to export again. Give the PyTorch fp32 "
                                f"folder as --model, or export it with {how} first.")
        notes.append(f"{source} holds the {have} graph; its parent {origin} was exported again {wanted}")
        source = origin
    wanted = wanted or "fused"
    t0 = time.perf_counter()
    fp32_dir = export_onnx(source, work / "fp32", optimize=wanted == "fused")
    timings["export_s"] = round(time.perf_counter() - t0, 2)
    exported = read_meta(fp32_dir)
    got = "fused" if (exported.get("onnx") or {}).get("optimized") else "unfused"
    if got != wanted:
        notes.append("the export could not fuse this model's graph; the unfused graph was quantized")
    return fp32_dir, exported, got


class _OrtBuilder(_Builder):
    def __init__(self, fp32_dir: Path, op_types: Sequence[str] | None = None):
        self.op_types = list(op_types or ORT_OP_TYPES)
        self.fp32_dir = Path(fp32_dir)
        self.graph = self.fp32_dir / ONNX_FILE
        if not self.graph.exists():
            raise CompressError(f"{self.fp32_dir} has no {ONNX_FILE}. Export the model first: bert-compress export.")
        from transformers import AutoConfig

        self.layers = int(getattr(AutoConfig.from_pretrained(str(self.fp32_dir)), "num_hidden_layers", 0) or 0)

    def build(self, spec: CandidateSpec, folder: Path) -> list[str]:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        _copy_side_files(self.fp32_dir, folder)
        exclude = sensitive_onnx_nodes(self.graph, self.layers) if spec.exclude_sensitive else []
        with _quiet_quantizer():
            quantize_dynamic(
                str(self.graph), str(folder / ONNX_FILE), weight_type=QuantType.QInt8, per_channel=spec.per_channel,
                reduce_range=spec.reduce_range, op_types_to_quantize=self.op_types, nodes_to_exclude=exclude,
                # Without it, quantizing the fused graph fails: "Unable to find data type for weight_name".
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            )
        return exclude


class _OrtStaticBuilder(_OrtBuilder):
    """QDQ static INT8 calibrated on task texts (:mod:`compress.stages.ort_static`)."""

    def __init__(self, fp32_dir: Path, op_types: Sequence[str] | None, fp32: Predictor, texts: list[Any]):
        super().__init__(fp32_dir, op_types or ORT_STATIC_OP_TYPES)
        check_calibration_inputs(self.graph)
        self.reader = TextCalibrationReader(fp32, texts, graph_inputs(self.graph))
        self.texts = len(texts)

    def build(self, spec: CandidateSpec, folder: Path) -> list[str]:
        _copy_side_files(self.fp32_dir, folder)
        exclude = sensitive_onnx_nodes(self.graph, self.layers) if spec.exclude_sensitive else []
        with _quiet_quantizer():
            quantize_static_graph(self.graph, folder / ONNX_FILE, self.reader, calibration=spec.calibration or "minmax",
                                  per_channel=spec.per_channel, reduce_range=spec.reduce_range, op_types=self.op_types,
                                  exclude=exclude)
        return exclude


class _OpenVinoBuilder(_Builder):
    """The unfused fp32 graph as an OpenVINO IR, as it is (``texts`` None) or NNCF INT8 calibrated on ``texts``.

    The calibration batches are built like ort-static's (:class:`compress.stages.ort_static.TextCalibrationReader`:
    the serving tokenization, real lengths), so NNCF sees the activations of real use.
    """

    def __init__(self, fp32_dir: Path, fp32: Predictor | None = None, texts: list[Any] | None = None):
        from transformers import AutoConfig

        self.fp32_dir = Path(fp32_dir)
        self.graph = self.fp32_dir / ONNX_FILE
        self.layers = int(getattr(AutoConfig.from_pretrained(str(self.fp32_dir)), "num_hidden_layers", 0) or 0)
        self.feeds: list[dict[str, np.ndarray]] = []
        self.texts = len(texts or ())
        if texts:
            reader = TextCalibrationReader(fp32, texts, graph_inputs(self.graph))
            self.feeds = list(iter(reader.get_next, None))

    def build(self, spec: CandidateSpec, folder: Path) -> list[str]:
        _copy_side_files(self.fp32_dir, folder)
        model = convert_onnx(self.graph)
        exclude: list[str] = []
        if spec.precision == "int8":
            import nncf

            exclude = sensitive_onnx_nodes(self.graph, self.layers) if spec.exclude_sensitive else []
            preset = nncf.QuantizationPreset.MIXED if spec.calibration == "nncf-mixed" else nncf.QuantizationPreset.PERFORMANCE
            nncf.set_log_level(logging.ERROR)
            with _quiet_quantizer():
                model = nncf.quantize(model, nncf.Dataset(self.feeds), preset=preset, model_type=nncf.ModelType.TRANSFORMER,
                                      subset_size=max(1, sum(len(f["input_ids"]) for f in self.feeds)),
                                      # ONNX node names survive the conversion; names NNCF does not quantize anyway
                                      # (LayerNorm, Add) are not an error.
                                      ignored_scope=nncf.IgnoredScope(names=exclude, validate=False) if exclude else None)
        save_ir(model, folder)
        return exclude

    def describe(self, chosen: dict[str, Any]) -> dict[str, Any]:
        """``compress.json``'s ``openvino`` section: files, what was converted, calibration, versions."""
        import importlib.metadata

        def version(name: str) -> str | None:
            try:
                return importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                return None

        return {"files": [OPENVINO_XML, OPENVINO_BIN], "converted_from": "unfused fp32 ONNX graph",
                "precision": "int8" if self.feeds else "fp32", "inference_precision_hint": "f32",
                "preset": (chosen.get("calibration") or "").removeprefix("nncf-") or None,
                "calibration_texts": self.texts or None, "calibration_batches": len(self.feeds) or None,
                "versions": {"openvino": version("openvino"), "nncf": version("nncf") if self.feeds else None}}


class _Bf16Builder(_Builder):
    """The fp32 PyTorch model with its weights cast to bfloat16 (:mod:`compress.runtime.formats.bf16`)."""

    def __init__(self, source: Path):
        self.source = Path(source)
        self.model, self.tokenizer, has_head = load_classifier(self.source)
        if not has_head:
            raise CompressError(f"--model {source}: the model has no trained classification head; converting it is "
                                "pointless. Fine-tune it first with bert-compress teacher.")
        self.model.eval()

    def build(self, spec: CandidateSpec, folder: Path) -> list[str]:
        folder.mkdir(parents=True, exist_ok=True)
        save_bf16(copy.deepcopy(self.model), folder)
        self.tokenizer.save_pretrained(str(folder))
        return []


class _TorchBuilder(_Builder):
    def __init__(self, source: Path):
        self.source = Path(source)
        self.model, _, has_head = load_classifier(self.source)
        if not has_head:
            raise CompressError(f"--model {source}: the model has no trained classification head; quantizing it is "
                                "pointless. Fine-tune it first with bert-compress teacher.")
        self.model.eval()

    def build(self, spec: CandidateSpec, folder: Path) -> list[str]:
        exclude = sensitive_torch_modules(self.model) if spec.exclude_sensitive else []
        qmodel = torch_dynamic_int8(copy.deepcopy(self.model), per_channel=spec.per_channel, exclude=exclude)
        _copy_side_files(self.source, folder)
        save_torch_int8(qmodel, folder)
        return exclude


@contextlib.contextmanager
def _quiet_quantizer() -> Iterator[None]:
    """ORT's quantizer logs advice ("consider pre-processing") on the root logger for every call."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def _int8_op_counts(onnx_file: Path) -> dict[str, int]:
    import onnx

    counts: dict[str, int] = {}
    for node in onnx.load(str(onnx_file), load_external_data=False).graph.node:
        if node.op_type in INT8_OPS:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))


# ----------------------------------------------------------------------------- sensitive layers


def sensitive_onnx_nodes(onnx_file: str | os.PathLike, num_layers: int) -> list[str]:
    """Names of the graph nodes of the last encoder layer, the pooler and the classifier.

    The exporter names nodes after modules (``/model/bert/encoder/layer.3/...``), but ORT's fused
    Attention nodes are named ``Attention_3`` whatever their layer, so the last layer starts at the
    earlier of its first named node and the last fused attention node (graphs are topologically
    ordered). ORT rewrites Gemm into ``<name>_MatMul`` before quantizing; both names are listed.
    """
    import onnx

    nodes = list(onnx.load(str(onnx_file), load_external_data=False).graph.node)
    starts = []
    attention = [i for i, n in enumerate(nodes) if n.op_type in ("Attention", "MultiHeadAttention")]
    if attention:
        starts.append(attention[-1])
    if num_layers > 0:
        last = re.compile(rf"layer\.{num_layers - 1}/")
        named = [i for i, n in enumerate(nodes) if last.search(n.name)]
        if named:
            starts.append(named[0])
    picked = nodes[min(starts):] if starts else [n for n in nodes if re.search(r"classifier|pooler", n.name)]
    names: list[str] = []
    for node in picked:
        if node.name:
            names.append(node.name)
            if node.op_type == "Gemm":
                names.append(f"{node.name}_MatMul")
    return names


def sensitive_torch_modules(model) -> list[str]:
    """Names of the ``nn.Linear`` modules of the last encoder layer, the pooler and the classifier."""
    import torch

    linears = [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    layers = [int(m.group(1)) for name in linears if (m := re.search(r"\.layer\.(\d+)\.", name))]
    last = f".layer.{max(layers)}." if layers else None
    return [n for n in linears if "classifier" in n or "pooler" in n or (last is not None and last in n)]


# ----------------------------------------------------------------------------- PyTorch INT8, without pickle


def torch_dynamic_int8(model, per_channel: bool = False, exclude: list[str] | tuple[str, ...] = ()):
    """PyTorch dynamic INT8 of every ``nn.Linear`` except the modules named in ``exclude`` (in place)."""
    import torch
    from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

    qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
    skip = set(exclude)
    spec = {name: qconfig for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and name not in skip}
    model.eval()
    with quiet_torch_ao():
        return quantize_dynamic(model, spec, dtype=torch.qint8, inplace=True)
