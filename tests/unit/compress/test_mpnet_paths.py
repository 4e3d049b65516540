"""The default teacher's code paths on a tiny MPNet in the real mpnet-base layout (tests/conftest.py):
its teacher stage, MPNet -> BERT distillation (logits, then with intermediate losses across the two
tokenizers), its unfused ONNX export, the pruning refusal, and the position-table cap
(``default_max_length``) with MPNet's and RoBERTa's two-row offset, on position tables shorter
than the tokenizer's limit."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from compress.config import DataOptions
from compress.core.errors import CompressError
from compress.runtime.predictor import Predictor, default_max_length, position_limit
from compress.stages.training import TrainSettings
from tests.conftest import (MPNET_SHIFT, MPNET_VOCAB_SIZE, make_bert, make_mpnet, make_mpnet_tokenizer, make_tokenizer,
                            sentiment_rows, train_briefly, write_csv)

#: Longer than every position table below: truncation must come from the cap, not from luck.
LONG = "the plot was dull and the acting weak but the cast was really charming " * 12


@pytest.fixture(scope="module")
def mpnet_teacher(tmp_path_factory):
    """A tiny MPNet encoder (66 position rows = 64 tokens, tokenizer limit 512) fine-tuned by the teacher stage."""
    from compress.stages.teacher import TeacherConfig, train_teacher

    root = tmp_path_factory.mktemp("mpnet")
    data = write_csv(root / "sentiment.csv", sentiment_rows(240))
    encoder = make_mpnet(root / "encoder")
    cfg = TeacherConfig(model=str(encoder), data=DataOptions(str(data)),
                        train=TrainSettings(epochs=6, lr=2e-3, batch_size=16, logging_steps=1000))
    return train_teacher(cfg, root / "teacher"), data, root


def _meta(folder) -> dict:
    return json.loads((folder / "compress.json").read_text())


# ----------------------------------------------------------------------------- the fixture itself


def test_mpnet_tokenizer_has_the_real_layout():
    """Word pieces of bert-base-uncased at id + 4, MPNet's specials around them: the same pieces as BERT's."""
    mp, bert = make_mpnet_tokenizer(), make_tokenizer()
    assert len(mp) == MPNET_VOCAB_SIZE and mp.model_max_length == 512
    assert [mp.cls_token_id, mp.pad_token_id, mp.sep_token_id, mp.mask_token_id] == [0, 1, 2, 30526]
    assert mp.unk_token == "[UNK]" and mp.unk_token_id == bert.unk_token_id + MPNET_SHIFT
    text, pair = "a wonderful, unbelievably charming film", "the cast was weak"
    m, b = mp(text, pair)["input_ids"], bert(text, pair)["input_ids"]
    assert mp.convert_ids_to_tokens(m)[:2] == ["<s>", "a"] and "token_type_ids" not in mp(text)
    # <s> A </s></s> B </s> against [CLS] A [SEP] B [SEP]: one more separator, the same pieces shifted by 4
    strip = lambda ids, specials: [i for i in ids if i not in specials]  # noqa: E731
    assert strip(m, set(mp.all_special_ids)) == [i + MPNET_SHIFT for i in strip(b, set(bert.all_special_ids))]
    assert len(m) == len(b) + 1


# ----------------------------------------------------------------------------- default_max_length


def _config(model_type: str, positions: int | None):
    return SimpleNamespace(model_type=model_type, max_position_embeddings=positions)


@pytest.mark.parametrize("model_type, positions, tokenizer_limit, expected", [
    ("bert", 40, 512, 40),          # the position table decides, not the tokenizer
    ("bert", 512, 128, 128),        # the tokenizer decides
    ("mpnet", 66, 512, 64),         # positions count from padding_idx + 1: two rows fewer
    ("mpnet", 514, 512, 512),       # mpnet-base itself
    ("roberta", 66, 512, 64),
    ("xlm-roberta", 514, 100_000_000, 512),  # no tokenizer limit ("very large"): the table alone
    ("distilbert", None, 100_000_000, 512),  # neither: 512
])
def test_default_max_length_caps_at_the_position_table(model_type, positions, tokenizer_limit, expected):
    tok = SimpleNamespace(model_max_length=tokenizer_limit)
    assert default_max_length(tok, _config(model_type, positions), None) == expected
    # a recorded training length wins when it fits, and is capped when it does not
    assert default_max_length(tok, _config(model_type, positions), {"config": {"max_length": 16}}) == 16
    assert default_max_length(tok, _config(model_type, positions), {"max_length": 100_000}) == expected
    assert position_limit(_config(model_type, positions)) == (None if positions is None else
                                                              positions - 2 * (model_type != "bert"))


def test_bench_position_limit_is_the_runtime_one():
    from benchmarks.latency import position_limit as bench_limit

    for model_type in ("bert", "mpnet", "roberta", "camembert", "electra"):
        assert bench_limit(_config(model_type, 66)) == position_limit(_config(model_type, 66))


@pytest.mark.parametrize("builder, positions", [(make_bert, 40), (make_mpnet, 66)])
def test_predictor_truncates_long_text_to_the_position_table(tmp_path, builder, positions):
    """A plain folder (no compress.json) with a short table under a long tokenizer limit runs a long text."""
    folder = builder(tmp_path / "model", layers=1, head=True, max_positions=positions, model_max_length=512)
    predictor = Predictor.load(folder)
    usable = positions - (2 if builder is make_mpnet else 0)
    assert predictor.max_length == usable
    assert len(predictor.tokenizer(LONG)["input_ids"]) > positions  # it would overflow untruncated
    logits = np.concatenate([predictor.logits([LONG, "good"]), predictor.logits([("good", LONG)])])
    assert logits.shape == (3, 2) and np.isfinite(logits).all()
    with pytest.raises(CompressError, match=rf"--max-length {positions + 1}: .*1 to {usable} tokens"):
        Predictor.load(folder, max_length=positions + 1)


# ----------------------------------------------------------------------------- teacher and distillation


def test_mpnet_teacher_stage_learns(mpnet_teacher):
    teacher, _, _ = mpnet_teacher
    meta = _meta(teacher)
    assert meta["stage"] == "teacher" and meta["model_type"] == "mpnet" and meta["fine_tuned"]
    assert meta["metrics"]["test"]["accuracy"] >= 0.85
    config = json.loads((teacher / "config.json").read_text())
    assert config["architectures"] == ["MPNetForSequenceClassification"]
    assert Predictor.load(teacher).predict(["a wonderful film", "a dull film"])[0] == ["1", "0"]


@pytest.fixture(scope="module")
def bert_encoder(mpnet_teacher):
    """A compact BERT encoder that already reads words (MiniLM's role in the default recipe): a tiny BERT
    trained briefly on the sentiment rows, saved without its head, with bert-base-uncased's tokenizer."""
    from transformers import BertForSequenceClassification

    root = mpnet_teacher[2]
    trained = train_briefly(make_bert(root / "bert-classifier", layers=2, head=True, seed=7), steps=30)
    encoder = root / "bert-encoder"
    BertForSequenceClassification.from_pretrained(trained).bert.save_pretrained(encoder, safe_serialization=True)
    make_tokenizer().save_pretrained(encoder)
    return encoder


def _distill_into_bert(teacher, data, encoder, out, **kw):
    from compress.stages.distill.trainer import DistillConfig, distill
    from students.factory import StudentSpec

    cfg = DistillConfig(teacher=str(teacher), data=DataOptions(str(data)),
                        student=StudentSpec("2x32", f"pretrained:{encoder}"),
                        train=TrainSettings(epochs=2, lr=2e-3, batch_size=16, logging_steps=1000), **kw)
    return distill(cfg, out)


def test_mpnet_to_bert_logit_distillation(mpnet_teacher, bert_encoder):
    """The default recipe's pairing: an MPNet teacher, a BERT student with its own tokenizer. With no
    hard-label loss the student learns from the teacher's logits alone, so agreeing with the teacher
    shows each example's soft labels reached that example's student tokenization."""
    teacher, data, root = mpnet_teacher
    out = _distill_into_bert(teacher, data, bert_encoder, root / "student-logits", intermediate=False,
                             alpha_hard=0.0)
    meta = _meta(out)
    assert meta["model_type"] == "bert" and meta["distillation"]["intermediate"] is False
    assert meta["distillation"]["losses"] == {"kd": 1.0, "hard": 0.0}
    assert meta["metrics"]["test"]["agreement"] >= 0.9 and meta["metrics"]["test"]["teacher_accuracy"] >= 0.85
    student = Predictor.load(out)
    assert student.tokenizer.cls_token == "[CLS]" and student.need_token_types  # BERT's own tokenizer
    assert student.predict(["a wonderful film", "a dull film"])[0] == ["1", "0"]


def test_mpnet_to_bert_distillation_with_intermediate_losses(mpnet_teacher, bert_encoder):
    """<s>/</s> against [CLS]/[SEP] are special on both sides and every word piece lines up, so the
    hidden-state and attention losses run across the two tokenizers (ASSETS.md: MPNet's vocabulary is
    BERT's shifted by four ids)."""
    teacher, data, root = mpnet_teacher
    out = _distill_into_bert(teacher, data, bert_encoder, root / "student-inter", intermediate=True)
    meta = _meta(out)
    assert meta["distillation"]["intermediate"] is True, meta["notes"]
    assert meta["distillation"]["layer_map"] == "0:0,1:1"
    assert {"hidden", "attention"} <= set(meta["distillation"]["losses"])
    assert not any("disabled" in note for note in meta["notes"])
    assert meta["metrics"]["test"]["agreement"] >= 0.8


# ----------------------------------------------------------------------------- export and pruning


def test_mpnet_exports_unfused_with_parity(mpnet_teacher, tmp_path):
    from compress.stages.export import export_onnx

    teacher, _, _ = mpnet_teacher
    out = export_onnx(teacher, tmp_path / "onnx")
    onnx = _meta(out)["onnx"]
    assert onnx["optimized"] is False and onnx["inputs"] == ["input_ids", "attention_mask"]
    assert not onnx["fused_ops"].get("Attention")
    assert any("model_type 'mpnet' has no ONNX Runtime fusion" in n for n in _meta(out)["notes"])
    assert _meta(out)["parity"]["max_abs_diff"] <= _meta(out)["parity"]["atol"]
    graph, torch_model = Predictor.load(out), Predictor.load(teacher)
    assert graph.kind == "onnx-fp32" and graph.max_length == torch_model.max_length
    for inputs in ([LONG, "a wonderful film", "dull"], [("a dull film", LONG), ("good", "a wonderful film")]):
        assert np.allclose(graph.logits(inputs, batch_size=2), torch_model.logits(inputs, batch_size=2), atol=1e-4)


def test_pruning_refuses_mpnet_before_any_work(mpnet_teacher, tmp_path):
    from compress.config import PruneConfig
    from compress.stages.prune import prune

    teacher, data, _ = mpnet_teacher
    cfg = PruneConfig(model=str(teacher), data=DataOptions(str(data)), heads=0.5,
                      train=TrainSettings(epochs=0, lr=2e-3, batch_size=16, logging_steps=1000))
    with pytest.raises(CompressError, match=r"pruning supports model_type bert, .*this model is 'mpnet'\. Prune a "
                                            r"BERT-family student"):
        prune(cfg, tmp_path / "pruned")
    assert not (tmp_path / "pruned").exists() and not list(tmp_path.glob(".pruned*"))
