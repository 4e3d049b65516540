"""The built-in wnut17-unlabeled corpus: upstream's raw files, checked, with every WNUT sentence kept out."""

from __future__ import annotations

import gzip
import shutil

import pytest

from compress.core.errors import CompressError
from compress.stages.transfer import load_unlabeled, normalize_text, wnut17_unlabeled, wnut17_unlabeled_stats
from compress.corpora import wnut_raw
from compress.tasks.token_classification.data import wnut17


@pytest.fixture(scope="module")
def corpus():
    return wnut17_unlabeled()["text"][:]


def test_no_kept_line_equals_or_contains_a_validation_or_test_sentence(corpus):
    task = wnut17()
    held = [normalize_text(" ".join(w)) for name in ("validation", "test") for w in task.splits[name]["tokens"]]
    kept = {normalize_text(t) for t in corpus}
    assert not kept & set(held)
    # the long held-out sentences (ten words or more) do not sit inside any kept line either
    padded = [f" {k} " for k in kept]
    long_ones = [h for h in held if len(h.split()) >= 10][:150]
    assert long_ones and not [h for h in long_ones if any(f" {h} " in line for line in padded)]


def test_the_counts_add_up_and_name_what_was_dropped(corpus):
    stats = wnut17_unlabeled_stats()
    dropped = stats["short"] + stats["duplicates"] + stats["repeats_validation_or_test"] + stats["repeats_training"]
    assert stats["lines"] == sum(stats[f"lines_{name}"] for name in wnut_raw.RAW_FILES) == 102323
    assert stats["lines"] - dropped == stats["sentences"] == len(corpus)
    assert stats["repeats_validation_or_test"] > 1000  # the raw files are where dev and test were drawn from


def test_load_unlabeled_knows_the_corpus_by_name(corpus):
    loaded = load_unlabeled("wnut17-unlabeled")
    assert loaded.texts == corpus and loaded.source == "wnut17-unlabeled"


def test_a_changed_raw_file_is_refused_in_one_line(tmp_path, monkeypatch):
    folder = tmp_path / "raw"
    shutil.copytree(wnut_raw.RAW_DIR, folder)
    path = folder / "stacko-src.gz"
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes()) + b"one more line\n"))
    monkeypatch.setattr(wnut_raw, "RAW_DIR", folder)
    with pytest.raises(CompressError, match=r"stacko-src\.gz: sha256 .* does not match upstream's"):
        wnut_raw.raw_lines("stacko-src")
    assert len(wnut_raw.raw_lines("redd.tok.uniq")) == 1966
