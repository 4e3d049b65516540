"""The CPU-side guard: a device mix-up fails on CPU-only machines, not only on GPUs.

Each stage that runs a model is run with that model on a second device (``tests/support/device_guard.py``:
values kept, devices checked as CUDA checks them). Code that leaves a batch on the CPU while the
model is elsewhere, or calls ``.numpy()`` on logits that are not on the CPU, fails here on a
machine without a GPU, the way it fails on one with a GPU. Results must come back as numpy
arrays equal to a plain CPU run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from compress.config import DataOptions
from compress.tasks.tables import load_task_data, tokenize_split
from compress.runtime.modeling import load_classifier, predict_logits
from tests.conftest import make_bert, sentiment_rows, train_briefly, write_csv
from tests.support.device_guard import DEVICE, DeviceMismatch, OtherDevice


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("device-guard")
    data = write_csv(root / "data.csv", sentiment_rows(240))
    teacher = train_briefly(make_bert(root / "teacher", layers=2, head=True))
    return root, data, teacher


def _tokenized(folder, data, split="validation"):
    task = load_task_data(str(data))
    model, tok, _ = load_classifier(folder, task.num_labels)
    return model, tok, task, tokenize_split(task.splits[split], tok, 64, False)


def test_the_guard_fails_on_a_forgotten_move(world):
    _, data, teacher = world
    model, tok, _, _ = _tokenized(teacher, data)
    enc = tok(["a wonderful film", "a dull film"], return_tensors="pt", padding=True)
    with OtherDevice():
        model.to(DEVICE)
        assert next(model.parameters()).device == DEVICE
        with torch.inference_mode():
            with pytest.raises(DeviceMismatch):
                model(**enc)  # the batch stayed on the CPU
            logits = model(**{k: v.to(DEVICE) for k, v in enc.items()}).logits
            assert logits.device == DEVICE
            with pytest.raises((TypeError, RuntimeError)):
                logits.numpy()  # not on the CPU
            assert isinstance(logits.cpu().numpy(), np.ndarray)


def test_predict_logits_runs_on_the_models_device(world):
    _, data, teacher = world
    model, tok, _, val = _tokenized(teacher, data)
    expected = predict_logits(model, val, batch_size=8, pad_id=tok.pad_token_id, progress=False)
    with OtherDevice() as guard:
        model.to(DEVICE)
        got = predict_logits(model, val, batch_size=8, pad_id=tok.pad_token_id, progress=False)
    assert guard.checked > 0  # the forward passes really ran on the other device
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_teacher_soft_labels_run_on_the_teachers_device(world, tmp_path, monkeypatch):
    from compress.stages.teacher import load_teacher, teacher_logits

    monkeypatch.setenv("BERT_COMPRESS_CACHE", str(tmp_path / "cache"))
    _, data, teacher_dir = world
    task = load_task_data(str(data))
    teacher = load_teacher(teacher_dir, task)
    ds = tokenize_split(task.splits["validation"], teacher.tokenizer, 64, False, prefix="t_")
    expected = predict_logits(teacher.model, ds, prefix="t_", pad_id=teacher.tokenizer.pad_token_id, progress=False)
    with OtherDevice() as guard:
        teacher.model.to(DEVICE)
        got, reused = teacher_logits(teacher, ds, prefix="t_", what="validation")
    assert not reused and guard.checked > 0
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_distillation_teacher_forward_follows_the_training_device(world, tmp_path, monkeypatch):
    """The Trainer puts the student on its device; a teacher loaded elsewhere must not be fed across."""
    import compress.tasks.sequence_classification.distill as classifier_distill
    from compress.stages.distill.trainer import DistillConfig, distill
    from compress.stages.training import TrainSettings
    from students.factory import StudentSpec

    monkeypatch.setenv("BERT_COMPRESS_CACHE", str(tmp_path / "cache"))
    _, data, teacher_dir = world
    real_load = classifier_distill.load_teacher

    def load_on_other_device(*args, **kwargs):
        teacher = real_load(*args, **kwargs)
        teacher.model.to(DEVICE)  # where a user's teacher may sit while the Trainer uses another device
        return teacher

    monkeypatch.setattr(classifier_distill, "load_teacher", load_on_other_device)
    cfg = DistillConfig(teacher=str(teacher_dir), data=DataOptions(str(data)), student=StudentSpec("1x32", "random"),
                        train=TrainSettings(epochs=1, lr=1e-3, batch_size=16, max_steps=2, logging_steps=1000),
                        intermediate=True)
    with OtherDevice() as guard:
        out = distill(cfg, tmp_path / "student")
    meta = json.loads((out / "compress.json").read_text())
    assert guard.checked > 0 and meta["distillation"]["intermediate"] is True
    assert meta["training"]["global_steps"] == 2
    assert {"embedding", "hidden", "attention"} <= set(meta["distillation"]["losses"])


def test_quantize_accuracy_check_and_predictor_on_the_models_device(world):
    from compress.stages.quantize import _Evaluation
    from compress.runtime.predictor import Predictor

    _, data, teacher = world
    predictor = Predictor.load(teacher)
    texts = [r["text"] for r in sentiment_rows(12, seed=9)]
    expected = predictor.logits(texts)
    reference = _Evaluation(DataOptions(str(data)).load_any(), predictor).fp32
    with OtherDevice() as guard:
        predictor.model.to(DEVICE)
        got = predictor.logits(texts)
        check = _Evaluation(DataOptions(str(data)).load_any(), predictor)
    assert guard.checked > 0 and isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    assert check.fp32 == reference and check.scorer.metric == "accuracy"
