"""Extractive QA data: SQuAD v1.1 / v2.0 JSON, squad-shaped datasets, the split by article, the built-in
SQuAD v1.1 dev set, and one clear line for every bad input."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from compress.core.errors import CompressError
from compress.tasks.question_answering import data as qa_data
from compress.tasks.question_answering.data import examples_from_dataset, load_qa_data, read_squad_json, split_by_article, squad_dev

CONTEXT = "Paris is the capital of France. It lies on the Seine."


def _squad(articles: int = 1, version: str = "1.1") -> dict:
    """``articles`` articles of two paragraphs with two questions each (ids unique)."""
    data = []
    for a in range(articles):
        paragraphs = []
        for p in range(2):
            context = f"Article {a} paragraph {p}. " + CONTEXT
            start = context.index("Paris")
            paragraphs.append({"context": context, "qas": [
                {"id": f"q{a}-{p}-0", "question": "What is the capital of France?",
                 "answers": [{"text": "Paris", "answer_start": start}, {"text": "Paris", "answer_start": start}]},
                {"id": f"q{a}-{p}-1", "question": "Which river?",
                 "answers": [{"text": "the Seine", "answer_start": context.index("the Seine")}]},
            ]})
        data.append({"title": f"Title_{a:02d}", "paragraphs": paragraphs})
    return {"data": data, "version": version}


def _write(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def test_a_v11_file_is_read_in_the_hub_squad_shape(tmp_path):
    version, examples = read_squad_json(_write(tmp_path / "train.json", _squad(2)))
    assert version == "1.1" and len(examples) == 8
    first = examples[0]
    assert (first.id, first.title, first.question) == ("q0-0-0", "Title_00", "What is the capital of France?")
    assert first.answers == (("Paris", 23), ("Paris", 23)) and first.context[23:28] == "Paris"
    assert first.where.endswith("train.json: data[0].paragraphs[0].qas[0]")


def test_a_v20_file_keeps_unanswerable_questions_and_ignores_plausible_answers(tmp_path):
    obj = _squad(10, "v2.0")
    qa = obj["data"][3]["paragraphs"][1]["qas"][1]
    qa.update(answers=[], is_impossible=True, plausible_answers=[{"text": "nonsense", "answer_start": 999}])
    obj["data"][0]["paragraphs"][0]["qas"][0]["is_impossible"] = False
    task = load_qa_data(str(_write(tmp_path / "v2.json", obj)))
    assert task.version == "v2.0" and task.with_impossible
    rows = {r["id"]: r for s in task.splits.values() for r in s}
    assert rows["q3-1-1"]["answers"] == {"text": [], "answer_start": []}
    assert rows["q0-0-0"]["answers"]["text"] == ["Paris", "Paris"]
    assert set(rows["q0-0-0"]) == {"id", "title", "context", "question", "answers"}
    assert sum(task.sizes().values()) == 40


def test_a_file_is_split_by_article_with_a_fixed_seed(tmp_path):
    path = _write(tmp_path / "squad.json", _squad(20))
    task = load_qa_data(str(path))
    titles = {s: set(d["title"]) for s, d in task.splits.items()}
    assert {s: len(t) for s, t in titles.items()} == {"train": 16, "validation": 2, "test": 2}
    assert not (titles["train"] & titles["validation"]) and not (titles["train"] & titles["test"])
    assert not (titles["validation"] & titles["test"])
    contexts = {s: set(d["context"]) for s, d in task.splits.items()}
    assert not (contexts["train"] & (contexts["validation"] | contexts["test"]))
    assert task.notes == []
    again = load_qa_data(str(path))
    assert again.fingerprint == task.fingerprint and {s: set(d["title"]) for s, d in again.splits.items()} == titles
    assert {s: set(d["title"]) for s, d in load_qa_data(str(path), seed=1).splits.items()} != titles
    # The file's order does not matter: articles are sorted before the seeded shuffle.
    shuffled = _squad(20)
    shuffled["data"].reverse()
    other = load_qa_data(str(_write(tmp_path / "reversed.json", shuffled)))
    assert {s: set(d["title"]) for s, d in other.splits.items()} == titles


def test_articles_that_share_a_passage_stay_together():
    obj = _squad(6)
    obj["data"][5]["paragraphs"][0]["context"] = obj["data"][2]["paragraphs"][0]["context"]
    obj["data"][5]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 23
    obj["data"][5]["paragraphs"][0]["qas"][0]["answers"][1]["answer_start"] = 23
    obj["data"][5]["paragraphs"][0]["qas"][1]["answers"][0]["answer_start"] = \
        obj["data"][2]["paragraphs"][0]["qas"][1]["answers"][0]["answer_start"]
    _, examples = qa_data.examples_from_squad(obj, "x.json")
    groups = qa_data.article_groups(examples)
    assert len(groups) == 5
    assert any({examples[i].title for i in g} == {"Title_02", "Title_05"} for g in groups)
    for seed in range(5):
        splits = split_by_article(examples, seed)
        where = {e.title: s for s, ex in splits.items() for e in ex}
        assert where["Title_02"] == where["Title_05"]


def test_too_few_articles_to_split_is_one_line(tmp_path):
    with pytest.raises(CompressError, match=r"one\.json: 2 article\(s\): too few to split by article into train, "
                                            r"validation, test"):
        load_qa_data(str(_write(tmp_path / "one.json", _squad(2))))


def test_titles_that_share_passages_are_named_so_when_too_few_groups_remain(tmp_path):
    obj = _squad(4)
    context = obj["data"][0]["paragraphs"][0]["context"]
    for article in obj["data"]:
        for paragraph in article["paragraphs"]:
            paragraph["context"] = context
            for qa in paragraph["qas"]:
                for answer in qa["answers"]:
                    answer["text"], answer["answer_start"] = context[:5], 0
    with pytest.raises(CompressError, match=r"4 titles, but they share passages, so they are 1 group\(s\)"):
        load_qa_data(str(_write(tmp_path / "shared.json", obj)))


def test_a_list_of_articles_without_the_data_wrapper_says_so(tmp_path):
    from compress.cli import main

    path = _write(tmp_path / "bare.json", _squad(6)["data"])
    with pytest.raises(CompressError, match=r"bare\.json: this looks like SQuAD's list of articles without the wrapper"):
        load_qa_data(str(path))
    assert main(["teacher", "--model", str(tmp_path / "none"), "--data", str(path), "--out", str(tmp_path / "t")]) == 2


def test_a_folder_keeps_its_splits_and_notes_a_shared_passage(tmp_path):
    _write(tmp_path / "train.json", _squad(3))
    dev = _squad(1)
    for p in dev["data"][0]["paragraphs"]:
        for q in p["qas"]:
            q["id"] = "dev-" + q["id"]
    _write(tmp_path / "dev.json", dev)
    _write(tmp_path / "test.json", {"data": [], "version": "1.1"})
    with pytest.raises(CompressError, match=r"test\.json: no questions in it"):
        load_qa_data(str(tmp_path))
    (tmp_path / "test.json").unlink()
    task = load_qa_data(str(tmp_path))
    assert task.files["validation"].endswith("dev.json") and task.files["test"].endswith("train.json")
    assert task.sizes()["validation"] == 4
    assert any("a passage of" in n for n in task.notes)  # dev's passages are train's Title_00 ones


def test_a_squad_shaped_dataset_is_read_with_its_columns():
    from datasets import Dataset, DatasetDict

    rows = {"id": ["a", "b", "c"], "title": ["T1", "T2", "T3"], "context": [CONTEXT, CONTEXT + " Yes.", CONTEXT + " No."],
            "question": ["Capital?", "River?", "Moon?"],
            "answers": [{"text": ["Paris"], "answer_start": [0]},
                        {"text": ["the Seine"], "answer_start": [CONTEXT.index("the Seine")]},
                        {"text": [], "answer_start": []}]}
    task = qa_data.dataset_qa_data(DatasetDict({"train": Dataset.from_dict(rows), "extra": Dataset.from_dict(rows)}),
                                   "hf:toy")
    assert task.version == "2.0" and sum(task.sizes().values()) == 3 and task.notes == ["splits not used: extra"]
    renamed = Dataset.from_dict({"q": rows["question"], "passage": [CONTEXT] * 3, "gold": rows["answers"]})
    examples = examples_from_dataset(renamed, "hf:toy[train]", question_column="q", answers_column="gold")
    assert [e.id for e in examples] == ["1", "2", "3"] and examples[1].answers == (("the Seine", 43),)
    assert examples[0].title == examples[1].title  # one passage: one article
    with pytest.raises(CompressError, match=r"hf:toy\[train\]: no question column 'question' \(columns: q, "
                                            r"passage, gold\)\. Pass --question-column NAME"):
        examples_from_dataset(renamed, "hf:toy[train]")
    wrong = Dataset.from_dict({**rows, "answers": [{"text": ["Lyon"], "answer_start": [0]}] * 3})
    with pytest.raises(CompressError, match=r"hf:toy\[train\] row 1\.answers\[0\]: answer_start 0 does not point at "
                                            r"the answer 'Lyon'.*does not occur in the context at all"):
        examples_from_dataset(wrong, "hf:toy[train]")


def _bad(tmp_path: Path, change) -> str:
    obj = _squad(4)
    change(obj)
    path = _write(tmp_path / "bad.json", obj)
    with pytest.raises(CompressError) as err:
        read_squad_json(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}:")
    return message


def _set(path: str, value):
    """A change that sets the item at a JSON path such as data[1].paragraphs[0].context (None: delete it)."""
    def change(obj):
        parts = re.findall(r"(\w+)(?:\[(\d+)\])?", path)
        node = obj
        for k, (key, index) in enumerate(parts):
            last = k == len(parts) - 1
            if last and not index:
                if value is None:
                    del node[key]
                else:
                    node[key] = value
                return
            node = node[key]
            if index:
                if last:
                    node[int(index)] = value
                    return
                node = node[int(index)]
    return change


@pytest.mark.parametrize("path, value, expected", [
    ("data[3].paragraphs[0].qas[1].answers[0].answer_start", 3,
     r"data\[3\]\.paragraphs\[0\]\.qas\[1\]\.answers\[0\]: answer_start 3 does not point at the answer 'the Seine' "
     r"\(the context has 'icle 3 pa' there\): the text occurs at 66; set answer_start to the character offset"),
    ("data[1].paragraphs[1].qas[0].answers[1].answer_start", 500,
     r"data\[1\]\.paragraphs\[1\]\.qas\[0\]\.answers\[1\]: answer_start 500 does not point at the answer 'Paris' "
     r"\(the context has '' there\): the text occurs at 23"),
    ("data[0].paragraphs[0].qas[0].answers[0].text", "Lyon",
     r"answers\[0\]: answer_start 23 does not point at the answer 'Lyon'.*does not occur in the context at all"),
    ("data[2].paragraphs[1].context", "   ",
     r"data\[2\]\.paragraphs\[1\]\.context: the context is empty\. Give a non-empty context"),
    ("data[2].paragraphs[1].context", None,
     r"data\[2\]\.paragraphs\[1\]: no 'context' field \(fields: 'qas'\)\. Give the passage as a string"),
    ("data[0].paragraphs[1].qas[1].question", None,
     r"data\[0\]\.paragraphs\[1\]\.qas\[1\]: no 'question' field \(fields: 'id', 'answers'\)"),
    ("data[0].paragraphs[1].qas[1].id", None, r"qas\[1\]: no 'id' field.*Give each question a unique id"),
    ("data[0].paragraphs[1].qas[1].answers", None, r"qas\[1\]: no 'answers' field"),
    ("data[0].paragraphs[0].qas[0].answers[0].answer_start", None,
     r"answers\[0\]: no 'answer_start' field \(fields: 'text'\)\. Give the character offset"),
    ("data[0].paragraphs[0].qas[0].answers[0].text", None, r"answers\[0\]: no 'text' field"),
    ("data[1].paragraphs", None, r"data\[1\]: no 'paragraphs' field \(fields: 'title'\)"),
    ("data[0].paragraphs[0].qas[0].answers[0].answer_start", "22",
     r"answers\[0\]\.answer_start: expected int, got str \('22'\)"),
    ("data[0].paragraphs[0].qas[0].answers[0].answer_start", True, r"answer_start: expected int, got bool"),
    ("data[0].paragraphs[0].qas[0].answers[0].text", 5, r"answers\[0\]\.text: expected str, got int"),
    ("data[0].paragraphs[0].context", ["Paris"], r"paragraphs\[0\]\.context: expected str, got list"),
    ("data[0].paragraphs[0].qas", {"id": 1}, r"paragraphs\[0\]\.qas: expected list, got dict"),
    ("data[0].paragraphs[0].qas[0].answers", "Paris", r"qas\[0\]\.answers: expected list, got str"),
    ("data[0].paragraphs[0].qas[0].answers[0]", "Paris",
     r"answers\[0\]: expected an object with 'text' and 'answer_start', got str"),
    ("data[0].paragraphs[0].qas[0].question", "  ", r"qas\[0\]\.question: the question is empty"),
    ("data[0].paragraphs[0].qas[0].answers", [],
     r"qas\[0\]: the question has no answers\. Give at least one .* or set is_impossible: true"),
    ("data[0].paragraphs[0].qas[0].is_impossible", True,
     r"qas\[0\]: is_impossible is true but the question has 2 answer\(s\)\. Move them to plausible_answers"),
    ("data[0].paragraphs[0].qas[0].is_impossible", "yes", r"qas\[0\]\.is_impossible: expected true or false, got str"),
    ("data[2].paragraphs[1].qas[1].id", "q0-0-0",
     r"data\[2\]\.paragraphs\[1\]\.qas\[1\]\.id: the id 'q0-0-0' is used again \(first at .*data\[0\]\.paragraphs\[0\]"
     r"\.qas\[0\]\)"),
    ("data[1].title", 7, r"data\[1\]\.title: expected str, got int"),
    ("data", {"title": "x"}, r"not SQuAD-format JSON \(got an object with fields data, version\)"),
])
def test_every_bad_input_is_one_line_naming_the_json_path_and_the_fix(tmp_path, path, value, expected):
    assert re.search(expected, _bad(tmp_path, _set(path, value))), _bad(tmp_path, _set(path, value))


def test_a_file_that_is_not_json_names_its_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"data": [\n{"title": "x",}\n]}', encoding="utf-8")
    with pytest.raises(CompressError, match=r"broken\.json:2: not valid JSON \(.*\)\. A SQuAD file is one JSON object"):
        read_squad_json(path)
    with pytest.raises(CompressError, match=r"neither the built-in squad-dev nor an existing file"):
        load_qa_data(str(tmp_path / "missing.json"))


@pytest.fixture(scope="module")
def builtin():
    return squad_dev()


def test_the_builtin_squad_dev_is_the_whole_v11_dev_set_split_by_article(builtin):
    assert builtin.source == "squad-dev" and builtin.version == "1.1"
    assert sum(builtin.sizes().values()) == 10570
    titles = {s: set(d["title"]) for s, d in builtin.splits.items()}
    assert {s: len(t) for s, t in titles.items()} == {"train": 40, "validation": 4, "test": 4}
    assert len(set().union(*titles.values())) == 48
    assert titles["validation"] == {"Normans", "Black_Death", "Martin_Luther", "Oxygen"}
    assert titles["test"] == {"Pharmacy", "Sky_(United_Kingdom)", "Private_school", "Super_Bowl_50"}
    assert builtin.sizes() == {"train": 8464, "validation": 946, "test": 1160}
    contexts = [set(d["context"]) for d in builtin.splits.values()]
    assert sum(map(len, contexts)) == len(set().union(*contexts)) == 2067
    assert sum(len(a["text"]) for d in builtin.splits.values() for a in d["answers"]) == 34726
    assert not builtin.with_impossible


def test_the_builtin_files_are_checked_against_their_sha256(tmp_path, monkeypatch):
    from compress.tasks.tables import BUILTIN_DATASET_TASKS
    from compress.stages.fingerprint import data_fingerprint

    assert BUILTIN_DATASET_TASKS["squad-dev"] == "question-answering"
    from compress.tasks.tables import load_task_data

    with pytest.raises(CompressError, match=r"'squad-dev' is a question-answering set, and this stage trains and "
                                            r"scores sentence classifiers"):
        load_task_data("squad-dev")
    assert data_fingerprint("squad-dev") == ("builtin:squad-dev:bf8ebb60a161d0594f455be869ff3a476d2fe07da92ab1ecb0dea41f5"
                                             "0ea64f3:f0a16b507dbb983d1a04315b6a189e539aa15c91c4ccfb849b0392593daf80dd")
    copy_dir = tmp_path / "squad11"
    shutil.copytree(qa_data.SQUAD_DEV_DIR, copy_dir)
    part = copy_dir / qa_data.SQUAD_DEV_FILES[1]
    part.write_bytes(part.read_bytes().replace(b'"Rhine"', b'"Rhein"', 1))
    monkeypatch.setattr(qa_data, "SQUAD_DEV_DIR", copy_dir)
    with pytest.raises(CompressError, match=r"dev-v1\.1\.part2\.json: sha256 [0-9a-f]{64} does not match the recorded "
                                            r"f0a16b50.*Reinstall bert-compress"):
        squad_dev()
    part.unlink()
    with pytest.raises(CompressError, match=r"the built-in SQuAD file is missing"):
        squad_dev()


def test_a_changed_count_is_refused(builtin, monkeypatch):
    monkeypatch.setattr(qa_data, "SQUAD_DEV_QUESTIONS", 10571)
    with pytest.raises(CompressError, match=r"48 articles and 10570 questions, expected 48 and 10571"):
        squad_dev()

