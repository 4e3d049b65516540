"""A long text's vector: its windows' vectors, weighted by their tokens, normalised again."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from compress.tasks.sentence_embedding.long_texts import encode_long
from compress.tasks.sentence_embedding.pooling import encode, load_pooled_encoder
from compress.tasks.sentence_embedding.vectors import pool_window_vectors
from compress.core.windows import encode_windows
from tests.support.embedding import corpus, make_st_folder


def test_window_vectors_pooled_by_hand():
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    sample, tokens = np.array([0, 0, 1]), np.array([3, 1, 5])
    np.testing.assert_allclose(pool_window_vectors(vectors, sample, tokens, 2, unit=False), [[0.75, 0.25], [2.0, 2.0]])
    unit = pool_window_vectors(vectors, sample, tokens, 2, unit=True)
    np.testing.assert_allclose(unit, [[0.75 / np.hypot(0.75, 0.25), 0.25 / np.hypot(0.75, 0.25)],
                                      [2 ** -0.5, 2 ** -0.5]], rtol=1e-6)
    assert unit.dtype == np.float32
    with pytest.raises(ValueError, match=r"texts \[2\] have no window"):
        pool_window_vectors(vectors, sample, tokens, 3, unit=False)


@pytest.mark.parametrize("normalize", [True, False])
def test_long_texts_are_read_in_windows(tmp_path, normalize):
    model, tok, _ = load_pooled_encoder(make_st_folder(tmp_path / "st", normalize=normalize))
    short = corpus(3, seed=5)
    long_text = " ".join(corpus(30, seed=6))  # far past a 24-token window
    texts = [short[0], long_text, short[1], short[2]]
    got = encode_long(model, tok, texts, max_length=24, stride=6, batch_size=2)
    assert got.shape == (4, 32) and got.dtype == np.float32
    # A text that fits in one window keeps the vector it has when read at once.
    np.testing.assert_allclose(got[[0, 2, 3]], encode(model, tok, short, max_length=24), atol=1e-5)
    # The long one: each window through the model, the token-weighted mean, normalised when the model normalises.
    windows = encode_windows(tok, [long_text], max_length=24, stride=6)
    assert len(windows) > 3
    with torch.no_grad():
        rows = [model(torch.tensor([ids]), torch.tensor([mask]), torch.tensor([types]))[0].double().numpy()
                for ids, mask, types in zip(windows.input_ids, windows.attention_mask, windows.token_type_ids)]
    weights = np.array([len(ids) for ids in windows.input_ids], dtype=float)
    expected = (np.stack(rows) * weights[:, None]).sum(0) / weights.sum()
    if normalize:
        expected /= np.linalg.norm(expected)
    np.testing.assert_allclose(got[1], expected, atol=1e-5)
    # Not the vector of the text cut at 24 tokens.
    assert not np.allclose(got[1], encode(model, tok, [long_text], max_length=24)[0], atol=1e-3)
