"""Data loading: every reader, the fixed split, the built-in parser, and each validation error."""

import json

import pandas as pd
import pytest

from compress.tasks.tables import DynamicPaddingCollator, load_task_data, parse_movie_review_snippets, tokenize_split
from compress.core.errors import CompressError
from tests.conftest import sentiment_rows, write_csv


def _write(path, rows, kind):
    frame = pd.DataFrame(rows)
    if kind == "csv":
        frame.to_csv(path, index=False)
    elif kind == "tsv":
        frame.to_csv(path, sep="\t", index=False)
    elif kind == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    elif kind == "parquet":
        frame.to_parquet(path)
    return path


@pytest.mark.parametrize("kind", ["csv", "tsv", "jsonl", "parquet"])
def test_each_format_loads_and_splits_80_10_10(tmp_path, kind):
    path = _write(tmp_path / f"data.{kind}", sentiment_rows(100), kind)
    task = load_task_data(str(path))
    assert task.sizes() == {"train": 80, "validation": 10, "test": 10}
    assert task.label_names == ["0", "1"]
    assert set(task.splits["train"].column_names) == {"text", "label"}


def test_split_is_deterministic_and_disjoint(sentiment_csv):
    a, b = load_task_data(str(sentiment_csv)), load_task_data(str(sentiment_csv))
    assert a.fingerprint == b.fingerprint
    assert a.splits["test"]["text"][:] == b.splits["test"]["text"][:]
    c = load_task_data(str(sentiment_csv), seed=1)
    assert c.fingerprint != a.fingerprint
    n = sum(a.sizes().values())
    assert n == 240


def test_folder_with_splits_and_string_labels(tmp_path):
    rows = [{"sentence": r["text"], "sentiment": "pos" if r["label"] else "neg"} for r in sentiment_rows(60)]
    write_csv(tmp_path / "train.csv", rows[:40])
    write_csv(tmp_path / "validation.csv", rows[40:50])
    write_csv(tmp_path / "test.csv", rows[50:])
    task = load_task_data(str(tmp_path), text_column="sentence", label_column="sentiment")
    assert task.sizes() == {"train": 40, "validation": 10, "test": 10}
    assert task.label_names == ["neg", "pos"]
    assert set(task.splits["test"]["label"][:]) == {0, 1}


def test_sentence_pairs(tmp_path):
    rows = [{"premise": r["text"], "hypothesis": "it was " + ("good" if r["label"] else "bad"), "label": r["label"]}
            for r in sentiment_rows(50)]
    task = load_task_data(str(write_csv(tmp_path / "pairs.csv", rows)), text_column="premise",
                          text_pair_column="hypothesis")
    assert task.is_pair
    assert isinstance(task.texts("train")[0], tuple)


def _error(tmp_path, rows, match, name="bad.csv", **kwargs):
    path = write_csv(tmp_path / name, rows) if rows is not None else tmp_path / name
    with pytest.raises(CompressError, match=match) as info:
        load_task_data(str(path), **kwargs)
    assert name in str(info.value) or "bad" in str(info.value)
    return str(info.value)


def test_missing_text_column_names_the_option(tmp_path):
    msg = _error(tmp_path, [{"review": "x", "label": 0}] * 10, r"no column 'text'")
    assert "--text-column" in msg and "review" in msg


def test_missing_label_column(tmp_path):
    assert "--label-column" in _error(tmp_path, [{"text": "x", "y": 0}] * 10, r"no column 'label'")


def test_empty_file(tmp_path):
    (tmp_path / "bad.csv").write_text("text,label\n")
    with pytest.raises(CompressError, match="no rows"):
        load_task_data(str(tmp_path / "bad.csv"))


def test_nan_text_names_rows(tmp_path):
    rows = sentiment_rows(20)
    rows[3]["text"] = None
    assert "(line 5)" in _error(tmp_path, rows, "empty or missing text")  # the header is line 1


def test_negative_label(tmp_path):
    rows = sentiment_rows(20)
    rows[0]["label"] = -1
    _error(tmp_path, rows, "negative label -1")


def test_label_out_of_range_for_the_model(tmp_path):
    rows = sentiment_rows(20)
    rows[0]["label"] = 4
    _error(tmp_path, rows, "2 output labels", num_labels=2)


def test_fractional_label(tmp_path):
    rows = sentiment_rows(20)
    rows[3]["label"] = 0.5
    assert "at line 5" in _error(tmp_path, rows, "non-integer label")


def test_a_score_column_with_one_word_names_the_word_and_its_line(tmp_path):
    rows = [{**r, "label": 0.25 * (i % 18)} for i, r in enumerate(sentiment_rows(40))]
    rows[6]["label"] = "high"
    msg = _error(tmp_path, rows, "holds numbers, but 'high' at line 8 is text")
    assert "classes" not in msg


def test_a_file_without_a_header_or_with_another_separator_says_so(tmp_path):
    (tmp_path / "bad.csv").write_text("superb actor fine film,1\nan awful plot,0\n", encoding="utf-8")
    assert "no header line" in _error(tmp_path, None, "no column 'text'")
    (tmp_path / "bad.csv").write_text("text\tlabel\na fine film\t1\n", encoding="utf-8")
    assert "separated by tabs" in _error(tmp_path, None, "no column 'text'")
    (tmp_path / "bad.csv").write_text("text;label\na fine film;1\n", encoding="utf-8")
    assert "separated by semicolons" in _error(tmp_path, None, "no column 'text'")


def test_mixed_label_types(tmp_path):
    rows = sentiment_rows(20)
    rows[0]["label"] = "positive"
    assert "'positive' at line 2 is text" in _error(tmp_path, rows, "holds numbers, but")
    rows = [{**r, "label": "neg" if i % 2 else "pos"} for i, r in enumerate(rows)]
    rows[0]["label"] = 1
    _error(tmp_path, rows, "mixes numbers and text labels")


def test_single_class(tmp_path):
    rows = [dict(r, label=1) for r in sentiment_rows(20)]
    _error(tmp_path, rows, "single class")


def test_unseen_class_in_validation(tmp_path):
    write_csv(tmp_path / "train.csv", [{"text": "a", "label": "x"}, {"text": "b", "label": "y"}] * 5)
    write_csv(tmp_path / "validation.csv", [{"text": "c", "label": "z"}])
    with pytest.raises(CompressError, match="never occur in the training data"):
        load_task_data(str(tmp_path))


def test_missing_file_and_unknown_suffix(tmp_path):
    with pytest.raises(CompressError, match="neither a built-in dataset"):
        load_task_data(str(tmp_path / "nope.csv"))
    (tmp_path / "data.xlsx").write_text("x")
    with pytest.raises(CompressError, match="unsupported file type"):
        load_task_data(str(tmp_path / "data.xlsx"))


def test_folder_without_train(tmp_path):
    write_csv(tmp_path / "test.csv", sentiment_rows(10))
    with pytest.raises(CompressError, match="no train file"):
        load_task_data(str(tmp_path))


def test_malformed_json(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"text": "a", "label": 0}\n{not json\n')
    with pytest.raises(CompressError, match="bad.jsonl: line 2 is not valid JSON"):
        load_task_data(str(tmp_path / "bad.jsonl"))


def test_movie_review_parser(tmp_path):
    raw = ("1\t2.5\tA fine film.\r\n2\t-1.2\tA dull one.\r\n3\t0\tNeutral.\r\n"
           "4\t1.0\tA fine film.\r\n5\t-3\tAwful.\r\n")
    path = tmp_path / "snippets.txt"
    path.write_bytes(raw.encode())
    ratings: list[float] = []
    texts, labels = parse_movie_review_snippets(path, ratings)
    assert texts == ["A fine film.", "A dull one.", "Awful."]  # zero rating dropped, duplicate kept once
    assert labels == [1, 0, 0]
    assert ratings == [2.5, -1.2, -3.0]  # the first occurrence's rating, beside its sentence


def test_tokenize_and_dynamic_padding(tokenizer, sentiment_csv):
    task = load_task_data(str(sentiment_csv))
    ds = tokenize_split(task.splits["train"], tokenizer, 128, False, prefix="s_", with_length=True)
    batch = DynamicPaddingCollator({"s_": tokenizer.pad_token_id})([ds[i] for i in range(8)])
    longest = max(len(ds[i]["s_input_ids"]) for i in range(8))
    assert batch["s_input_ids"].shape == (8, longest)  # padded to the batch, not to 128
    assert batch["labels"].shape == (8,)
    assert int(batch["s_attention_mask"].sum()) == sum(len(ds[i]["s_input_ids"]) for i in range(8))


def test_truncation_is_counted(tokenizer, sentiment_csv, capsys):
    task = load_task_data(str(sentiment_csv))
    ds = tokenize_split(task.splits["train"], tokenizer, 8, False)
    assert max(len(x) for x in ds["input_ids"]) == 8
    assert "were truncated" in capsys.readouterr().err


def test_a_tokenized_split_is_fingerprinted_by_its_input_settings_and_tokenizer(tokenizer, sentiment_csv):
    """``tokenize_split`` hands ``datasets`` its own fingerprint (no dill-pickling of the tokenizer per map): equal
    for the same input, settings and tokenizer, different when any of them changes."""
    from tests.conftest import make_mpnet_tokenizer

    train = load_task_data(str(sentiment_csv)).splits["train"]
    fp = tokenize_split(train, tokenizer, 64, False)._fingerprint
    assert fp == tokenize_split(train, tokenizer, 64, False)._fingerprint
    others = {tokenize_split(train, tokenizer, 32, False)._fingerprint,
              tokenize_split(train, tokenizer, 64, False, prefix="s_")._fingerprint,
              tokenize_split(train, make_mpnet_tokenizer(), 64, False)._fingerprint,
              tokenize_split(train.select(range(10)), tokenizer, 64, False)._fingerprint}
    assert fp not in others and len(others) == 4


def test_a_broken_jsonl_line_is_named_by_its_line(tmp_path):
    lines = [json.dumps(r) for r in sentiment_rows(10)]
    lines[4] = lines[4][:-3]
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert "line 5 is not valid JSON" in _error(tmp_path, None, "not valid JSON", name="bad.jsonl")
