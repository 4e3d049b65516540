"""Distilling a tiny two-tower encoder for a few steps: the loss falls, the artifact says what it stores."""

from __future__ import annotations

import json

import numpy as np
import pytest

from compress.core.errors import CompressError
from compress.tasks.sentence_embedding.distill import (EmbeddingDistillConfig, distill_embeddings, load_projection,
                                                       read_record)
from compress.tasks.sentence_embedding.pooling import encode, load_pooled_encoder
from tests.conftest import make_bert
from tests.support.embedding import corpus, make_st_folder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("embedding-distill")
    teacher = make_st_folder(root / "teacher", hidden=48, layers=2, seed=1)  # mean pooling, then Normalize
    narrow = make_bert(root / "narrow", layers=1, hidden=32, heads=4, ffn=64, seed=2)  # a plain encoder
    same = make_bert(root / "same", layers=1, hidden=48, heads=4, ffn=64, seed=3)
    return teacher, narrow, same


def _first_and_last(losses, n=8):
    return float(np.mean(losses[:n])), float(np.mean(losses[-n:]))


def test_projection_mse_and_cosine_matrix_train_a_narrower_student(models, tmp_path):
    teacher, narrow, _ = models
    texts = corpus(160, seed=0)
    cfg = EmbeddingDistillConfig(teacher=str(teacher), student=str(narrow), loss="both", steps=40, batch_size=16,
                                 lr=1e-3, max_length=32, keep_projection=True)
    record = distill_embeddings(cfg, texts, tmp_path / "student", held_out=corpus(30, seed=9))
    first, last = _first_and_last(record["losses"])
    assert last < 0.7 * first, record["losses"]
    assert record["widths"] == {"student": 32, "teacher": 48}
    assert record["projection"]["stored"] and record["projection"]["file"] == "projection.safetensors"
    assert 0.0 <= record["held_out"]["neighbour_recall@10"] <= 1.0
    # The artifact: a sentence-transformers folder with the teacher's pipeline, the projection beside it.
    out = tmp_path / "student"
    assert read_record(out) == json.loads(json.dumps(record))
    assert json.loads((out / "compress.json").read_text())["task"] == "sentence-embedding"
    model, tok, config = load_pooled_encoder(out)
    assert (config.pooling, config.normalize, config.source, config.max_seq_length) == ("mean", True, "modules.json", 32)
    projection = load_projection(out)
    assert (projection.in_features, projection.out_features) == (32, 48)
    vectors = encode(model, tok, texts[:4], max_length=32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_what_is_stored_follows_the_loss_and_the_widths(models, tmp_path):
    teacher, narrow, same = models
    texts = corpus(64, seed=1)
    dropped = distill_embeddings(EmbeddingDistillConfig(str(teacher), str(narrow), loss="mse", steps=3, batch_size=8,
                                                        lr=1e-3, max_length=24), texts, tmp_path / "a")
    assert not dropped["projection"]["stored"] and "not stored" in dropped["projection"]["what"]
    assert load_projection(tmp_path / "a") is None
    direct = distill_embeddings(EmbeddingDistillConfig(str(teacher), str(same), loss="mse", steps=3, batch_size=8,
                                                       lr=1e-3, max_length=24, keep_projection=True), texts,
                                tmp_path / "b")
    assert not direct["projection"]["stored"] and "widths match" in direct["projection"]["what"]
    cosine = distill_embeddings(EmbeddingDistillConfig(str(teacher), str(narrow), loss="cosine", steps=3, batch_size=8,
                                                       lr=1e-3, max_length=24), texts, tmp_path / "c")
    assert "cosine-matrix" in cosine["projection"]["what"] and not (tmp_path / "c" / "projection.safetensors").exists()


def test_the_cosine_matrix_loss_alone_falls(models, tmp_path):
    teacher, narrow, _ = models
    record = distill_embeddings(EmbeddingDistillConfig(str(teacher), str(narrow), loss="cosine", steps=40,
                                                       batch_size=16, lr=1e-3, max_length=32),
                                corpus(160, seed=2), tmp_path / "student")
    first, last = _first_and_last(record["losses"])
    assert last < 0.7 * first, record["losses"]


@pytest.mark.parametrize("change,message", [({"loss": "kl"}, "--loss 'kl' is not one of mse, cosine, both"),
                                            ({"steps": 0}, "--steps must be at least 1"),
                                            ({"loss": "cosine", "batch_size": 1}, "--batch-size 2 or more")])
def test_bad_settings_are_one_line(models, tmp_path, change, message):
    teacher, narrow, _ = models
    cfg = EmbeddingDistillConfig(str(teacher), str(narrow), **change)
    with pytest.raises(CompressError, match=message):
        distill_embeddings(cfg, corpus(40), tmp_path / "x")
