"""tools.studies.prediction_cache: computed once per artifact, record and data; written whole."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tools.studies.prediction_cache import cache_key, cached


@pytest.fixture()
def artifact(tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_COMPRESS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights one")
    (folder / "compress.json").write_text(json.dumps({"complete": True, "stride": 32}))
    return folder


def test_predictions_are_computed_once_and_read_back_equal(artifact, tmp_path):
    calls = []

    def labels():
        calls.append("labels")
        return np.array([0, 2, 1])

    key = cache_key(artifact, "data-a")
    assert cached(key, "test", "labels", labels).tolist() == [0, 2, 1]
    assert cached(key, "test", "labels", labels).tolist() == [0, 2, 1] and calls == ["labels"]
    tags = [["O", "B-PER"], ["B-LOC", "I-LOC", "O"]]
    assert cached(key, "test", "tags", lambda: tags) == tags
    assert cached(key, "test", "tags", lambda: pytest.fail("tags were cached")) == tags
    cached(key, "validation", "labels", labels)  # another split is another entry
    assert calls == ["labels", "labels"]
    assert not [p for p in (tmp_path / "cache" / "predictions").iterdir() if ".tmp" in p.name]


def test_the_key_follows_the_weights_the_record_and_the_data(artifact):
    key = cache_key(artifact, "data-a")
    assert cache_key(artifact, "data-a") == key and cache_key(artifact, "data-b") != key
    (artifact / "compress.json").write_text(json.dumps({"complete": True, "stride": 16}))  # other windows: other predictions
    assert cache_key(artifact, "data-a") != key
    key = cache_key(artifact, "data-a")
    (artifact / "model.safetensors").write_bytes(b"weights two")  # retrained in place
    assert cache_key(artifact, "data-a") != key


def test_a_failed_computation_leaves_nothing_behind(artifact, tmp_path):
    def broken():
        raise RuntimeError("model failed")

    key = cache_key(artifact, "data-a")
    with pytest.raises(RuntimeError):
        cached(key, "test", "tags", broken)
    assert cached(key, "test", "tags", lambda: [["O"]]) == [["O"]]
