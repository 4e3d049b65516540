"""Pruning removes the units that matter least, for each criterion and scope, on tiny BERTs with
planted heads and FFN neurons whose importance is known by construction.

Three kinds of unit are planted in a random 4-layer BERT (4 heads of 8, FFN 64):

- *faint*: every weight of the unit (query/key/value rows and attention-output columns of a head;
  the intermediate row and output column of a neuron) scaled by 0.05. It still works, but its
  weights are tiny: ``magnitude`` must rank it lowest.
- *decoy*: large input weights (x4) whose output weights are zero, so it contributes nothing to
  the logits and no gradient reaches it: ``taylor`` (|weight x gradient|) scores it exactly 0 and
  must remove it, while ``magnitude`` sees the large weights and must keep it.
- everything else is left as initialised and carries the signal.

So the expected removals are written out by hand below; a flipped sign, a swapped criterion or a
swapped scope each removes other units and fails a test.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from compress.config import DataOptions
from compress.modeling import load_classifier
from compress.prune import (PruneConfig, accumulate_task_gradients, layer_parts, prune, prune_model,
                            score_units, structure)
from compress.training import TrainSettings
from tests.conftest import make_bert, sentiment_rows, train_briefly, write_csv

HEAD_SIZE = 8
FAINT, DECOY = 0.05, 4.0

# Per layer: one faint and one decoy head, 16 faint and 16 decoy neurons, at different places in each layer.
UNIFORM_PLAN = {
    "faint_heads": {0: [1], 1: [3], 2: [0], 3: [2]},
    "decoy_heads": {0: [2], 1: [0], 2: [3], 3: [1]},
    "faint_ffn": {layer: list(range(4 * layer, 4 * layer + 16)) for layer in range(4)},
    "decoy_ffn": {layer: list(range(40 + layer, 40 + layer + 16)) for layer in range(4)},
}
# Uneven per layer, 4 faint and 4 decoy heads, 64 faint and 64 decoy neurons in all: a global ranking
# removes exactly one kind, a per-layer ranking cannot.
GLOBAL_PLAN = {
    "faint_heads": {0: [1, 2], 1: [0], 2: [3]},
    "decoy_heads": {1: [2], 3: [0, 2, 3]},
    "faint_ffn": {0: list(range(0, 64, 2)), 1: list(range(16)), 2: list(range(8)), 3: list(range(56, 64))},
    "decoy_ffn": {1: list(range(48, 56)), 2: list(range(30, 54)), 3: list(range(0, 32))},
}


def _per_layer(mapping: dict[int, list[int]], layers: int = 4) -> list[list[int]]:
    return [sorted(mapping.get(layer, [])) for layer in range(layers)]


def _planted(folder, plan: dict[str, dict[int, list[int]]]):
    """A random BERT classifier (saved with the real tokenizer) with the plan's faint and decoy units."""
    model, tokenizer, _ = load_classifier(make_bert(folder, head=True, seed=4))
    d = HEAD_SIZE
    with torch.no_grad():
        for i, parts in enumerate(layer_parts(model)):
            q, k, v = (model.get_submodule(p) for p in (parts.query, parts.key, parts.value))
            attn_out = model.get_submodule(parts.attn_out)
            ffn_in, ffn_out = model.get_submodule(parts.ffn_in), model.get_submodule(parts.ffn_out)
            for h in plan["faint_heads"].get(i, []):
                rows = slice(h * d, (h + 1) * d)
                for lin in (q, k, v):
                    lin.weight[rows] *= FAINT
                    lin.bias[rows] *= FAINT
                attn_out.weight[:, rows] *= FAINT
            for h in plan["decoy_heads"].get(i, []):
                rows = slice(h * d, (h + 1) * d)
                for lin in (q, k, v):
                    lin.weight[rows] *= DECOY
                attn_out.weight[:, rows] = 0.0
            for j in plan["faint_ffn"].get(i, []):
                ffn_in.weight[j] *= FAINT
                ffn_in.bias[j] *= FAINT
                ffn_out.weight[:, j] *= FAINT
            for j in plan["decoy_ffn"].get(i, []):
                ffn_in.weight[j] *= DECOY
                ffn_out.weight[:, j] = 0.0
    return model, tokenizer


def _gradient_batches(tokenizer, n: int = 2):
    rows = sentiment_rows(16 * n, seed=11)
    batches = []
    for start in range(0, len(rows), 16):
        chunk = rows[start:start + 16]
        enc = tokenizer([r["text"] for r in chunk], padding=True, return_tensors="pt")
        batches.append({**enc, "labels": torch.tensor([r["label"] for r in chunk])})
    return batches


def _prune(folder, plan, importance: str, scope: str, heads: float, ffn: float):
    model, tokenizer = _planted(folder, plan)
    batches = _gradient_batches(tokenizer) if importance == "taylor" else None
    return prune_model(model, heads=heads, ffn=ffn, importance=importance, scope=scope, gradient_batches=batches)


def test_planted_scores_rank_as_constructed(tmp_path):
    """The raw scores, before any selection: faint lowest by magnitude, decoys exactly 0 by Taylor."""
    model, tokenizer = _planted(tmp_path / "m", UNIFORM_PLAN)
    enc = {k: v for k, v in _gradient_batches(tokenizer, 1)[0].items() if k != "labels"}
    _, magnitude = score_units(model, enc, "magnitude")
    accumulate_task_gradients(model, _gradient_batches(tokenizer))
    _, taylor = score_units(model, enc, "taylor")
    model.zero_grad(set_to_none=True)
    for layer in range(4):
        faint_h, decoy_h = UNIFORM_PLAN["faint_heads"][layer][0], UNIFORM_PLAN["decoy_heads"][layer][0]
        mh, th = magnitude.heads[layer], taylor.heads[layer]
        assert int(np.argmin(mh)) == faint_h and int(np.argmax(mh)) == decoy_h
        assert th[decoy_h] == 0.0 and int(np.argmin(th)) == decoy_h
        assert (np.delete(th, decoy_h) > 0).all()  # every working head gets a gradient
        mf, tf = magnitude.ffn[layer], taylor.ffn[layer]
        faint, decoy = UNIFORM_PLAN["faint_ffn"][layer], UNIFORM_PLAN["decoy_ffn"][layer]
        normal = sorted(set(range(64)) - set(faint) - set(decoy))
        assert mf[faint].max() < mf[normal].min() < mf[normal].max() < mf[decoy].min()
        assert (tf[decoy] == 0).all() and (tf[faint] > 0).all() and (tf[normal] > 0).all()


@pytest.mark.parametrize("importance, kind", [("magnitude", "faint"), ("taylor", "decoy")])
def test_uniform_scope_removes_the_planted_units_of_each_layer(tmp_path, importance, kind):
    plan = _prune(tmp_path / "m", UNIFORM_PLAN, importance, "uniform", heads=0.25, ffn=0.25)
    assert plan.heads == _per_layer(UNIFORM_PLAN[f"{kind}_heads"])
    assert plan.ffn == _per_layer(UNIFORM_PLAN[f"{kind}_ffn"])


@pytest.mark.parametrize("importance, kind", [("magnitude", "faint"), ("taylor", "decoy")])
def test_global_scope_removes_the_planted_units_wherever_they_are(tmp_path, importance, kind):
    plan = _prune(tmp_path / "m", GLOBAL_PLAN, importance, "global", heads=0.25, ffn=0.25)
    assert plan.heads == _per_layer(GLOBAL_PLAN[f"{kind}_heads"])
    assert plan.ffn == _per_layer(GLOBAL_PLAN[f"{kind}_ffn"])
    # the layers lost different amounts: this is what only a global ranking gives
    assert len({len(r) for r in plan.heads}) > 1 and len({len(r) for r in plan.ffn}) > 1


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
