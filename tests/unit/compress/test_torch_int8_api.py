"""The deprecated PyTorch API that ``torch-int8`` stands on still exists and works, or this fails saying what to do.

torch 2.13 warns that ``torch.ao.quantization.quantize_dynamic`` and quantized-tensor creation
"will be removed in a future PyTorch release". torchao's supported replacement was measured
about 30x slower on this project's CPU (compress/runtime/formats/torch_int8.py, ``tools.studies.torch_int8_probe``),
so the kind stays on the old path; this test is the alarm for the day the path goes away.
"""

from __future__ import annotations

import pytest

WHAT_TO_DO = ("torch {version} no longer has {what}, which the torch-int8 kind (compress/runtime/formats/torch_int8.py, "
              "compress.stages.quantize.torch_dynamic_int8) is built on. Measure torchao's Int8DynamicActivationInt8WeightConfig "
              "again with `python -m tools.studies.torch_int8_probe` and move torch-int8 to it if it is now fast on the "
              "CPUs served; else remove the torch-int8 kind (quantize --method torch-dynamic, optimize's torch-int8 "
              "candidate) and point users to onnx-int8 / openvino-int8. Pin torch below this version meanwhile.")


def _require(obj, name: str, where: str):
    import torch

    if getattr(obj, name, None) is None:
        pytest.fail(WHAT_TO_DO.format(version=torch.__version__, what=f"{where}.{name}"))


def test_the_deprecated_dynamic_int8_api_exists():
    import importlib

    import torch

    for module, names in (("torch.ao.quantization", ("quantize_dynamic", "default_dynamic_qconfig",
                                                     "per_channel_dynamic_qconfig")),
                          ("torch.ao.nn.quantized.dynamic", ("Linear",))):
        try:
            found = importlib.import_module(module)
        except ImportError:
            pytest.fail(WHAT_TO_DO.format(version=torch.__version__, what=module))
        for name in names:
            _require(found, name, module)
    for name in ("_make_per_tensor_quantized_tensor", "_make_per_channel_quantized_tensor", "qint8"):
        _require(torch, name, "torch")


def test_the_deprecated_dynamic_int8_api_still_quantizes_and_rebuilds_weights():
    """What compress.runtime.formats.torch_int8 does with it: quantize Linears, read int8 weights out, put them back."""
    import copy

    import torch
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    from compress.stages.quantize import torch_dynamic_int8

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).eval()
    x = torch.randn(8, 64)
    reference = model(x)
    for per_channel in (False, True):
        q = torch_dynamic_int8(copy.deepcopy(model), per_channel=per_channel)
        assert isinstance(q[0], DynamicLinear) and isinstance(q[2], DynamicLinear)
        out = q(x)
        assert (out - reference).abs().max().item() < 0.05  # INT8 of a random 64-wide MLP: ~1e-2
        weight, bias = q[0]._weight_bias()
        if per_channel:
            rebuilt = torch._make_per_channel_quantized_tensor(weight.int_repr(), weight.q_per_channel_scales(),
                                                               weight.q_per_channel_zero_points(),
                                                               weight.q_per_channel_axis())
        else:
            rebuilt = torch._make_per_tensor_quantized_tensor(weight.int_repr(), weight.q_scale(),
                                                              weight.q_zero_point())
        q[0].set_weight_bias(rebuilt, bias)
        assert torch.equal(q(x), out)


def test_the_probe_runs_and_records_speedups_against_the_deprecated_path(tmp_path, capsys):
    """Smoke test of ``tools.studies.torch_int8_probe`` on a 1-layer model (torchao timed too when importable)."""
    import json

    from tools.studies.torch_int8_probe import main

    out = tmp_path / "probe.json"
    assert main(["--layers", "1", "--hidden", "64", "--seq-len", "8", "--batch-sizes", "1,2", "--threads", "1",
                 "--warmup", "0", "--runs", "3", "--no-compile", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert set(got["batches"]) == {"1", "2"} and got["cpu_model"]
    for row in got["batches"].values():
        assert {"fp32", "torch.ao-dynamic"} <= set(row)
        assert row["torch.ao-dynamic"]["speedup_vs_torch_ao"]["median"] == 1.0
        assert all(v["p50_ms"] > 0 for v in row.values())
    assert "torch.ao quantize_dynamic warnings" in capsys.readouterr().out
