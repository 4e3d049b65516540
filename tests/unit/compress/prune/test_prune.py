"""Structured pruning on tiny BERTs: exact physical removal, reload in both scopes, ONNX export,
Taylor scores, recovery by distillation, and the errors a user can trigger."""

import copy
import json

import numpy as np
import pytest
import torch

from compress.cli import main
from compress.config import DataOptions
from compress.core.errors import CompressError
from compress.runtime.modeling import count_parameters, load_classifier
from compress.stages.prune import (PRUNING_KEY, PruneConfig, layer_parts, prune, prune_model, select_units, structure)
from compress.stages.teacher import TeacherConfig, train_teacher
from compress.stages.training import TrainSettings
from tests.conftest import make_bert, sentiment_rows, train_briefly, write_csv

# make_bert's defaults: 4 layers, hidden 32, 4 heads of 8, FFN 64.
LAYERS, HIDDEN, HEADS, HEAD_SIZE, FFN = 4, 32, 4, 8, 64
TEXTS = ["a wonderful and charming film", "the plot was dull, the acting weak and the story really tedious", "bad"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny 4-layer BERT fine-tuned on the learnable sentiment file, shared by this module."""
    root = tmp_path_factory.mktemp("prune")
    data = write_csv(root / "sentiment.csv", sentiment_rows(240))
    encoder = make_bert(root / "encoder")
    cfg = TeacherConfig(model=str(encoder), data=DataOptions(str(data)),
                        train=TrainSettings(epochs=6, lr=2e-3, batch_size=16, logging_steps=1000))
    return train_teacher(cfg, root / "teacher"), data


@pytest.fixture
def random_classifier(tmp_path):
    model, tokenizer, _ = load_classifier(make_bert(tmp_path / "random", head=True, seed=1))
    return model, tokenizer


def _logits(model, tokenizer, texts=TEXTS):
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    model.eval()
    with torch.no_grad():
        return model(**enc).logits


def _cfg(model, data, **kw):
    kw.setdefault("train", TrainSettings(epochs=0, lr=2e-3, batch_size=16, logging_steps=1000))
    return PruneConfig(model=str(model), data=DataOptions(str(data)), **kw)


def _meta(folder):
    return json.loads((folder / "compress.json").read_text())


def test_select_units_uniform_global_and_floors():
    scores = [np.array([0.1, 0.9, 0.5, 0.3]), np.array([2.0, 3.0, 1.0, 4.0])]
    assert select_units(scores, 0.0) == [[], []]
    assert select_units(scores, 0.5, "uniform") == [[0, 3], [0, 2]]
    assert select_units(scores, 0.3, "uniform") == [[0], [2]]  # nearest whole count: 1.2 -> 1
    # global: the 4 lowest of all 8 units, wherever they are; layer 0's last unit is kept (floor of one)
    assert select_units(scores, 0.5, "global") == [[0, 2, 3], [2]]
    # even at 0.9 every layer keeps one unit
    assert select_units(scores, 0.9, "global") == [[0, 2, 3], [0, 1, 2]]
    with pytest.raises(CompressError, match=r"\[0, 1\)"):
        select_units(scores, 1.0)
    with pytest.raises(CompressError, match="--scope"):
        select_units(scores, 0.5, "per-layer")


def test_ratio_zero_changes_nothing(random_classifier):
    model, tokenizer = random_classifier
    before = _logits(model, tokenizer)
    params = count_parameters(model)
    plan = prune_model(model, heads=0.0, ffn=0.0)
    assert plan.heads == [[]] * LAYERS and plan.ffn == [[]] * LAYERS
    assert count_parameters(model) == params
    assert torch.equal(_logits(model, tokenizer), before)
    assert not hasattr(model.config, PRUNING_KEY)


def test_removal_is_physical_and_equals_masking_the_original(random_classifier):
    model, tokenizer = random_classifier
    original = copy.deepcopy(model)
    params = count_parameters(model)
    plan = prune_model(model, heads=0.5, ffn=0.25, scope="uniform")
    assert structure(model) == {"heads_per_layer": [2] * LAYERS, "intermediate_per_layer": [48] * LAYERS,
                                "attention_head_size": HEAD_SIZE}
    # a head: q, k, v rows (weights + biases) and attention-output columns; a neuron: one row + bias, one column
    per_head = HEAD_SIZE * (3 * (HIDDEN + 1) + HIDDEN)
    per_neuron = 2 * HIDDEN + 1
    assert params - count_parameters(model) == LAYERS * (2 * per_head + 16 * per_neuron)
    for parts in layer_parts(model):
        attention = model.get_submodule(parts.attention)
        assert (attention.num_attention_heads, attention.all_head_size) == (2, 16)
        assert model.get_submodule(parts.attn_out).weight.shape == (HIDDEN, 16)
        assert model.get_submodule(parts.ffn_out).weight.shape == (HIDDEN, 48)
    # Removing a head or neuron is exactly zeroing its output columns in the unpruned model.
    with torch.no_grad():
        for parts, heads, neurons in zip(layer_parts(original), plan.heads, plan.ffn):
            attn_out = original.get_submodule(parts.attn_out).weight
            for h in heads:
                attn_out[:, h * HEAD_SIZE:(h + 1) * HEAD_SIZE] = 0
            original.get_submodule(parts.ffn_out).weight[:, neurons] = 0
    torch.testing.assert_close(_logits(model, tokenizer), _logits(original, tokenizer), atol=1e-5, rtol=0)
    # hidden width, embeddings, LayerNorms, pooler and classifier are untouched
    assert model.bert.embeddings.word_embeddings.weight.shape == (30522, HIDDEN)
    assert model.classifier.weight.shape == (2, HIDDEN)


def test_uniform_heads_reload_through_compress_and_export_with_parity(trained, tmp_path):
    from transformers import AutoModelForSequenceClassification

    from compress.stages.export import export_onnx
    from compress.stages.quantize import quantize
    from compress.runtime.predictor import Predictor

    teacher, data = trained
    out = prune(_cfg(teacher, data, heads=0.5, ffn=0.5), tmp_path / "pruned")
    meta = _meta(out)
    pruning = meta["pruning"]
    assert meta["stage"] == "prune" and meta["loader"] == pruning["loader"] == "compress"
    assert pruning["heads"]["before"] == [HEADS] * LAYERS and pruning["heads"]["after"] == [2] * LAYERS
    assert pruning["ffn"]["after"] == [32] * LAYERS and pruning["ffn"]["total_before"] == LAYERS * FFN
    assert pruning["parameters"]["after"] < pruning["parameters"]["before"]
    assert pruning["file_size_bytes"]["after"] < pruning["file_size_bytes"]["before"]
    assert set(pruning["accuracy"]) == {"before", "after_prune", "after_recovery"}
    assert pruning["accuracy"]["after_recovery"] is None
    config = json.loads((out / "config.json").read_text())
    assert config[PRUNING_KEY]["heads_per_layer"] == [2] * LAYERS
    # transformers cannot express fewer heads of the same size: plain from_pretrained refuses loudly
    with pytest.raises(Exception, match="mismatch"):
        AutoModelForSequenceClassification.from_pretrained(out)
    model, tokenizer, has_head = load_classifier(out)
    assert has_head and structure(model)["heads_per_layer"] == [2] * LAYERS
    assert count_parameters(model) == meta["parameters"]
    torch_predictor = Predictor.load(out)
    np.testing.assert_allclose(torch_predictor.logits(TEXTS), _logits(model, tokenizer).numpy(), atol=1e-5)

    onnx_dir = export_onnx(out, tmp_path / "onnx")
    onnx_meta = _meta(onnx_dir)
    assert onnx_meta["parity"]["max_abs_diff"] <= 1e-4
    assert onnx_meta["onnx"]["heads_per_layer"] == [2] * LAYERS
    np.testing.assert_allclose(Predictor.load(onnx_dir).logits(TEXTS), torch_predictor.logits(TEXTS), atol=1e-4)
    # and it quantizes like any other artifact (ONNX Runtime INT8, exported on the way)
    int8 = quantize(out, tmp_path / "int8", method="ort-dynamic", data=DataOptions(str(data)))
    q = _meta(int8)["quantization"]
    assert q["accuracy_int8"] >= q["accuracy_fp32"] - 0.05 and q["size_bytes_int8"] < q["size_bytes_fp32"]


def test_ffn_only_uniform_reloads_with_plain_from_pretrained(trained, tmp_path):
    from transformers import AutoModelForSequenceClassification

    teacher, data = trained
    out = prune(_cfg(teacher, data, ffn=0.25), tmp_path / "ffn")
    assert _meta(out)["loader"] == "transformers"
    config = json.loads((out / "config.json").read_text())
    assert config["intermediate_size"] == 48 and PRUNING_KEY not in config
    plain = AutoModelForSequenceClassification.from_pretrained(out)
    ours, tokenizer, _ = load_classifier(out)
    assert structure(plain)["intermediate_per_layer"] == [48] * LAYERS
    torch.testing.assert_close(_logits(plain, tokenizer), _logits(ours, tokenizer))


def test_global_scope_lets_layers_differ_and_reloads(trained, tmp_path):
    teacher, data = trained
    out = prune(_cfg(teacher, data, heads=0.5, ffn=0.5, scope="global"), tmp_path / "global")
    pruning = _meta(out)["pruning"]
    heads, ffn = pruning["heads"]["after"], pruning["ffn"]["after"]
    assert sum(heads) == LAYERS * HEADS // 2 and min(heads) >= 1
    assert sum(ffn) == LAYERS * FFN // 2 and min(ffn) >= 1
    assert pruning["loader"] == "compress" and pruning["scope"] == "global"
    # the saved model is exactly what pruning produced in memory (magnitude scores are deterministic)
    reloaded, tokenizer, _ = load_classifier(out)
    fresh, _, _ = load_classifier(teacher)
    prune_model(fresh, heads=0.5, ffn=0.5, scope="global")
    assert structure(reloaded) == structure(fresh)
    torch.testing.assert_close(_logits(reloaded, tokenizer), _logits(fresh, tokenizer), atol=1e-6, rtol=0)
    removed = (LAYERS * HEADS // 2) * HEAD_SIZE * (4 * HIDDEN + 3) + (LAYERS * FFN // 2) * (2 * HIDDEN + 1)
    assert pruning["parameters"]["before"] - pruning["parameters"]["after"] == removed
    assert pruning["parameters"]["encoder_before"] - pruning["parameters"]["encoder_after"] == removed


def test_a_pruned_model_can_seed_a_shallower_student(trained, tmp_path):
    from compress.stages.distill.trainer import DistillConfig, distill
    from students.factory import StudentSpec

    teacher, data = trained
    pruned = prune(_cfg(teacher, data, heads=0.5, scope="global"), tmp_path / "pruned")
    heads = _meta(pruned)["pruning"]["heads"]["after"]
    cfg = DistillConfig(teacher=str(teacher), data=DataOptions(str(data)),
                        student=StudentSpec("2x32", f"pretrained:{pruned}"),
                        train=TrainSettings(epochs=1, lr=2e-3, batch_size=16, logging_steps=1000))
    student = distill(cfg, tmp_path / "student")
    assert _meta(student)["student"]["kept_pretrained_layers"] == [1, 3]
    model, _, _ = load_classifier(student)  # the recorded per-layer shapes followed the kept layers
    assert structure(model)["heads_per_layer"] == [heads[1], heads[3]]


def test_taylor_importance_uses_task_gradients(trained, tmp_path):
    teacher, data = trained
    out = prune(_cfg(teacher, data, heads=0.25, ffn=0.25, importance="taylor", importance_batches=2),
                tmp_path / "taylor")
    pruning = _meta(out)["pruning"]
    assert pruning["importance"] == "taylor" and pruning["importance_examples"] == 32
    assert pruning["heads"]["after"] == [3] * LAYERS and pruning["ffn"]["after"] == [48] * LAYERS
    model, tokenizer, _ = load_classifier(out)
    assert all(p.grad is None for p in model.parameters())
    with pytest.raises(CompressError, match="taylor needs batches"):
        prune_model(model, heads=0.25, importance="taylor")


def test_recovery_distils_back_and_is_recorded(trained, tmp_path):
    from compress.runtime.predictor import Predictor

    teacher, data = trained
    train = TrainSettings(epochs=0, lr=2e-3, batch_size=16, logging_steps=1000)
    out = prune(_cfg(teacher, data, heads=0.75, ffn=0.75, recover_epochs=3, train=train), tmp_path / "recovered")
    meta = _meta(out)
    acc = meta["pruning"]["accuracy"]
    assert acc["after_recovery"] is not None
    for split in ("validation", "test"):
        assert acc["after_recovery"][split] >= acc["after_prune"][split]
    assert acc["after_recovery"]["test"] >= 0.85
    recovery = meta["pruning"]["recovery"]
    assert recovery["epochs"] == 3 and recovery["training"]["global_steps"] > 0
    assert recovery["teacher"] == str(teacher.resolve())
    assert meta["metrics"]["test"]["accuracy"] == acc["after_recovery"]["test"]
    assert meta["pruning"]["heads"]["after"] == [1] * LAYERS and meta["pruning"]["ffn"]["after"] == [16] * LAYERS
    assert Predictor.load(out).predict(["a wonderful and charming film", "a boring and tedious film"])[0] == ["1", "0"]
    assert not any(p.name.startswith((".recovered", ".pruned")) for p in tmp_path.iterdir())


def test_recovery_from_another_teacher_repairs_a_weak_model(trained, tmp_path):
    # The tiny teacher above loses nothing to pruning (one word decides the label), so to see
    # recovery repair damage, prune an untrained classifier and recover it from the trained teacher.
    teacher, data = trained
    weak = make_bert(tmp_path / "weak", head=True, seed=2)
    train = TrainSettings(epochs=0, lr=2e-3, batch_size=16, logging_steps=1000)
    out = prune(_cfg(weak, data, heads=0.5, ffn=0.5, recover_epochs=6, teacher=str(teacher), train=train),
                tmp_path / "repaired")
    pruning = _meta(out)["pruning"]
    acc = pruning["accuracy"]
    assert acc["after_recovery"]["test"] >= 0.85 and acc["after_recovery"]["test"] >= acc["after_prune"]["test"] + 0.2
    assert pruning["recovery"]["teacher"] == str(teacher.resolve())
    kl = {stage: pruning["metrics"][stage]["test"]["kl_to_unpruned"] for stage in ("after_prune", "after_recovery")}
    # the recovered model learnt what the unpruned (untrained) one never knew: it moved far from it
    assert kl["after_recovery"] > 0.05 and kl["after_recovery"] > 10 * kl["after_prune"], kl


def test_bad_settings_are_refused_with_the_flag_named(trained, tmp_path, capsys):
    teacher, data = trained
    for kw, flag in (({"heads": 1.0}, "--heads"), ({"heads": -0.1}, "--heads"), ({"ffn": 1.5}, "--ffn"),
                     ({"importance": "random"}, "--importance"), ({"scope": "layer"}, "--scope"),
                     ({"teacher": str(teacher)}, "--teacher is used only for recovery")):
        with pytest.raises(CompressError, match=flag):
            prune(_cfg(teacher, data, **kw), tmp_path / "x")
    model, _, _ = load_classifier(teacher)
    with pytest.raises(CompressError, match=r"--ffn must be a share in \[0, 1\)"):
        prune_model(model, ffn=1.0)
    rc = main(["prune", "--model", str(teacher), "--data", str(data), "--heads", "1", "--out", str(tmp_path / "x")])
    assert rc == 2 and "--heads must be a share in [0, 1)" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    encoder = make_bert(tmp_path / "encoder")
    with pytest.raises(CompressError, match="no trained classification head"):
        prune(_cfg(encoder, data, heads=0.5), tmp_path / "x")


def test_cli_prunes(trained, tmp_path, capsys):
    teacher, data = trained
    rc = main(["prune", "--model", str(teacher), "--data", str(data), "--heads", "0.5", "--scope", "global",
               "--out", str(tmp_path / "cli")])
    assert rc == 0
    assert "pruned artifact:" in capsys.readouterr().out
    assert sum(_meta(tmp_path / "cli")["pruning"]["heads"]["after"]) == LAYERS * HEADS // 2


def test_removing_only_dead_units_leaves_the_predictions_unchanged(tmp_path):
    """The stage end to end on a trained classifier whose dead units (zero weights in and out) are planted:
    Taylor pruning removes exactly them, so the pruned model's logits equal the unpruned ones (KL to
    the unpruned model 0, same accuracy); pruning working units as well moves them measurably."""
    data = write_csv(tmp_path / "sentiment.csv", sentiment_rows(240))
    model, tokenizer, _ = load_classifier(train_briefly(make_bert(tmp_path / "trained", layers=2, head=True), steps=40))
    dead_heads, dead_ffn = [[3], [0]], [list(range(0, 64, 4)), list(range(48, 64))]
    with torch.no_grad():
        for parts, heads, neurons in zip(layer_parts(model), dead_heads, dead_ffn):
            for h in heads:
                rows = slice(h * HEAD_SIZE, (h + 1) * HEAD_SIZE)
                for name in (parts.query, parts.key, parts.value):
                    model.get_submodule(name).weight[rows] = 0.0
                    model.get_submodule(name).bias[rows] = 0.0
                model.get_submodule(parts.attn_out).weight[:, rows] = 0.0
            model.get_submodule(parts.ffn_in).weight[neurons] = 0.0
            model.get_submodule(parts.ffn_in).bias[neurons] = 0.0
            model.get_submodule(parts.ffn_out).weight[:, neurons] = 0.0
    planted = tmp_path / "planted"
    model.save_pretrained(planted, safe_serialization=True)
    tokenizer.save_pretrained(planted)

    def run(name, heads, ffn):
        out = prune(PruneConfig(model=str(planted), data=DataOptions(str(data)), heads=heads, ffn=ffn,
                                importance="taylor", importance_batches=2,
                                train=TrainSettings(epochs=0, batch_size=16)), tmp_path / name)
        return json.loads((out / "compress.json").read_text())["pruning"]

    clean = run("clean", 0.25, 0.25)
    damaged = run("damaged", 0.75, 0.75)  # three of four heads and most neurons: working ones go too
    assert clean["heads"]["removed"] == {"0": [3], "1": [0]}
    assert clean["ffn"]["after"] == [48, 48]
    reloaded, _, _ = load_classifier(tmp_path / "clean")
    assert structure(reloaded)["heads_per_layer"] == [3, 3]
    for split in ("validation", "test"):
        kl = {name: p["metrics"]["after_prune"][split]["kl_to_unpruned"] for name, p in (("clean", clean),
                                                                                          ("damaged", damaged))}
        # Removing dead units changes the logits by float rounding only (measured about 1e-15); removing
        # working ones moves them (by little: in a model this small the residual stream carries most of
        # the signal; measured about 6e-7 on test).
        assert kl["clean"] < 1e-10 and kl["damaged"] > 1e-8, kl
        assert clean["metrics"]["after_prune"][split]["agreement"] == 1.0
        assert clean["accuracy"]["after_prune"][split] == clean["accuracy"]["before"][split]
