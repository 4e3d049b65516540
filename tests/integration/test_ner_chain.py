"""Token classification through teacher, export and Predictor, on a tiny BERT and a toy CoNLL file.

The toy task is learnable in a few dozen steps: city names (one or two words) are LOC, a few
first names PER, everything else O. One tagger is trained per module and reused.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from compress.core.errors import CompressError

from conftest import gate_verdict, make_bert, sentiment_rows, write_csv
from tests.support.toy_ner import teacher_config, toy_sentences, toy_tagger, write_conll

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tagger teacher fine-tuned on the toy CoNLL file (the stage under test), and that file."""
    tmp = tmp_path_factory.mktemp("ner")
    data, path = toy_tagger(tmp, sentences=200)
    return SimpleNamespace(path=path, data=data, tmp=tmp)


@pytest.fixture(scope="module")
def exported(trained):
    from compress.stages.export import export_onnx

    return export_onnx(trained.path, trained.tmp / "onnx")


def test_teacher_learns_the_toy_tags_and_records_entity_f1(trained):
    meta = json.loads((trained.path / "compress.json").read_text())
    config = json.loads((trained.path / "config.json").read_text())
    names = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert meta["task"] == "token-classification" and meta["fine_tuned"]
    assert meta["label_names"] == names and meta["data"]["label_names"] == names
    assert config["architectures"] == ["BertForTokenClassification"]
    assert [config["id2label"][str(i)] for i in range(5)] == names and config["label2id"]["B-PER"] == 3
    for split in ("validation", "test"):
        assert meta["metrics"][split]["entity_f1"] >= 0.9, meta["metrics"][split]
        assert set(meta["metrics"][split]["per_type_f1"]) == {"LOC", "PER"}
    epochs = meta["training"]["validation_by_epoch"]
    assert len(epochs) == 2 and epochs[-1]["validation_entity_f1"] == pytest.approx(
        meta["metrics"]["validation"]["entity_f1"], abs=1e-4)
    assert not (trained.tmp / "teacher.checkpoints").exists()


def test_first_subtoken_labels_in_the_training_rows(tokenizer):
    from datasets import Dataset

    from compress.tasks.token_classification.words import tokenize_tagged_split

    ds = Dataset.from_dict({"tokens": [["Gurez", "is", "in", "Kashmir"]], "tags": [[1, 0, 0, 1]]})
    row = tokenize_tagged_split(ds, tokenizer, 32)[0]
    pieces = tokenizer.convert_ids_to_tokens(row["input_ids"])
    n_gurez = row["word_ids"].count(0)
    assert pieces[1] == "gu" and n_gurez >= 2  # a word of several sub-tokens: only the first carries the tag
    expected = [-100, 1] + [-100] * (n_gurez - 1) + [0, 0, 1] + [-100] * (len(pieces) - n_gurez - 4)
    assert row["labels"] == expected and row["word_ids"][0] == row["word_ids"][-1] == -1
    assert [pieces[p] for p, label in enumerate(row["labels"]) if label >= 0] == ["gu", "is", "in", "kashmir"]


def _one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_a_tagger_given_classification_data_is_one_line(trained, tmp_path):
    from compress.stages.teacher import train_teacher

    csv = write_csv(tmp_path / "sentiment.csv", sentiment_rows(40))
    with pytest.raises(CompressError) as exc:
        train_teacher(teacher_config(trained.path, csv), tmp_path / "out")
    message = _one_line(exc)
    assert "is a tagger" in message and "classification data" in message and str(csv) in message


def test_a_classifier_given_tagging_data_is_one_line(trained, tmp_path):
    from compress.stages.teacher import train_teacher

    classifier = make_bert(tmp_path / "classifier", layers=1, hidden=32, head=True, num_labels=2)
    config = json.loads((classifier / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    with pytest.raises(CompressError) as exc:
        train_teacher(teacher_config(classifier, trained.data), tmp_path / "out")
    message = _one_line(exc)
    assert "sentence classifier" in message and "tagging data" in message


def test_a_tagger_with_another_label_count_is_one_line(trained, tmp_path):
    from compress.stages.teacher import train_teacher

    only_places = write_conll(tmp_path / "places.conll", toy_sentences(30, seed=3, types=("LOC",)))
    with pytest.raises(CompressError) as exc:
        train_teacher(teacher_config(trained.path, only_places), tmp_path / "out")
    assert "a tagger of 5 labels" in _one_line(exc) and "has 3" in str(exc.value)


def test_a_collapsed_tagger_is_refused_by_teacher_and_by_distill(trained, tmp_path, capsys):
    """A tagger whose every word comes out O (how a fine-tuning at too high a learning rate collapsed once): the
    teacher stage under --finetune no refuses to package it, in one line; distill refuses it as a teacher in one
    line before labelling anything, and distils from it under --allow-untrained-teacher."""
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from compress.cli import main

    collapsed = tmp_path / "collapsed"
    model = AutoModelForTokenClassification.from_pretrained(trained.path)
    with torch.no_grad():
        model.classifier.bias[0] += 100.0  # O wins at every word
    model.save_pretrained(collapsed)
    AutoTokenizer.from_pretrained(trained.path).save_pretrained(collapsed)
    assert main(["teacher", "--model", str(collapsed), "--data", str(trained.data), "--finetune", "no",
                 "--max-length", "48", "--out", str(tmp_path / "teacher")]) == 2
    err = capsys.readouterr().err
    assert "its head was never trained for this task" in err and "word-tag accuracy" in err
    assert "Traceback" not in err and not (tmp_path / "teacher").exists()
    fine = json.loads((trained.path / "compress.json").read_text())["chance_check"]
    assert fine["verdict"] == "trained" and fine["accuracy"] > 0.9 > fine["chance_rate"]
    args = ["distill", "--teacher", str(collapsed), "--data", str(trained.data), "--student", "1x32", "--init",
            "teacher-layers", "--max-length", "48", "--epochs", "1", "--batch-size", "8", "--out"]
    assert main(args + [str(tmp_path / "refused")]) != 0
    captured = capsys.readouterr()
    message = [line for line in captured.err.splitlines() if "no better than chance" in line]
    assert len(message) == 1 and "0 of" in message[0] and "--allow-untrained-teacher" in message[0]
    assert "soft labels" not in captured.out and not (tmp_path / "refused").exists()
    assert main(args + [str(tmp_path / "anyway"), "--allow-untrained-teacher"]) == 0
    assert "distilling from it anyway" in capsys.readouterr().out


def test_the_data_decides_the_task(tmp_path):
    from compress.tasks.task_choice import data_task

    tagged_tsv = write_conll(tmp_path / "tagged.tsv", toy_sentences(5))
    table = tmp_path / "table.tsv"
    table.write_text("text\tlabel\nfine film\t1\n", encoding="utf-8")
    tagged_jsonl = tmp_path / "tagged.jsonl"
    tagged_jsonl.write_text(json.dumps({"tokens": ["Paris"], "tags": ["B-LOC"]}) + "\n", encoding="utf-8")
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"text": "fine", "label": 1}) + "\n", encoding="utf-8")
    assert [data_task(str(p)) for p in (tagged_tsv, table, tagged_jsonl, rows)] == [
        "token-classification", "sequence-classification", "token-classification", "sequence-classification"]
    assert data_task("wnut17") == "token-classification" and data_task("movie-reviews") == "sequence-classification"
    assert data_task(str(tmp_path / "typo.conll")) == "token-classification"


def test_export_keeps_per_token_logits_within_parity(trained, exported):
    import onnx
    import onnxruntime as ort
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    meta = json.loads((exported / "compress.json").read_text())
    assert meta["task"] == "token-classification" and meta["parity"]["max_abs_diff"] <= meta["parity"]["atol"]
    assert meta["onnx"]["optimized"] and meta["onnx"]["attention_fused_per_layer"]  # ORT fusions as for classifiers
    graph = onnx.load(str(exported / "model.onnx"))
    dims = [d.dim_param or d.dim_value for d in graph.graph.output[0].type.tensor_type.shape.dim]
    assert dims[:2] == ["batch", "sequence"] and dims[2] == 5
    # Unseen lengths and batch sizes: every real token's logits agree with PyTorch.
    tok = AutoTokenizer.from_pretrained(trained.path)
    model = AutoModelForTokenClassification.from_pretrained(trained.path).eval()
    texts = ["we went to San Francisco", "Maria", "later friends from Rome saw Peter and the London crowd"]
    enc = tok(texts, padding=True, return_tensors="np")
    session = ort.InferenceSession(str(exported / "model.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(["logits"], {i.name: enc[i.name] for i in session.get_inputs()})[0]
    with torch.no_grad():
        want = model(**{k: torch.from_numpy(v) for k, v in enc.items()}).logits.numpy()
    real = enc["attention_mask"].astype(bool)
    assert got.shape == want.shape == (3, enc["input_ids"].shape[1], 5)
    assert np.abs(got - want)[real].max() <= 1e-4


TEXT = "yesterday we visited  New York with Alice"


@pytest.mark.parametrize("which", ["torch", "onnx"])
def test_predictor_entities_have_char_offsets(trained, exported, which):
    from compress.runtime.predictor import Predictor

    predictor = Predictor.load(trained.path if which == "torch" else exported)
    assert predictor.task == "token-classification"
    result = predictor.predict([TEXT, "the friends"], word_tags=True)
    got = [(e["type"], e["start"], e["end"], e["text"]) for e in result[0]["entities"]]
    assert got == [("LOC", 22, 30, "New York"), ("PER", 36, 41, "Alice")]
    assert all(0.5 < e["score"] <= 1 for e in result[0]["entities"])
    assert result[0]["words"] == TEXT.split() and result[0]["word_tags"][3:7] == ["B-LOC", "I-LOC", "O", "B-PER"]
    assert result[1]["entities"] == [] and result[1]["word_tags"] == ["O", "O"]


def test_torch_and_onnx_predictors_agree(trained, exported):
    from compress.runtime.predictor import Predictor

    texts = [TEXT, "Paris and Rome then Berlin", "Peter saw John in Madrid"]
    torch_out = Predictor.load(trained.path).predict(texts, aggregation="average")
    onnx_out = Predictor.load(exported).predict(texts, aggregation="average")
    for a, b in zip(torch_out, onnx_out):
        assert [(e["type"], e["start"], e["end"]) for e in a["entities"]] == [
            (e["type"], e["start"], e["end"]) for e in b["entities"]]
        assert [e["score"] for e in a["entities"]] == pytest.approx([e["score"] for e in b["entities"]], abs=1e-4)


LABELS = ["O", "B-LOC", "I-LOC"]


def test_aggregations_on_a_hand_checked_word():
    from compress.tasks.token_classification.decoding import tag_text

    # "Gurez town": Gurez is two sub-tokens (0-2, 2-5), town one (6-10); a [CLS]/[SEP] around them.
    probs = np.array([[1.0, 0.0, 0.0], [0.50, 0.45, 0.05], [0.10, 0.30, 0.60], [0.9, 0.05, 0.05], [1.0, 0.0, 0.0]])
    offsets = [(0, 0), (0, 2), (2, 5), (6, 10), (0, 0)]
    logits = np.log(np.clip(probs, 1e-12, None))
    tags = {a: tag_text("Gurez town", logits, offsets, LABELS, a, word_tags=True) for a in ("first", "max", "average")}
    assert tags["first"]["word_tags"] == ["O", "O"] and tags["first"]["entities"] == []
    assert tags["max"]["word_tags"] == ["I-LOC", "O"]  # the sub-token with the top probability: 0.60
    assert tags["average"]["word_tags"] == ["B-LOC", "O"]  # mean (0.30, 0.375, 0.325)
    assert tags["average"]["entities"] == [
        {"type": "LOC", "start": 0, "end": 5, "text": "Gurez", "score": pytest.approx(0.375)}]
    assert tags["max"]["entities"][0]["score"] == pytest.approx(0.60)


def test_word_aggregation_equals_the_transformers_pipeline():
    from transformers.pipelines.token_classification import AggregationStrategy, TokenClassificationPipeline

    from compress.tasks.token_classification.decoding import aggregate_words

    fake = SimpleNamespace(tokenizer=SimpleNamespace(convert_tokens_to_string=" ".join),
                           model=SimpleNamespace(config=SimpleNamespace(id2label=dict(enumerate(LABELS)))))
    rng = np.random.default_rng(0)
    for _ in range(50):
        sizes = rng.integers(1, 4, size=rng.integers(1, 6))
        words = [w for w, n in enumerate(sizes) for _ in range(n)]
        probs = rng.dirichlet(np.ones(3), size=len(words))
        for name in ("first", "max", "average"):
            labels, scores = aggregate_words(probs, words, len(sizes), name)
            for w in range(len(sizes)):
                tokens = [{"word": "x", "scores": probs[t], "start": t, "end": t + 1}
                          for t in range(len(words)) if words[t] == w]
                want = TokenClassificationPipeline.aggregate_word(fake, tokens, AggregationStrategy(name))
                assert LABELS[labels[w]] == want["entity"] and scores[w] == pytest.approx(float(want["score"]))


def test_predict_cli_prints_entities_without_the_training_stack(exported):
    """``bert-compress predict`` on the ONNX tagger in a process where torch, transformers (and the rest
    of the training stack) cannot be imported: the serving path of a tagger is torch-free too."""
    import subprocess
    import sys

    from tests.support.paths import ROOT
    from tests.support.serving_env import BLOCKER, TRAINING_STACK, blocked_env

    code = BLOCKER + "import runpy\nrunpy.run_module('compress', run_name='__main__')\n"
    done = subprocess.run([sys.executable, "-c", code, ",".join(TRAINING_STACK), "predict", "--model", str(exported),
                           TEXT, "--word-tags", "--aggregation", "max"], capture_output=True, text=True, timeout=120,
                          env=blocked_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout.splitlines()
    assert out[0] == TEXT
    assert out[1].split() == ["LOC", "22-30", "'New", "York'", out[1].split()[-1]]
    assert out[2].split()[:3] == ["PER", "36-41", "'Alice'"]
    assert out[3].startswith("  words: yesterday/O we/O visited/O New/B-LOC York/I-LOC")


def test_bad_aggregation_is_one_line(exported):
    from compress.runtime.predictor import Predictor

    with pytest.raises(CompressError, match="--aggregation 'mean' is not one of first, average, max"):
        Predictor.load(exported).predict(TEXT, aggregation="mean")


def test_word_soft_labels_line_up_across_tokenizers(trained, tmp_path):
    import torch
    from transformers import AutoTokenizer

    from compress.runtime.modeling import load_classifier
    from compress.tasks.token_classification.distill import word_soft_labels

    from conftest import make_mpnet

    model, tok, _ = load_classifier(trained.path, task="token-classification")
    words = [["Gurez", "is", "in", "New", "York"], ["Alice"]]
    soft, reused = word_soft_labels(model, tok, words, [[0] * 5, [0]], 48, "teacher-sha")
    assert not reused and [s.shape for s in soft] == [(5, 5), (1, 5)]
    enc = tok(words[:1], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[0].numpy()
    ids = enc.word_ids(0)
    firsts = [ids.index(w) for w in range(5)]
    assert firsts[:2] == [1, firsts[0] + ids.count(0)]  # Gurez: several BERT sub-tokens, the first one counts
    assert np.allclose(soft[0], logits[firsts], atol=1e-5)
    # The student's tokenizer frames and splits differently, yet gives one first sub-token per word.
    student_tok = AutoTokenizer.from_pretrained(make_mpnet(tmp_path / "mpnet", layers=1))
    s_enc = student_tok(words[:1], is_split_into_words=True)
    assert s_enc["input_ids"][0][0] != enc["input_ids"][0][0].item()
    assert sorted({w for w in s_enc.word_ids(0) if w is not None}) == list(range(5))
    again, reused = word_soft_labels(model, tok, words, [[0] * 5, [0]], 48, "teacher-sha")
    assert reused and all(np.array_equal(a, b) for a, b in zip(soft, again))


def test_distilling_a_tagger_into_a_student_with_another_tokenizer(trained, tmp_path):
    from compress.config import TrainSettings
    from compress.runtime.predictor import Predictor
    from compress.tasks.token_classification.distill import distill_tagger

    from conftest import make_mpnet

    student = make_mpnet(tmp_path / "mpnet", layers=2, hidden=32)
    settings = TrainSettings(epochs=2, lr=6e-3, batch_size=8, save_steps=100000, sampling="sequential",
                             logging_steps=1000)
    path = distill_tagger(trained.path, student, str(trained.data), tmp_path / "student", settings, max_length=48)
    meta = json.loads((path / "compress.json").read_text())
    assert meta["task"] == "token-classification" and meta["model_type"] == "mpnet"
    validation = meta["metrics"]["validation"]
    assert validation["entity_f1"] >= 0.8 and validation["token_agreement"] >= 0.9, validation
    got = Predictor.load(path).predict(TEXT)[0]["entities"]
    assert [(e["type"], e["text"]) for e in got] == [("LOC", "New York"), ("PER", "Alice")]


def _hidden_gap(student: Path, teacher: Path, data: Path) -> float:
    """Mean squared distance between each student layer's states and its teacher layer's (uniform map, equal
    widths) over the validation sentences: what the hidden-state term minimises."""
    import torch

    from compress.runtime.modeling import load_classifier
    from compress.tasks.token_classification.data import load_token_data
    from students.layer_map import parse_layer_map

    t_model, tok, _ = load_classifier(teacher, task="token-classification")
    s_model, _, _ = load_classifier(student, task="token-classification")
    words = load_token_data(str(data)).splits["validation"]["tokens"]
    enc = tok([list(w) for w in words], is_split_into_words=True, padding=True, return_tensors="pt")
    pairs = parse_layer_map("uniform", t_model.config.num_hidden_layers, s_model.config.num_hidden_layers)
    with torch.no_grad():
        t_states = t_model(**enc, output_hidden_states=True).hidden_states
        s_states = s_model(**enc, output_hidden_states=True).hidden_states
    mask = enc["attention_mask"].unsqueeze(-1).float()
    gaps = [(((s_states[s + 1] - t_states[t + 1]) ** 2) * mask).sum() / (mask.sum() * s_states[0].shape[-1])
            for s, t in pairs.items()]
    return float(sum(gaps) / len(gaps))


def test_intermediate_terms_pull_a_tagger_students_states_towards_the_teachers(trained, tmp_path):
    """The same random student distilled twice, with and without the hidden-state term: only the run with it gets
    layers close to the teacher's, and compress.json records the terms, the layer map and the alignment."""
    from compress.cli import main

    common = ["distill", "--teacher", str(trained.path), "--data", str(trained.data), "--student", "2x32",
              "--init", "random", "--max-length", "48", "--epochs", "2", "--lr", "3e-3", "--batch-size", "8",
              "--sampling", "sequential", "--seed", "3"]
    logits_only, with_hidden = tmp_path / "logits", tmp_path / "hidden"
    assert main(common + ["--out", str(logits_only)]) == 0
    assert main(common + ["--out", str(with_hidden), "--intermediate", "--alpha-embedding", "0",
                          "--alpha-attention", "0", "--alpha-hidden", "5"]) == 0
    meta = json.loads((with_hidden / "compress.json").read_text())
    record = meta["distillation"]
    assert record["intermediate"] is True and record["layer_map"] and meta["notes"] == []
    assert {(t["on"], t["weight"]) for t in record["loss_terms"]} >= {("hidden", 5.0), ("logits", 1.0), ("labels", 0.5)}
    assert json.loads((logits_only / "compress.json").read_text())["distillation"]["intermediate"] is False
    gap, gap_without = _hidden_gap(with_hidden, trained.path, trained.data), _hidden_gap(logits_only, trained.path,
                                                                                          trained.data)
    assert gap < 0.5 * gap_without, (gap, gap_without)
    assert meta["metrics"]["validation"]["entity_f1"] >= 0.5, meta["metrics"]["validation"]
    # TinyBERT's two-stage schedule: the intermediate terms alone first, then the word logits and tags alone
    staged = tmp_path / "staged"
    assert main(common + ["--out", str(staged), "--intermediate", "--schedule", "two-stage", "--stage1-epochs", "1"]) == 0
    terms = json.loads((staged / "compress.json").read_text())["distillation"]["loss_terms"]
    assert {t["on"] for t in terms["stage1"]} == {"embeddings", "hidden", "attention"}
    assert {t["on"] for t in terms["stage2"]} == {"logits", "labels"}


def test_a_student_that_reads_other_word_pieces_distils_the_word_logits_only(trained, tmp_path, capsys):
    """A cased student under an uncased teacher: its pieces differ, so the intermediate terms are dropped with a
    note (in the output and in compress.json) and the word logits are still distilled."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast

    from compress.cli import main
    from tests.conftest import FIXTURES

    cased_dir = make_bert(tmp_path / "cased", layers=1, hidden=32, heads=4, ffn=64)
    backend = BertWordPieceTokenizer(str(FIXTURES / "vocab.txt"), lowercase=False)._tokenizer
    BertTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]",
                      mask_token="[MASK]", model_max_length=128, do_lower_case=False).save_pretrained(cased_dir)
    out = tmp_path / "student"
    assert main(["distill", "--teacher", str(trained.path), "--data", str(trained.data), "--student", "1x32",
                 "--init", f"pretrained:{cased_dir}", "--out", str(out), "--max-length", "48", "--epochs", "1",
                 "--lr", "3e-3", "--batch-size", "8", "--sampling", "sequential", "--intermediate"]) == 0
    assert "intermediate losses disabled: teacher and student tokenizations do not line up" in capsys.readouterr().err
    meta = json.loads((out / "compress.json").read_text())
    assert meta["distillation"]["intermediate"] is False and "do not line up" in meta["notes"][0]
    assert {t["on"] for t in meta["distillation"]["loss_terms"]} == {"logits", "labels"}


def test_distill_command_on_tagging_data_builds_a_tagger_student(trained, tmp_path, capsys):
    from compress.cli import main

    out = tmp_path / "student"
    common = ["distill", "--teacher", str(trained.path), "--data", str(trained.data), "--student", "1x32",
              "--init", "teacher-layers", "--out", str(out), "--max-length", "48"]
    assert main(common + ["--augment", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--augment 2" in err[0] and not out.exists()
    assert main(common + ["--epochs", "1", "--lr", "3e-3", "--batch-size", "8", "--sampling", "sequential"]) == 0
    meta = json.loads((out / "compress.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert meta["task"] == "token-classification" and config["architectures"] == ["BertForTokenClassification"]
    assert config["num_hidden_layers"] == 1 and meta["student"]["copied_teacher_layers"] == {"0": 1}
    assert meta["metrics"]["validation"]["entity_f1"] >= 0.7, meta["metrics"]["validation"]
    printed = capsys.readouterr().out
    assert "student: validation entity F1" in printed
    assert "epoch 1: validation entity F1" in printed  # scored after each epoch, like the teacher


def test_stride_sets_the_windows_of_a_tagger_student_its_soft_labels_and_its_serving(trained, tmp_path):
    """``--stride``: a sentence past the window is read by teacher and student in windows that overlap by it
    (more rows than the default's smaller overlap), the teacher's word soft labels are cached per stride, and
    the student records the stride and is served with it."""
    from compress.cli import main
    from compress.config import DataOptions
    from compress.runtime.modeling import load_classifier
    from compress.runtime.predictor import Predictor
    from compress.tasks.token_classification.words import tokenize_tagged_split
    from compress.tasks.token_classification.distill import word_soft_labels

    model, tok, _ = load_classifier(trained.path, task="token-classification")
    words = [["Alice", "is", "in", "New", "York", "and", "Bob", "is", "in", "Paris", "with", "Carol"]]
    _, reused = word_soft_labels(model, tok, words, [[0] * 12], 8, "stride-sha")
    assert not reused
    assert word_soft_labels(model, tok, words, [[0] * 12], 8, "stride-sha", stride=4)[1] is False  # other windows
    assert word_soft_labels(model, tok, words, [[0] * 12], 8, "stride-sha", stride=4)[1] is True

    out = tmp_path / "student"
    assert main(["distill", "--teacher", str(trained.path), "--data", str(trained.data), "--student", "1x32",
                 "--init", "teacher-layers", "--out", str(out), "--max-length", "8", "--stride", "4", "--epochs", "1",
                 "--batch-size", "8"]) == 0
    meta = json.loads((out / "compress.json").read_text())
    assert (meta["stride"], meta["config"]["stride"]) == (4, 4) and Predictor.load(out).stride == 4
    train = DataOptions(data=str(trained.data)).load_tagging(meta["label_names"]).splits["train"]
    rows = {stride: len(tokenize_tagged_split(train, tok, 8, stride=stride)) for stride in (4, None)}
    assert meta["training"]["rows"] == rows[4] > rows[None] > len(train)


def test_distill_reads_the_split_and_the_limit_it_is_given(trained, tmp_path):
    """``--split-seed`` and ``--limit`` reach the tagger student's data, as they reach the teacher's: a student
    distilled on another carving of a single file than its flags name would score on sentences it trained on."""
    from compress.cli import main
    from compress.tasks.token_classification.data import load_token_data

    out = tmp_path / "student"
    assert main(["distill", "--teacher", str(trained.path), "--data", str(trained.data), "--student", "1x32",
                 "--init", "teacher-layers", "--out", str(out), "--max-length", "48", "--epochs", "1",
                 "--batch-size", "8", "--split-seed", "1", "--limit", "30"]) == 0
    recorded = json.loads((out / "compress.json").read_text())["data"]
    expected = load_token_data(str(trained.data), seed=1).subset(30, seed=1)
    assert recorded["sizes"] == expected.sizes() == {"train": 30, "validation": 20, "test": 20}
    assert recorded["fingerprint"] == expected.fingerprint
    assert recorded["fingerprint"] != load_token_data(str(trained.data)).subset(30).fingerprint


def test_keep_best_writes_the_student_of_its_best_validation_epoch(trained, tmp_path, capsys):
    """``--keep-best``: the student written is the epoch with the best validation entity F1, which the written
    model scores again after training; ``compress.json`` says which epoch that was and what each epoch read."""
    from compress.cli import main

    out = tmp_path / "student"
    assert main(["distill", "--teacher", str(trained.path), "--data", str(trained.data), "--student", "1x32",
                 "--init", "teacher-layers", "--out", str(out), "--max-length", "48", "--epochs", "3", "--lr", "3e-3",
                 "--batch-size", "8", "--sampling", "sequential", "--keep-best"]) == 0
    meta = json.loads((out / "compress.json").read_text())
    epochs = meta["training"]["validation_by_epoch"]
    kept = meta["training"]["kept_epoch"]
    best = max(epochs, key=lambda e: e["validation_entity_f1"])  # the first of equals, as max() gives it
    assert len(epochs) == 3 and kept["epoch"] == best["epoch"] and kept["epochs_compared"] == [1, 2, 3]
    assert kept["value"] == best["validation_entity_f1"] and kept["last_value"] == epochs[-1]["validation_entity_f1"]
    assert meta["metrics"]["validation"]["entity_f1"] == pytest.approx(best["validation_entity_f1"], abs=1e-4)
    assert meta["config"]["train"]["keep_best"] is True
    assert "--keep-best: " in capsys.readouterr().out


def test_a_word_without_tokens_is_outside_every_entity():
    from compress.tasks.token_classification.decoding import tag_text

    # "\x07 Rome": the tokenizer drops the control character, so the first word has no token; the
    # label list does not start with O, so "label 0" would wrongly make it an entity.
    logits = np.log(np.array([[1e-9, 1.0, 1e-9], [1.0, 1e-9, 1e-9], [1e-9, 1.0, 1e-9]]))
    got = tag_text("\x07 Rome", logits, [(0, 0), (2, 6), (0, 0)], ["B-LOC", "O", "I-LOC"], word_tags=True)
    assert got["word_tags"] == ["O", "B-LOC"] and got["word_scores"][0] == 0.0
    assert got["entities"] == [{"type": "LOC", "start": 2, "end": 6, "text": "Rome", "score": pytest.approx(1.0)}]


def test_teacher_takes_jsonl_tagging_data(tmp_path, capsys):
    from compress.stages.teacher import train_teacher

    data = tmp_path / "toy.jsonl"
    data.write_text("".join(json.dumps({"tokens": w, "tags": t}) + "\n" for w, t in toy_sentences(40, seed=7)),
                    encoding="utf-8")
    encoder = make_bert(tmp_path / "encoder", layers=1, hidden=32)
    path = train_teacher(teacher_config(encoder, data, epochs=0), tmp_path / "teacher")
    meta = json.loads((path / "compress.json").read_text())
    assert meta["task"] == "token-classification" and not meta["fine_tuned"]
    assert meta["data"]["source"] == str(data) and meta["label_names"] == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert set(meta["metrics"]) == {"validation", "test"} and "random" in capsys.readouterr().err


# ----------------------------------------------------------------------------- INT8 and optimize on entity F1


def _scored_folder(tmp_path: Path, per: int, loc: int) -> Path:
    """A folder of train/validation/test CoNLL files whose validation split holds ``loc`` one-word LOC
    entities and ``per`` PER ones, one entity per sentence (so sentences and entities line up)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    rows = [(["we", "saw", "Paris"], ["O", "O", "B-LOC"])] * loc + [(["we", "saw", "Alice"], ["O", "O", "B-PER"])] * per
    for split in ("train", "validation", "test"):
        write_conll(tmp_path / f"{split}.conll", rows)
    return tmp_path


def test_a_collapsed_type_fails_the_check_even_when_overall_f1_holds(tmp_path):
    """100 LOC and 12 PER entities: a candidate that loses 9 of the 12 PER keeps overall F1 within a
    0.1 budget (0.958) but PER's F1 falls from 1.0 to 0.4, under half: it is out, and says why. The
    same loss on a type with fewer than MIN_TYPE_SUPPORT gold entities is reported, not judged."""
    from compress.config import MIN_TYPE_SUPPORT
    from compress.stages.quality import SplitScorer
    from compress.tasks.token_classification.data import load_token_data

    scorer = SplitScorer(load_token_data(str(_scored_folder(tmp_path, per=12, loc=100))), "validation")
    assert scorer.metric == "entity_f1" and scorer.drop_key == "entity_f1_drop" and scorer.n == 112
    gold = scorer.gold

    def losing(k):  # the first k PER sentences tagged all O
        return [["O", "O", "O"] if 100 <= i < 100 + k else list(t) for i, t in enumerate(gold)]

    record = scorer.compare(losing(9), gold)
    assert record["entity_f1"] == pytest.approx(2 * (103 / 112) / (1 + 103 / 112))
    assert record["entity_f1_drop"] == round(1 - 2 * 103 / 215, 6) and record["n"] == 112
    assert record["per_type_f1"]["PER"] == pytest.approx(0.4) and record["per_type_f1_drop"]["PER"] == pytest.approx(0.6)
    assert record["per_type_f1_drop"]["LOC"] == 0.0
    assert record["collapsed_types"] == {"PER": [1.0, pytest.approx(0.4)]}
    assert scorer.failures(record, 0.1) == ["type PER collapsed: F1 1.000 -> 0.400"]
    # Exactly half is not a collapse (under half is): 8 of 12 lost leaves PER at 0.5.
    half = scorer.compare(losing(8), gold)
    assert half["per_type_f1"]["PER"] == 0.5 and half["collapsed_types"] == {}
    assert scorer.failures(half, 0.1, max_type_drop=None) == []
    # The per-type budget (tests/unit/compress/test_type_budget.py) still catches that loss of half.
    assert [r.split(" [")[0] for r in scorer.failures(half, 0.1)] == ["type PER lost F1 0.500"]
    # Over budget overall too: both reasons.
    assert scorer.failures(record, 0.01)[0].startswith("entity F1 drop 0.0")

    # Exactly MIN_TYPE_SUPPORT gold entities are judged; one fewer are not.
    at = SplitScorer(load_token_data(str(_scored_folder(tmp_path / "at", per=MIN_TYPE_SUPPORT, loc=100))))
    lost_all = [["O", "O", "O"] if i >= 100 else list(t) for i, t in enumerate(at.gold)]
    assert at.compare(lost_all, at.gold)["collapsed_types"] == {"PER": [1.0, 0.0]}
    few = SplitScorer(load_token_data(str(_scored_folder(tmp_path / "few", per=MIN_TYPE_SUPPORT - 1, loc=100))))
    lost = [["O", "O", "O"] if i >= 100 else list(t) for i, t in enumerate(few.gold)]
    small = few.compare(lost, few.gold)
    assert small["per_type_f1"]["PER"] == 0.0 and small["collapsed_types"] == {}
    assert few.failures(small, 0.1) == []


def test_collapse_is_judged_against_the_reference_f1_of_the_type():
    """Under half of the reference's F1 on a type, whatever that F1 is (0.8 here: 0.39 collapses, 0.41 not);
    a type only the reference predicts (no gold entity) is reported with its drop and never judged."""
    from compress.tasks.token_classification.scoring import collapsed_types

    support = {"LOC": 50, "PER": 20, "MISC": 0}
    assert collapsed_types({"LOC": 0.9, "PER": 0.8}, {"LOC": 0.9, "PER": 0.39}, support) == {"PER": [0.8, 0.39]}
    assert collapsed_types({"LOC": 0.9, "PER": 0.8}, {"LOC": 0.9, "PER": 0.41}, support) == {}
    assert collapsed_types({"PER": 0.8, "MISC": 0.0}, {"PER": 0.8}, support) == {}


def test_a_classifier_split_is_scored_on_accuracy_and_agreement(tmp_path):
    from compress.config import DataOptions
    from compress.stages.quality import SplitScorer

    from conftest import sentiment_rows, write_csv

    data = DataOptions(str(write_csv(tmp_path / "d.csv", sentiment_rows(200)))).load_any()
    scorer = SplitScorer(data, "validation")
    assert (scorer.metric, scorer.drop_key, scorer.n) == ("accuracy", "accuracy_drop", 20)
    gold = scorer.gold
    wrong = gold.copy()
    wrong[:3] = 1 - wrong[:3]
    record = scorer.compare(wrong, gold)
    assert record == {"accuracy": 0.85, "accuracy_drop": 0.15, "agreement": 0.85, "n": 20}
    assert scorer.failures(record, 0.2) == []
    assert scorer.failures(record, 0.1) == ["accuracy drop 0.1500 > budget 0.1"]
    # Agreement exactly at the minimum passes; under it fails, and says so.
    assert scorer.failures(record, 0.2, min_agreement=0.85) == []
    assert scorer.failures(record, 0.2, min_agreement=0.9) == ["agreement 0.8500 < 0.9"]


def test_a_type_only_the_reference_predicts_gets_its_drop_and_is_not_judged(tmp_path):
    """MISC is a tag of the training split with no gold entity in validation: a reference that predicts one
    has a MISC F1 of 0 (nothing to find), a candidate that does not predict it has no MISC entry; its drop
    is 0 and it is never judged."""
    from compress.stages.quality import SplitScorer
    from compress.tasks.token_classification.data import load_token_data

    folder = _scored_folder(tmp_path, per=12, loc=100)
    write_conll(folder / "train.conll", [(["we", "saw", "Paris"], ["O", "O", "B-LOC"]),
                                         (["we", "saw", "Alice"], ["O", "O", "B-PER"]),
                                         (["the", "Euro", "cup"], ["O", "B-MISC", "I-MISC"])])
    scorer = SplitScorer(load_token_data(str(folder)), "validation")
    reference = [list(t) for t in scorer.gold]
    reference[0] = ["B-MISC", "O", "B-LOC"]  # a spurious MISC
    record = scorer.compare([list(t) for t in scorer.gold], reference)
    assert "MISC" not in record["per_type_f1"]
    assert record["per_type_f1_drop"] == {"LOC": 0.0, "MISC": 0.0, "PER": 0.0} and record["collapsed_types"] == {}


def test_word_texts_give_one_whitespace_word_per_gold_word():
    from compress.tasks.token_classification.decoding import whitespace_words
    from compress.tasks.token_classification.data import word_texts

    sentences = [["New\u00a0York", "", "is", "big"], ["a\tb", "c"]]
    texts = word_texts(sentences)
    assert texts == ["New_York _ is big", "a_b c"]
    assert [len(whitespace_words(t)) for t in texts] == [4, 2]


def test_quantize_a_tagger_is_decided_on_entity_f1(trained, exported, tmp_path, capsys):
    """ORT INT8 of the toy tagger, checked on the validation split's entity F1 through the serving path:
    the recorded fp32 F1 is the one Predictor's entities give, every candidate carries its per-type F1
    and their change, and the kept INT8 artifact still finds the entities."""
    from compress.config import DataOptions
    from compress.stages.quality import SplitScorer
    from compress.stages.quantize import quantize
    from compress.runtime.predictor import Predictor
    from compress.tasks.token_classification.metrics import entity_scores
    from compress.tasks.token_classification.data import load_token_data

    out = quantize(exported, tmp_path / "int8", method="ort-dynamic", data=DataOptions(str(trained.data)),
                   max_accuracy_drop=0.05)
    meta = json.loads((out / "compress.json").read_text())
    q = meta["quantization"]
    assert meta["task"] == "token-classification" and q["metric"] == "entity_f1"
    data = load_token_data(str(trained.data))
    fp32_tags = [r["word_tags"] for r in Predictor.load(exported).predict(data.texts("validation"), word_tags=True)]
    assert q["entity_f1_fp32"] == pytest.approx(entity_scores(data.tags("validation"), fp32_tags)["f1"])
    assert q["entity_f1_fp32"] > 0.8
    first = q["candidates"][0]
    # a tagger's ladder starts at per-channel weight scales (Task.int8_per_channel), and says so
    assert first["per_channel"] is True and first["name"] == "per-channel"
    assert meta["config"]["per_channel"] is False and any("token-classification default" in n for n in meta["notes"])
    assert set(first["per_type_f1"]) == {"LOC", "PER"} and set(first["per_type_f1_drop"]) == {"LOC", "PER"}
    assert first["within_budget"] is (not SplitScorer(data).failures(first, 0.05))
    assert q["within_budget"] and q["entity_f1_drop"] <= 0.05
    assert meta["metrics"]["validation"]["fp32_entity_f1"] == q["entity_f1_fp32"]
    assert "validation entity f1 fp32" in capsys.readouterr().out
    int8 = Predictor.load(out)
    assert int8.kind == "onnx-int8" and int8.task == "token-classification"
    got = [(e["type"], e["text"]) for e in int8.predict(TEXT)[0]["entities"]]
    assert got == [("LOC", "New York"), ("PER", "Alice")]


def test_quantize_refuses_a_tagger_with_other_tags(trained, exported, tmp_path):
    from compress.config import DataOptions
    from compress.stages.quantize import quantize

    # tags are matched by name: data with a subset of the tagger's tags is fine, a tag it never predicts is not
    sentences = [(words, [t.replace("PER", "ORG") for t in tags]) for words, tags in toy_sentences(60)]
    other = write_conll(tmp_path / "other.conll", sentences)
    with pytest.raises(CompressError, match=r"other.conll has the tag\(s\) B-ORG, I-ORG that .* does not predict"):
        quantize(exported, tmp_path / "int8", method="ort-dynamic", data=DataOptions(str(other)))
    assert not (tmp_path / "int8").exists()
    places = write_conll(tmp_path / "places.conll", toy_sentences(60, types=("LOC",)))
    assert quantize(exported, tmp_path / "int8", method="ort-dynamic", data=DataOptions(str(places)),
                    max_accuracy_drop=0.5).exists()


def test_optimize_a_tagger_scores_candidates_on_entity_f1_and_serves_the_choice(trained, tmp_path):
    """optimize on a tagger: every candidate (ONNX fp32, ORT INT8, ORT static INT8, which calibrates on the
    training sentences) is scored on validation entity F1 with its per-type change; the choice artifact
    is a tagger that finds the entities."""
    from compress.config import DataOptions, OptimizeConfig
    from compress.stages.optimize import format_decision, optimize
    from compress.tasks.token_classification.scoring import types_over_budget
    from compress.runtime.predictor import Predictor

    cfg = OptimizeConfig(model=str(trained.path), data=DataOptions(str(trained.data)),
                         candidates="onnx-fp32,onnx-int8-fused,onnx-static-unfused", batch_sizes=[1, 8], seq_len=16,
                         warmup=1, runs=3, max_accuracy_drop=0.05, calibration_size=16)
    out = optimize(cfg, tmp_path / "choice", progress=False)
    meta = json.loads((out / "compress.json").read_text())
    assert meta["task"] == "token-classification" and meta["optimize"]["metric"] == "entity_f1"
    assert meta["optimize"]["settings"]["max_type_f1_drop"] == 0.03
    rows = {r["name"]: r for r in meta["optimize"]["table"]}
    assert set(rows) == {"pytorch", "onnx-fp32", "onnx-int8-fused", "onnx-static-unfused"}
    assert rows["pytorch"]["entity_f1_drop"] == 0.0 and rows["pytorch"]["agreement"] == 1.0
    for row in rows.values():
        assert set(row["per_type_f1"]) == {"LOC", "PER"} and "collapsed_types" in row
        assert row["eligible"] is (row["entity_f1_drop"] <= 0.05 and not row["collapsed_types"]
                                   and not types_over_budget(row, 0.03))
        assert set(row["per_type_f1_drop_interval"]) == {"LOC", "PER"}
    assert abs(rows["onnx-fp32"]["entity_f1"] - rows["pytorch"]["entity_f1"]) < 1e-9
    table = format_decision(meta).splitlines()
    assert "F1" in table[1]
    worst = rows["onnx-int8-fused"]
    t = max(worst["per_type_f1_drop_interval"], key=lambda k: worst["per_type_f1_drop"][k])
    assert table[-1].startswith("the type that lost most F1") and f"onnx-int8-fused {t} " in table[-1]
    assert "pytorch" not in table[-1]
    served = Predictor.load(out)
    assert served.task == "token-classification"
    assert [(e["type"], e["text"]) for e in served.predict(TEXT)[0]["entities"]] == [("LOC", "New York"), ("PER", "Alice")]


# ----------------------------------------------------------------------------- bench and gate on entity F1


@pytest.fixture(scope="module")
def tagger_results(trained, exported):
    """``bench --quick`` of the toy tagger: PyTorch (reference), its ONNX export and an ORT INT8 copy."""
    from compress.cli import main
    from compress.stages.quantize import quantize

    int8 = quantize(exported, trained.tmp / "int8", method="ort-dynamic")
    out = trained.tmp / "bench"
    assert main(["bench", str(exported), str(int8), "--reference", str(trained.path), "--data", str(trained.data),
                 "--out", str(out), "--quick", "--threads", "1", "--no-memory"]) == 0
    return out


def test_bench_scores_a_tagger_on_entity_f1_per_sentence(trained, tagger_results):
    from compress.core.stats import f1_interval
    from compress.runtime.predictor import Predictor
    from compress.tasks.token_classification.metrics import entity_scores, sentence_counts
    from compress.config import DataOptions

    results = json.loads((tagger_results / "results.json").read_text())
    assert results["data"]["metric"] == "entity_f1" and results["data"]["types"] == ["LOC", "PER"]
    assert "labels" not in results["data"] and results["data"]["task"] == "token-classification"
    data = DataOptions(**results["data"]["options"]).load_any()  # --quick's seeded cut, in its order
    gold = data.tags("test")
    arts = {a["name"]: a for a in results["artifacts"]}
    ref = arts[results["reference"]]["quality"]
    tags = [r["word_tags"] for r in Predictor.load(trained.path).predict(data.texts("test"), word_tags=True)]
    assert ref["entity_f1"] == pytest.approx(entity_scores(gold, tags)["f1"])
    assert ref["entity_counts"] == sentence_counts(gold, tags, ["LOC", "PER"])[1].tolist()
    assert ref["agreement"] == 1.0 and "entity_f1_drop" not in ref
    assert ref["entity_f1_ci"] == pytest.approx([f1_interval(ref["entity_counts"]).low, f1_interval(ref["entity_counts"]).high])
    for name, art in arts.items():
        q = art["quality"]
        assert len(q["entity_counts"]) == len(gold) == q["n"] and len(q["word_agreement"]) == len(gold)
        if not art["is_reference"]:
            assert q["entity_f1_drop"]["estimate"] == pytest.approx(ref["entity_f1"] - q["entity_f1"])
            assert set(q["per_type_f1_drop"]) == {"LOC", "PER"}
            for t, (low, high) in q["per_type_f1_drop_interval"].items():
                assert low - 1e-9 <= q["per_type_f1_drop"][t] <= high + 1e-9
        assert art["latency"], f"{name} was not timed"
    report = (tagger_results / "report.md").read_text()
    assert "entity F1 [95%]" in report and "F1 LOC" in report and "word agreement" in report



def test_gate_decides_a_tagger_on_entity_f1(tagger_results, tmp_path):
    code, out = gate_verdict(tagger_results, tmp_path, "[rules]\nmax_f1_drop = 0.5\nmin_agreement = 0.5\n")
    assert code == 0, out
    assert "max_f1_drop" in out and "of words" in out
    # An artifact that tags every word O (its counts are those of that tagging): F1 0, the drop is the
    # reference's whole F1, far over 0.1: fail; word agreement is the share of O words in the reference's tags.
    from compress.config import DataOptions
    from compress.tasks.token_classification.metrics import sentence_counts

    results = json.loads((tagger_results / "results.json").read_text())
    data = DataOptions(**results["data"]["options"]).load_any()
    nothing = [["O"] * len(t) for t in data.tags("test")]
    worse = next(a for a in results["artifacts"] if not a["is_reference"])
    worse["quality"]["entity_counts"] = sentence_counts(data.tags("test"), nothing, ["LOC", "PER"])[1].tolist()
    worse["quality"]["entity_f1"] = 0.0
    (tmp_path / "worse").mkdir()
    (tmp_path / "worse" / "results.json").write_text(json.dumps(results))
    code, out = gate_verdict(tmp_path / "worse", tmp_path, "[rules]\nmax_f1_drop = 0.1\n")
    assert code == 1 and "entity F1 fell by -" not in out and "entity F1 fell by +" in out, out
    code, out = gate_verdict(tmp_path / "worse", tmp_path, "[rules]\nmax_f1_regression = 0.1\n",
                      baseline=tagger_results / "results.json")
    assert code == 1 and "entity F1 fell" in out, out
    # A rerun against itself as the baseline: the same sentences, nothing fell.
    code, out = gate_verdict(tagger_results, tmp_path, "[rules]\nmax_f1_regression = 0.0\n",
                      baseline=tagger_results / "results.json")
    assert code == 0 and "paired" in out, out


def _tagger_seed_group(results: dict, keep: list[int]) -> dict:
    """``results`` with its first non-reference artifact as seeds "student-s0", "student-s1", ... of a group
    "student": seed ``k`` keeps that artifact's entity counts, except that with ``keep[k] = m > 0`` it tags
    every word O on every m-th test sentence (their counts become those of an all-O tagging)."""
    import copy

    from compress.config import DataOptions
    from compress.tasks.token_classification.metrics import sentence_counts

    doc = copy.deepcopy(results)
    data = DataOptions(**doc["data"]["options"]).load_any()
    gold = data.tags("test")
    first = next(a for a in doc["artifacts"] if not a["is_reference"])
    doc["artifacts"] = [a for a in doc["artifacts"] if a is not first]
    nothing = sentence_counts(gold, [["O"] * len(t) for t in gold], ["LOC", "PER"])[1].tolist()
    for k, every in enumerate(keep):
        member = copy.deepcopy(first)
        member.update(name=f"student-s{k}", latency=first["latency"] if k == 0 else [])
        counts = [c if every == 0 or i % every else nothing[i] for i, c in enumerate(first["quality"]["entity_counts"])]
        member["quality"]["entity_counts"] = counts
        totals = np.asarray(counts).reshape(len(counts), -1, 3).sum(axis=(0, 1))
        member["quality"]["entity_f1"] = float(2 * totals[0] / max(1, totals[1] + totals[2]))
        doc["artifacts"].append(member)
    doc["groups"] = [{"name": "student", "members": [f"student-s{k}" for k in range(len(keep))]}]
    return doc


def test_gate_decides_a_seed_group_of_taggers_on_its_mean(tagger_results, tmp_path):
    """A seed group of taggers is gated on its members' mean F1 drop and word agreement (seed spread added
    to the bootstrap's test-set term) and, against a baseline group, on Welch's t over per-seed F1."""
    from compress.core.stats import f1_drop_interval, mean_f1_drop_over_seeds_interval

    results = json.loads((tagger_results / "results.json").read_text())
    same = _tagger_seed_group(results, [0, 0, 0])  # three identical seeds: the ONNX export's counts
    (tmp_path / "same").mkdir()
    (tmp_path / "same" / "results.json").write_text(json.dumps(same))
    code, out = gate_verdict(tmp_path / "same", tmp_path, "[rules]\nmax_f1_drop = 0.5\nmin_agreement = 0.5\n")
    assert code == 0 and "mean of 3 seeds" in out and "not gated as a group" not in out, out
    ref = next(a for a in same["artifacts"] if a["is_reference"])["quality"]["entity_counts"]
    members = [a["quality"]["entity_counts"] for a in same["artifacts"] if a["name"].startswith("student-s")]
    group, single = mean_f1_drop_over_seeds_interval(ref, members), f1_drop_interval(ref, members[0])
    assert group.estimate == pytest.approx(single.estimate)  # no seed spread: the same drop, a t interval around it

    # Seeds that lose the entities of every 2nd (and every 3rd) sentence: a mean F1 far under the reference's.
    worse = _tagger_seed_group(results, [2, 3, 2])
    (tmp_path / "worse").mkdir()
    (tmp_path / "worse" / "results.json").write_text(json.dumps(worse))
    code, out = gate_verdict(tmp_path / "worse", tmp_path, "[rules]\nmax_f1_drop = 0.05\n")
    assert code == 1 and "mean of 3 seeds" in out and "entity F1 fell by +" in out, out
    drops = [float(f1_drop_interval(ref, a["quality"]["entity_counts"]).estimate)
             for a in worse["artifacts"] if a["name"].startswith("student-s")]
    assert mean_f1_drop_over_seeds_interval(ref, [a["quality"]["entity_counts"] for a in worse["artifacts"]
                                                  if a["name"].startswith("student-s")]).estimate == pytest.approx(
        sum(drops) / 3)
    # Against the identical group as the baseline: Welch's t over per-seed F1 fails the fall; the group against
    # itself is no change at all.
    code, out = gate_verdict(tmp_path / "worse", tmp_path, "[rules]\nmax_f1_regression = 0.05\n",
                      baseline=tmp_path / "same" / "results.json")
    assert code == 1 and "mean of 3 seeds against 3" in out, out
    code, out = gate_verdict(tmp_path / "same", tmp_path, "[rules]\nmax_f1_regression = 0.0\n",
                      baseline=tmp_path / "same" / "results.json")
    assert code == 0, out


def test_gate_refuses_classifier_rules_on_a_tagger_in_one_line(tagger_results, tmp_path, capsys):
    code, _ = gate_verdict(tagger_results, tmp_path, "[rules]\nmax_accuracy_drop = 0.01\n")
    err = capsys.readouterr().err
    assert code == 3 and "these results are a tagger's (entity F1): use max_f1_drop" in err
    assert len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- pruning a tagger


def test_pruning_a_tagger_removes_heads_and_neurons_and_recovers_entity_f1(trained, tmp_path):
    """Half the heads and FFN neurons of the toy tagger (Taylor importance from per-token gradients), then
    one epoch of word-level distillation from the unpruned tagger: the artifact is a smaller tagger,
    scored on entity F1 before, after pruning and after recovery, and still exports with parity."""
    from compress.config import DataOptions, PruneConfig, TrainSettings
    from compress.stages.export import export_onnx
    from compress.stages.prune.stage import prune
    from compress.runtime.predictor import Predictor

    cfg = PruneConfig(model=str(trained.path), data=DataOptions(str(trained.data)), heads=0.5, ffn=0.5,
                      importance="taylor", recover_epochs=2, max_length=48,
                      train=TrainSettings(lr=6e-3, batch_size=8, save_steps=100000, logging_steps=1000,
                                          sampling="sequential"))
    out = prune(cfg, tmp_path / "pruned")
    meta = json.loads((out / "compress.json").read_text())
    p = meta["pruning"]
    assert meta["task"] == "token-classification" and p["metric"] == "entity_f1"
    assert sum(p["heads"]["after"]) == sum(p["heads"]["before"]) // 2
    assert sum(p["ffn"]["after"]) == sum(p["ffn"]["before"]) // 2
    assert p["parameters"]["after"] < p["parameters"]["before"]
    f1 = p["entity_f1"]
    assert f1["before"]["validation"] > 0.8 and f1["after_recovery"]["validation"] > 0.8
    assert meta["metrics"]["validation"]["unpruned_entity_f1"] == f1["before"]["validation"]
    assert meta["metrics"]["validation"]["kl_to_unpruned"] >= 0 and "per_type_f1" in meta["metrics"]["validation"]
    # recovery is the distill stage with --intermediate (prune's default): same tokenizer, so the terms apply
    assert p["recovery"]["distillation"]["intermediate"] is True, p["recovery"]["distillation"]
    tagger = Predictor.load(out)
    assert tagger.task == "token-classification"
    assert [(e["type"], e["text"]) for e in tagger.predict(TEXT)[0]["entities"]] == [("LOC", "New York"), ("PER", "Alice")]
    onnx = export_onnx(out, tmp_path / "pruned-onnx")
    assert json.loads((onnx / "compress.json").read_text())["parity"]["max_abs_diff"] <= 1e-3



def test_a_roberta_tagger_reads_words_with_their_leading_space(tmp_path):
    """A byte-level BPE tokenizer saved with add_prefix_space=False (RoBERTa's) is loaded for a tagger with
    add_prefix_space=True: pre-split words then tokenize exactly as the same words in running text do, so
    training on words and serving raw text see the same tokens (transformers 5 no longer refuses the
    pre-split call, it reads each word as text-initial)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaForTokenClassification, RobertaTokenizerFast

    from datasets import Dataset

    from compress.runtime.modeling import load_classifier
    from compress.tasks.token_classification.words import tokenize_tagged_split

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([" ".join(w for w, _ in zip(*s)) for s in toy_sentences(60)], vocab_size=300,
                            min_frequency=1, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    folder = tmp_path / "roberta"
    RobertaTokenizerFast(tokenizer_object=bpe, add_prefix_space=False, bos_token="<s>", eos_token="</s>",
                         unk_token="<unk>", pad_token="<pad>", mask_token="<mask>").save_pretrained(folder)
    config = RobertaConfig(vocab_size=300, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=130, pad_token_id=1, num_labels=5)
    RobertaForTokenClassification(config).save_pretrained(folder)
    _, tok, _ = load_classifier(folder, 5, ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"], task="token-classification")
    assert tok.add_prefix_space is True
    words = ["we", "went", "to", "New", "York"]
    rows = tokenize_tagged_split(Dataset.from_dict({"tokens": [words], "tags": [[0] * len(words)]}), tok, 32)
    assert rows["input_ids"][0] == tok(" ".join(words))["input_ids"]
    _, classifier_tok, _ = load_classifier(folder, 2)  # a sentence classifier keeps the tokenizer as saved
    assert classifier_tok.add_prefix_space is False
