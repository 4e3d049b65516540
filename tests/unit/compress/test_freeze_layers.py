"""``--freeze-layers``: the teacher's bottom layers stay fixed and the backward pass stops above them.

Each model kind keeps its layers elsewhere (BERT and MPNet in ``encoder.layer``, DistilBERT in
``transformer.layer``) and MPNet shares one relative position bias across all of them, so each is
checked on a tiny model built here: what is frozen, that one backward pass reaches exactly the
trainable weights, and that the teacher stage leaves the frozen weights bit-identical.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from compress.core.errors import CompressError
from compress.stages.training import freeze_bottom_layers


def _tagger(kind: str, layers: int = 3):
    from transformers import (BertConfig, BertForTokenClassification, DistilBertConfig,
                              DistilBertForTokenClassification, MPNetConfig, MPNetForTokenClassification)

    torch.manual_seed(0)
    small = dict(vocab_size=120, hidden_size=16, num_attention_heads=2, intermediate_size=32, num_labels=3)
    if kind == "bert":
        return BertForTokenClassification(BertConfig(num_hidden_layers=layers, max_position_embeddings=32, **small))
    if kind == "mpnet":
        return MPNetForTokenClassification(MPNetConfig(num_hidden_layers=layers, max_position_embeddings=34, **small))
    return DistilBertForTokenClassification(DistilBertConfig(
        vocab_size=120, dim=16, n_layers=layers, n_heads=2, hidden_dim=32, max_position_embeddings=32, num_labels=3))


def _layers(model):
    base = model.base_model
    return (base.encoder if hasattr(base, "encoder") else base.transformer).layer


def _backward(model) -> None:
    ids = torch.randint(5, 120, (2, 7))
    labels = torch.randint(0, 3, (2, 7))
    model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss.backward()


@pytest.mark.parametrize("kind", ["bert", "mpnet", "distilbert"])
def test_the_bottom_layers_get_no_gradient_and_the_rest_do(kind):
    model = _tagger(kind)
    log = freeze_bottom_layers(model, 2)
    layers = _layers(model)
    fixed = [*model.base_model.embeddings.parameters(), *layers[0].parameters(), *layers[1].parameters()]
    if kind == "mpnet":  # the position bias every layer reads: trainable, it would pull the backward through all
        fixed.append(model.base_model.encoder.relative_attention_bias.weight)
    trained = [*layers[2].parameters(), *model.classifier.parameters()]
    assert all(not p.requires_grad for p in fixed) and all(p.requires_grad for p in trained)
    assert log == {"freeze_layers": 2, "trainable_parameters": sum(p.numel() for p in model.parameters()
                                                                   if p.requires_grad)}
    _backward(model)
    assert all(p.grad is None for p in fixed)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in layers[2].parameters()
               if p.dim() > 1)  # weight matrices; a LayerNorm bias can legitimately get a zero gradient


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")  # layer 2: its input needs no gradient
def test_the_backward_pass_stops_above_the_frozen_layers():
    """No gradient is computed for the frozen layers' inputs either: their activations need none."""
    model = _tagger("bert")
    freeze_bottom_layers(model, 2)
    seen = []
    for i, layer in enumerate(_layers(model)):
        layer.register_full_backward_hook(lambda module, grad_in, grad_out, i=i: seen.append(i))
    _backward(model)
    assert seen == [2]


def test_zero_freezes_nothing_and_records_nothing():
    model = _tagger("bert")
    assert freeze_bottom_layers(model, 0) == {}
    assert all(p.requires_grad for p in model.parameters())


def test_every_layer_frozen_trains_the_head_alone():
    model = _tagger("bert", layers=2)
    freeze_bottom_layers(model, 2)
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    assert names == {"classifier.weight", "classifier.bias"}


def test_more_layers_than_the_model_has_is_one_clear_line():
    with pytest.raises(CompressError, match=r"--freeze-layers 4: the model has 3 encoder layers; give at most 3"):
        freeze_bottom_layers(_tagger("bert"), 4)


def test_a_negative_count_is_refused_by_the_config():
    from compress.config import ConfigError, TeacherConfig

    with pytest.raises(ConfigError, match="--freeze-layers must be 0 or more, got -1"):
        TeacherConfig.from_dict({"model": "m", "data": {"data": "d.csv"}, "freeze_layers": -1})


def test_the_flag_reaches_the_teacher_config():
    from compress.cli import build_parser, stage_config

    args = build_parser().parse_args(["teacher", "--model", "m", "--data", "d.csv", "--out", "o",
                                      "--freeze-layers", "3"])
    assert stage_config("teacher", args).freeze_layers == 3


def test_the_teacher_stage_keeps_frozen_weights_bit_identical(tmp_path):
    from safetensors.torch import load_file

    from compress.stages.teacher import train_teacher
    from tests.conftest import make_bert
    from tests.support.toy_ner import teacher_config, toy_sentences, write_conll

    data = write_conll(tmp_path / "toy.conll", toy_sentences(48))
    encoder = make_bert(tmp_path / "encoder", layers=2, hidden=32, heads=4, ffn=64)
    cfg = dataclasses.replace(teacher_config(encoder, data, epochs=1.0), freeze_layers=1)
    out = train_teacher(cfg, tmp_path / "teacher")
    before, after = load_file(encoder / "model.safetensors"), load_file(out / "model.safetensors")
    prefix = "bert."  # the tagger's keys; the saved encoder's have none
    fixed = [k for k in before if k.startswith(("embeddings.", "encoder.layer.0."))]
    moved = [k for k in before if k.startswith("encoder.layer.1.") and k.endswith("weight")]
    assert fixed and moved
    assert all(torch.equal(before[k], after[prefix + k]) for k in fixed)
    assert all(not torch.equal(before[k], after[prefix + k]) for k in moved)
    training = json.loads((out / "compress.json").read_text())["training"]
    assert training["freeze_layers"] == 1 and 0 < training["trainable_parameters"]
