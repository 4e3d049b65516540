"""The teacher stage on question-answering data: a tiny span reader trained on SQuAD-format files.

The synthetic passages hide the answer (one of ten colour words, at a random place among filler
words) after "the key is"; passages are longer than the 48-token window, so questions are read in
several windows and some windows hold no answer (their gold position is [CLS]). A reader that
learns must then point at the colour's characters exactly: exact match 1.0 needs the positions,
the window merging and the offsets back into the passage all right. The untrained reader scores
far below.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compress.config import DataOptions, TeacherConfig, TrainSettings
from tests.conftest import make_bert

from tests.support.squad import squad_splits


@pytest.fixture(scope="module")
def squad_folder(tmp_path_factory) -> Path:
    return squad_splits(tmp_path_factory.mktemp("squad"))


def test_squad_files_and_folders_are_question_answering_data(squad_folder, tmp_path):
    from compress.tasks.task_choice import QA, SEQUENCE, data_task

    assert data_task(str(squad_folder)) == QA and data_task(str(squad_folder / "train.json")) == QA
    assert data_task("squad-dev") == QA
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"rows": [{"text": "a", "label": 0}]}))
    assert data_task(str(other)) == SEQUENCE


@pytest.fixture(scope="module")
def reader(squad_folder, tmp_path_factory):
    """``(encoder folder, trained reader folder, config)``: the teacher stage on the synthetic SQuAD folder."""
    from compress.stages.teacher import train_teacher

    root = tmp_path_factory.mktemp("reader")
    encoder = make_bert(root / "encoder", layers=2)
    cfg = TeacherConfig(model=str(encoder), data=DataOptions(str(squad_folder)), max_length=48,
                        train=TrainSettings(epochs=2, lr=3e-3, batch_size=16, logging_steps=1000))
    return encoder, train_teacher(cfg, root / "teacher"), cfg


def test_a_span_reader_teacher_learns_to_point_at_the_answer(reader):
    from compress.tasks.question_answering.teacher import load_qa_task, qa_stride, qa_training_rows, score_reader
    from compress.runtime.modeling import load_classifier

    encoder, out, cfg = reader
    data = load_qa_task(cfg)
    untrained, tok, has_head = load_classifier(encoder, task="question-answering")
    assert not has_head
    rows = qa_training_rows(data.splits["train"], tok, 48, qa_stride(48))
    assert len(rows) > 200 and 0 in rows["start_positions"]  # long passages: several windows, some without the answer
    before = score_reader(untrained, tok, {"test": data.splits["test"]}, {"test": data.gold_answers("test")}, 48,
                          qa_stride(48), False).metrics["test"]
    assert before["exact_match"] < 0.3

    meta = json.loads((out / "compress.json").read_text())
    assert meta["task"] == "question-answering" and meta["stride"] == 16 and meta["fine_tuned"] is True
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForQuestionAnswering"]
    test = meta["metrics"]["test"]
    assert test["exact_match"] > 0.9 and test["f1"] >= test["exact_match"] and test["windows"] > test["questions"] == 40
    epochs = meta["training"]["validation_by_epoch"]
    assert len(epochs) == 2 and epochs[-1]["validation_f1"] == pytest.approx(meta["metrics"]["validation"]["f1"], abs=1e-4)
    assert meta["data"]["task"] == "question-answering" and meta["data"]["sizes"]["train"] == 200
    assert not (out.parent / "teacher.checkpoints").exists()


def test_keep_best_writes_the_reader_of_its_best_validation_epoch(reader, tmp_path):
    """``--keep-best`` on a reader: the weights written are those of the epoch with the best validation F1,
    which the written reader scores again; compress.json names the epoch."""
    from dataclasses import replace

    from compress.stages.teacher import train_teacher

    encoder, _, cfg = reader
    cfg = replace(cfg, train=replace(cfg.train, epochs=3, keep_best=True))
    meta = json.loads((train_teacher(cfg, tmp_path / "teacher") / "compress.json").read_text())
    epochs = meta["training"]["validation_by_epoch"]
    best = max(epochs, key=lambda e: e["validation_f1"])
    assert meta["training"]["kept_epoch"]["epoch"] == best["epoch"] and len(epochs) == 3
    assert meta["metrics"]["validation"]["f1"] == pytest.approx(best["validation_f1"], abs=1e-4)


def test_doc_stride_sets_the_readers_passage_windows_and_is_served(reader, squad_folder, tmp_path, capsys):
    """``--doc-stride`` (``--stride``): the reader trains and is scored on passage windows that overlap by it,
    records it, and ``Predictor`` serves with it; a stride its window cannot hold is one line before any work."""
    from compress.cli import main
    from compress.tasks.question_answering.teacher import load_qa_task, qa_training_rows, reader_windows
    from compress.runtime.predictor import Predictor

    encoder, _, cfg = reader
    flags = ["teacher", "--model", str(encoder), "--data", str(squad_folder), "--max-length", "48", "--epochs", "1",
             "--lr", "3e-3", "--batch-size", "16"]
    assert main(flags + ["--doc-stride", "46", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--stride 46" in err[0] and not (tmp_path / "bad").exists()
    out = tmp_path / "teacher"
    assert main(flags + ["--doc-stride", "24", "--out", str(out)]) == 0  # more overlap than the default 16
    meta = json.loads((out / "compress.json").read_text())
    assert (meta["stride"], meta["config"]["stride"]) == (24, 24) and Predictor.load(out).stride == 24
    data = load_qa_task(cfg)
    tok = Predictor.load(out).tokenizer
    rows = {stride: len(qa_training_rows(data.splits["train"], tok, 48, stride)) for stride in (24, 16)}
    windows = {stride: len(reader_windows(tok, data.splits["test"], 48, stride)) for stride in (24, 16)}
    assert meta["training"]["training_windows"] == rows[24] > rows[16]
    assert meta["metrics"]["test"]["windows"] == windows[24] > windows[16]


def _questions(folder: Path, split: str) -> tuple[list[tuple[str, str]], list[str]]:
    doc = json.loads((folder / f"{split}.json").read_text())
    pairs = [(q["question"], p["context"]) for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]]
    gold = [q["answers"][0]["text"] for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]]
    return pairs, gold


def test_the_reader_exports_both_outputs_with_parity_and_predicts_answers_with_offsets(reader, squad_folder, tmp_path):
    """The ONNX graph has ``start_logits`` and ``end_logits`` (parity on both, at real tokens); ``Predictor``
    on PyTorch and on ONNX gives the same answers, spans of the passage at the characters it names, read in
    the windows the teacher was trained with, and as many exact matches as the teacher's own scoring."""
    import onnx

    from compress.stages.export import export_onnx
    from compress.runtime.predictor import Predictor

    _, folder, _ = reader
    exported = export_onnx(folder, tmp_path / "onnx")
    meta = json.loads((exported / "compress.json").read_text())
    assert meta["onnx"]["outputs"] == ["start_logits", "end_logits"] and meta["parity"]["max_abs_diff"] <= 1e-4
    assert [o.name for o in onnx.load(str(exported / "model.onnx")).graph.output] == ["start_logits", "end_logits"]
    assert meta["stride"] == 16  # the teacher's windows, carried for Predictor
    pairs, gold = _questions(squad_folder, "test")
    answers = {}
    for name, path in (("pytorch", folder), ("onnx", exported)):
        predictor = Predictor.load(path)
        assert predictor.stride == 16 and predictor.task == "question-answering"
        answers[name] = predictor.predict(pairs, batch_size=7)
    assert [a["answer"] for a in answers["pytorch"]] == [a["answer"] for a in answers["onnx"]]
    for (question, passage), a in zip(pairs, answers["onnx"]):
        assert passage[a["start"]:a["end"]] == a["answer"] and a["question"] == question and 0 <= a["score"] <= 1
    exact = sum(a["answer"] == g for a, g in zip(answers["onnx"], gold)) / len(gold)
    teacher_em = json.loads((folder / "compress.json").read_text())["metrics"]["test"]["exact_match"]
    assert exact == pytest.approx(teacher_em)  # the stage's scoring and Predictor read the passages alike
    one = Predictor.load(exported).predict(pairs[0])
    assert len(one) == 1 and one[0]["answer"] == answers["onnx"][0]["answer"]


@pytest.mark.parametrize("bad, expected", [
    ("what is the key ?", "takes \\(question, passage\\) tuples, got a str"),
    ([("q", "p", "x")], "input 0 is \\('q', 'p', 'x'\\)"),
    ([("  ", "a passage")], "input 0: the question and the passage must both hold text"),
])
def test_bad_reader_inputs_are_one_clear_error(reader, bad, expected):
    from compress.core.errors import CompressError
    from compress.runtime.predictor import Predictor

    with pytest.raises(CompressError, match=expected):
        Predictor.load(reader[1]).predict(bad)


def test_a_tagger_or_classifier_given_squad_data_is_one_line(squad_folder, tmp_path):
    from compress.core.errors import CompressError
    from compress.stages.teacher import train_teacher

    classifier = make_bert(tmp_path / "classifier", layers=1, head=True)
    cfg = TeacherConfig(model=str(classifier), data=DataOptions(str(squad_folder)), max_length=48)
    with pytest.raises(CompressError, match=r"the model is a sentence classifier .* is question-answering data") as info:
        train_teacher(cfg, tmp_path / "out")
    assert "\n" not in str(info.value) and not (tmp_path / "out").exists()
