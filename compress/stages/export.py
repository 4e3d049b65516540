"""ONNX export of an fp32 classifier, ONNX Runtime fusions, and a parity check against PyTorch.

Why each step is done the way it is (all measured on this stack, see docs/design.md, "Known traps"):

- The TorchScript exporter (``dynamo=False``) on a model loaded with ``attn_implementation="eager"``
  is used because ONNX Runtime's transformer optimizer recognises its attention subgraph; on the
  dynamo exporter's graph it fuses no Attention and no EmbedLayerNormalization, silently.
- The model is traced on a *padded* batch: transformers decides in Python whether a mask is
  needed, and a trace taken on an unpadded batch could bake "no padding" into the graph.
- The fused operators are counted and recorded, and a warning printed when fewer Attention nodes
  than layers were fused (onnxruntime #10359, #21208: fusions that silently do not happen).
- Every export is compared with PyTorch on real texts, single and padded batches, sentence pairs;
  a graph whose logits differ by more than ``atol`` is never written. When only the fused graph
  fails, the unfused one is kept with a warning, since a correct slow model beats a fast wrong one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from compress.core.artifact import read_meta, weights_sha256, write_artifact
from compress.config import ExportConfig
from compress.core.errors import CompressError, describe, first_line
from compress.runtime.predictor import (ONNX_FILE, artifact_kind, artifact_task, default_max_length, encode_batches,
                                        reading_settings)
from compress.runtime.modeling import accepts_token_types, count_parameters, named_outputs
from compress.tasks import get_task
from compress.tasks.task_choice import SEQUENCE, head_task

DEFAULT_OPSET = 17
PARITY_ATOL = 1e-4
#: Operators ONNX Runtime's transformer optimizer fuses; their counts go into compress.json.
FUSED_OPS = ("Attention", "MultiHeadAttention", "EmbedLayerNormalization", "SkipLayerNormalization",
             "LayerNormalization", "BiasGelu", "FastGelu", "Gelu")
#: model_type values handed to ORT's "bert" fusions. Others are exported unfused (with a warning):
#: their attention subgraphs were not checked here, and the parity check would reject a wrong fusion
#: only after the time was spent.
FUSABLE_MODEL_TYPES = ("bert",)
#: Texts of very different lengths, so parity is checked on padded batches, not one shape.
PARITY_TEXTS = [
    "good",
    "The film was a complete waste of time.",
    "An absolutely wonderful, moving and funny story with a brilliant cast; I would watch it again tomorrow.",
    "dull",
    "The plot wanders, the acting is wooden, and the ending arrives long after anyone has stopped caring about it, "
    "which is a shame because the first twenty minutes promise a much better movie than the one we finally get.",
    "Not bad at all.",
]
PARITY_PAIRS = [
    ("A man is playing a guitar.", "Someone plays an instrument."),
    ("The cat sleeps.", "A dog is running through the park on a sunny afternoon."),
    ("Is it raining?", "No."),
]


def export_stage(cfg: ExportConfig, out: str | os.PathLike) -> Path:
    """The export stage as the pipeline and the command line run it: a validated config in, an artifact out."""
    cfg.validate()
    return export_onnx(cfg.model, out, opset=cfg.opset, optimize=cfg.optimize, atol=cfg.atol)


def export_onnx(model_dir: str | os.PathLike, out: str | os.PathLike, opset: int = DEFAULT_OPSET,
                optimize: bool = True, atol: float = PARITY_ATOL) -> Path:
    """Export a PyTorch fp32 classifier folder to an ``onnx-fp32`` artifact at ``out``.

    The artifact holds ``model.onnx``, the tokenizer, ``config.json`` (label names) and
    ``compress.json`` with the fused-operator counts and the measured parity.
    """

    source = Path(model_dir)
    check_out_is_not_input(source, out)
    if source.is_dir():
        kind = artifact_kind(source)
        if kind != "pytorch":
            raise CompressError(_not_exportable(source, kind))

    parent_meta = read_meta(source)
    # the task the artifact records, else its config's head (the model each task's decoding aspect loads)
    task = get_task(artifact_task(parent_meta, _config(source)))
    model, tokenizer, has_head = task.aspect("decoding").torch_model(source, eager_attention=True)
    if not has_head:
        raise CompressError(f"--model {source}: the model has no trained classification head, so the exported graph "
                            "would predict at random. Fine-tune it first: bert-compress teacher --model DIR --data DATA --out DIR")
    parent = {"path": str(source.resolve()), "weights_sha256": (parent_meta or {}).get("weights_sha256") or weights_sha256(source),
              "kind": "pytorch", "stage": (parent_meta or {}).get("stage")}
    return export_model(model, tokenizer, out, opset=opset, optimize=optimize, atol=atol, parent=parent,
                        parent_meta=parent_meta, model_path=str(model_dir))


def _config(source: Path) -> dict[str, Any]:
    """``config.json`` of ``source`` as a dict (empty when unreadable: the model loader says why)."""
    import json

    try:
        raw = json.loads((source / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def carry_model_files(task: Any, source: str | os.PathLike | None, tmp: Path) -> None:
    """Copy the files beside the weights that describe the model to other tools (the task's
    :meth:`~compress.tasks.protocol.decoding.PROTOCOL.model_files`: a sentence-transformers pipeline) from the
    ``source`` folder (the model exported or quantized) into the artifact being written at ``tmp``."""
    if not source or not Path(source).is_dir():
        return
    for name in task.aspect("decoding").model_files(Path(source)):
        found = Path(source) / name
        if found.is_dir():
            shutil.copytree(found, tmp / name, dirs_exist_ok=True)
        elif found.is_file():
            shutil.copyfile(found, tmp / name)


def check_out_is_not_input(source: Path, out: str | os.PathLike) -> None:
    """A stage writing over its own input would replace the model it is reading."""
    if source.exists() and Path(out).expanduser().resolve() == source.resolve():
        raise CompressError(f"--out {out} is the --model folder itself; writing there would replace the input. "
                            "Give another --out folder.")


def _not_exportable(source: Path, kind: str) -> str:
    if kind == "torch-int8":
        return (f"--model {source} is PyTorch dynamic INT8, which cannot be exported to ONNX (pytorch #123555). Export "
                "its fp32 parent instead, then quantize inside ONNX Runtime: bert-compress quantize --method ort-dynamic")
    return f"--model {source} is already an ONNX artifact ({kind}); export takes a PyTorch fp32 folder."


def export_model(model, tokenizer, out: str | os.PathLike, opset: int = DEFAULT_OPSET, optimize: bool = True,
                 atol: float = PARITY_ATOL, parent: dict[str, Any] | None = None,
                 parent_meta: dict[str, Any] | None = None, model_path: str | None = None) -> Path:
    """Export an in-memory fp32 classifier (e.g. one just pruned) and write the artifact.

    :func:`export_onnx` loads a folder and calls this; a stage holding a model whose shape its
    config cannot describe (heads pruned per layer) can export it directly.
    """
    import onnx

    from compress.tasks.registry import SEQUENCE as SEQUENCE_AXIS

    # The task of the in-memory model's head decides the output's axes (per-token logits for a tagger).
    # (a classifier and a regression head share their class: head_task tells them apart by the config)
    task = head_task({**model.config.to_dict(), "architectures": [type(model).__name__]}) or get_task(SEQUENCE)

    if opset < 14:
        raise CompressError(f"--opset {opset} is too old: these graphs need operators of opset 14 and later; "
                            f"use --opset {DEFAULT_OPSET}.")
    started = time.perf_counter()
    model.eval()
    _use_eager_attention(model)
    config = model.config
    max_length = default_max_length(tokenizer, config, parent_meta)
    need_types = accepts_token_types(model) and "token_type_ids" in getattr(tokenizer, "model_input_names", [])
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if need_types else [])
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    timings: dict[str, float] = {}

    out_path = Path(out).expanduser().resolve()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out_path.name}.export-", dir=out_path.parent))
    try:
        raw = work / "raw.onnx"
        t0 = time.perf_counter()
        outputs = list(task.outputs)
        _torch_export(model, tokenizer, names, raw, opset, max_length, task.dynamic_axes(names), outputs)
        timings["export_s"] = round(time.perf_counter() - t0, 2)
        reference = _reference_inputs(tokenizer, max_length, need_types, model, outputs)
        per_token = {name: SEQUENCE_AXIS in axes for name, axes in task.outputs.items()}

        graph_file, optimized, notes = raw, False, []
        heads = attention_heads_per_layer(model)
        shapes = {(h, size) for h, size in heads}
        if optimize:
            if len(shapes) > 1:
                notes.append(f"attention heads per layer differ ({', '.join(str(h) for h, _ in heads)}; pruned): ONNX "
                             "Runtime's fusion takes one head count for the whole graph and computes wrong attention "
                             "otherwise, so the graph was exported unfused")
                print(f"warning: {notes[-1]}", file=sys.stderr)
            elif config.model_type in FUSABLE_MODEL_TYPES:
                num_heads, all_head_size = shapes.pop() if shapes else (config.num_attention_heads, config.hidden_size)
                t0 = time.perf_counter()
                fused = work / "optimized.onnx"
                error = _optimize(raw, fused, num_heads, all_head_size)
                timings["optimize_s"] = round(time.perf_counter() - t0, 2)
                if error is None:
                    graph_file, optimized = fused, True
                else:
                    notes.append(f"ONNX Runtime optimization failed ({error}); the unfused graph was kept")
                    print(f"warning: {notes[-1]}", file=sys.stderr)
            else:
                notes.append(f"model_type {config.model_type!r} has no ONNX Runtime fusion here "
                             f"(only {', '.join(FUSABLE_MODEL_TYPES)}); the graph was exported unfused")
                print(f"warning: {notes[-1]}", file=sys.stderr)

        t0 = time.perf_counter()
        diff = _parity(graph_file, reference, per_token)
        if diff > atol and optimized:
            raw_diff = _parity(raw, reference, per_token)
            if raw_diff <= atol:
                notes.append(f"the fused graph differed from PyTorch by {diff:.2e} (> atol {atol:g}); the unfused graph "
                             f"(difference {raw_diff:.2e}) was kept instead")
                print(f"warning: {notes[-1]}", file=sys.stderr)
                graph_file, optimized, diff = raw, False, raw_diff
        timings["parity_s"] = round(time.perf_counter() - t0, 2)
        if not diff <= atol:  # also catches NaN
            raise CompressError(
                f"ONNX export of {(parent or {}).get('path', 'the model')}: logits differ from PyTorch by {diff:.3g}, more "
                f"than the tolerance {atol:g}; nothing was written to {out}. Try --opset {DEFAULT_OPSET} and --no-optimize; "
                "if it persists, the model has an operation the exporter mistranslates."
            )

        fused_ops = count_fused_ops(graph_file)
        attention = fused_ops.get("Attention", 0) + fused_ops.get("MultiHeadAttention", 0)
        if optimized and attention != layers:
            notes.append(f"ONNX Runtime fused {attention} Attention operators for {layers} layers: the unfused layers "
                         "run as separate MatMul/Softmax operators and are slower")
            print(f"warning: {notes[-1]}", file=sys.stderr)
        timings["total_s"] = round(time.perf_counter() - started, 2)

        meta: dict[str, Any] = {
            "stage": "export",
            "kind": "onnx-fp32",
            "task": task.name,
            "model_type": config.model_type,
            "parameters": count_parameters(model),
            "max_length": max_length,
            "parent": parent or {},
            "config": ExportConfig(model=model_path or (parent or {}).get("path", ""), opset=opset, optimize=optimize,
                                   atol=atol).to_dict(),
            "onnx": {"file": ONNX_FILE, "opset": opset, "optimized": optimized, "inputs": names, "outputs": outputs,
                     "num_layers": layers, "heads_per_layer": [h for h, _ in heads], "fused_ops": fused_ops,
                     "attention_fused_per_layer": attention == layers},
            "parity": {"max_abs_diff": diff, "atol": atol, "texts": len(PARITY_TEXTS), "pairs": len(PARITY_PAIRS),
                       "batch_sizes": sorted({len(a["input_ids"]) for a, _ in reference})},
            "timings": timings,
            "notes": notes,
        }
        if parent_meta:
            meta.update(reading_settings(parent_meta))
            meta["data"] = parent_meta.get("data")
            meta["parent_meta"] = {k: parent_meta.get(k) for k in ("stage", "kind", "data", "metrics", "config", "parent")
                                   if k in parent_meta}

        def fill(tmp: Path) -> None:
            shutil.copyfile(graph_file, tmp / ONNX_FILE)
            onnx.checker.check_model(str(tmp / ONNX_FILE))
            tokenizer.save_pretrained(tmp)
            config.save_pretrained(tmp)
            carry_model_files(task, (parent or {}).get("path"), tmp)
            meta["weights_sha256"] = weights_sha256(tmp)

        path = write_artifact(out, fill, meta)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ops = ", ".join(f"{k} {v}" for k, v in fused_ops.items() if v) or "none"
    print(f"export: {path} ({'fused' if optimized else 'unfused'}; fused operators: {ops}; "
          f"max |logit diff| vs PyTorch {diff:.1e})")
    return path


def _use_eager_attention(model) -> None:
    """Switch an in-memory model to eager attention: the only attention graph ORT can fuse."""
    current = getattr(model.config, "_attn_implementation", None)
    if current in (None, "eager"):
        return
    try:
        model.set_attn_implementation("eager")
    except Exception as exc:  # a model class without an eager path: export anyway, fusions will tell
        print(f"warning: could not switch attention to eager ({exc}); ONNX Runtime may fuse no Attention",
              file=sys.stderr)


def _outputs_module(model, outputs: list[str]):
    """The model wrapped so the graph has named tensor inputs and the task's outputs, in the registry's
    order (``logits`` for a classifier or a tagger; ``start_logits``, ``end_logits`` for a span reader)."""
    import torch

    class TaskOutputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                kwargs["token_type_ids"] = token_type_ids
            named = named_outputs(self.model(**kwargs), outputs)
            return tuple(named[name] for name in outputs) if len(outputs) > 1 else named[outputs[0]]

    return TaskOutputs().eval()


def _torch_export(model, tokenizer, names: list[str], path: Path, opset: int, max_length: int,
                  axes: dict[str, dict[int, str]], outputs: Sequence[str] = ("logits",)) -> None:
    """``torch.onnx.export`` of the task's ``outputs``; ``axes`` are its dynamic axes (``Task.dynamic_axes``)."""
    import torch

    # A padded batch of two lengths: the trace must take the branch that applies the padding mask.
    _, batches = encode_batches(tokenizer, PARITY_TEXTS[1:3], max_length, 2, "token_type_ids" in names)
    arrays = batches[0][1]
    if arrays["attention_mask"].all():
        raise CompressError("internal: the export example batch has no padding; the trace would drop the mask.")
    args = tuple(torch.from_numpy(arrays[n]) for n in names)
    wrapper = _outputs_module(model, list(outputs))
    try:
        with _quiet_export(), torch.no_grad():
            torch.onnx.export(wrapper, args, str(path), input_names=names, output_names=list(outputs), dynamic_axes=axes,
                              opset_version=opset, do_constant_folding=True, dynamo=False)
    except CompressError:
        raise
    except Exception as exc:
        raise CompressError(f"torch.onnx.export failed at --opset {opset}: {first_line(exc)}. "
                            f"Try --opset {DEFAULT_OPSET}.") from exc


@contextlib.contextmanager
def _quiet_export():
    """Hide the exporter's expected warnings (legacy exporter notice, shape-only tracer checks)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
        warnings.filterwarnings("ignore", message=".*The feature will be removed.*")
        warnings.filterwarnings("ignore", message=".*Converting a tensor to a Python boolean.*")
        warnings.filterwarnings("ignore", message=".*aten::index operator of advanced indexing.*")
        yield


def attention_heads_per_layer(model) -> list[tuple[int, int]]:
    """``(heads, heads x head_size)`` of every self-attention module, in layer order.

    After head pruning these differ from ``config.num_attention_heads`` / ``hidden_size``. ORT's
    fusion must be given the real values: told 4 heads of 8 for a layer holding 3, it fuses without
    complaint and the logits move by 0.4 (measured on a trained tiny BERT). The exported graph
    reshapes with ``-1`` heads, so ORT cannot read them from the graph either.
    """
    out = []
    for module in model.modules():
        heads = getattr(module, "num_attention_heads", None)
        size = getattr(module, "attention_head_size", None)
        if isinstance(heads, int) and isinstance(size, int) and not hasattr(module, "attention"):
            out.append((heads, heads * size))
    return out


def _optimize(raw: Path, fused: Path, num_heads: int, all_head_size: int) -> str | None:
    """Run ORT's BERT fusions; return an error message instead of raising (the raw graph still works)."""
    try:
        from onnxruntime.transformers.optimizer import optimize_model

        logger = logging.getLogger("onnxruntime.transformers")
        level = logger.level
        logger.setLevel(logging.ERROR)  # its INFO/WARNING chatter; the counts are reported instead
        try:
            optimized = optimize_model(str(raw), model_type="bert", num_heads=int(num_heads),
                                       hidden_size=int(all_head_size), use_gpu=False)
        finally:
            logger.setLevel(level)
        optimized.save_model_to_file(str(fused), use_external_data_format=False)
        return None
    except Exception as exc:  # the optimizer raises many types; the unfused graph is the fallback
        return describe(exc, 200)


def count_fused_ops(onnx_file: str | os.PathLike) -> dict[str, int]:
    """How many of each fused operator a graph holds (0 for those absent), in :data:`FUSED_OPS` order."""
    import onnx

    counts = Counter(n.op_type for n in onnx.load(str(onnx_file), load_external_data=False).graph.node)
    return {op: int(counts.get(op, 0)) for op in FUSED_OPS}


def _reference_inputs(tokenizer, max_length: int, need_types: bool, model, outputs: Sequence[str] = ("logits",)
                      ) -> list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """PyTorch's outputs for the parity texts: all texts in one padded batch, then one by one, then pairs."""
    import torch

    groups = [(PARITY_TEXTS, len(PARITY_TEXTS)), (PARITY_TEXTS[:3], 1), (PARITY_PAIRS, len(PARITY_PAIRS))]
    out = []
    with torch.inference_mode():
        for texts, batch_size in groups:
            _, batches = encode_batches(tokenizer, texts, max_length, batch_size, need_types)
            for _, arrays in batches:
                result = model(**{k: torch.from_numpy(v) for k, v in arrays.items()})
                out.append((arrays, {name: value.float().numpy()
                                     for name, value in named_outputs(result, list(outputs)).items()}))
    return out


def _parity(graph_file: Path, reference: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]],
            per_token: dict[str, bool] | None = None) -> float:
    """Largest absolute difference of any output between the graph (in ONNX Runtime) and PyTorch; outputs
    with a sequence axis (a tagger's logits, a reader's start and end logits) are compared at real tokens
    only: padded positions are nobody's output."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(graph_file), options, providers=["CPUExecutionProvider"])
    inputs = [i.name for i in session.get_inputs()]
    worst = 0.0
    for arrays, expected in reference:
        names = list(expected)
        for name, got in zip(names, session.run(names, {n: arrays[n] for n in inputs})):
            gap = np.abs(got.astype(np.float64) - expected[name].astype(np.float64))
            if (per_token or {}).get(name, gap.ndim == 3):
                gap = gap[arrays["attention_mask"].astype(bool)]
            diff = float(np.max(gap))
            if not np.isfinite(diff):
                return float("nan")
            worst = max(worst, diff)
    return worst
