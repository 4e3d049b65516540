"""The sentence-embedding task's training aspect: the teacher as it is or fine-tuned on pairs, and distillation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from compress.config import DataOptions, DistillConfig, TeacherConfig
from compress.config.shared import StudentSpec, TrainSettings
from compress.core.errors import CompressError
from compress.tasks import get_task
from compress.tasks.protocol import missing_members
from compress.tasks.sentence_embedding.distill import Encoder
from tests.support.embedding import corpus, make_st_folder

TRAINING = get_task("sentence-embedding").aspect("training")
PAIRS = DataOptions(data="stsb-captions", limit=40)


@pytest.fixture(scope="module")
def teacher_folder(tmp_path_factory):
    return make_st_folder(tmp_path_factory.mktemp("embedding-training") / "teacher", hidden=48, layers=2, seed=1)


def _meta(folder):
    return json.loads((folder / "compress.json").read_text())


def test_the_teacher_is_used_as_it_is_and_scored_on_pairs(teacher_folder, tmp_path):
    out = TRAINING.train_teacher(TeacherConfig(model=str(teacher_folder), data=PAIRS), tmp_path / "teacher")
    meta = _meta(out)
    assert meta["task"] == "sentence-embedding" and meta["stage"] == "teacher"
    assert not meta["distillation"]["fine_tuned"] and set(meta["metrics"]) == {"validation", "test"}
    texts = corpus(6, seed=4)
    np.testing.assert_allclose(Encoder.load(out).vectors(texts), Encoder.load(teacher_folder, 128).vectors(texts),
                               atol=1e-6)


def test_fine_tuning_needs_pairs_and_changes_the_weights(teacher_folder, tmp_path):
    text = tmp_path / "domain.txt"
    text.write_text("\n".join(corpus(200)), encoding="utf-8")
    with pytest.raises(CompressError, match="fine-tuned on scored sentence pairs"):
        TRAINING.train_teacher(TeacherConfig(model=str(teacher_folder), data=DataOptions(data=str(text)),
                                             finetune=True), tmp_path / "refused")
    cfg = TeacherConfig(model=str(teacher_folder), data=PAIRS, finetune=True,
                        train=TrainSettings(max_steps=4, batch_size=8, lr=1e-3))
    out = TRAINING.train_teacher(cfg, tmp_path / "tuned")
    record = _meta(out)["distillation"]
    assert record["fine_tuned"] and record["training"]["steps"] == 4
    texts = corpus(4, seed=5)
    assert not np.allclose(Encoder.load(out).vectors(texts), Encoder.load(teacher_folder, 128).vectors(texts),
                           atol=1e-4)


def test_distill_trains_a_student_from_its_shape_on_the_data_texts(teacher_folder, tmp_path):
    text = tmp_path / "domain.txt"
    text.write_text("\n".join(corpus(300)), encoding="utf-8")
    cfg = DistillConfig(teacher=str(teacher_folder), data=DataOptions(data=str(text)),
                        student=StudentSpec(shape="1x32", init="random"), train=TrainSettings(max_steps=6, batch_size=8))
    out = TRAINING.distill(cfg, tmp_path / "student")
    meta = _meta(out)
    record = meta["distillation"]
    assert record["widths"] == {"student": 32, "teacher": 48} and record["loss"] == "both" and record["steps"] == 6
    assert record["held_out"]["texts"] >= 50 and not record["projection"]["stored"]
    assert record["pipeline_from"].startswith("the teacher's pipeline")
    student = Encoder.load(out)
    assert (student.config.pooling, student.config.normalize) == ("mean", True)


def test_a_pretrained_student_keeps_its_own_pipeline(teacher_folder, tmp_path):
    own = make_st_folder(tmp_path / "own", pooling="cls", normalize=False, hidden=32, layers=2, seed=6)
    cfg = DistillConfig(teacher=str(teacher_folder), data=PAIRS, student=StudentSpec(shape="2x32", init=f"pretrained:{own}"),
                        train=TrainSettings(max_steps=2, batch_size=8))
    meta = _meta(TRAINING.distill(cfg, tmp_path / "student"))
    assert meta["distillation"]["pooling"] == "cls" and not meta["distillation"]["normalize"]
    assert set(meta["metrics"]) == {"validation", "test"} and set(meta["teacher_metrics"]) == {"validation", "test"}


def test_pruning_and_pretraining_are_refused_in_one_line(tmp_path):
    with pytest.raises(CompressError, match="pruning a sentence encoder is not supported yet"):
        TRAINING.load_for_pruning(None, tmp_path, None)
    with pytest.raises(CompressError, match="distill --unlabeled"):
        TRAINING.pretrain_data(None)
    assert missing_members(get_task("sentence-embedding"), "training") == []
