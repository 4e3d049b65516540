"""Sentence-similarity data: recognised by a float score beside two sentences, read from every source, bad rows named
by file and line; the built-in STS Benchmark caption pairs; the task's metrics against scipy; a regression head told
from a classifier (the protocol's conformance over every task is tests/unit/compress/tasks/test_task_protocol.py)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from compress.core.errors import CompressError
from compress.tasks import get_task
from compress.tasks.task_choice import data_task, head_task
from compress.tasks.sentence_similarity import data as sim
from tests.support.similarity import scored_pairs, write_pairs

SIM, SEQ = "sentence-similarity", "sequence-classification"


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_a_scored_pair_table_is_similarity_data_in_every_format(tmp_path, suffix):
    path = write_pairs(tmp_path / f"pairs{suffix}", scored_pairs(40))
    assert data_task(str(path)) == SIM
    data = sim.load_similarity_data(str(path))
    assert data.sizes() == {"train": 32, "validation": 4, "test": 4}
    assert all(isinstance(s, float) for s in data.splits["train"]["label"][:])
    assert data.texts("test")[0] == (data.splits["test"]["text"][0], data.splits["test"]["text_pair"][0])


def test_a_folder_of_splits_keeps_them(tmp_path):
    write_pairs(tmp_path / "train.csv", scored_pairs(30))
    write_pairs(tmp_path / "dev.tsv", scored_pairs(6, seed=1))
    write_pairs(tmp_path / "test.jsonl", scored_pairs(5, seed=2))
    assert data_task(str(tmp_path)) == SIM
    assert sim.load_similarity_data(str(tmp_path)).sizes() == {"train": 30, "validation": 6, "test": 5}


def test_classification_tables_stay_classification(tmp_path):
    """Integer and string labels (the classification tables of today) are never taken for scores, nor is a score
    column of whole numbers; a fraction in ``label`` beside two sentence columns is a score (GLUE's STS-B)."""
    ints = [{"sentence1": r["sentence1"], "sentence2": r["sentence2"], "label": i % 3} for i, r in
            enumerate(scored_pairs(20))]
    named = [{"text": r["sentence1"], "text_pair": r["sentence2"], "label": ["pos", "neg"][i % 2]} for i, r in
             enumerate(scored_pairs(20))]
    whole = [{**r, "score": float(round(r["score"]))} for r in scored_pairs(20)]
    text_only = [{"text": r["sentence1"], "label": r["score"]} for r in scored_pairs(20)]
    glue = [{"sentence1": r["sentence1"], "sentence2": r["sentence2"], "label": r["score"]} for r in scored_pairs(20)]
    decided = [data_task(str(write_pairs(tmp_path / f"{name}.csv", rows))) for name, rows in
               (("ints", ints), ("named", named), ("whole", whole), ("text_only", text_only), ("glue", glue))]
    assert decided == [SEQ, SEQ, SEQ, SEQ, SIM]


def test_column_flags_name_the_columns_and_say_the_task(tmp_path):
    from compress.config import DataOptions

    rows = [{"a": r["sentence1"], "b": r["sentence2"], "sim": round(r["score"] / 5, 3)} for r in scored_pairs(30)]
    path = write_pairs(tmp_path / "odd.csv", rows)
    assert DataOptions(str(path)).task() == SEQ  # nothing it knows: classification's loader says what is missing
    options = DataOptions(str(path), sentence1_column="a", sentence2_column="b", score_column="sim", score_range="0,1")
    assert options.task() == SIM
    data = options.load_any()
    assert data.sizes() == {"train": 24, "validation": 3, "test": 3} and data.score_range == (0.0, 1.0)
    with pytest.raises(CompressError, match=r"no score column 'simm' \(columns: a, b, sim\)\. Pass --score-column"):
        DataOptions(str(path), sentence1_column="a", sentence2_column="b", score_column="simm").load_any()


def _one_line_error(path, **kwargs) -> str:
    with pytest.raises(CompressError) as caught:
        sim.load_similarity_data(str(path), **kwargs)
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and str(path) in message
    return message


def test_bad_rows_are_one_line_naming_file_line_and_fix(tmp_path):
    rows = scored_pairs(20)
    rows[3]["sentence2"] = ""
    message = _one_line_error(write_pairs(tmp_path / "empty.csv", rows))
    assert "line 5" in message and "'sentence2' holds no sentence" in message and "Fill it in" in message

    rows = scored_pairs(20)
    rows[6]["score"] = "high"
    message = _one_line_error(write_pairs(tmp_path / "word.jsonl", rows))
    assert "line 7" in message and "score 'high'" in message and "is not a number" in message

    rows = scored_pairs(20)
    rows[0]["score"] = 7.5
    message = _one_line_error(write_pairs(tmp_path / "range.tsv", rows))
    assert "line 2" in message and "outside the stated range 0 to 5" in message and "--score-range LO,HI" in message
    assert sim.load_similarity_data(str(tmp_path / "range.tsv"), score_range="0,10").sizes()["train"] == 16

    rows = scored_pairs(20)
    del rows[9]["score"]
    message = _one_line_error(write_pairs(tmp_path / "missing.jsonl", rows))
    assert "line 10" in message and "has no score" in message

    with pytest.raises(CompressError, match="--score-range '5,0': LO must be a number below HI"):
        sim.parse_score_range("5,0")


def test_a_hub_dataset_with_a_float_score_is_similarity_data(tmp_path, monkeypatch):
    from datasets import Dataset

    from tests.support.hf_cache import add_dataset

    cache = tmp_path / "datasets"
    add_dataset(cache, "org/tiny-sts", {"train": Dataset.from_list(scored_pairs(30)),
                                        "validation": Dataset.from_list(scored_pairs(6, seed=1))})
    add_dataset(cache, "org/int-pairs", {"train": Dataset.from_list(
        [{"sentence1": r["sentence1"], "sentence2": r["sentence2"], "label": i % 2}
         for i, r in enumerate(scored_pairs(30))])})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    assert data_task("hf:org/tiny-sts") == SIM and data_task("hf:org/int-pairs") == SEQ
    data = sim.load_similarity_data("hf:org/tiny-sts")
    assert data.sizes() == {"train": 27, "validation": 6, "test": 3}  # test carved out of train (its tenth)


def test_the_builtin_caption_pairs_are_checked_and_complete(tmp_path, monkeypatch):
    assert data_task("stsb-captions") == SIM
    data = sim.stsb_captions()
    assert data.sizes() == {"train": 1000, "validation": 375, "test": 375}
    scores = np.concatenate([data.scores(s) for s in ("train", "validation", "test")])
    assert scores.min() >= 0 and scores.max() <= 5 and len(np.unique(scores)) >= 40
    copy = tmp_path / "stsb"
    shutil.copytree(sim.STSB_DIR, copy)
    with open(copy / "sts-dev.csv", "a", encoding="utf-8") as handle:
        handle.write("main-captions\timages\t2015\t9999\t5.000\tA cat.\tA cat.\n")
    monkeypatch.setattr(sim, "STSB_DIR", copy)
    with pytest.raises(CompressError, match="sts-dev.csv: sha256 .* does not match the recorded"):
        sim.stsb_captions()


def test_the_metrics_are_scipys_times_100():
    from scipy import stats

    rng = np.random.RandomState(0)
    gold = np.round(rng.uniform(0, 5, 200) * 2) / 2  # ties, as STS scores have
    predicted = gold + rng.normal(0, 1.0, 200)
    predicted[:20] = predicted[0]  # ties in the predictions too
    out = get_task(SIM).score(predicted, gold, reference=gold * 0.5)
    assert out["spearman"] == pytest.approx(100 * stats.spearmanr(predicted, gold).statistic, abs=1e-9)
    assert out["pearson"] == pytest.approx(100 * stats.pearsonr(predicted, gold).statistic, abs=1e-9)
    assert out["reference_spearman"] == pytest.approx(out["spearman"], abs=1e-9) and out["n"] == 200
    assert get_task(SIM).primary_metric == "spearman"


def test_a_regression_head_is_told_from_a_classifier():
    regression = {"architectures": ["BertForSequenceClassification"], "problem_type": "regression",
                  "id2label": {"0": "LABEL_0"}}
    classifier = {"architectures": ["BertForSequenceClassification"], "id2label": {"0": "neg", "1": "pos"}}
    tagger = {"architectures": ["BertForTokenClassification"], "id2label": {"0": "O", "1": "B-x"}}
    assert [head_task(c).name for c in (regression, classifier, tagger)] == [SIM, SEQ, "token-classification"]
    assert head_task({"architectures": ["BertModel"]}) is None


def test_the_recorded_data_options_of_earlier_configs_are_unchanged():
    """The similarity fields are recorded only when set: a config's identity from before they existed stays."""
    from compress.config import DataOptions

    assert "score_column" not in DataOptions("movie-reviews").to_dict()
    assert DataOptions("x.csv", score_column="s").to_dict()["score_column"] == "s"
    assert DataOptions.from_dict(DataOptions("x.csv", score_range="0,1").to_dict()).score_range == "0,1"


def test_the_benchmarks_own_files_and_folder_are_read_as_released(tmp_path):
    """The STS Benchmark's extracted ``stsbenchmark/`` folder (``sts-train.csv`` ..., tab-separated, no header) is
    similarity data as it is; a bad line in one of its files is named by its line."""
    for name in sim.STSB_FILES.values():
        shutil.copyfile(sim.STSB_DIR / name, tmp_path / name)
    assert data_task(str(tmp_path)) == SIM and data_task(str(tmp_path / "sts-dev.csv")) == SIM
    assert sim.load_similarity_data(str(tmp_path)).sizes() == {"train": 1000, "validation": 375, "test": 375}
    assert sim.load_similarity_data(str(tmp_path / "sts-test.csv")).sizes() == {"train": 300, "validation": 37,
                                                                               "test": 38}
    lines = (tmp_path / "sts-dev.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    fields = lines[2].split("\t")
    fields[4] = "9.000"
    lines[2] = "\t".join(fields)
    (tmp_path / "sts-dev.csv").write_text("".join(lines), encoding="utf-8")
    message = _one_line_error(tmp_path / "sts-dev.csv")
    assert "line 3: score '9.000' is not a number from 0 to 5" in message
