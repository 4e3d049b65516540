"""Tagging and question-answering data from the Hugging Face Hub (``--data hf:NAME``) reach their own stages.

Hub datasets are told apart by their columns (word and tag lists: tagging; question, passage and answers:
question answering); a ``--token-column`` / ``--question-column`` family flag, for datasets that name their
columns otherwise, says the task itself. The
datasets are real ``datasets`` caches on disk, read offline (tests/support/hf_cache.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compress.cli import main
from tests.conftest import make_bert
from tests.support.hf_cache import add_dataset


def _tagged(n: int, offset: int = 0, words: str = "tokens", tags: str = "ner_tags"):
    from datasets import ClassLabel, Dataset, Features, List, Value

    names = ["O", "B-person", "I-person"]
    features = Features({"id": Value("string"), words: List(Value("string")), tags: List(ClassLabel(names=names))})
    rows = [{"id": str(i), words: [f"Ann{i}", "Lee", "sings"], tags: [1, 2, 0] if i % 2 else [0, 0, 0]}
            for i in range(offset, offset + n)]
    return Dataset.from_list(rows, features=features)


def _questions(n: int, offset: int = 0, question: str = "question", context: str = "context", answers: str = "answers"):
    from datasets import Dataset

    rows = {"id": [], "title": [], question: [], context: [], answers: []}
    for i in range(offset, offset + n):
        passage = f"story {i} . the key is red . the end"
        rows["id"].append(str(i))
        rows["title"].append(f"T{i % 6}")
        rows[question].append("what is the key ?")
        rows[context].append(passage)
        rows[answers].append({"text": ["red"], "answer_start": [passage.index("red")]})
    return Dataset.from_dict(rows)


@pytest.fixture
def hub_data(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "datasets"
    add_dataset(cache, "org/tiny-ner", {"train": _tagged(30), "test": _tagged(6, 50)})
    add_dataset(cache, "org/odd-ner", {"train": _tagged(30, words="words2", tags="labels2")})
    add_dataset(cache, "org/tiny-squad", {"train": _questions(40), "validation": _questions(8, 100)})
    add_dataset(cache, "org/odd-squad", {"train": _questions(40, question="q", answers="gold")})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    return cache


def test_hub_datasets_are_told_apart_by_their_columns(hub_data):
    from compress.config import DataOptions

    assert DataOptions("hf:org/tiny-ner").task() == "token-classification"
    assert DataOptions("hf:org/tiny-squad").task() == "question-answering"
    # other column names: classification until a flag names one of them, then the task the flag is for
    assert DataOptions("hf:org/odd-ner").task() == "sequence-classification"
    odd_ner = DataOptions("hf:org/odd-ner", token_column="words2", tag_column="labels2")
    assert odd_ner.task() == "token-classification"
    assert odd_ner.load_any().label_names == ["O", "B-person", "I-person"]
    assert DataOptions("hf:org/odd-squad").task() == "sequence-classification"
    odd_squad = DataOptions("hf:org/odd-squad", question_column="q", answers_column="gold")
    assert odd_squad.task() == "question-answering" and sum(odd_squad.load_any().sizes().values()) == 40
    # a name not in the cache is left to the classification loader, which says so in one line
    assert DataOptions("hf:org/not-cached").task() == "sequence-classification"


@pytest.mark.parametrize("data, extra, task", [
    ("hf:org/tiny-ner", [], "token-classification"),
    ("hf:org/odd-ner", ["--token-column", "words2", "--tag-column", "labels2"], "token-classification"),
    ("hf:org/odd-squad", ["--question-column", "q", "--answers-column", "gold"], "question-answering"),
])
def test_the_teacher_command_trains_the_task_a_hub_dataset_holds(hub_data, tmp_path, capsys, data, extra, task):
    out = tmp_path / "teacher"
    rc = main(["teacher", "--model", str(make_bert(tmp_path / "encoder", layers=1)), "--data", data, *extra,
               "--epochs", "1", "--max-length", "32", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    meta = json.loads((out / "compress.json").read_text())
    assert meta["task"] == task and meta["data"]["source"] == data


def test_a_column_flag_naming_no_column_is_one_line(hub_data, tmp_path, capsys):
    rc = main(["teacher", "--model", str(make_bert(tmp_path / "encoder", layers=1)), "--data", "hf:org/tiny-ner",
               "--tag-column", "labels", "--epochs", "1", "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert rc == 2 and "no tag column 'labels'" in err and "--tag-column NAME" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "t").exists()


def test_a_jsonl_table_with_other_keys_is_tagging_data_by_its_flags(tmp_path):
    """The same flags name the keys of a tagged JSONL file, and say it is tagging data (its keys alone do not)."""
    from compress.config import DataOptions

    path = tmp_path / "odd.jsonl"
    path.write_text("\n".join(json.dumps({"words2": ["Ann", "Lee", "sings"], "labels2": ["B-person", "I-person", "O"]})
                              for _ in range(30)))
    assert DataOptions(str(path)).task() == "sequence-classification"
    tagged = DataOptions(str(path), token_column="words2", tag_column="labels2")
    assert tagged.task() == "token-classification" and tagged.load_any().sizes() == {"train": 24, "validation": 3,
                                                                                      "test": 3}
