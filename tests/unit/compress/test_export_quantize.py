"""ONNX export, INT8 quantization and the one runtime, on tiny BERTs built here (no downloads).

The model is trained for a few seconds on the learnable sentiment rows so that its logits have
real margins: on a random model every input gets nearly the same logits, and an INT8/fp32
agreement rate measured on it would say nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from compress.core.artifact import read_meta
from compress.config import DataOptions
from compress.core.errors import CompressError
from compress.stages.export import PARITY_ATOL, export_model, export_onnx
from compress.runtime.formats.torch_int8 import load_torch_int8
from compress.stages.quantize import (candidate_plan, quantize, sensitive_onnx_nodes,
                               sensitive_torch_modules, torch_dynamic_int8)
from compress.runtime.predictor import TORCH_INT8_FILE, Predictor, artifact_kind
from tests.conftest import make_bert, sentiment_rows, train_briefly, write_csv

LAYERS = 4
TEXTS = [r["text"] for r in sentiment_rows(200, seed=7)]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("export-quantize")


@pytest.fixture(scope="module")
def trained(work) -> Path:
    return train_briefly(make_bert(work / "bert", layers=LAYERS, head=True), steps=60, seed=0)


@pytest.fixture(scope="module")
def exported(trained, work) -> Path:
    return export_onnx(trained, work / "onnx")


@pytest.fixture(scope="module")
def ort_int8(exported, work) -> Path:
    return quantize(exported, work / "onnx-int8")


@pytest.fixture(scope="module")
def torch_int8(trained, work) -> Path:
    return quantize(trained, work / "torch-int8", method="torch-dynamic")


@pytest.fixture(scope="module")
def data_csv(work) -> Path:
    return write_csv(work / "sentiment.csv", sentiment_rows(240, seed=3))


def test_trained_model_is_decisive(trained):
    """Guard for the agreement tests below: the fp32 model really separates the classes."""
    predictor = Predictor.load(trained)
    labels, probs = predictor.predict(TEXTS)
    truth = [r["label"] for r in sentiment_rows(200, seed=7)]
    accuracy = np.mean([predictor.label_names.index(lab) == t for lab, t in zip(labels, truth)])
    assert accuracy > 0.8
    assert np.abs(probs[:, 0] - 0.5).mean() > 0.1


# ----------------------------------------------------------------------------- export


def test_export_fuses_every_layer_and_matches_pytorch(exported, trained):
    meta = read_meta(exported)
    assert meta["kind"] == "onnx-fp32" and meta["stage"] == "export"
    assert meta["parent"]["path"] == str(trained.resolve()) and len(meta["parent"]["weights_sha256"]) == 64
    assert (exported / "model.onnx").exists() and (exported / "config.json").exists()
    assert (exported / "tokenizer.json").exists() or (exported / "vocab.txt").exists()

    fused = meta["onnx"]["fused_ops"]
    assert meta["onnx"]["optimized"] is True and meta["onnx"]["opset"] == 17
    assert fused["Attention"] == LAYERS, fused
    assert fused["EmbedLayerNormalization"] == 1
    assert fused["SkipLayerNormalization"] == 2 * LAYERS
    assert fused["BiasGelu"] + fused["FastGelu"] + fused["Gelu"] == LAYERS
    assert meta["onnx"]["attention_fused_per_layer"] is True

    assert meta["parity"]["atol"] == PARITY_ATOL
    assert meta["parity"]["max_abs_diff"] <= PARITY_ATOL
    assert max(meta["parity"]["batch_sizes"]) > 1

    # Independent of the export's own check: 200 texts, batches of mixed lengths, through the runtime.
    onnx_logits = Predictor.load(exported).logits(TEXTS, batch_size=16)
    torch_logits = Predictor.load(trained).logits(TEXTS, batch_size=16)
    assert np.abs(onnx_logits - torch_logits).max() <= PARITY_ATOL


def test_export_without_optimization_records_no_fusions(trained, work, capsys):
    path = export_onnx(trained, work / "onnx-plain", optimize=False)
    meta = read_meta(path)
    assert meta["onnx"]["optimized"] is False
    assert meta["onnx"]["fused_ops"]["Attention"] == 0
    assert meta["parity"]["max_abs_diff"] <= PARITY_ATOL
    assert "unfused" in capsys.readouterr().out


def _prune_heads(model, heads: dict[int, list[int]]) -> None:
    """Physically remove attention heads (what model.prune_heads did before transformers 5 dropped it)."""
    import torch
    from transformers.pytorch_utils import prune_linear_layer

    for layer, drop in heads.items():
        attention = model.bert.encoder.layer[layer].attention
        self_att = attention.self
        size = self_att.attention_head_size
        keep = torch.tensor([i for h in range(self_att.num_attention_heads) if h not in drop
                             for i in range(h * size, (h + 1) * size)])
        self_att.query = prune_linear_layer(self_att.query, keep)
        self_att.key = prune_linear_layer(self_att.key, keep)
        self_att.value = prune_linear_layer(self_att.value, keep)
        attention.output.dense = prune_linear_layer(attention.output.dense, keep, dim=1)
        self_att.num_attention_heads -= len(drop)
        self_att.all_head_size = self_att.num_attention_heads * size


@pytest.mark.parametrize("heads, fused", [
    ({0: [0], 1: [1, 2]}, 0),                    # per-layer head counts differ: exported unfused
    ({0: [0], 1: [1], 2: [2], 3: [3]}, LAYERS),  # 3 heads in every layer: fused with the real count
])
def test_model_with_pruned_heads_exports_with_parity(trained, work, heads, fused, capsys):
    import torch

    from compress.stages.export import attention_heads_per_layer
    from compress.runtime.modeling import load_classifier

    model, tokenizer, _ = load_classifier(trained, eager_attention=True)
    assert not hasattr(model, "prune_heads")  # transformers 5 dropped it: hence the physical pruning above
    _prune_heads(model, heads)
    expected_heads = [4 - len(heads.get(i, [])) for i in range(LAYERS)]
    assert [h for h, _ in attention_heads_per_layer(model)] == expected_heads
    out = work / f"onnx-pruned-{fused}"
    path = export_model(model, tokenizer, out, parent={"path": str(trained), "pruned_heads": heads})
    meta = read_meta(path)
    assert meta["parity"]["max_abs_diff"] <= PARITY_ATOL
    assert meta["onnx"]["heads_per_layer"] == expected_heads
    assert meta["onnx"]["fused_ops"]["Attention"] == fused
    if not fused:
        assert "heads per layer differ" in capsys.readouterr().err

    predictor = Predictor.load(path)
    ids = predictor.tokenizer(TEXTS[:40], padding=True, return_tensors="pt")
    with torch.inference_mode():
        expected = model(**ids).logits.numpy()
    assert np.abs(predictor.logits(TEXTS[:40]) - expected).max() <= PARITY_ATOL


def test_export_refuses_what_it_cannot_export(torch_int8, exported, work):
    with pytest.raises(CompressError, match="pytorch #123555"):
        export_onnx(torch_int8, work / "never")
    with pytest.raises(CompressError, match="already an ONNX artifact"):
        export_onnx(exported, work / "never")
    encoder = make_bert(work / "encoder-only", layers=2)
    with pytest.raises(CompressError, match="no trained classification head"):
        export_onnx(encoder, work / "never")
    assert not (work / "never").exists()


# ----------------------------------------------------------------------------- quantization


def test_ort_int8_is_small_and_agrees_with_fp32(ort_int8, exported):
    meta = read_meta(ort_int8)
    assert meta["kind"] == "onnx-int8" and artifact_kind(ort_int8) == "onnx-int8"
    assert meta["parent"]["path"] == str(exported.resolve())
    q = meta["quantization"]
    assert q["size_ratio"] <= 0.30, q  # the embedding table is quantized too
    assert (ort_int8 / "model.onnx").stat().st_size <= 0.30 * (exported / "model.onnx").stat().st_size
    assert meta["onnx"]["int8_ops"].get("QAttention") == LAYERS
    assert meta["onnx"]["int8_ops"].get("QEmbedLayerNormalization") == 1
    assert q["within_budget"] is None and len(q["candidates"]) == 1  # no data: no accuracy claim

    fp32 = Predictor.load(exported).logits(TEXTS)
    int8 = Predictor.load(ort_int8).logits(TEXTS)
    agreement = float((fp32.argmax(-1) == int8.argmax(-1)).mean())
    assert agreement >= 0.9, agreement


def test_quantize_from_pytorch_exports_on_the_fly(trained, work):
    path = quantize(trained, work / "onnx-int8-direct")
    meta = read_meta(path)
    assert meta["kind"] == "onnx-int8"
    assert meta["parent"]["kind"] == "pytorch" and meta["parent"]["path"] == str(trained.resolve())
    assert meta["export"]["onnx"]["fused_ops"]["Attention"] == LAYERS
    assert meta["export"]["parity"]["max_abs_diff"] <= PARITY_ATOL
    assert not [p for p in work.iterdir() if ".quantize-" in p.name]  # the temporary export is gone


def test_torch_int8_reloads_without_pickle(torch_int8, trained):
    import torch
    from safetensors import safe_open

    from compress.runtime.modeling import load_classifier

    files = sorted(p.name for p in torch_int8.iterdir())
    assert TORCH_INT8_FILE in files
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl"))]
    with safe_open(str(torch_int8 / TORCH_INT8_FILE), framework="pt") as handle:
        header = handle.metadata()
        assert handle.get_tensor("classifier.weight.int8").dtype == torch.int8
    assert header["format"] == "bert-compress-torch-int8"

    reloaded = load_torch_int8(torch_int8)
    dynamic = torch.ao.nn.quantized.dynamic.Linear
    quantized = [n for n, m in reloaded.named_modules() if isinstance(m, dynamic)]
    assert len(quantized) == 6 * LAYERS + 2  # q k v o, ffn in/out per layer; pooler; classifier

    fp32, tokenizer, _ = load_classifier(trained)
    in_memory = torch_dynamic_int8(fp32)
    enc = tokenizer(TEXTS[:50], padding=True, return_tensors="pt")
    with torch.inference_mode():
        assert torch.equal(reloaded(**enc).logits, in_memory(**enc).logits)

    meta = read_meta(torch_int8)
    assert meta["kind"] == "torch-int8"
    assert meta["quantization"]["size_ratio"] < 1.0
    agreement = (Predictor.load(torch_int8).logits(TEXTS).argmax(-1) == Predictor.load(trained).logits(TEXTS).argmax(-1))
    assert agreement.mean() >= 0.9


def test_quantizing_a_quantized_artifact_is_refused(ort_int8, torch_int8, work):
    for folder in (ort_int8, torch_int8):
        for method in ("ort-dynamic", "torch-dynamic"):
            with pytest.raises(CompressError, match="already quantized"):
                quantize(folder, work / "twice", method=method)
    assert not (work / "twice").exists()


def test_method_and_option_errors(exported, trained, work):
    with pytest.raises(CompressError, match="torch-dynamic needs the PyTorch fp32 folder"):
        quantize(exported, work / "bad", method="torch-dynamic")
    with pytest.raises(CompressError, match="--method"):
        quantize(trained, work / "bad", method="static")
    with pytest.raises(CompressError, match="--reduce-range"):
        quantize(trained, work / "bad", method="torch-dynamic", reduce_range=True)
    with pytest.raises(CompressError, match="does not exist"):
        quantize(work / "missing", work / "bad")
    with pytest.raises(CompressError, match="the --model folder itself"):
        quantize(exported, exported)
    with pytest.raises(CompressError, match="the --model folder itself"):
        export_onnx(trained, trained)
    with pytest.raises(CompressError, match="--opset 12 is too old"):
        export_onnx(trained, work / "bad", opset=12)
    assert not (work / "bad").exists()


def test_accuracy_budget_fallbacks_keep_the_best_candidate(exported, data_csv, work, capsys):
    # A negative budget can never be met: every fallback runs, and the best is still written.
    path = quantize(exported, work / "int8-fallback", data=DataOptions(str(data_csv)), max_accuracy_drop=-1.0)
    q = read_meta(path)["quantization"]
    names = [c["name"] for c in q["candidates"]]
    assert names == [s.name for s in candidate_plan("ort-dynamic")]
    assert len(names) == 4 and names[-1].endswith("sensitive-fp32")
    assert q["candidates"][-1]["size_bytes"] > q["candidates"][1]["size_bytes"]  # those layers really stayed fp32
    assert q["within_budget"] is False
    assert all(c["within_budget"] is False and 0 <= c["accuracy"] <= 1 for c in q["candidates"])
    best = max(c["accuracy"] for c in q["candidates"])
    chosen = next(c for c in q["candidates"] if c["name"] == q["chosen"])
    assert chosen["accuracy"] == best == q["accuracy_int8"]
    assert q["accuracy_fp32"] > 0.8 and q["accuracy_drop"] == pytest.approx(q["accuracy_fp32"] - best, abs=1e-6)
    excluded = q["candidates"][-1]["excluded"]
    assert any("classifier" in n for n in excluded) and any("layer.3/" in n for n in excluded)
    assert read_meta(path)["metrics"]["validation"]["accuracy"] == best
    assert Predictor.load(path).predict(TEXTS[:3])[1].shape == (3, 2)
    # the warning and the report name the kept candidate's own failed checks, which compress.json records
    assert q["failed_checks"] == chosen["failed_checks"] == [f"accuracy drop {q['accuracy_drop']:.4f} > budget -1"]
    captured = capsys.readouterr()
    assert (f"no candidate passed the checks on validation; kept the best one on accuracy ({q['chosen']}, drop "
            f"{q['accuracy_drop']:.4f}: accuracy drop {q['accuracy_drop']:.4f} > budget -1)") in captured.err
    assert f"failed: accuracy drop {q['accuracy_drop']:.4f} > budget -1)" in captured.out

    # A generous budget stops at the first candidate.
    path = quantize(exported, work / "int8-budget", data=DataOptions(str(data_csv)), max_accuracy_drop=1.0)
    q = read_meta(path)["quantization"]
    assert len(q["candidates"]) == 1 and q["within_budget"] is True and q["failed_checks"] == []


def test_torch_fallbacks_keep_fp32_sensitive_layers(trained, data_csv, work):
    import torch

    path = quantize(trained, work / "torch-fallback", method="torch-dynamic", data=DataOptions(str(data_csv)),
                    max_accuracy_drop=-1.0)
    q = read_meta(path)["quantization"]
    assert [c["name"] for c in q["candidates"]] == [s.name for s in candidate_plan("torch-dynamic")]
    assert q["within_budget"] is False and q["chosen"] in [c["name"] for c in q["candidates"]]
    # The last candidate (sensitive layers fp32) also reloads: mixed fp32/int8 Linears.
    model = load_torch_int8(path)
    excluded = q["candidates"][-1]["excluded"]
    assert "classifier" in excluded and any(".layer.3." in n for n in excluded)
    if q["chosen"].endswith("sensitive-fp32"):
        assert isinstance(model.classifier, torch.nn.Linear)


def test_sensitive_node_selection(exported, trained):
    from compress.runtime.modeling import load_classifier

    nodes = sensitive_onnx_nodes(exported / "model.onnx", LAYERS)
    assert "Attention_3" in nodes or any(n.startswith("Attention") for n in nodes)
    assert not any("layer.2/" in n for n in nodes)
    assert any("classifier" in n for n in nodes)
    model, _, _ = load_classifier(trained)
    modules = sensitive_torch_modules(model)
    assert set(modules) >= {"classifier", "bert.pooler.dense"}
    assert all(".layer.3." in m or m in ("classifier", "bert.pooler.dense") for m in modules)


# ----------------------------------------------------------------------------- runtime


def test_every_artifact_kind_runs_in_the_predictor(trained, exported, ort_int8, torch_int8):
    import torch

    texts = TEXTS[:23] + ["word " * 400]  # one text far over max_length: truncated, not a crash
    results = {}
    threads = torch.get_num_threads()
    try:
        for folder in (trained, exported, ort_int8, torch_int8):
            predictor = Predictor.load(folder, threads=1)
            labels, probs = predictor.predict(texts, batch_size=5)
            assert probs.shape == (len(texts), 2) and len(labels) == len(texts)
            assert np.allclose(probs.sum(-1), 1.0, atol=1e-5)
            assert predictor.size_bytes > 0 and predictor.max_length == 128
            assert set(labels) <= set(predictor.label_names)
            results[predictor.kind] = probs
    finally:
        torch.set_num_threads(threads)  # PyTorch's thread count is process-wide: leave it as found
    assert set(results) == {"pytorch", "onnx-fp32", "onnx-int8", "torch-int8"}
    assert Predictor.load(trained).num_parameters == Predictor.load(exported).num_parameters


def test_predictor_restores_order_and_handles_pairs(exported):
    predictor = Predictor.load(exported)
    batched = predictor.logits(TEXTS[:17], batch_size=4)  # sorted by length inside
    one_by_one = np.concatenate([predictor.logits([t]) for t in TEXTS[:17]])
    assert np.abs(batched - one_by_one).max() <= 1e-4
    assert predictor.logits("just one text").shape == (1, 2)
    pairs = [("a good film", "i liked it"), ("dull", "the plot was weak and boring")]
    assert predictor.logits(pairs).shape == (2, 2)
    assert predictor.logits([]).shape == (0, 2)
    with pytest.raises(CompressError, match="mix"):
        predictor.logits(["text", ("a", "b")])
    with pytest.raises(CompressError, match="does not exist"):
        Predictor.load(Path("/nonexistent/model"))


# ----------------------------------------------------------------------------- command line


def test_cli_export_quantize_predict(trained, work, capsys):
    from compress.cli import main

    assert main(["export", "--model", str(trained), "--out", str(work / "cli-onnx")]) == 0
    assert main(["quantize", "--model", str(work / "cli-onnx"), "--out", str(work / "cli-int8")]) == 0
    capsys.readouterr()
    assert main(["predict", "--model", str(work / "cli-int8"), "--threads", "1", "a wonderful film", "dull"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and lines[0].endswith("a wonderful film") and "LABEL_0=" in lines[0]
    assert main(["quantize", "--model", str(work / "cli-int8"), "--out", str(work / "cli-twice")]) == 2
    assert "already quantized" in capsys.readouterr().err
    meta = json.loads((work / "cli-int8" / "compress.json").read_text())
    assert meta["parent"]["path"] == str((work / "cli-onnx").resolve())
