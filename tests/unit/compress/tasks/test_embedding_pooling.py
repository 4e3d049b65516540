"""PooledEncoder: sentence-transformers' pooling and normalisation, by hand and inside the ONNX graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from compress.tasks.sentence_embedding.pooling import PooledEncoder, encode, load_pooled_encoder, pool, tokenizer_limit
from tests.support.embedding import corpus, make_st_folder

HIDDEN = torch.tensor([[[1.0, 2.0], [3.0, -4.0], [100.0, 100.0]],
                       [[-1.0, 0.5], [7.0, 7.0], [9.0, -9.0]]])
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])


@pytest.mark.parametrize("mode,expected", [
    ("mean", [[2.0, -1.0], [5.0, -0.5]]),
    ("cls", [[1.0, 2.0], [-1.0, 0.5]]),
    ("max", [[3.0, 2.0], [9.0, 7.0]]),  # the padded 100s are never the max
    ("mean_sqrt_len", [[4.0 / 2 ** 0.5, -2.0 / 2 ** 0.5], [15.0 / 3 ** 0.5, -1.5 / 3 ** 0.5]]),
])
def test_each_pooling_by_hand(mode, expected):
    assert torch.allclose(pool(HIDDEN, MASK, mode), torch.tensor(expected))


def test_the_folder_decides_pooling_and_normalisation(tmp_path):
    model, tok, config = load_pooled_encoder(make_st_folder(tmp_path / "st", pooling="cls", normalize=True))
    assert (model.pooling, model.normalize, config.source) == ("cls", True, "modules.json")
    enc = tok(["a good film", "rain and snow today"], padding=True, return_tensors="pt")
    with torch.no_grad():
        vectors = model(**enc)
        states = model.encoder(**enc).last_hidden_state
    assert vectors.shape == (2, 32)
    assert torch.allclose(vectors.norm(dim=1), torch.ones(2), atol=1e-6)
    assert torch.allclose(vectors, torch.nn.functional.normalize(states[:, 0], dim=1), atol=1e-6)


def test_encode_keeps_the_input_order_and_pads_harmlessly(tmp_path):
    model, tok, config = load_pooled_encoder(make_st_folder(tmp_path / "st", normalize=False))
    texts = corpus(7, seed=3)
    together = encode(model, tok, texts, max_length=tokenizer_limit(tok, model, config), batch_size=3)
    alone = np.concatenate([encode(model, tok, [t], max_length=128) for t in texts])
    assert together.dtype == np.float32 and together.shape == (7, 32)
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_the_length_limit_is_the_trained_length_when_stated(tmp_path):
    model, tok, config = load_pooled_encoder(make_st_folder(tmp_path / "st", max_seq_length=48))
    assert config.max_seq_length == 48 and tokenizer_limit(tok, model, config) == 48
    assert tokenizer_limit(tok, model, None) == 128  # the position table and the tokenizer's limit


@pytest.mark.parametrize("pooling,normalize", [("mean", True), ("max", False)])
def test_pooling_and_normalisation_are_inside_the_onnx_graph(tmp_path, pooling, normalize):
    import onnxruntime as ort

    model, tok, _ = load_pooled_encoder(make_st_folder(tmp_path / "st", pooling=pooling, normalize=normalize),
                                        eager=True)
    example = tok(["a short one", "a rather longer text about football and rain"], padding=True, return_tensors="pt")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    path = tmp_path / "model.onnx"
    with torch.no_grad():
        torch.onnx.export(model, tuple(example[n] for n in names), str(path), input_names=names,
                          output_names=["sentence_embedding"], opset_version=17, do_constant_folding=True, dynamo=False,
                          dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in names},
                                        "sentence_embedding": {0: "batch"}})
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["sentence_embedding"]
    # Two batch sizes and two lengths, padded: the graph's vectors are the PyTorch pooling's.
    for texts in (corpus(3, seed=1), [" ".join(corpus(12, seed=2))] + corpus(4, seed=4)):
        enc = tok(texts, padding=True, truncation=True, max_length=96, return_tensors="np")
        (got,) = session.run(None, {n: enc[n].astype(np.int64) for n in names})
        with torch.no_grad():
            want = model(**{n: torch.from_numpy(enc[n]) for n in names}).numpy()
        assert got.shape == (len(texts), 32)
        np.testing.assert_allclose(got, want, atol=1e-5)
        if normalize:
            np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_a_model_without_token_types_is_not_given_them(tmp_path):
    from tests.conftest import make_mpnet

    model, tok, config = load_pooled_encoder(make_mpnet(tmp_path / "mpnet"))
    assert not model.takes_token_types and config.pooling == "mean" and not config.normalize
    enc = tok(["a film"], return_tensors="pt")
    with torch.no_grad():
        a = model(enc["input_ids"], enc["attention_mask"], torch.zeros_like(enc["input_ids"]))
    assert a.shape == (1, 32)
    assert tokenizer_limit(tok, model, config) == 64  # 66 positions counted from padding_idx + 1
