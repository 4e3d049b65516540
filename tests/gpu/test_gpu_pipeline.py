"""The chain on a GPU: teacher -> distill (intermediate losses, precision auto) -> prune -> export -> quantize
-> Predictor -> bench on a tiny BERT, and a 2-rank NCCL distillation when two GPUs are present.

Skipped without CUDA. The CPU equivalents run everywhere: ``tests/integration/test_end_to_end.py`` (teacher,
distill), ``tests/unit/compress/stages/prune/test_prune.py``, ``tests/unit/compress/test_export_quantize.py``, ``tests/unit/benchmarks/test_bench.py``,
``tests/integration/test_distributed.py`` (2 ranks, gloo), and ``tests/integration/test_device_guard.py`` (every stage
with its model on a second, checked device, which catches the device mix-ups this suite would hit).

Training stages run on the GPU because the Trainer picks it when present; what runs outside the
Trainer (soft labels, evaluation, pruning importance, export, ONNX Runtime) runs where its model
is. Stages are driven through the command line (``compress.cli.main``), in this process, so that
``torch.cuda.max_memory_allocated`` shows whether the GPU really did the work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from compress.cli import main
from tests.conftest import make_bert, sentiment_rows, write_csv

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU (torch.cuda.is_available() is False); the CPU equivalents "
                                       "are tests/integration/test_end_to_end.py, test_prune.py, test_export_quantize.py, "
                                       "test_bench.py, test_distributed.py and test_device_guard.py")

ROOT = Path(__file__).resolve().parents[2]


def _meta(folder: Path) -> dict:
    return json.loads((folder / "compress.json").read_text())


def _bf16_ok() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu")
    data = write_csv(root / "data.csv", sentiment_rows(320))
    encoder = make_bert(root / "encoder", layers=4)  # hidden 32: the 2x32 student copies its layers
    return root, data, encoder


def _run(argv: list[str]) -> None:
    torch.cuda.reset_peak_memory_stats()
    assert main(argv) == 0, argv
    assert torch.cuda.max_memory_allocated() > 0, f"{argv[0]} did not use the GPU"


def test_chain_on_cuda(chain):
    root, data, encoder = chain
    precision = []  # --precision auto, the default: bf16 on a GPU with it, fp16 (grad scaler) on one without
    common = ["--data", str(data), "--batch-size", "16"]

    _run(["teacher", "--model", str(encoder), "--out", str(root / "teacher"), "--epochs", "6", "--lr", "2e-3",
          *common, *precision])
    teacher = _meta(root / "teacher")
    assert teacher["fine_tuned"] and teacher["metrics"]["test"]["accuracy"] >= 0.9
    assert teacher["precision"]["setting"] == "auto"
    assert teacher["precision"]["precision"] == ("bf16" if _bf16_ok() else "fp16"), teacher["precision"]

    _run(["distill", "--teacher", str(root / "teacher"), "--student", "2x32", "--init", "teacher-layers",
          "--epochs", "6", "--lr", "2e-3", "--out", str(root / "student"), *common, *precision])
    student = _meta(root / "student")
    assert student["distillation"]["intermediate"] is True
    assert {"embedding", "hidden", "attention"} <= set(student["distillation"]["losses"])
    assert student["metrics"]["test"]["accuracy"] >= 0.85 and student["metrics"]["test"]["agreement"] >= 0.85

    _run(["prune", "--model", str(root / "student"), "--heads", "0.5", "--ffn", "0.5", "--recover-epochs", "2",
          "--out", str(root / "pruned"), *common, *precision])
    assert _meta(root / "pruned")["pruning"]["heads"]["after"] != _meta(root / "pruned")["pruning"]["heads"]["before"]

    assert main(["export", "--model", str(root / "pruned"), "--out", str(root / "onnx")]) == 0
    assert main(["quantize", "--model", str(root / "onnx"), "--data", str(data), "--out", str(root / "onnx-int8")]) == 0

    from compress.runtime.predictor import Predictor

    labels, _ = Predictor.load(root / "onnx-int8").predict(["a wonderful and charming film", "a dull, tedious film"])
    assert labels == ["1", "0"]
    # a PyTorch Predictor whose model sits on the GPU gives the CPU's logits back on the CPU
    texts = [r["text"] for r in sentiment_rows(40, seed=7)]
    predictor = Predictor.load(root / "student")
    on_cpu = predictor.logits(texts)
    predictor.model.to("cuda")
    on_gpu = predictor.logits(texts)
    assert isinstance(on_gpu, np.ndarray)
    np.testing.assert_allclose(on_gpu, on_cpu, atol=1e-3)

    assert main(["bench", str(root / "student"), str(root / "pruned"), str(root / "onnx-int8"),
                 "--reference", str(root / "teacher"), "--data", str(data), "--quick", "--no-memory",
                 "--out", str(root / "bench")]) == 0
    results = json.loads((root / "bench" / "results.json").read_text())
    assert {a["name"] for a in results["artifacts"]} >= {"student", "pruned", "onnx-int8"}


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs for a 2-rank NCCL run")
def test_two_rank_nccl_distillation(chain, tmp_path):
    root, data, encoder = chain
    teacher = root / "teacher"
    if not teacher.exists():
        _run(["teacher", "--model", str(encoder), "--out", str(teacher), "--epochs", "6", "--lr", "2e-3",
              "--data", str(data), "--batch-size", "16"])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "BERT_COMPRESS_CACHE": str(tmp_path / "cache"),
           "TORCH_DISTRIBUTED_DEBUG": "DETAIL", "NCCL_DEBUG": "INFO"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "compress",
                          "distill", "--teacher", str(teacher), "--data", str(data), "--student", "2x32",
                          "--init", "teacher-layers", "--epochs", "4", "--lr", "2e-3", "--batch-size", "8",
                          "--out", str(tmp_path / "ddp")], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "NCCL" in run.stdout + run.stderr, "the ranks did not talk over NCCL"
    meta = _meta(tmp_path / "ddp")
    assert meta["training"]["effective_batch_size"] == 16
    assert meta["metrics"]["test"]["accuracy"] >= 0.85
    # the soft labels were sharded across the ranks and gathered into one cache per split
    assert len(list((tmp_path / "cache" / "soft-labels").glob("*.npy"))) == 3


def test_device_flag_on_cuda(chain, tmp_path):
    """``--device cuda:0`` trains and records the GPU, ``--device cpu`` keeps a GPU machine's run on the CPU,
    Predictor and bench run where ``--device`` says (ONNX on CUDAExecutionProvider when onnxruntime-gpu is there)."""
    import onnxruntime as ort

    from compress.runtime.predictor import Predictor

    root, data, encoder = chain
    common = ["--data", str(data), "--batch-size", "16", "--epochs", "1", "--max-steps", "4"]
    _run(["teacher", "--model", str(encoder), "--out", str(tmp_path / "on-gpu"), "--device", "cuda:0", *common])
    assert _meta(tmp_path / "on-gpu")["device"] == "cuda:0"
    assert main(["teacher", "--model", str(encoder), "--out", str(tmp_path / "on-cpu"), "--device", "cpu",
                 *common]) == 0
    assert _meta(tmp_path / "on-cpu")["device"] == "cpu"
    _run(["distill", "--teacher", str(tmp_path / "on-gpu"), "--student", "2x32", "--init", "teacher-layers",
          "--out", str(tmp_path / "student"), "--device", "cuda", "--allow-untrained-teacher", *common])
    assert _meta(tmp_path / "student")["device"] == "cuda:0"

    texts = [r["text"] for r in sentiment_rows(20, seed=3)]
    on_cpu = Predictor.load(tmp_path / "student", device="cpu")
    on_gpu = Predictor.load(tmp_path / "student", device="cuda:0")
    assert on_cpu.device == "cpu" and on_gpu.device == "cuda:0"
    np.testing.assert_allclose(on_gpu.logits(texts), on_cpu.logits(texts), atol=1e-3)

    assert main(["export", "--model", str(tmp_path / "student"), "--out", str(tmp_path / "onnx")]) == 0
    onnx = Predictor.load(tmp_path / "onnx", device="cuda")
    expected = "CUDAExecutionProvider" if "CUDAExecutionProvider" in ort.get_available_providers() else \
        "CPUExecutionProvider"
    assert onnx.provider == expected
    np.testing.assert_allclose(onnx.logits(texts), on_cpu.logits(texts), atol=1e-3)

    assert main(["bench", str(tmp_path / "student"), str(tmp_path / "onnx"), "--reference", str(tmp_path / "on-gpu"),
                 "--data", str(data), "--quick", "--no-memory", "--device", "cuda",
                 "--out", str(tmp_path / "bench")]) == 0
    results = json.loads((tmp_path / "bench" / "results.json").read_text())
    assert results["settings"]["device"] == "cuda:0"
    by_name = {a["name"]: a for a in results["artifacts"]}
    assert by_name["student"]["device"] == "cuda:0" and by_name["onnx"]["provider"] == expected
