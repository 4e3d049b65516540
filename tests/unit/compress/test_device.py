"""``--device auto|cpu|cuda|cuda:N``: parsing, the config/CLI/recipe paths, the no-GPU error, and what runs record.

CPU only: on a machine with CUDA the "no CUDA device" test is skipped; ``tests/gpu/`` runs the
GPU side (``--device cuda`` / ``cuda:0``).
"""

from __future__ import annotations

import json

import pytest
import torch

from compress.cli import build_parser, main, stage_config
from compress.config import ConfigError
from compress.stages.registry import stage_configs
from compress.core.device import DEVICE_FORMS, check_device_spec, device_problem, mixed_precision, resolve_device
from compress.core.errors import CompressError
from tests.conftest import make_bert, sentiment_rows, write_csv

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
DEVICE_STAGES = ("teacher", "pretrain", "distill", "prune", "quantize", "optimize", "bench")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("device")
    data = write_csv(root / "data.csv", sentiment_rows(80))
    model = make_bert(root / "model", layers=1, head=True)
    return root, data, model


@pytest.mark.parametrize("spec", ["auto", "cpu", "cuda", "cuda:0", "cuda:12"])
def test_accepted_forms(spec):
    assert device_problem(spec) is None and check_device_spec(spec) == spec


@pytest.mark.parametrize("spec", ["gpu", "cuda:x", "CUDA", "cuda:", "cpu:0", "", None, 0])
def test_bad_forms_get_one_clear_error(spec):
    message = device_problem(spec)
    assert message and message.startswith("--device ") and DEVICE_FORMS in message
    with pytest.raises(CompressError, match="use auto, cpu, cuda or cuda:N"):
        check_device_spec(spec)


@pytest.mark.parametrize("stage", DEVICE_STAGES)
def test_every_model_stage_config_has_a_validated_device(stage):
    cls = stage_configs()[stage]
    assert cls().device == "auto" and "device" in cls.known_keys()
    assert cls.from_dict({"device": "cuda:1"}, check=False).device == "cuda:1"
    with pytest.raises(ConfigError) as info:
        cls.from_dict({"device": "gpu"}, check=False).validate()
    device_problems = [p for p in info.value.problems if p.keys == ("device",)]
    assert len(device_problems) == 1 and "--device 'gpu' is not a device" in device_problems[0].message


def test_device_is_recorded_but_not_part_of_a_stage_identity():
    from compress.config import DistillConfig
    from compress.stages.fingerprint import stage_identity

    on_cpu, on_gpu = DistillConfig(teacher="t", device="cpu"), DistillConfig(teacher="t", device="cuda")
    assert on_cpu.to_dict()["device"] == "cpu"
    assert DistillConfig.from_dict(on_cpu.to_dict()) == on_cpu
    assert stage_identity(on_cpu)["config"] == stage_identity(on_gpu)["config"]


@pytest.mark.parametrize("argv", [
    ["teacher", "--model", "m", "--data", "d.csv", "--out", "o"],
    ["pretrain", "--model", "m", "--unlabeled", "u.txt", "--out", "o"],
    ["distill", "--teacher", "t", "--data", "d.csv", "--out", "o"],
    ["prune", "--model", "m", "--data", "d.csv", "--out", "o", "--heads", "0.5"],
    ["quantize", "--model", "m", "--out", "o"],
    ["optimize", "--model", "m", "--data", "d.csv", "--out", "o"],
    ["bench", "a", "--reference", "a", "--data", "d.csv", "--out", "o"],
])
def test_the_device_flag_reaches_the_config(argv):
    parser = build_parser()
    assert stage_config(argv[0], parser.parse_args(argv)).device == "auto"
    assert stage_config(argv[0], parser.parse_args(argv + ["--device", "cpu"])).device == "cpu"


def test_a_bad_device_flag_is_one_error_naming_the_flag(capsys):
    assert main(["distill", "--teacher", "t", "--data", "d.csv", "--out", "o", "--device", "gpu"]) == 2
    err = capsys.readouterr().err
    assert "--device 'gpu' is not a device; use auto, cpu, cuda or cuda:N" in err and err.count("\n") == 1


def test_a_recipe_stage_takes_device(tiny, tmp_path):
    from compress.pipeline import load_recipe

    _, data, model = tiny
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"data: {data}\nteacher:\n  model: {model}\n  device: cpu\ndistill:\n  device: cpu\n"
                      "bench:\n  quick: true\n")
    stages = load_recipe(recipe, str(tmp_path / "out")).stages
    assert stages["teacher"].device == "cpu" and stages["distill"].device == "cpu"
    assert stages["bench"].device == "auto"
    recipe.write_text(f"data: {data}\nteacher:\n  model: {model}\n  device: gpu\n")
    with pytest.raises(CompressError) as info:
        load_recipe(recipe, str(tmp_path / "out"))
    assert f"{recipe}:4: teacher: --device 'gpu' is not a device" in str(info.value)


def test_auto_and_cpu_resolve_here():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert mixed_precision("cpu") in ("bf16", None)


@no_cuda
@pytest.mark.parametrize("spec", ["cuda", "cuda:0"])
def test_cuda_without_a_gpu_is_a_clear_error(spec):
    with pytest.raises(CompressError) as info:
        resolve_device(spec)
    message = str(info.value)
    assert f"--device {spec}: torch sees no CUDA device" in message
    assert "--device cpu" in message and "--device auto" in message


@no_cuda
def test_cuda_without_a_gpu_through_the_command_line(tiny, tmp_path, capsys):
    _, data, model = tiny
    out = tmp_path / "teacher"
    assert main(["teacher", "--model", str(model), "--data", str(data), "--out", str(out), "--device", "cuda"]) == 2
    assert "torch sees no CUDA device" in capsys.readouterr().err and not out.exists()
    assert main(["predict", "--model", str(model), "--device", "cuda", "a fine film"]) == 2
    assert "torch sees no CUDA device" in capsys.readouterr().err


def test_training_arguments_follow_the_device(tmp_path):
    from compress.config import TrainSettings
    from compress.stages.training import training_arguments

    args = training_arguments(TrainSettings(), tmp_path, 10, device=torch.device("cpu"))
    assert args.use_cpu and args.device.type == "cpu" and not args.fp16


def test_the_teacher_stage_records_its_device(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_COMPRESS_CACHE", str(tmp_path / "cache"))
    _, data, model = tiny
    out = tmp_path / "teacher"
    assert main(["teacher", "--model", str(model), "--data", str(data), "--out", str(out), "--finetune", "yes",
                 "--max-steps", "2", "--batch-size", "16", "--device", "cpu"]) == 0
    meta = json.loads((out / "compress.json").read_text())
    assert meta["device"] == "cpu" and meta["config"]["device"] == "cpu"


def test_predictor_reports_its_device_and_provider(tiny, tmp_path, capsys):
    import onnxruntime as ort

    from compress.stages.export import export_onnx
    from compress.runtime.predictor import Predictor

    _, _, model = tiny
    onnx_dir = export_onnx(model, tmp_path / "onnx")
    torch_predictor = Predictor.load(model, device="cpu")
    assert torch_predictor.device == "cpu" and torch_predictor.provider is None
    onnx_predictor = Predictor.load(onnx_dir, device="cpu")
    assert onnx_predictor.provider == "CPUExecutionProvider" and onnx_predictor.device == "cpu"
    assert Predictor.load(onnx_dir).provider == "CPUExecutionProvider"  # no device: the CPU, as before
    texts = ["a wonderful film", "a dull film"]
    assert abs(onnx_predictor.logits(texts) - torch_predictor.logits(texts)).max() < 1e-3
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        capsys.readouterr()
        fallback = Predictor.load(onnx_dir, device="cuda")
        assert fallback.provider == "CPUExecutionProvider" and fallback.device == "cpu"
        assert "onnxruntime-gpu" in capsys.readouterr().err
    with pytest.raises(CompressError, match="is not a device"):
        Predictor.load(onnx_dir, device="gpu")


def test_bench_results_carry_the_device(tiny, tmp_path):
    _, data, model = tiny
    out = tmp_path / "bench"
    assert main(["bench", str(model), "--reference", str(model), "--data", str(data), "--quick", "--no-memory",
                 "--runs", "2", "--warmup", "0", "--out", str(out), "--device", "cpu"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["device"] == "cpu"
    assert [(a["device"], a["provider"]) for a in results["artifacts"]] == [("cpu", None)]


def _results(device: str | None) -> dict:
    from tests.support.results import make_results

    doc = make_results()
    if device is not None:
        doc["settings"]["device"] = device
    return doc


def test_gate_refuses_a_baseline_from_another_device(tmp_path, capsys):
    from benchmarks.gate import EXIT_MALFORMED, EXIT_PASS, device_mismatch

    current, baseline, rules = tmp_path / "now.json", tmp_path / "base.json", tmp_path / "gates.toml"
    current.write_text(json.dumps(_results("cuda:0")))
    baseline.write_text(json.dumps(_results(None)))  # written before the device setting: measured on the CPU
    rules.write_text("[rules]\nmax_regression = 0.10\n")
    argv = ["gate", str(current), "--rules", str(rules), "--baseline", str(baseline)]
    assert main(argv) == EXIT_MALFORMED
    out = capsys.readouterr()
    assert "measured on cpu and these results on cuda:0" in out.out + out.err and "--allow-device-mismatch" in out.out + out.err
    assert main(argv + ["--allow-device-mismatch"]) == EXIT_PASS
    assert "--allow-device-mismatch" in capsys.readouterr().err
    # another GPU of the same kind is the same device kind
    assert device_mismatch(_results("cuda:1"), _results("cuda:0")) is None
    assert device_mismatch(_results("cpu"), _results(None)) is None
