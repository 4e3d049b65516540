"""What a new user hits first, fed through the command line as they would: models brought from outside with heads
never trained, a tagger's own label order, labels and files that are not what they seem. Each case checks the one
line it gets (no traceback) or the corrected result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compress.cli import main
from tests.conftest import make_tokenizer
from tests.support.squad import squad_splits
from tests.support.toy_ner import toy_sentences, write_conll

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]  # CoNLL's usual order, not sorted


def _meta(folder: Path) -> dict:
    return json.loads((folder / "compress.json").read_text(encoding="utf-8"))


def save_untrained(cls, folder: Path, labels: list[str] | None = None, positions: int = 128) -> Path:
    """A tiny BERT with a task head straight from ``cls(config)``: what ``save_pretrained`` after a conversion gives."""
    import torch
    from transformers import BertConfig

    torch.manual_seed(0)
    extra = {} if labels is None else {"id2label": dict(enumerate(labels)),
                                       "label2id": {name: i for i, name in enumerate(labels)}}
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=positions, **extra)
    cls(config).save_pretrained(folder)
    tok = make_tokenizer()
    tok.model_max_length = positions
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def conll(tmp_path_factory) -> Path:
    return write_conll(tmp_path_factory.mktemp("conll") / "train.conll", toy_sentences(160))


def test_an_untrained_tagger_is_fine_tuned_not_packaged(tmp_path, conll, capsys):
    from transformers import BertForTokenClassification

    tagger = save_untrained(BertForTokenClassification, tmp_path / "tagger", LABELS)
    assert main(["teacher", "--model", str(tagger), "--data", str(conll), "--epochs", "3", "--lr", "6e-3",
                 "--batch-size", "8", "--max-length", "48", "--out", str(tmp_path / "t")]) == 0
    out = capsys.readouterr().out
    assert "no better than chance" in out and "fine-tuning it" in out and "word-tag accuracy" in out
    meta = _meta(tmp_path / "t")
    assert meta["fine_tuned"] and meta["training"]["global_steps"] > 0
    assert meta["head_check"]["verdict"] == "untrained" and meta["head_check"]["decision"] == "fine-tuned"
    assert meta["chance_check"]["verdict"] == "trained" and meta["metrics"]["test"]["entity_f1"] > 0.8

    # the trained tagger given again keeps its head, and says that the training flags went unused
    assert main(["teacher", "--model", str(tmp_path / "t"), "--data", str(conll), "--epochs", "10",
                 "--max-length", "48", "--out", str(tmp_path / "again")]) == 0
    out = capsys.readouterr().out
    assert "kept as it is, not trained" in out and "--finetune yes" in out
    assert not _meta(tmp_path / "again")["fine_tuned"]


def test_an_untrained_reader_is_fine_tuned_and_an_untrained_teacher_refused(tmp_path, capsys):
    from transformers import BertForQuestionAnswering

    reader = save_untrained(BertForQuestionAnswering, tmp_path / "reader")
    data = squad_splits(tmp_path / "squad")
    assert main(["teacher", "--model", str(reader), "--data", str(data), "--epochs", "1", "--max-length", "48",
                 "--out", str(tmp_path / "t")]) == 0
    out = capsys.readouterr().out
    assert "no better than chance" in out and "fine-tuning it" in out and "answer-start accuracy" in out
    meta = _meta(tmp_path / "t")
    assert meta["fine_tuned"] and meta["head_check"]["decision"] == "fine-tuned"
    assert meta["chance_check"]["measure"].startswith("answer-start accuracy")

    # under --finetune no the same reader is refused in one line, nothing written
    assert main(["teacher", "--model", str(reader), "--data", str(data), "--finetune", "no", "--max-length", "48",
                 "--out", str(tmp_path / "kept")]) == 2
    err = capsys.readouterr().err
    assert "its head was never trained for this task" in err and "Traceback" not in err
    assert not (tmp_path / "kept").exists()

    # as a teacher brought from outside, distill tests it and refuses it before any work
    assert main(["distill", "--teacher", str(reader), "--data", str(data), "--student", "1x32", "--init", "random",
                 "--max-length", "48", "--epochs", "1", "--out", str(tmp_path / "student")]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "no better than chance" in line]
    assert len(lines) == 1 and "--allow-untrained-teacher" in lines[0] and not (tmp_path / "student").exists()


def test_a_tagger_with_its_own_label_order_goes_through_every_stage(tmp_path, conll, capsys):
    """A tagger brought from outside in CoNLL's order (O, B-PER, I-PER, B-LOC, I-LOC; the data's own list is sorted):
    every stage matches tags by name, and the order the tagger was built with is the one every artifact keeps."""
    from transformers import BertForTokenClassification

    from compress.runtime.predictor import Predictor

    tagger = save_untrained(BertForTokenClassification, tmp_path / "outside", LABELS)
    common = ["--max-length", "48", "--batch-size", "8"]
    run = lambda *argv: main([*map(str, argv)])  # noqa: E731
    assert run("teacher", "--model", tagger, "--data", conll, "--epochs", "3", "--lr", "6e-3", *common,
               "--out", tmp_path / "teacher") == 0
    assert _meta(tmp_path / "teacher")["label_names"] == LABELS
    assert run("distill", "--teacher", tmp_path / "teacher", "--data", conll, "--student", "1x32", "--init",
               "teacher-layers", "--epochs", "3", "--lr", "6e-3", *common, "--out", tmp_path / "student") == 0
    assert _meta(tmp_path / "student")["label_names"] == LABELS
    assert run("export", "--model", tmp_path / "teacher", "--out", tmp_path / "onnx") == 0
    assert run("quantize", "--model", tmp_path / "onnx", "--data", conll, "--max-accuracy-drop", "0.5",
               "--out", tmp_path / "int8") == 0
    assert run("optimize", "--model", tmp_path / "student", "--data", conll, "--candidates", "onnx-fp32,onnx-int8-fused",
               "--batch-sizes", "1", "--seq-len", "16", "--warmup", "1", "--runs", "2", "--max-accuracy-drop", "0.5",
               "--out", tmp_path / "optimized") == 0
    assert run("bench", tmp_path / "onnx", tmp_path / "int8", tmp_path / "optimized", "--reference", tmp_path / "teacher",
               "--data", conll, "--quick", "--threads", "1", "--no-memory", "--out", tmp_path / "bench") == 0
    rules = tmp_path / "gates.toml"
    rules.write_text("[rules]\nmax_f1_drop = 0.5\n", encoding="utf-8")
    assert run("gate", tmp_path / "bench" / "results.json", "--rules", rules) == 0
    capsys.readouterr()
    assert run("predict", "--model", tmp_path / "int8", "we flew to paris with alice") == 0
    out = capsys.readouterr().out
    assert "LOC" in out and "PER" in out
    for folder in ("int8", "optimized"):
        assert Predictor.load(tmp_path / folder).label_names == LABELS
    quality = {a["name"]: a["quality"] for a in json.loads((tmp_path / "bench" / "results.json").read_text())["artifacts"]}
    assert all(q["entity_f1"] > 0.8 for q in quality.values()), quality


# ----------------------------------------------------------------------------- class labels


def _labelled(path: Path, names: dict[int, object], n: int = 120, seed: int = 0) -> Path:
    from tests.conftest import sentiment_rows, write_csv

    return write_csv(path, [{**r, "label": names[r["label"]]} for r in sentiment_rows(n, seed=seed)])


def test_integer_labels_with_gaps_are_classes_not_indices(tmp_path, capsys):
    from compress.tasks.tables import load_task_data
    from tests.conftest import make_bert

    data = _labelled(tmp_path / "stars.csv", {0: 1, 1: 2}, n=240)
    task = load_task_data(str(data))
    assert task.label_names == ["1", "2"] and task.num_labels == 2
    assert "read as 2 class names" in capsys.readouterr().out
    # a 2-output model fits data of two classes labelled 1 and 2 (it once read "3 classes (labels 0..2)")
    model = make_bert(tmp_path / "bert", layers=2, head=True)
    assert main(["teacher", "--model", str(model), "--data", str(data), "--finetune", "yes", "--epochs", "4",
                 "--lr", "3e-3", "--batch-size", "16", "--out", str(tmp_path / "t")]) == 0
    meta = _meta(tmp_path / "t")
    assert meta["data"]["label_names"] == ["1", "2"] and meta["metrics"]["test"]["accuracy"] > 0.8

    # an integer class that only validation has is refused, as a class name is
    from tests.conftest import write_csv
    folder = tmp_path / "split"
    folder.mkdir()
    write_csv(folder / "train.csv", [{"text": "a fine film", "label": 0}, {"text": "a dull film", "label": 1}] * 5)
    write_csv(folder / "validation.csv", [{"text": "a film", "label": 2}])
    assert main(["teacher", "--model", str(model), "--data", str(folder), "--out", str(tmp_path / "u")]) == 2
    err = capsys.readouterr().err
    assert "validation.csv" in err and "['2'] that never occur in the training data" in err


def _swap_classes(trained: Path, out: Path, names: list[str]) -> Path:
    """The same classifier with its two output rows swapped and ``id2label`` set to ``names``."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(trained)
    with torch.no_grad():
        model.classifier.weight.copy_(model.classifier.weight.flip(0))
        model.classifier.bias.copy_(model.classifier.bias.flip(0))
    model.config.id2label = dict(enumerate(names))
    model.config.label2id = {n: i for i, n in enumerate(names)}
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(trained).save_pretrained(out)
    return out


def test_a_teachers_own_class_names_are_matched_by_name(tmp_path, capsys):
    from tests.conftest import make_bert, train_briefly

    trained = train_briefly(make_bert(tmp_path / "bert", layers=2, head=True), steps=40, seed=0)
    teacher = _swap_classes(trained, tmp_path / "teacher", ["pos", "neg"])  # class 0 is positive
    data = _labelled(tmp_path / "named.csv", {0: "neg", 1: "pos"})  # sorted, the data's classes are neg, pos
    args = ["--student", "1x32", "--init", "teacher-layers", "--epochs", "2", "--lr", "3e-3", "--batch-size", "16"]
    assert main(["distill", "--teacher", str(teacher), "--data", str(data), *args, "--out", str(tmp_path / "s")]) == 0
    assert "matched to --teacher" in capsys.readouterr().out
    meta = _meta(tmp_path / "s")
    assert meta["metrics"]["test"]["accuracy"] > 0.8 and meta["metrics"]["test"]["teacher_accuracy"] > 0.8
    from compress.runtime.predictor import Predictor
    assert Predictor.load(tmp_path / "s").predict(["a wonderful brilliant film"])[0] == ["pos"]

    # names the teacher does not have are one line, not a silent index match
    other = _labelled(tmp_path / "other.csv", {0: "bad", 1: "good"})
    assert main(["distill", "--teacher", str(teacher), "--data", str(other), *args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "'bad', 'good' that --teacher" in err and "its classes: pos, neg" in err and not (tmp_path / "o").exists()


def test_a_tagger_teacher_on_classification_data_is_one_line(tmp_path, conll, capsys):
    from transformers import BertForTokenClassification

    tagger = save_untrained(BertForTokenClassification, tmp_path / "tagger", LABELS)
    data = _labelled(tmp_path / "data.csv", {0: 0, 1: 1})
    assert main(["distill", "--teacher", str(tagger), "--data", str(data), "--student", "1x32",
                 "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "ignore_mismatched_sizes" not in err and "tagger" in err


def test_texts_longer_than_the_position_table_are_read_in_its_windows(tmp_path, capsys):
    """A 64-position model under a 512-token tokenizer, texts of ~150 tokens: teacher and distill cap the window at
    the model's 64 positions (it once crashed in the forward pass), with a note, and record what they read."""
    from tests.conftest import make_bert, sentiment_rows, write_csv

    model = make_bert(tmp_path / "bert64", layers=2, max_positions=64, model_max_length=512)
    data = write_csv(tmp_path / "long.csv", [{**r, "text": " ".join([r["text"]] * 20)} for r in sentiment_rows(80)])
    assert main(["teacher", "--model", str(model), "--data", str(data), "--max-length", "512", "--epochs", "1",
                 "--out", str(tmp_path / "t")]) == 0
    assert "--max-length 512 is longer than --model" in capsys.readouterr().out
    assert _meta(tmp_path / "t")["config"]["max_length"] == 64
    assert main(["distill", "--teacher", str(tmp_path / "t"), "--data", str(data), "--student", "1x32", "--init",
                 "random", "--epochs", "1", "--allow-untrained-teacher", "--out", str(tmp_path / "s")]) == 0
    assert _meta(tmp_path / "s")["config"]["max_length"] <= 64


# ----------------------------------------------------------------------------- paths


@pytest.mark.parametrize("where", ["under-a-file", "proc", "a-file"])
def test_an_out_path_that_cannot_be_a_folder_is_one_line_before_any_work(tmp_path, capsys, where):
    from tests.conftest import make_bert, sentiment_rows, write_csv

    blocker = tmp_path / "file.txt"
    blocker.write_text("x", encoding="utf-8")
    out = {"under-a-file": blocker / "out", "proc": Path("/proc/bert-compress-out"), "a-file": blocker}[where]
    data = write_csv(tmp_path / "d.csv", sentiment_rows(40))
    model = make_bert(tmp_path / "bert", layers=1)
    capsys.readouterr()
    for argv in (["teacher", "--model", str(model), "--data", str(data), "--out", str(out)],
                 ["export", "--model", str(model), "--out", str(out)],
                 ["bench", str(model), "--reference", str(model), "--data", str(data), "--quick", "--out", str(out)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: --out") and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert "fine-tuning" not in err


def test_a_cache_folder_that_cannot_be_made_is_one_line(tmp_path, capsys, monkeypatch):
    from tests.conftest import make_bert

    blocker = tmp_path / "file.txt"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv("BERT_COMPRESS_CACHE", str(blocker / "cache"))
    model = make_bert(tmp_path / "bert", layers=1)
    capsys.readouterr()
    assert main(["export", "--model", str(model), "--out", str(tmp_path / "onnx")]) == 2
    err = capsys.readouterr().err
    assert "BERT_COMPRESS_CACHE=" in err and "Traceback" not in err and not (tmp_path / "onnx").exists()


# ----------------------------------------------------------------------------- predict


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> Path:
    from tests.conftest import make_bert, train_briefly

    return train_briefly(make_bert(tmp_path_factory.mktemp("clf") / "bert", layers=2, head=True), steps=30)


def test_predict_refuses_an_empty_text_and_reads_standard_input_for_a_dash(classifier, capsys, monkeypatch):
    import io

    capsys.readouterr()
    assert main(["predict", "--model", str(classifier), "a fine film", ""]) == 2
    assert "text 2 is empty" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", io.StringIO("a wonderful film\n\n  \na dull boring film\n"))
    assert main(["predict", "--model", str(classifier), "-"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "\t" in line]
    assert [line.split("\t")[-1] for line in lines] == ["a wonderful film", "a dull boring film"]
    assert main(["predict", "--model", str(classifier), "--word-tags", "a fine film"]) == 2
    assert "--word-tags is for a tagger" in capsys.readouterr().err


def test_limit_zero_is_refused_not_read_as_no_limit(classifier, tmp_path, capsys):
    from tests.conftest import sentiment_rows, write_csv

    data = write_csv(tmp_path / "d.csv", sentiment_rows(40))
    assert main(["teacher", "--model", str(classifier), "--data", str(data), "--limit", "0",
                 "--out", str(tmp_path / "t")]) == 2
    assert "--limit must be >= 1" in capsys.readouterr().err and not (tmp_path / "t").exists()


# ----------------------------------------------------------------------------- data files through the CLI


def _csv_rows(n: int = 40) -> list[str]:
    from tests.conftest import sentiment_rows

    return [f"{r['text']},{r['label']}" for r in sentiment_rows(n)]


DATA_CASES = {
    "no header": ("bad.csv", lambda: "\n".join(_csv_rows()), "seems to have no header line"),
    "tabs in a .csv": ("bad.csv", lambda: "text\tlabel\n" + "\n".join(r.replace(",", "\t") for r in _csv_rows()),
                       "separated by tabs"),
    "semicolons": ("bad.csv", lambda: "text;label\n" + "\n".join(r.replace(",", ";") for r in _csv_rows()),
                   "separated by semicolons"),
    "a word among scores": ("bad.csv", lambda: "text,label\n" + "\n".join(
        [f"{r.rsplit(',', 1)[0]},{0.25 * (i % 18)}" for i, r in enumerate(_csv_rows())][:6] + ["a film,high"]
        + [f"{r.rsplit(',', 1)[0]},{0.5}" for r in _csv_rows()[:30]]), "holds numbers, but 'high' at line 8 is text"),
    "empty text": ("bad.csv", lambda: "text,label\n" + "\n".join(_csv_rows()[:3] + [",1"] + _csv_rows()[3:]),
                   "(line 5)"),
    "broken jsonl": ("bad.jsonl", lambda: "\n".join(
        [json.dumps({"text": r.rsplit(",", 1)[0], "label": int(r[-1])}) for r in _csv_rows()][:4] + ['{"text": "x",']),
        "line 5 is not valid JSON"),
    "squad without wrapper": ("bad.json", lambda: json.dumps([{"title": "T", "paragraphs": [
        {"context": "Paris is in France.", "qas": [{"id": "1", "question": "Where?",
                                                    "answers": [{"text": "France", "answer_start": 12}]}]}]}]),
        "without the wrapper"),
}


@pytest.mark.parametrize("case", list(DATA_CASES))
def test_bad_data_files_are_one_line_through_the_command_line(tmp_path, capsys, case):
    from tests.conftest import make_bert

    name, text, expected = DATA_CASES[case]
    path = tmp_path / name
    path.write_text(text(), encoding="utf-8")
    model = make_bert(tmp_path / "bert", layers=1)
    capsys.readouterr()
    assert main(["teacher", "--model", str(model), "--data", str(path), "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert expected in err and str(path) in err and "Traceback" not in err, err
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1
    assert not (tmp_path / "t").exists()


# ----------------------------------------------------------------------------- what is said, once


def test_the_iob1_note_is_said_once_by_a_teacher_that_reads_its_file_twice(tmp_path, capsys):
    """A tagger in CoNLL order makes the teacher read its IOB1 file twice (once more in the head's tag order)."""
    from transformers import BertForTokenClassification

    sentences = toy_sentences(120, seed=4)
    iob1 = [(w, [t.replace("B-", "I-") for t in tags]) for w, tags in sentences]  # single-word names: I- opens
    data = write_conll(tmp_path / "iob1.conll", iob1)
    tagger = save_untrained(BertForTokenClassification, tmp_path / "tagger", LABELS)
    capsys.readouterr()
    assert main(["teacher", "--model", str(tagger), "--data", str(data), "--epochs", "1", "--max-length", "48",
                 "--out", str(tmp_path / "t")]) == 0
    assert capsys.readouterr().err.count("tags read as IOB1") == 1


def test_help_names_the_tasks(capsys):
    for argv in (["--help"], ["teacher", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        text = " ".join(capsys.readouterr().out.split())
        assert "tagger" in text and "QA reader" in text and "sequence classifier (the teacher)" not in text


def test_gate_lists_every_bad_rule_through_the_command_line(tmp_path, capsys):
    rules = tmp_path / "gates.toml"
    rules.write_text("[rules]\nmax_latency_ms = 20\nmax_model_mb = 50\n", encoding="utf-8")
    results = tmp_path / "results.json"
    results.write_text("{}", encoding="utf-8")
    assert main(["gate", str(results), "--rules", str(rules)]) == 3
    err = capsys.readouterr().err
    assert "'max_p50_ms'" in err and "'max_size_mb'" in err and "Traceback" not in err


def test_squad_titles_sharing_passages_through_the_command_line(tmp_path, capsys):
    context = "Paris is the capital of France and the Seine runs through it."
    data = {"version": "1.1", "data": [{"title": f"T{a}", "paragraphs": [{"context": context, "qas": [
        {"id": f"q{a}", "question": "What is the capital?", "answers": [{"text": "Paris", "answer_start": 0}]}]}]}
        for a in range(5)]}
    path = tmp_path / "shared.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert main(["teacher", "--model", str(tmp_path / "nope"), "--data", str(path), "--out", str(tmp_path / "t")]) == 2
    assert "5 titles, but they share passages, so they are 1 group(s)" in capsys.readouterr().err
