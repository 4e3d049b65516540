"""A task registered from outside the package goes through every stage with no file of compress/ or benchmarks/
changed: the toy ``sentence-order`` task (tests/support/toy_task: a next-sentence head, one ``.stories`` file,
its own metric and decoding) through teacher -> distill -> export -> quantize -> optimize -> bench -> gate ->
predict, each stage driven through the command line in this process (a child process would not see a task this
test registers)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from compress.cli import main
from compress.tasks.protocol import ASPECTS, missing_members
from conftest import make_bert
from tests.support.toy_task import NAME, TASK, register, unregister

#: A story's two sentences begin with these words, in this order: which pair is in order is learnt from them.
OPENERS = ("once", "then")
THINGS = ("the cat", "a dog", "the man", "my friend", "the bird", "a child")
DOINGS = ("sat down", "ran home", "went out", "ate food", "slept well", "sang loud")


def write_stories(path, n: int = 100):
    """``n`` two-sentence stories, one per line, sentences separated by `` / ``."""
    lines = []
    for i in range(n):
        thing = THINGS[i % len(THINGS)]
        lines.append(" / ".join(f"{opener} {thing} {DOINGS[(i + k) % len(DOINGS)]}"
                                for k, opener in enumerate(OPENERS)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def toy():
    """The toy task, registered for this module's tests only."""
    register()
    yield TASK
    unregister()


@pytest.fixture(scope="module")
def trained(toy, tmp_path_factory):
    """A teacher (``bert-compress teacher``) and a student (``bert-compress distill``) of the toy task."""
    tmp = tmp_path_factory.mktemp("toy")
    data = write_stories(tmp / "train.stories")
    encoder = make_bert(tmp / "encoder", layers=1, hidden=32)
    common = ["--data", str(data), "--epochs", "6", "--lr", "3e-3", "--batch-size", "16", "--max-length", "24",
              "--precision", "fp32"]
    assert main(["teacher", "--model", str(encoder), *common, "--out", str(tmp / "teacher")]) == 0
    assert main(["distill", "--teacher", str(tmp / "teacher"), "--student", "1x32", "--init", "random", *common,
                 "--out", str(tmp / "student")]) == 0
    return SimpleNamespace(tmp=tmp, data=data, teacher=tmp / "teacher", student=tmp / "student")


@pytest.fixture(scope="module")
def int8(trained):
    """The student exported to ONNX (``bert-compress export``) and quantized to INT8 (``bert-compress quantize``)."""
    onnx, int8 = trained.tmp / "onnx", trained.tmp / "int8"
    assert main(["export", "--model", str(trained.student), "--out", str(onnx)]) == 0
    assert main(["quantize", "--model", str(onnx), "--method", "ort-dynamic", "--data", str(trained.data),
                 "--max-accuracy-drop", "0.5", "--out", str(int8)]) == 0
    return SimpleNamespace(onnx=onnx, path=int8)


def _meta(folder):
    return json.loads((folder / "compress.json").read_text(encoding="utf-8"))


def test_the_toy_task_lives_outside_the_package_and_has_every_aspect(toy):
    assert not toy.package.startswith("compress.")
    assert {name: missing_members(toy, name) for name in ASPECTS} == {name: [] for name in ASPECTS}


def test_the_data_says_the_task(toy, tmp_path):
    from compress.config import DataOptions

    data = DataOptions(str(write_stories(tmp_path / "s.stories"))).load_any()
    assert DataOptions(str(tmp_path / "s.stories")).task() == NAME and data.task == NAME
    assert data.sizes() == {"validation": 20, "test": 20, "train": 160}


def test_teacher_and_distill_train_the_next_sentence_head(trained):
    teacher, student = _meta(trained.teacher), _meta(trained.student)
    assert teacher["task"] == student["task"] == NAME
    config = json.loads((trained.student / "config.json").read_text())
    assert config["architectures"] == ["BertForNextSentencePrediction"] and config["num_hidden_layers"] == 1
    assert teacher["metrics"]["test"]["order_accuracy"] > 0.9, teacher["metrics"]  # the openers tell the order
    assert student["metrics"]["test"]["order_accuracy"] > 0.9, student["metrics"]
    assert student["metrics"]["test"]["order_agreement"] > 0.9 and student["distillation"]["losses"]["teacher_kl"] == 1


def test_export_and_quantize_keep_the_task(trained, int8):
    assert _meta(int8.onnx)["task"] == NAME and _meta(int8.onnx)["parity"]["max_abs_diff"] <= 1e-4
    meta = _meta(int8.path)
    assert meta["task"] == NAME and "order_accuracy_drop" in json.dumps(meta), sorted(meta)


def test_optimize_scores_candidates_on_order_accuracy(trained, tmp_path):
    out = tmp_path / "choice"
    assert main(["optimize", "--model", str(trained.student), "--out", str(out), "--data", str(trained.data),
                 "--candidates", "onnx-fp32,onnx-int8-fused", "--batch-sizes", "1,4", "--seq-len", "16",
                 "--warmup", "1", "--runs", "3", "--threads", "1", "--max-accuracy-drop", "0.5"]) == 0
    meta = _meta(out)
    assert meta["task"] == NAME and meta["optimize"]["metric"] == "order_accuracy"
    assert all("order_accuracy_drop" in row for row in meta["optimize"]["table"])


def test_bench_and_the_gate_read_the_toy_tasks_results(trained, int8, tmp_path, capsys):
    bench = tmp_path / "bench"
    assert main(["bench", str(trained.student), str(int8.path), "--reference", str(trained.student), "--data",
                 str(trained.data), "--quick", "--no-memory", "--out", str(bench)]) == 0
    results = json.loads((bench / "results.json").read_text())
    assert results["data"]["task"] == NAME and len(results["data"]["labels"]) == 20
    assert "order accuracy" in (bench / "report.md").read_text()
    (tmp_path / "rules.toml").write_text("[rules]\nmax_accuracy_drop = 0.5\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["gate", str(bench / "results.json"), "--rules", str(tmp_path / "rules.toml")]) == 0
    assert "max_accuracy_drop" in capsys.readouterr().out


def test_predict_answers_each_pairs_order(trained, int8, capsys):
    capsys.readouterr()
    assert main(["predict", "--model", str(int8.path), "once the cat sat down\tthen the cat ran home",
                 "then a dog went out\tonce a dog ran home"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split("\t")[0] for line in lines] == ["in-order", "swapped"], lines


def test_a_task_sharing_the_classifiers_head_class_is_told_by_its_recorded_task(toy, tmp_path):
    """The same toy task on a ``...ForSequenceClassification`` head (the head class of two built-in tasks): its
    teacher, recorded as its task, is accepted as that task's model (what distill asks of a teacher)."""
    import dataclasses

    from compress.core.artifact import write_model_artifact
    from compress.runtime.modeling import load_classifier
    from compress.tasks.registry import register_task, unregister_task
    from compress.tasks.task_choice import check_model_task

    shared = register_task(dataclasses.replace(toy, name="sentence-order-cls", head_suffix="ForSequenceClassification",
                                               auto_model="AutoModelForSequenceClassification"), replace=True)
    try:
        folder = make_bert(tmp_path / "classifier", layers=1, head=True, num_labels=2)
        model, tokenizer, _ = load_classifier(folder, 2, ["in-order", "swapped"])
        artifact = write_model_artifact(tmp_path / "artifact", model, tokenizer,
                                        {"stage": "teacher", "kind": "pytorch", "task": shared.name})
        head, _ = check_model_task(artifact, shared.name, "train.stories")
        assert head is not None and head.name == shared.name
    finally:
        unregister_task(shared.name)
