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

import numpy as np
import pytest
import torch

from compress.runtime.modeling import load_classifier
from compress.core.errors import CompressError
from compress.stages.prune import (PRUNING_KEY, accumulate_task_gradients, layer_parts, prune_model, score_units,
                            select_units, structure)
from compress.stages.prune.importance import _nearest
from tests.conftest import make_bert, sentiment_rows

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


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The random BERT classifier (saved with the real tokenizer) every test plants its units in: built
    once, loaded afresh by each test (a mutation run repeats this module for every mutant)."""
    return make_bert(tmp_path_factory.mktemp("planted") / "bert", head=True, seed=4)


def _planted(folder, plan: dict[str, dict[int, list[int]]]):
    """A fresh load of the random BERT at ``folder`` with the plan's faint and decoy units."""
    model, tokenizer, _ = load_classifier(folder)
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


def test_planted_scores_rank_as_constructed(base):
    """The raw scores, before any selection: faint lowest by magnitude, decoys exactly 0 by Taylor."""
    model, tokenizer = _planted(base, UNIFORM_PLAN)
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
        # both criteria divide each layer's scores by their mean, so layers compare under --scope global
        for unit_scores in (mh, th, mf, tf):
            assert unit_scores.mean() == pytest.approx(1.0, rel=1e-6)  # normalised in float32


@pytest.mark.parametrize("importance, kind", [("magnitude", "faint"), ("taylor", "decoy")])
def test_uniform_scope_removes_the_planted_units_of_each_layer(base, importance, kind):
    model, tokenizer = _planted(base, UNIFORM_PLAN)
    batches = _gradient_batches(tokenizer) if importance == "taylor" else None
    plan = prune_model(model, heads=0.25, ffn=0.25, importance=importance, scope="uniform", gradient_batches=batches)
    assert plan.heads == _per_layer(UNIFORM_PLAN[f"{kind}_heads"])
    assert plan.ffn == _per_layer(UNIFORM_PLAN[f"{kind}_ffn"])
    assert plan.before == {"heads_per_layer": [4] * 4, "intermediate_per_layer": [64] * 4,
                           "attention_head_size": HEAD_SIZE}
    assert plan.after == structure(model) == {"heads_per_layer": [3] * 4, "intermediate_per_layer": [48] * 4,
                                              "attention_head_size": HEAD_SIZE}
    assert getattr(model.config, PRUNING_KEY)["heads_per_layer"] == [3] * 4  # the shapes a reload needs
    assert all(p.grad is None for p in model.parameters())  # Taylor's gradients are not left behind


@pytest.mark.parametrize("importance, kind", [("magnitude", "faint"), ("taylor", "decoy")])
def test_global_scope_removes_the_planted_units_wherever_they_are(base, importance, kind):
    plan = _prune(base, GLOBAL_PLAN, importance, "global", heads=0.25, ffn=0.25)
    assert plan.heads == _per_layer(GLOBAL_PLAN[f"{kind}_heads"])
    assert plan.ffn == _per_layer(GLOBAL_PLAN[f"{kind}_ffn"])
    # the layers lost different amounts: this is what only a global ranking gives
    assert len({len(r) for r in plan.heads}) > 1 and len({len(r) for r in plan.ffn}) > 1


def _weights(model, name: str):
    return model.get_submodule(name).weight.detach().double()


def test_magnitude_scores_are_group_l2_norms_over_their_mean(base):
    """``magnitude`` by hand: a neuron's score is the squared L2 norm of its intermediate row plus its output
    column, a head's the mean over its dimensions of the same sum over its query, key and value rows and
    attention-output columns; each layer's scores are divided by their mean (what makes layers comparable)."""
    model, tokenizer = _planted(base, UNIFORM_PLAN)
    enc = {k: v for k, v in _gradient_batches(tokenizer, 1)[0].items() if k != "labels"}
    _, scores = score_units(model, enc)  # magnitude is the default
    for layer, parts in enumerate(layer_parts(model)):
        dims = sum((_weights(model, p) ** 2).sum(1) for p in (parts.query, parts.key, parts.value))
        dims = dims + (_weights(model, parts.attn_out) ** 2).sum(0)
        heads = (dims / dims.mean()).view(-1, HEAD_SIZE).mean(1).numpy()
        neurons = (_weights(model, parts.ffn_in) ** 2).sum(1) + (_weights(model, parts.ffn_out) ** 2).sum(0)
        np.testing.assert_allclose(scores.heads[layer], heads, rtol=1e-5)
        np.testing.assert_allclose(scores.ffn[layer], (neurons / neurons.mean()).numpy(), rtol=1e-5)
        assert scores.heads[layer].dtype == scores.ffn[layer].dtype == np.float64


def test_taylor_scores_without_any_gradient_signal_are_zero_not_nan(base):
    """All-zero gradients make every Taylor score 0, and torch-pruning's mean normalizer 0/0 = NaN: the
    scores must come back as 0 (a NaN would sort anywhere), so such a layer loses its first units."""
    model, tokenizer = _planted(base, UNIFORM_PLAN)
    enc = {k: v for k, v in _gradient_batches(tokenizer, 1)[0].items() if k != "labels"}
    accumulate_task_gradients(model, _gradient_batches(tokenizer, 1))
    for p in model.parameters():
        p.grad.zero_()
    _, scores = score_units(model, enc, "taylor")
    for s in scores.heads + scores.ffn:
        assert np.array_equal(s, np.zeros_like(s))
    assert select_units(scores.heads, 0.5) == [[0, 1]] * 4


def test_task_gradients_are_the_mean_over_batches(base):
    """The same batch twice gives the gradients of that batch once (a mean, not a sum), a second call
    starts from zero, and the count is of examples."""
    model, tokenizer = _planted(base, UNIFORM_PLAN)
    batch = _gradient_batches(tokenizer, 1)[0]
    model.bert.pooler.dense.weight.requires_grad_(False)  # frozen weights get gradients too
    assert accumulate_task_gradients(model, [batch]) == 16
    once = {n: p.grad.clone() for n, p in model.named_parameters()}
    assert accumulate_task_gradients(model, [batch, batch]) == 32
    twice = {n: p.grad for n, p in model.named_parameters()}
    assert set(once) == set(twice) and once["bert.pooler.dense.weight"].abs().sum() > 0
    for name, grad in once.items():
        torch.testing.assert_close(twice[name], grad, rtol=1e-5, atol=1e-9)


def test_selection_rounds_to_the_nearest_count_and_keeps_a_floor():
    assert [_nearest(x) for x in (0.5, 1.4999, 2.5, 0.3 * 10, 0.49)] == [1, 1, 3, 3, 0]
    scores = [np.array([0.1, 0.9, 0.5, 0.3]), np.array([2.0, 3.0, 1.0, 4.0])]
    assert select_units(scores, 0.125, "uniform") == [[0], [2]]  # 0.5 units round up to one
    assert select_units(scores, 0.9, "uniform") == [[0, 2, 3], [0, 1, 2]]  # 3.6 -> 4, floor of one: 3
    assert select_units(scores, 0.9, "global", min_keep=2) == [[0, 3], [0, 2]]
    assert select_units(scores, 0.9, "uniform", min_keep=2) == [[0, 3], [0, 2]]
    # ties break by position within a layer (a sort that is not stable reorders ties among 64 units)
    tied = np.random.default_rng(0).integers(0, 3, 64).astype(float)
    assert select_units([tied], 0.25) == [sorted(sorted(range(64), key=lambda j: (tied[j], j))[:16])]
    # ... and by layer, then position, globally; layer 0 stops at its floor of one, layer 1 gives the third unit
    assert select_units([np.ones(3), np.ones(3)], 0.5, "global") == [[0, 1], [0]]



def test_prune_model_refuses_bad_settings_before_touching_the_model(base):
    """Each refusal names its flag, and the model is left as it was."""
    model, _ = _planted(base, UNIFORM_PLAN)
    before = structure(model)
    for kw, start in (({"heads": 1.0}, "--heads must be a share"), ({"heads": -0.1}, "--heads must be a share"),
                      ({"ffn": 1.0}, "--ffn must be a share"), ({"ffn": "0.5"}, "--ffn must be a share"),
                      ({"heads": 0.5, "scope": "layer"}, "--scope 'layer' is unknown"),
                      ({"heads": 0.5, "importance": "random"}, "--importance 'random' is unknown"),
                      ({"heads": 0.5, "importance": "taylor"}, "--importance taylor needs batches")):
        with pytest.raises(CompressError) as refused:
            prune_model(model, **kw)
        assert str(refused.value).startswith(start), (kw, str(refused.value))
    assert structure(model) == before and not hasattr(model.config, PRUNING_KEY)
    assert all(p.grad is None for p in model.parameters())


def test_a_model_with_a_small_vocabulary_is_traced_and_pruned():
    """The tracing batch holds ids below the vocabulary size whatever it is (a 64-token vocabulary here)."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                                     num_attention_heads=4, intermediate_size=64))
    plan = prune_model(model, heads=0.5, ffn=0.25)
    assert [len(h) for h in plan.heads] == [2, 2] and [len(f) for f in plan.ffn] == [16, 16]
    assert structure(model)["heads_per_layer"] == [2, 2]



def test_taylor_gradients_of_a_tagger_are_those_of_its_labelled_tokens(tmp_path):
    """A tagger's logits are (batch, tokens, labels): the cross-entropy runs over the labelled tokens only.
    With every label -100 but two, the gradients equal those of the mean loss of those two tokens."""
    folder = make_bert(tmp_path / "enc", layers=2)
    model, tok, _ = load_classifier(folder, 5, ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"], task="token-classification")
    enc = tok(["we went to paris", "alice saw rome"], padding=True, return_tensors="pt")
    labels = torch.full(enc["input_ids"].shape, -100)
    labels[0, 4], labels[1, 1] = 1, 3
    assert accumulate_task_gradients(model, [{**enc, "labels": labels}]) == 2
    got = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    logits = model(**enc).logits
    picked = torch.stack([logits[0, 4], logits[1, 1]])
    torch.nn.functional.cross_entropy(picked.float(), torch.tensor([1, 3])).backward()
    assert got
    for n, p in model.named_parameters():
        if p.grad is not None:
            assert torch.allclose(got[n], p.grad, atol=1e-6), n
