"""The OpenVINO runtime kinds: fp32 IR and NNCF INT8, served without torch, measured by optimize and bench.

On a tiny BERT trained here for a few seconds (logit margins ~3-6, so agreement means something).
Tolerances against the PyTorch fp32 parent: the fp32 IR within 1e-4 in logits (the same fp32
arithmetic in other kernels, run with ``INFERENCE_PRECISION_HINT=f32``); NNCF INT8 within 0.5
(0.31 measured here) with >= 95% agreement. OpenVINO is an optional extra: without it these tests
are skipped with the reason, except the one that checks optimize's message for that case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compress.config import DataOptions, OptimizeConfig
from compress.core.errors import CompressError
from compress.runtime.formats.openvino import OPENVINO_BIN, OPENVINO_XML, is_int8_ir, openvino_missing
from compress.runtime.predictor import Predictor, artifact_kind
from tests.support.paths import ROOT
from tests.support.serving_env import BLOCKER, TRAINING_STACK
from tests.support.trained_classifier import TEXTS, agreement, data, fp32_logits, trained, work  # noqa: F401 (fixtures)

FP32_ATOL = 1e-4
INT8_ATOL = 0.5
MISSING = openvino_missing(need_nncf=True)
needs_openvino = pytest.mark.skipif(MISSING is not None, reason=f"OpenVINO tests skipped: {MISSING}")


@pytest.fixture(scope="module")
def ov_fp32(trained, data, work) -> Path:
    from compress.stages.quantize import quantize

    return quantize(trained, work / "ov-fp32", method="openvino-fp32", data=data)


@pytest.fixture(scope="module")
def ov_int8(trained, data, work) -> Path:
    from compress.stages.quantize import quantize

    return quantize(trained, work / "ov-int8", method="openvino-int8", data=data, calibration_size=64)


@needs_openvino
def test_fp32_ir_reloads_and_matches_pytorch(ov_fp32, fp32_logits):
    assert (ov_fp32 / OPENVINO_XML).exists() and (ov_fp32 / OPENVINO_BIN).exists()
    assert not list(ov_fp32.glob("*.onnx")) and not list(ov_fp32.parent.glob(".ov-fp32*"))  # atomic, no leftovers
    meta = json.loads((ov_fp32 / "compress.json").read_text())
    assert meta["kind"] == "openvino-fp32" and meta["openvino"]["precision"] == "fp32"
    assert meta["openvino"]["inference_precision_hint"] == "f32" and meta["openvino"]["versions"]["openvino"]
    assert not is_int8_ir(ov_fp32 / OPENVINO_XML)
    predictor = Predictor.load(ov_fp32, threads=1)
    assert predictor.kind == "openvino-fp32" and predictor.label_names == ["LABEL_0", "LABEL_1"]
    logits = predictor.logits(TEXTS)
    assert np.max(np.abs(logits - fp32_logits)) <= FP32_ATOL
    # Batching and padding do not change the answers (dynamic shapes in the IR).
    assert np.allclose(predictor.logits(TEXTS, batch_size=1), logits, atol=FP32_ATOL)
    # Served with the sequence axis bounded at the position table (faster on changing lengths), the batch free.
    from compress.runtime.predictor import position_limit

    for model_input in predictor.compiled.inputs:
        batch, sequence = model_input.get_partial_shape()
        assert batch.is_dynamic and batch.get_max_length() == -1
        assert (sequence.get_min_length(), sequence.get_max_length()) == (1, position_limit(predictor.config))
    labels, probs = predictor.predict(["a wonderful film", "boring and dull"])
    assert len(labels) == 2 and np.allclose(probs.sum(-1), 1)


@needs_openvino
def test_int8_ir_is_quantized_accuracy_checked_and_agrees(ov_int8, fp32_logits, trained):
    meta = json.loads((ov_int8 / "compress.json").read_text())
    q = meta["quantization"]
    assert meta["kind"] == "openvino-int8" and artifact_kind(ov_int8) == "openvino-int8"
    assert is_int8_ir(ov_int8 / OPENVINO_XML)
    assert q["accuracy_fp32"] is not None and q["accuracy_drop"] is not None and q["within_budget"] is True
    assert q["candidates"][0]["name"] == "per-channel+static-nncf-performance"
    assert meta["openvino"]["calibration_texts"] == 64 and meta["openvino"]["versions"]["nncf"]
    assert meta["agreement_with_parent"]["agreement"] >= 0.95
    assert q["size_bytes_int8"] < 0.5 * q["size_bytes_fp32"]
    # The file decides the kind when compress.json is gone (a bare IR folder).
    bare = ov_int8.parent / "bare-int8"
    bare.mkdir()
    for item in ov_int8.iterdir():
        if item.name != "compress.json":
            (bare / item.name).write_bytes(item.read_bytes())
    assert artifact_kind(bare) == "openvino-int8"
    logits = Predictor.load(ov_int8, threads=1).logits(TEXTS)
    assert np.max(np.abs(logits - fp32_logits)) <= INT8_ATOL and agreement(logits, fp32_logits) >= 0.95


@needs_openvino
@pytest.mark.slow  # two NNCF runs: a minute or more on a busy 2-core machine
def test_sensitive_layer_fallback_keeps_them_in_fp32(trained, data, work):
    """The last fallback's ignored scope really reaches the IR: fewer quantized operators."""
    from compress.stages.export import export_onnx
    from compress.stages.ort_static import calibration_texts
    from compress.stages.quantize import _OpenVinoBuilder, candidate_plan

    onnx_dir = export_onnx(trained, work / "unfused", optimize=False)
    fp32 = Predictor.load(onnx_dir, threads=1)
    builder = _OpenVinoBuilder(onnx_dir, fp32, calibration_texts(data.load(), 32))
    plan = candidate_plan("openvino-int8")
    assert [s.name for s in plan] == ["per-channel+static-nncf-performance", "per-channel+static-nncf-mixed",
                                      "per-channel+static-nncf-mixed+sensitive-fp32"]
    counts = {}
    for spec in plan[1:]:
        excluded = builder.build(spec, work / spec.name)
        counts[spec.name] = (work / spec.name / OPENVINO_XML).read_text().count('type="FakeQuantize"')
        assert bool(excluded) == spec.exclude_sensitive
    assert 0 < counts["per-channel+static-nncf-mixed+sensitive-fp32"] < counts["per-channel+static-nncf-mixed"]


@needs_openvino
def test_openvino_errors_are_one_clear_line(trained, data, work, ov_int8):
    from compress.stages.quantize import quantize

    with pytest.raises(CompressError, match="openvino-int8 calibrates on training texts"):
        quantize(trained, work / "no-data", method="openvino-int8")
    with pytest.raises(CompressError, match="drop --graph"):
        quantize(trained, work / "graph", method="openvino-fp32", graph="fused")
    with pytest.raises(CompressError, match="already quantized|OpenVINO artifact"):
        quantize(ov_int8, work / "again", method="openvino-int8", data=data)
    broken = work / "broken"
    broken.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", OPENVINO_XML):
        if (ov_int8 / name).exists():
            (broken / name).write_bytes((ov_int8 / name).read_bytes())
    with pytest.raises(CompressError, match=f"{OPENVINO_BIN} is missing"):
        Predictor.load(broken)


SERVE = BLOCKER + """
import json
from compress.runtime.predictor import Predictor
p = Predictor.load(sys.argv[1], threads=1)
logits = p.logits(json.loads(sys.argv[2]), batch_size=3)
loaded = sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in BLOCKED})
print(json.dumps({"kind": p.kind, "logits": logits.tolist(), "loaded": loaded}))
"""


@needs_openvino
@pytest.mark.parametrize("which", ["ov_fp32", "ov_int8"])
def test_openvino_serves_with_torch_and_the_training_stack_unimportable(which, request):
    folder = request.getfixturevalue(which)
    blocked = ",".join(TRAINING_STACK + ("nncf",))  # serving needs openvino, tokenizers, numpy: not NNCF either
    done = subprocess.run([sys.executable, "-c", SERVE, blocked, str(folder), json.dumps(TEXTS)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["kind"] == artifact_kind(folder) and got["loaded"] == []
    here = Predictor.load(folder, threads=1).logits(TEXTS, batch_size=3)
    assert np.allclose(np.asarray(got["logits"], dtype=np.float32), here, atol=1e-5)


@needs_openvino
def test_openvino_import_does_not_pull_torch():
    done = subprocess.run([sys.executable, "-c", "import sys, openvino; print(sorted(m for m in sys.modules "
                           "if m.split('.')[0] in ('torch', 'transformers', 'nncf')))"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


@needs_openvino
@pytest.mark.slow  # builds two runtimes, times them, benches: a minute or more on a busy 2-core machine
def test_optimize_measures_openvino_and_bench_takes_its_folder(trained, data, work):
    from compress.cli import main
    from compress.stages.optimize import optimize

    out = optimize(OptimizeConfig(model=str(trained), data=data, candidates="onnx-int8-fused,openvino-int8",
                                  batch_sizes=[1, 4], seq_len=16, threads=1, warmup=1, runs=5, calibration_size=32),
                   work / "optimized", progress=False)
    meta = json.loads((out / "compress.json").read_text())
    rows = {r["name"]: r for r in meta["optimize"]["table"]}
    assert rows["openvino-int8"]["kind"] == "openvino-int8" and not rows["openvino-int8"].get("error")
    assert rows["openvino-int8"]["agreement"] >= 0.95
    assert set(meta["choice"]["decided_by"]) == {"1", "4"}
    assert artifact_kind(out / "candidates" / "openvino-int8") == "openvino-int8"
    # bench takes the candidates' folders side by side.
    bench_out = work / "bench"
    code = main(["bench", str(out / "candidates" / "openvino-int8"), str(out / "candidates" / "onnx-int8-fused"),
                 "--reference", str(trained), "--data", data.data, "--out", str(bench_out), "--batch-sizes", "1",
                 "--seq-lens", "16", "--warmup", "1", "--runs", "3", "--threads", "1", "--no-memory"])
    assert code == 0
    results = json.loads((bench_out / "results.json").read_text())
    kinds = {a["name"]: a["kind"] for a in results["artifacts"]}
    assert kinds["openvino-int8"] == "openvino-int8" and kinds["onnx-int8-fused"] == "onnx-int8"


def test_optimize_skips_openvino_with_a_message_when_it_is_not_installed(monkeypatch, tmp_path, capsys):
    """Without the extra, the OpenVINO candidates are skipped: said, recorded in the table, nothing attempted."""
    import compress.stages.optimize as optimize_module

    monkeypatch.setattr(optimize_module, "openvino_missing", lambda need_nncf=False: "openvino is not installed; "
                        "pip install -e '.[openvino]'")
    cfg = OptimizeConfig(model="m", data=DataOptions("d.csv"), candidates="openvino-fp32,openvino-int8")
    folders, errors = optimize_module.build_candidates(Path("m"), cfg, tmp_path)
    assert folders == {} and set(errors) == {"openvino-fp32", "openvino-int8"} and not list(tmp_path.iterdir())
    assert all(e.startswith("skipped: openvino is not installed") for e in errors.values())
    err = capsys.readouterr().err
    assert "optimize: skipping candidate openvino-int8: openvino is not installed; pip install -e '.[openvino]'" in err
    assert "building" not in err
