"""Token-classification data: CoNLL, JSONL, hub datasets, the built-in WNUT-17, and every bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from compress.core.errors import CompressError
from compress.tasks.token_classification import data as token_data
from compress.tasks.token_classification.data import load_token_data, read_conll

TRAIN = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _sentences(n: int, start: int = 0) -> str:
    """n two-word sentences, tab-separated, each with one two-word entity or none."""
    out = []
    for i in range(start, start + n):
        if i % 3 == 0:
            out.append(f"word{i}\tO\nthing{i}\tO\n")
        else:
            kind = "person" if i % 3 == 1 else "location"
            out.append(f"Name{i}\tB-{kind}\nMore{i}\tI-{kind}\n")
    return "\n".join(out)


def test_conll_columns_docstart_and_separators(tmp_path):
    four = read_conll(_write(tmp_path / "a.conll", TRAIN))
    assert [s.tokens for s in four] == [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]]
    assert [s.tags for s in four] == [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER"]]
    assert four[0].lines == [3, 4, 5, 6] and four[1].line == 8
    # Tabs (a word may hold a space then), CRLF, a BOM, a tab-only separator line, repeated blank lines.
    raw = "\ufeffNew York\tB-location\r\nis\tO\r\n\t\r\n\r\n\r\nhi\tO\r\n"
    (tmp_path / "b.tsv").write_bytes(raw.encode("utf-8"))
    tabs = read_conll(tmp_path / "b.tsv")
    assert [s.tokens for s in tabs] == [["New York", "is"], ["hi"]] and tabs[1].line == 6


def test_label_list_from_train_with_o_first_and_every_prefix(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    _write(folder / "train.conll", "Ann\tB-person\nin\tO\nParis\tB-location\n\nBo\tB-person\nLee\tI-person\n")
    _write(folder / "dev.conll", "Rome\tB-location\nCity\tI-location\n")  # I-location never occurs in train
    _write(folder / "test.conll", "Al\tB-person\n")
    task = load_token_data(str(folder))
    assert task.label_names == ["O", "B-location", "I-location", "B-person", "I-person"]
    assert task.sizes() == {"train": 2, "validation": 1, "test": 1}
    assert task.tags("validation") == [["B-location", "I-location"]]
    assert task.scheme == "iob2" and task.problems == [] and task.entity_types == ["location", "person"]
    assert task.files["validation"].endswith("dev.conll")
    assert task.describe()["label_names"] == task.label_names and len(task.fingerprint) == 64


def test_a_single_file_is_split_80_10_10_with_a_fixed_seed(tmp_path):
    path = _write(tmp_path / "all.conll", _sentences(50))
    first, again = load_token_data(str(path), seed=1), load_token_data(str(path), seed=1)
    assert first.sizes() == {"train": 40, "validation": 5, "test": 5}
    assert first.splits["test"]["tokens"][:] == again.splits["test"]["tokens"][:]
    assert first.splits["test"]["tokens"][:] != load_token_data(str(path), seed=2).splits["test"]["tokens"][:]


def test_bioes_is_detected(tmp_path):
    path = _write(tmp_path / "t.bioes", "Ann\tS-person\nof\tO\nNew\tB-location\nYork\tE-location\n\n" + _sentences(20))
    task = load_token_data(str(path))
    assert task.scheme == "bioes"
    assert task.label_names == ["O", "B-location", "I-location", "E-location", "S-location", "B-person", "I-person",
                                "E-person", "S-person"]
    with pytest.raises(CompressError, match=r"t\.bioes:1: tag 'S-person' belongs to BIOES.*scheme iob2"):
        load_token_data(str(path), scheme="iob2")


def test_invalid_sequences_are_reported_with_file_and_line_not_repaired(tmp_path, capsys):
    text = ("Ann\tO\nLee\tI-person\n\n"            # I-X after O (line 2)
            "Big\tB-group\nApple\tI-location\n\n"  # I-X after B-Y (line 5)
            + _sentences(20))
    path = _write(tmp_path / "bad.conll", text)
    task = load_token_data(str(path))
    assert task.problems == [f"{path}:2: I-person follows O; an entity starts with B-person",
                             f"{path}:5: I-location follows B-group; an entity starts with B-location"]
    err = capsys.readouterr().err
    assert "2 invalid IOB2 tag sequence(s), kept as they are" in err and f"{path}:2" in err
    everything = {tuple(t) for split in ("train", "validation", "test") for t in task.tags(split)}
    assert ("O", "I-person") in everything and ("B-group", "I-location") in everything  # kept, not repaired
    assert task.describe()["invalid_sequences"] == 2
    with pytest.raises(CompressError, match=rf"{path}:2: I-person follows O.*2 invalid tag sequence\(s\) in all"):
        load_token_data(str(path), strict=True)


def test_invalid_bioes_sequences(tmp_path):
    path = _write(tmp_path / "b.conll", "New\tB-location\nin\tO\n\nYork\tI-location\n\nAnn\tS-person\n")
    folder = tmp_path / "f"
    folder.mkdir()
    shutil.copy(path, folder / "train.conll")
    _write(folder / "dev.conll", "Al\tS-person\n")
    _write(folder / "test.conll", "Al\tS-person\n")
    problems = load_token_data(str(folder)).problems
    train = folder / "train.conll"
    assert problems == [f"{train}:2: O follows B-location; the location entity must end with E-location",
                        f"{train}:4: I-location follows the sentence start; an entity starts with B-location "
                        "(or S- for one word)",
                        f"{train}:4: the sentence ends inside a location entity; its last word is tagged E-location "
                        "(or S-location for one word)"]


@pytest.mark.parametrize("text, message", [
    ("Ann\tB-person\nParis\n", r"x\.conll:2: the word 'Paris' has no tag: a CoNLL line is WORD"),
    ("Ann\tB-person\nParis\t\n", r"x\.conll:2: the word 'Paris' has no tag"),
    ("Ann\tB-person\n\tO\n", r"x\.conll:2: the tag 'O' has no word"),
    ("Ann\tPER\n", r"x\.conll:1: tag 'PER' is not a BIO/BIOES tag .*Convert the tags to IOB2 or BIOES"),
    ("Ann NNP\n", r"x\.conll:1: tag 'NNP' is not a BIO/BIOES tag .*move it there"),
    ("\n\n-DOCSTART- O\n\n", r"x\.conll: no sentences in it"),
    ("Ann\tO\nis\tO\n", r"x\.conll: every tag is O"),
])
def test_bad_conll_is_one_line_naming_file_and_line(tmp_path, text, message):
    with pytest.raises(CompressError, match=message) as info:
        load_token_data(str(_write(tmp_path / "x.conll", text)))
    assert "\n" not in str(info.value)


def test_a_tag_outside_the_label_list_names_file_and_line(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    _write(folder / "train.conll", _sentences(6))
    _write(folder / "validation.conll", "a\tO\n\nb\tO\nAcme\tB-corporation\n")
    with pytest.raises(CompressError, match=r"validation\.conll:4: tag 'B-corporation' is not in the label list "
                                            r"\(O, B-location, I-location, B-person, I-person\) taken from the "
                                            r"training data .*train\.conll\. Every entity type needs training"):
        load_token_data(str(folder))
    # The same with a label list given (a teacher's tags): a tag outside it is refused too.
    with pytest.raises(CompressError, match=r"train\.conll:4: tag 'B-person' is not in the label list \(O, B-location, "
                                            r"I-location\) that was given\."):
        load_token_data(str(folder), label_names=["O", "B-location", "I-location"])


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_jsonl_sentences(tmp_path):
    rows = [{"tokens": ["Ann", "Lee", "sings"], "tags": ["B-person", "I-person", "O"]}] * 10
    rows.append({"words": ["x"], "labels": ["O"], "tokens": ["Paris"], "tags": ["B-location"]})
    task = load_token_data(str(_jsonl(tmp_path / "s.jsonl", rows)))
    assert task.label_names == ["O", "B-location", "I-location", "B-person", "I-person"]
    assert sum(task.sizes().values()) == 11
    other = _jsonl(tmp_path / "o.jsonl", [{"w": ["Ann", "x"], "t": [3, 0]}] * 10)
    named = load_token_data(str(other), token_column="w", tag_column="t", label_names=["O", "B-x", "I-x", "B-person"])
    assert named.tags("train")[0] == ["B-person", "O"]


@pytest.mark.parametrize("row, message", [
    ({"tokens": ["Ann", "Lee", "sings"], "tags": ["B-person", "O"]},
     r"s\.jsonl:2: 3 words but 2 tags\. Give exactly one tag per word"),
    ({"tokens": [], "tags": []}, r"s\.jsonl:2: an empty sentence \(no words\)"),
    ({"tokens": ["Ann"], "label": ["O"]}, r"s\.jsonl:2: no 'tags' key \(keys: 'tokens', 'label'\)\. Name the key "
                                         r"with --tag-column"),
    ({"tokens": ["Ann", ""], "tags": ["O", "O"]}, r"s\.jsonl:2: word 1 is '', not a non-empty string"),
    ({"tokens": "Ann Lee", "tags": "B-person I-person"}, r"s\.jsonl:2: 'tokens' and 'tags' must both be lists"),
    ({"tokens": ["Ann"], "tags": [1]}, r"s\.jsonl:2: 'tags' holds integer tag ids but no label names"),
    ('{"tokens": ["Ann"], "tags": ["O"]', r"s\.jsonl:2: not valid JSON"),
    ({"tokens": ["Ann", "Lee"], "tags": ["B-person", "X-person"]},
     r"s\.jsonl:2 \(word 2, 'Lee'\): tag 'X-person' is not a BIO/BIOES tag"),
])
def test_bad_jsonl_is_one_line_naming_file_and_line(tmp_path, row, message):
    good = {"tokens": ["Ann"], "tags": ["B-person"]}
    with pytest.raises(CompressError, match=message) as info:
        load_token_data(str(_jsonl(tmp_path / "s.jsonl", [good, row, good])))
    assert "\n" not in str(info.value)


def test_unsupported_suffix_and_missing_data(tmp_path):
    with pytest.raises(CompressError, match=r"unsupported file type '\.csv' for token classification"):
        load_token_data(str(_write(tmp_path / "x.csv", "a,b\n")))
    for missing in (str(tmp_path / "nope" / "x.conll"), "typo.conll", "typo.jsonl"):
        with pytest.raises(CompressError, match=r"neither a built-in tagging set \(wnut17, wikigold\) nor an existing"):
            load_token_data(missing)


def _ner_dataset(n: int, offset: int = 0):
    from datasets import ClassLabel, Dataset, Features, List, Value

    names = ["O", "B-person", "I-person"]
    features = Features({"id": Value("string"), "tokens": List(Value("string")), "ner_tags": List(ClassLabel(names=names))})
    rows = [{"id": str(i), "tokens": [f"Ann{i}", "Lee", "sings"], "ner_tags": [1, 2, 0] if i % 2 else [0, 0, 0]}
            for i in range(offset, offset + n)]
    return Dataset.from_list(rows, features=features)


def test_dataset_columns_are_picked_and_classlabel_names_used():
    from datasets import DatasetDict

    dd = DatasetDict({"train": _ner_dataset(20), "validation": _ner_dataset(4, 100), "test": _ner_dataset(4, 200),
                      "extra": _ner_dataset(2)})
    task = token_data.dataset_token_data(dd, "mem")
    assert task.label_names == ["O", "B-person", "I-person"] and task.sizes() == {"train": 20, "validation": 4, "test": 4}
    assert task.tags("train")[1] == ["B-person", "I-person", "O"] and task.notes == ["splits not used: extra"]
    assert token_data.pick_columns(["words", "ner"], "x") == ("words", "ner")
    with pytest.raises(CompressError, match=r"mem\[train\]: no tag column 'labels' \(columns: id, tokens, ner_tags\)\. Pass "
                                            r"--tag-column NAME"):
        token_data.dataset_token_data(dd, "mem", tag_column="labels")
    bad = DatasetDict({"train": _ner_dataset(3).map(lambda r: {"tokens": r["tokens"][:2]})})
    with pytest.raises(CompressError, match=r"mem\[train\] row 1: 2 words but 3 tags"):
        token_data.dataset_token_data(bad, "mem")


def test_hub_dataset_through_the_offline_cache(tmp_path, monkeypatch):
    from tests.support.hf_cache import add_dataset

    cache = tmp_path / "datasets"
    add_dataset(cache, "org/tiny-ner", {"train": _ner_dataset(30), "test": _ner_dataset(6, 50)})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    task = load_token_data("hf:org/tiny-ner")
    # validation is carved out of train (10%), the test split kept as it is.
    assert task.sizes() == {"train": 27, "validation": 3, "test": 6}
    assert task.label_names == ["O", "B-person", "I-person"] and task.source == "hf:org/tiny-ner"


def test_builtin_wnut17():
    task = load_token_data("wnut17")
    assert task.sizes() == {"train": 3394, "validation": 1009, "test": 1287}
    assert task.entity_types == ["corporation", "creative-work", "group", "location", "person", "product"]
    assert task.label_names[0] == "O" and task.num_labels == 13 and task.scheme == "iob2"
    assert task.problems == []
    first = task.splits["train"][0]
    assert first["tokens"][:3] == ["@paulwalk", "It", "'s"] and first["line"] == 1
    assert task.tags("train")[0][14:17] == ["B-location", "I-location", "I-location"]  # Empire State Building


def test_builtin_wikigold_keeps_each_article_in_one_split():
    task = load_token_data("wikigold")
    assert task.sizes() == {"train": 1335, "validation": 178, "test": 183}  # a tenth of 1,696 sentences held out
    assert task.entity_types == ["LOC", "MISC", "ORG", "PER"] and task.converted_from == "iob1"
    assert task.scheme == "iob2" and task.problems == []
    lines = {split: set(task.splits[split]["line"]) for split in ("train", "validation", "test")}
    starts = [0] + [i for i, line in enumerate(token_data.WIKIGOLD_FILE.read_text().splitlines(), 1)
                    if line.startswith("-DOCSTART-")]
    article_of = lambda line: sum(start < line for start in starts)  # noqa: E731
    owners = {split: {article_of(line) for line in lines[split]} for split in lines}
    assert not owners["train"] & owners["test"] and not owners["train"] & owners["validation"]
    assert not owners["validation"] & owners["test"] and len(set().union(*owners.values())) == 145
    again, other = load_token_data("wikigold"), load_token_data("wikigold", seed=1)
    assert again.fingerprint == task.fingerprint and other.fingerprint != task.fingerprint
    assert sum(other.sizes().values()) == 1696
    opening = next(row for split in task.splits.values() for row in split if row["line"] == 1)
    assert opening["tokens"][:4] == ["010", "is", "the", "tenth"]  # IOB1 "010 I-MISC" read as B-MISC
    assert task.label_names[opening["tags"][0]] == "B-MISC"


def test_wnut17_is_checked_against_its_sha256(tmp_path, monkeypatch):
    copy = tmp_path / "wnut17"
    shutil.copytree(token_data.WNUT17_DIR, copy)
    dev = copy / "emerging.dev.conll"
    dev.write_bytes(dev.read_bytes().replace(b"B-person", b"B-persom", 1))
    monkeypatch.setattr(token_data, "WNUT17_DIR", copy)
    with pytest.raises(CompressError, match=r"emerging\.dev\.conll: sha256 \w+ does not match the recorded e053b752"):
        token_data.wnut17()
    dev.unlink()
    with pytest.raises(CompressError, match="missing from the installed package"):
        token_data.wnut17()


def test_wnut17_is_a_registered_builtin_of_the_tagging_task():
    from compress.tasks.tables import BUILTIN_DATASET_TASKS, BUILTIN_DATASETS, load_task_data
    from compress.stages.fingerprint import data_fingerprint

    assert "wnut17" in BUILTIN_DATASETS and BUILTIN_DATASET_TASKS["wnut17"] == "token-classification"
    with pytest.raises(CompressError, match="'wnut17' is a token-classification .* this stage trains and scores "
                                            "sentence classifiers"):
        load_task_data("wnut17")
    assert data_fingerprint("wnut17").startswith("builtin:wnut17:") and "731820e1" in data_fingerprint("wnut17")
    assert BUILTIN_DATASET_TASKS["wikigold"] == "token-classification" and "wikigold" in BUILTIN_DATASETS
    assert data_fingerprint("wikigold") == "builtin:wikigold:c797a64d0cf73ed058363f77671486bcfd413e70fda1726ad4a6ba624455225f"


def test_wikigold_is_checked_against_its_sha256(tmp_path, monkeypatch):
    copy = tmp_path / "wikigold.conll.txt"
    copy.write_bytes(token_data.WIKIGOLD_FILE.read_bytes().replace(b"I-PER", b"I-PRE", 1))
    monkeypatch.setattr(token_data, "WIKIGOLD_FILE", copy)
    with pytest.raises(CompressError, match=r"wikigold\.conll\.txt: sha256 \w+ does not match the recorded c797a64d"):
        token_data.wikigold()


# IOB1 (CoNLL-2003's original files, WikiGold): I- opens an entity, B- only right after another of the same type.
IOB1 = ("The\tO\nMad\tI-ORG\nCapsule\tI-ORG\nMarkets\tI-ORG\n.\tO\n\n"
        "Ann\tI-PER\nBob\tB-PER\nLee\tI-PER\nin\tO\nParis\tI-LOC\nFC\tI-ORG\n\n")


def test_an_iob1_file_is_read_as_iob1_and_converted_to_iob2_with_the_same_entities(tmp_path, capsys):
    path = _write(tmp_path / "wiki.conll", IOB1 * 10)
    task = load_token_data(str(path))
    assert task.scheme == "iob2" and task.converted_from == "iob1" and task.problems == []
    assert task.label_names == ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    converted = {tuple(t) for split in ("train", "validation", "test") for t in task.tags(split)}
    assert converted == {("O", "B-ORG", "I-ORG", "I-ORG", "O"),
                         ("B-PER", "B-PER", "I-PER", "O", "B-LOC", "B-ORG")}  # Ann | Bob Lee: two people
    assert task.describe()["converted_from"] == "iob1" and "read as IOB1" in task.notes[0]
    err = capsys.readouterr().err
    assert "tags read as IOB1" in err and "invalid" not in err


@pytest.mark.parametrize("seed", range(5))
def test_iob1_conversion_keeps_seqeval_s_iob1_entities(seed):
    """On random IOB1 sequences, the entities of the converted tags (our decoder) are seqeval's strict IOB1 ones."""
    import random

    from seqeval.scheme import IOB1 as SEQEVAL_IOB1, Entities

    from compress.tasks.token_classification.metrics import extract_entities

    rng = random.Random(seed)
    for _ in range(200):
        tags, before = [], ""
        for _ in range(rng.randint(1, 12)):
            type_ = rng.choice(["A", "B"])
            # B- only right after a tag of the same type: the IOB1 rule
            choices = ["O", f"I-{type_}"] + ([f"B-{type_}"] if before == type_ else [])
            tag = rng.choice(choices)
            tags.append(tag)
            before = tag[2:] if tag != "O" else ""
        sentence = token_data.Sentence([f"w{i}" for i in range(len(tags))], tags, list(range(1, len(tags) + 1)))
        ours = [(e.start, e.end, e.type) for e in extract_entities(token_data.iob1_to_iob2(sentence).tags)]
        theirs = [(e.start, e.end, e.tag) for e in Entities([tags], SEQEVAL_IOB1).entities[0]]
        assert ours == theirs, tags


def test_a_file_where_b_opens_entities_too_stays_iob2_and_b_after_o_is_an_iob1_error_when_asked(tmp_path):
    mixed = _write(tmp_path / "mixed.conll", "Ann\tI-PER\nx\tO\n\nBo\tB-PER\ny\tO\n\n" * 10)
    task = load_token_data(str(mixed))  # I- and B- both open entities: IOB2 with invalid sequences, reported
    assert task.scheme == "iob2" and task.converted_from == "" and len(task.problems) == 10
    asked = load_token_data(str(mixed), scheme="iob1")
    assert asked.converted_from == "iob1" and len(asked.problems) == 10
    assert asked.problems[0].endswith(":4: B-PER follows the sentence start; in IOB1 an entity starts with I-PER "
                                      "(B-PER only right after another PER entity)")
    with pytest.raises(CompressError, match=r"mixed\.conll:4: B-PER follows the sentence start"):
        load_token_data(str(mixed), scheme="iob1", strict=True)
    bioes = _write(tmp_path / "t.bioes", "Ann\tS-PER\n\n" * 10)
    with pytest.raises(CompressError, match=r"belongs to BIOES, but the scheme iob1 was asked"):
        load_token_data(str(bioes), scheme="iob1")
