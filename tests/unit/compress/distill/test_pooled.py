"""Sentence-vector distillation (``distill --alpha-pooled``): the losses on pooled vectors, the store that caches
the teacher's vectors beside its soft labels, the settings that cannot go with it, and a run of tiny BERTs
trained in the test whose second seed runs no teacher at all."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from compress.cli import main
from compress.config import DataOptions, DistillConfig
from compress.config.shared import StudentSpec
from compress.stages.distill.pooled import mean_pool, vector_cache_path
from compress.stages.distill.soft_labels import Part, SoftLabelStore, save_logits
from compress.stages.distill.trainer import DistillationModule, distill
from compress.core.errors import CompressError
from compress.stages.losses import LOSSES, LossTerm
from compress.stages.teacher import TeacherConfig, train_teacher
from compress.stages.training import TrainSettings
from tests.conftest import make_bert, sentiment_rows, write_csv


def test_the_vector_losses_measure_what_they_say():
    g = torch.Generator().manual_seed(0)
    t = torch.randn(6, 8, generator=g)
    cosine, nmse, relation = LOSSES["pooled_cosine"], LOSSES["pooled_nmse"], LOSSES["pooled_relation"]
    assert float(cosine(t, t)) == pytest.approx(0.0, abs=1e-6)
    assert float(cosine(-t, t)) == pytest.approx(2.0, abs=1e-6)
    assert float(cosine(3 * t, t)) == pytest.approx(0.0, abs=1e-6)  # a direction, not a length
    assert float(nmse(3 * t + 1, t)) == pytest.approx(0.0, abs=1e-5)  # standardised: scale and shift drop out
    assert float(nmse(torch.randn(6, 8, generator=g), t)) > 0.5
    rotation, _ = torch.linalg.qr(torch.randn(8, 8, generator=g))
    # The relational loss keeps the sentences' angles to one another, wherever the space puts them.
    assert float(relation(t @ rotation, t)) == pytest.approx(0.0, abs=1e-5)
    assert float(cosine(t @ rotation, t)) > 0.1
    assert float(relation(torch.randn(6, 8, generator=g), t)) > 0.01
    assert float(relation(t[:1], t[:1] * -1)) == 0.0  # one row: no relation to keep
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [99.0, 99.0]], [[5.0, 6.0], [99.0, 99.0], [99.0, 99.0]]])
    assert mean_pool(hidden, mask).tolist() == [[2.0, 3.0], [5.0, 6.0]]  # padding never counts


def test_the_store_caches_vectors_beside_the_logits_and_needs_both(tmp_path):
    parts = [Part("train", 0, 3, tmp_path / "a.npy"), Part("unlabeled", 3, 5, tmp_path / "b.npy")]
    save_logits(parts[0].cache, np.ones((3, 2), dtype=np.float32))  # logits cached by an earlier logits-only run
    store = SoftLabelStore(parts, 2, vector_width=4)
    assert store.loaded == {"train": True, "unlabeled": False}
    assert store.vectors_loaded == {"train": False, "unlabeled": False}
    assert store.missing(np.array([0])) and store.unknown_rows(np.arange(5)) == 5  # logits alone are not enough
    with pytest.raises(ValueError, match="pass them with the logits"):
        store.put(np.array([0]), np.zeros((1, 2)))
    store.put(np.arange(5), np.full((5, 2), 2.0), np.arange(20, dtype=np.float32).reshape(5, 4))
    assert store.complete
    assert set(store.save()) == {"unlabeled"}  # the loaded logits file is not rewritten
    assert set(store.save_vectors()) == {"train", "unlabeled"}
    assert np.load(vector_cache_path(parts[1].cache)).tolist() == [[12, 13, 14, 15], [16, 17, 18, 19]]
    assert np.load(parts[0].cache).tolist() == [[1, 1]] * 3  # a loaded logits file is not rewritten
    again = SoftLabelStore(parts, 2, vector_width=4)
    assert again.complete and again.vectors_loaded == {"train": True, "unlabeled": True}
    assert again.get_vectors(np.array([4])).tolist() == [[16, 17, 18, 19]]
    assert not SoftLabelStore(parts, 2, vector_width=3).complete  # a cache of another width is refilled
    assert SoftLabelStore(parts, 2).complete  # a logits-only run ignores the vectors


def test_the_pooled_term_is_built_checked_and_refused_where_it_cannot_run():
    terms = DistillConfig(alpha_pooled=0.5, pooled_loss="pooled_relation").loss_terms()
    assert [t.to_dict() for t in terms if t.pooled] == [{"name": "pooled", "loss": "pooled_relation", "on": "pooled",
                                                         "weight": 0.5}]
    assert not any(t.pooled for t in DistillConfig().loss_terms())
    assert LossTerm("pooled_cosine").on == "pooled"
    assert "not hidden" in LossTerm("pooled_cosine", on="hidden").problems()[0]

    def messages(**kw) -> list[str]:
        return [p.message for p in DistillConfig(**kw).problems()]

    assert any("--alpha-pooled must be >= 0" in m for m in messages(alpha_pooled=-1))
    assert any("drop --ensemble" in m for m in messages(alpha_pooled=1, ensemble="other"))
    assert any("--soft-labels pytorch" in m for m in messages(alpha_pooled=1, soft_labels="onnx-int8"))
    assert messages(alpha_pooled=1, soft_labels="auto") == []
    with pytest.raises(CompressError, match="--alpha-pooled 1"):
        DistillConfig(alpha_pooled=1.0).refuse_beyond_logits("a tagger uses soft CE over words plus hard CE only")


def test_the_pooled_term_trains_the_student_through_its_projection(tmp_path):
    student = _tiny(tmp_path / "s", hidden=16)
    module = DistillationModule(student, 16, 24, {}, intermediate=False, pooled=True)
    ids = torch.randint(5, 100, (4, 7))
    mask = torch.ones_like(ids)
    term = LossTerm("pooled_cosine", 1.0, on="pooled")
    values = module(ids, mask, terms=[term], teacher_vectors=torch.randn(4, 24))
    values["loss"].backward()
    assert float(values["pooled"].detach()) > 0
    assert module.pooled_projection.weight.grad.abs().sum() > 0
    assert student.bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert "pooled" not in module(ids, mask, terms=[term])  # no teacher vectors: the term is skipped


def _tiny(folder, hidden: int):
    from transformers import AutoModelForSequenceClassification

    return AutoModelForSequenceClassification.from_pretrained(make_bert(folder, layers=1, hidden=hidden, head=True))


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    root = tmp_path_factory.mktemp("pooled")
    data = write_csv(root / "data.csv", sentiment_rows(120))
    base = make_bert(root / "base", layers=2, head=True)
    path = train_teacher(TeacherConfig(model=str(base), data=DataOptions(str(data)),
                                       train=TrainSettings(epochs=1, lr=2e-3, batch_size=16, logging_steps=1000)),
                         root / "teacher")
    return {"data": data, "teacher": path}


def test_distill_with_the_pooled_term_caches_the_vectors_and_a_second_seed_runs_no_teacher(teacher, tmp_path, capsys):
    cfg = DistillConfig(teacher=str(teacher["teacher"]), data=DataOptions(str(teacher["data"])), alpha_pooled=1.0,
                        train=TrainSettings(epochs=1, lr=2e-3, batch_size=16, logging_steps=2),
                        student=StudentSpec("2x32", "random"), allow_untrained_teacher=True)
    first = json.loads((distill(cfg, tmp_path / "s0") / "compress.json").read_text())
    assert first["distillation"]["pooled"]["teacher_width"] == 32
    assert first["distillation"]["soft_labels"]["runtime"] == "pytorch"
    assert {"name": "pooled", "loss": "pooled_cosine", "on": "pooled", "weight": 1.0} in \
        first["distillation"]["loss_terms"]
    assert first["training"]["soft_label_rows_filled"] > 0
    assert first["training"]["teacher_vectors"]["filled_during_training"] is True
    pooled = [float(v) for v in re.findall(r"'loss_pooled': '([0-9.e-]+)'", capsys.readouterr().out)]
    assert len(pooled) == 3 and pooled[-1] < pooled[0]  # the student's vectors move toward the teacher's
    out = tmp_path / "s1"
    rc = main(["distill", "--teacher", str(teacher["teacher"]), "--data", str(teacher["data"]), "--student", "2x32",
               "--init", "random", "--epochs", "1", "--batch-size", "16", "--lr", "2e-3", "--alpha-pooled", "1",
               "--pooled-loss", "pooled_relation", "--seed", "1", "--out", str(out), "--allow-untrained-teacher"])
    assert rc == 0, capsys.readouterr().err
    second = json.loads((out / "compress.json").read_text())
    assert second["training"]["soft_label_rows_filled"] == 0  # logits and vectors both came from the cache
    assert second["training"]["teacher_vectors"]["cached_parts"] == {"train": True}

