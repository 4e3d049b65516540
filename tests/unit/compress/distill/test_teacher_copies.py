"""Soft labels from a faster copy of the teacher (compress.stages.distill.teacher_copies: ONNX Runtime INT8, OpenVINO
fp32), and the teacher stage's evaluation logits reused by distillation, on a tiny BERT teacher built in the test."""

import json

import numpy as np
import pytest

from compress.config import SOFT_LABELS_AUTO_MIN_ROWS, DataOptions, DistillConfig
from compress.tasks.tables import tokenize_split
from compress.stages.distill.teacher_copies import (INT8_TAG, OPENVINO_FP32_TAG, choose_label_runtime, copy_wins,
                                             wants_copy)
from compress.stages.distill.trainer import distill
from compress.stages.teacher import TeacherConfig, load_teacher, soft_label_cache_path, teacher_logits, train_teacher
from compress.stages.training import TrainSettings
from students.factory import StudentSpec
from tests.conftest import make_bert, sentiment_rows, write_csv


@pytest.fixture(scope="module")
def teacher_and_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("int8-labels")
    data = write_csv(root / "sentiment.csv", sentiment_rows(240))
    # seed 7: not the teacher other modules train on the same file (same weights, same soft-label cache key), so
    # which rows are cached depends on this module alone
    cfg = TeacherConfig(model=str(make_bert(root / "encoder", seed=7)), data=DataOptions(str(data)),
                        train=TrainSettings(epochs=6, lr=2e-3, batch_size=16, logging_steps=1000))
    return train_teacher(cfg, root / "teacher"), data


def _distill(teacher, data, out, **kw):
    cfg = DistillConfig(teacher=str(teacher), data=DataOptions(str(data)), student=StudentSpec("2x16", "random"),
                        train=TrainSettings(epochs=1, lr=2e-3, batch_size=16, logging_steps=1000), **kw)
    return json.loads((distill(cfg, out) / "compress.json").read_text())


VNNI = frozenset({"avx2", "avx512f", "avx512_vnni"})
AVX2 = frozenset({"avx2", "fma"})


@pytest.mark.parametrize("setting, device, intermediate, world, rows, precision, flags, expected, why", [
    ("pytorch", "cpu", False, 1, 10**6, "fp32", VNNI, None, "--soft-labels pytorch"),
    ("auto", "cpu", True, 1, 10**6, "fp32", VNNI, None, "intermediate losses"),
    ("onnx-int8", "cpu", True, 1, 10**6, "fp32", VNNI, None, "intermediate losses"),
    ("auto", "cpu", False, 2, 10**6, "fp32", VNNI, None, "distributed"),
    ("auto", "cpu", False, 1, 0, "fp32", VNNI, None, "cached"),
    ("auto", "cuda:0", False, 1, 10**6, "bf16", VNNI, None, "cuda:0"),
    ("auto", "cpu", False, 1, SOFT_LABELS_AUTO_MIN_ROWS - 1, "fp32", VNNI, None, "fewer than"),
    ("auto", "cpu", False, 1, 10**6, "bf16", VNNI, None, "native bf16"),   # the PyTorch teacher is the fast one
    ("auto", "cpu", False, 1, SOFT_LABELS_AUTO_MIN_ROWS, "fp32", VNNI, INT8_TAG, ""),
    ("auto", "cpu", False, 1, 10**6, "fp32", AVX2, None, "no VNNI"),
    ("auto", "cpu", False, 1, 10**6, "fp32", frozenset({"avx_vnni"}), INT8_TAG, ""),
    ("auto", "cpu", False, 1, 10**6, "fp32", frozenset({"amx_int8"}), INT8_TAG, ""),
    ("onnx-int8", "cpu", False, 1, 5, "bf16", AVX2, INT8_TAG, ""),  # asked for: tried for a few rows, anywhere
    ("onnx-int8", "cuda:0", False, 1, 5, "fp32", VNNI, INT8_TAG, ""),
    ("openvino-fp32", "cpu", False, 1, 5, "bf16", AVX2, OPENVINO_FP32_TAG, ""),  # only when asked for
])
def test_which_copy_is_tried(setting, device, intermediate, world, rows, precision, flags, expected, why):
    copy, reason = wants_copy(setting, device, intermediate, world, rows, precision, flags)
    assert copy == expected
    assert why in reason


@pytest.mark.parametrize("agreement, timed, explicit, wins, says", [
    (0.999, {"pytorch": 10.0, "copy": 6.0}, False, True, "agrees with the PyTorch teacher on 99.90%"),
    (0.990, {"pytorch": 10.0, "copy": 6.0}, False, False, "99.00% of 1000 validation sentences (< 99.50%)"),
    (0.990, {"pytorch": 10.0, "copy": 6.0}, True, False, "(< 99.50%)"),  # asked for, but it disagrees: never used
    (0.999, {"pytorch": 10.0, "copy": 11.0}, False, False, "no faster"),    # auto keeps the faster PyTorch teacher
    (0.999, {"pytorch": 10.0, "copy": 11.0}, True, True, "asked for it"),  # the user's choice, its time recorded
])
def test_a_copy_is_used_only_when_it_agrees_and_auto_also_needs_it_faster(agreement, timed, explicit, wins, says):
    timed = {**timed, "rows": 256}
    used, reason = copy_wins("openvino-fp32", agreement, 1000, 0.995, timed, explicit)
    assert used is wins and says in reason


def test_the_teacher_stage_caches_its_evaluation_logits_for_distill(teacher_and_data, tmp_path):
    teacher, data = teacher_and_data
    meta = _distill(teacher, data, tmp_path / "student", soft_labels="pytorch")
    # validation and test were labelled by the teacher stage itself; the training rows were not
    assert meta["distillation"]["soft_labels_reused"] == {"train": False, "validation": True, "test": True}
    t_meta = json.loads((teacher / "compress.json").read_text())
    for split in ("validation", "test"):
        assert meta["metrics"][split]["teacher_accuracy"] == pytest.approx(t_meta["metrics"][split]["accuracy"])
    assert meta["distillation"]["soft_labels"]["runtime"] == "pytorch"


def test_int8_labels_are_used_when_they_agree_and_cached_under_their_own_key(teacher_and_data, tmp_path, capsys,
                                                                            monkeypatch):
    teacher, data = teacher_and_data
    monkeypatch.setenv("BERT_COMPRESS_CACHE", str(tmp_path / "cache"))  # no soft label of this teacher cached yet
    # fp32 throughout: the PyTorch labels cached below are fp32 ones (auto would pick bf16 on a CPU that has it)
    meta = _distill(teacher, data, tmp_path / "student", soft_labels="onnx-int8", soft_labels_min_agreement=0.9,
                    precision="fp32")
    labels = meta["distillation"]["soft_labels"]
    assert labels["runtime"] == INT8_TAG and labels["validation_agreement"] >= 0.9 and labels["validation_n"] > 0
    assert "agrees with the PyTorch teacher on" in labels["reason"]
    assert "the onnx-int8 teacher, cached at" in capsys.readouterr().out
    assert "copy_labels_s" in meta["timings"] and set(labels["sample_seconds"]) == {"pytorch", "copy", "rows"}

    # The INT8 labels are near the PyTorch teacher's, and keyed apart from them.
    loaded = load_teacher(teacher)
    from compress.tasks.tables import load_task_data

    train = tokenize_split(load_task_data(str(data)).splits["train"], loaded.tokenizer, 128, False, prefix="t_",
                           what="teacher")
    int8_file = soft_label_cache_path(loaded, train, "t_", INT8_TAG)
    assert int8_file.exists() and int8_file != soft_label_cache_path(loaded, train, "t_", "fp32")
    int8 = np.load(int8_file)
    fp32, _ = teacher_logits(loaded, train, prefix="t_")
    assert int8.shape == fp32.shape
    assert (int8.argmax(-1) == fp32.argmax(-1)).mean() >= 0.95
    assert np.abs(int8 - fp32).max() < 0.5 * np.abs(fp32).max()
    assert not np.array_equal(int8, fp32)  # really another runtime's numbers

    # teacher_logits above cached the fp32 labels too: a second run has no row left to label.
    again = _distill(teacher, data, tmp_path / "again", soft_labels="onnx-int8", soft_labels_min_agreement=0.9,
                     precision="fp32")
    assert again["distillation"]["soft_labels"]["runtime"] == "pytorch"
    assert again["distillation"]["soft_labels_reused"]["train"] is True


def test_int8_labels_that_disagree_are_not_used(teacher_and_data):
    teacher, data = teacher_and_data
    loaded = load_teacher(teacher)
    from compress.tasks.tables import load_task_data

    validation = tokenize_split(load_task_data(str(data)).splits["validation"], loaded.tokenizer, 128, False,
                                prefix="t_", what="teacher")
    fp32, _ = teacher_logits(loaded, validation, prefix="t_")
    # Against its own labels the INT8 copy passes; against labels it contradicts everywhere it fails.
    kept = choose_label_runtime("onnx-int8", 0.9, loaded, validation, fp32, "cpu", False, 1, 1000)
    assert kept.runtime == INT8_TAG
    refused = choose_label_runtime("onnx-int8", 0.9, loaded, validation, -fp32, "cpu", False, 1, 1000)
    assert refused.runtime == "pytorch" and "(< 90.00%)" in refused.reason and refused.agreement < 0.1
    few = choose_label_runtime("auto", 0.9, loaded, validation, fp32, "cpu", False, 1, 10)
    assert few.runtime == "pytorch" and few.agreement is None


def test_the_openvino_fp32_copy_labels_with_the_teachers_numbers(teacher_and_data, tmp_path, monkeypatch):
    pytest.importorskip("openvino")
    teacher, data = teacher_and_data
    monkeypatch.setenv("BERT_COMPRESS_CACHE", str(tmp_path / "cache"))
    meta = _distill(teacher, data, tmp_path / "student", soft_labels="openvino-fp32", precision="fp32")
    labels = meta["distillation"]["soft_labels"]
    assert labels["runtime"] == OPENVINO_FP32_TAG and labels["validation_agreement"] == 1.0
    loaded = load_teacher(teacher)
    from compress.tasks.tables import load_task_data

    train = tokenize_split(load_task_data(str(data)).splits["train"], loaded.tokenizer, 128, False, prefix="t_",
                           what="teacher")
    copied = np.load(soft_label_cache_path(loaded, train, "t_", OPENVINO_FP32_TAG))
    fp32, _ = teacher_logits(loaded, train, prefix="t_")
    np.testing.assert_allclose(copied, fp32, atol=1e-4)  # fp32 in another runtime: the same logits, rounding aside
