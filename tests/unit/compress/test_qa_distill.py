"""Distilling a span reader: the teacher's start/end logits on the student's windows, across tokenizers.

The synthetic SQuAD files of tests/unit/compress/test_qa_teacher.py (the answer, a colour word, after "the key
is", in passages longer than the window). The strongest check is the miniature of the real pairing:
an **MPNet** teacher (``<s> q </s></s> p </s>``, ids shifted by four) distilled into a **BERT**
student (``[CLS] q [SEP] p [SEP]``) on the soft labels alone (``alpha_hard 0``): were the teacher's
scores mapped one position off, the student would learn to point next to the answer and its exact
match would be near 0.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from compress.config import DataOptions, DistillConfig, StudentSpec, TrainSettings
from compress.core.errors import CompressError
from tests.conftest import make_bert, make_mpnet, make_mpnet_tokenizer, make_tokenizer
from tests.support.squad import squad_splits, train_tiny_reader

MAX_LENGTH = 48


@pytest.fixture(scope="module")
def squad(tmp_path_factory) -> Path:
    return squad_splits(tmp_path_factory.mktemp("squad"))


@pytest.fixture(scope="module")
def mpnet_reader(squad, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mpnet-reader")
    return train_tiny_reader(root, squad, make_mpnet(root / "encoder", layers=2), MAX_LENGTH)


@pytest.mark.parametrize("make", [make_tokenizer, make_mpnet_tokenizer], ids=["bert", "mpnet"])
def test_the_pair_template_rebuilds_the_tokenizers_own_pair_encoding(make):
    from compress.tasks.question_answering.distill import pair_template

    tok = make()
    template = pair_template(tok)
    for question, passage in (("what is the key ?", "the film was long . the key is red ."), ("who", "a b c")):
        q = tok(question, add_special_tokens=False)["input_ids"]
        p = tok(passage, add_special_tokens=False)["input_ids"]
        ids, types, q_pos, p_pos = template.build(q, p)
        own = tok(question, passage, return_token_type_ids=True)
        assert ids == own["input_ids"]
        assert types == (own.get("token_type_ids") or [0] * len(ids))
        assert [ids[i] for i in q_pos] == q and [ids[i] for i in p_pos] == p


def test_student_windows_in_the_teachers_vocabulary_line_up_piece_for_piece(squad):
    """BERT student windows spelled for an MPNet teacher: a window that holds the whole passage is exactly
    MPNet's own encoding; in every window each question and passage piece maps to the same piece (id + 4) and
    each special token to a special token."""
    from compress.tasks.question_answering.distill import teacher_windows
    from compress.tasks.question_answering.features import encode_qa
    from tests.conftest import MPNET_SHIFT

    bert, mpnet = make_tokenizer(), make_mpnet_tokenizer()
    doc = json.loads((squad / "train.json").read_text())
    pairs = [(q["question"], p["context"]) for a in doc["data"][:3] for p in a["paragraphs"] for q in p["qas"]]
    windows = encode_qa(bert, [q for q, _ in pairs], [c for _, c in pairs], max_length=MAX_LENGTH, doc_stride=16)
    assert len(windows) > len(pairs)  # some passages take several windows
    ids, _, maps = teacher_windows(windows, bert, mpnet)
    specials = set(bert.all_special_ids)
    whole = 0
    for w, (s_ids, t_ids, index) in enumerate(zip(windows.input_ids, ids, maps)):
        for position, s_id in enumerate(s_ids):
            t_id = t_ids[index[position]]
            if s_id in specials:
                assert t_id in set(mpnet.all_special_ids)
            else:
                assert t_id == s_id + MPNET_SHIFT
        assert index[0] == 0 and index[-1] == len(t_ids) - 1 and len(set(index.tolist())) == len(s_ids)
        if len(windows.windows_of(int(windows.sample[w]))) == 1:
            question, context = pairs[int(windows.sample[w])]
            assert t_ids == mpnet(question.lstrip(), context)["input_ids"]
            whole += 1
    assert whole > 0


def test_soft_labels_are_the_teachers_scores_on_its_own_encoding_and_are_cached(mpnet_reader, squad):
    from compress.runtime.modeling import load_classifier
    from compress.tasks.question_answering.distill import window_soft_labels
    from compress.tasks.question_answering.teacher import span_logits
    from compress.tasks.question_answering.features import encode_qa

    model, t_tok, _ = load_classifier(mpnet_reader, task="question-answering")
    bert = make_tokenizer()
    pairs = [("what is the key ?", "the key is blue ."), ("what is the key ?", "long story . the key is gold . bad")]
    windows = encode_qa(bert, [q for q, _ in pairs], [c for _, c in pairs], max_length=MAX_LENGTH, doc_stride=16)
    starts, ends, reused = window_soft_labels(model, t_tok, bert, windows, "weights-a", MAX_LENGTH, 16)
    assert not reused and [len(s) for s in starts] == [len(x) for x in windows.input_ids]
    for i, (question, context) in enumerate(pairs):
        own = t_tok(question, context)["input_ids"]
        t_start, t_end = span_logits(model, [own], None)
        s_pieces = bert.convert_ids_to_tokens(windows.input_ids[i])
        t_pieces = t_tok.convert_ids_to_tokens(own)
        passage = [p for p, piece in enumerate(s_pieces) if windows.segment[i][0] <= p < windows.segment[i][1]]
        t_passage = [p for p, piece in enumerate(t_pieces) if piece not in ("<s>", "</s>")][-len(passage):]
        np.testing.assert_allclose(starts[i][passage], t_start[0][t_passage], atol=1e-5)
        np.testing.assert_allclose(ends[i][passage], t_end[0][t_passage], atol=1e-5)
        assert starts[i][0] == pytest.approx(t_start[0][0], abs=1e-5)  # [CLS] reads <s>: the "no answer" score
    again = window_soft_labels(model, t_tok, bert, windows, "weights-a", MAX_LENGTH, 16)
    assert again[2] and all(np.array_equal(a, b) for a, b in zip(again[0], starts))
    assert not window_soft_labels(model, t_tok, bert, windows, "weights-b", MAX_LENGTH, 16)[2]  # other weights


def test_soft_ce_counts_only_the_windows_real_positions():
    import torch

    from compress.tasks.question_answering.distill import span_distillation_loss

    teacher = torch.tensor([[1.0, 3.0, 0.5, float("nan")]])
    mask = torch.tensor([[1, 1, 1, 0]])
    student = torch.tensor([[0.0, 2.0, 1.0, 50.0]])  # a large score on padding must not count
    gold = torch.tensor([1])
    terms = span_distillation_loss(student, student, mask, teacher, teacher, gold, gold, temperature=2.0,
                                   alpha_kd=1.0, alpha_hard=1.0)
    p = torch.softmax(teacher[0, :3] / 2, -1)
    log_q = torch.log_softmax(student[0, :3] / 2, -1)
    assert terms["soft_ce"].item() == pytest.approx(-(p * log_q).sum().item() * 4, rel=1e-5)
    assert terms["hard_ce"].item() == pytest.approx(-torch.log_softmax(student[0, :3], -1)[1].item(), rel=1e-5)
    assert terms["loss"].item() == pytest.approx(terms["soft_ce"].item() + terms["hard_ce"].item(), rel=1e-6)
    assert math.isfinite(terms["loss"].item())


def _bert_student_config(mpnet_reader: Path, squad: Path, encoder: Path, **extra) -> DistillConfig:
    """A BERT student of an MPNet reader on the soft labels alone (``alpha_hard`` 0)."""
    return DistillConfig(teacher=str(mpnet_reader), data=DataOptions(str(squad)), max_length=MAX_LENGTH,
                         student=StudentSpec("2x32", init=f"pretrained:{encoder}"), alpha_kd=1.0, alpha_hard=0.0,
                         train=TrainSettings(epochs=3, lr=3e-3, batch_size=16, logging_steps=1000), **extra)


@pytest.fixture(scope="module")
def bert_student(mpnet_reader, squad, tmp_path_factory) -> Path:
    from compress.stages.distill.trainer import distill

    root = tmp_path_factory.mktemp("bert-student")
    encoder = make_bert(root / "bert-encoder", layers=2)
    return distill(_bert_student_config(mpnet_reader, squad, encoder), root / "student")


def test_an_mpnet_reader_distils_into_a_bert_student_on_soft_labels_alone(mpnet_reader, bert_student, tmp_path):
    from compress.runtime.predictor import Predictor

    teacher_meta = json.loads((mpnet_reader / "compress.json").read_text())
    assert teacher_meta["metrics"]["test"]["exact_match"] > 0.9
    out = bert_student
    meta = json.loads((out / "compress.json").read_text())
    assert meta["task"] == "question-answering" and meta["stride"] == 16 and meta["model_type"] == "bert"
    test = meta["metrics"]["test"]
    assert test["exact_match"] > 0.8, test  # one position off would put it near 0
    assert test["reference_f1"] > 0.8 and test["teacher_f1"] == pytest.approx(teacher_meta["metrics"]["test"]["f1"])
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForQuestionAnswering"]
    answers = Predictor.load(out).predict([("what is the key ?", "the film was long . the key is green . the end")])
    assert answers[0]["answer"] == "green"
    assert not (out.parent / "student.checkpoints").exists()
    assert meta["distillation"]["intermediate"] is False


def test_keep_best_scores_a_reader_student_each_epoch_and_writes_its_best(mpnet_reader, squad, tmp_path):
    """A QA student is scored on validation after every epoch only under ``--keep-best``; the student written is
    the best epoch's, which scores the same again after training."""
    from dataclasses import replace

    from compress.stages.distill.trainer import distill

    cfg = _bert_student_config(mpnet_reader, squad, make_bert(tmp_path / "bert-encoder", layers=2))
    cfg = replace(cfg, train=replace(cfg.train, keep_best=True))
    meta = json.loads((distill(cfg, tmp_path / "student") / "compress.json").read_text())
    epochs = meta["training"]["validation_by_epoch"]
    best = max(epochs, key=lambda e: e["validation_f1"])
    assert len(epochs) == 3 and meta["training"]["kept_epoch"]["epoch"] == best["epoch"]
    assert meta["metrics"]["validation"]["f1"] == pytest.approx(best["validation_f1"], abs=1e-4)


def test_teacher_states_are_read_at_the_students_positions():
    """``at_student_positions``: state ``[b, p]`` is the teacher's at ``index[b, p]``, attention ``[b, h, p, q]``
    the teacher's at ``(index[b, p], index[b, q])``."""
    import torch

    from compress.stages.distill.intermediate import at_student_positions

    torch.manual_seed(0)
    states = (torch.randn(2, 7, 3), torch.randn(2, 7, 3))
    attention = (torch.rand(2, 4, 7, 7),)
    index = torch.tensor([[0, 1, 3, 4, 6], [0, 2, 2, 5, 6]])
    mapped_states, mapped_attention = at_student_positions(states, attention, index)
    assert mapped_states[1].shape == (2, 5, 3) and mapped_attention[0].shape == (2, 4, 5, 5)
    for b in range(2):
        for p in range(5):
            assert torch.equal(mapped_states[1][b, p], states[1][b, index[b, p]])
            for q in range(5):
                assert torch.equal(mapped_attention[0][b, :, p, q], attention[0][b, :, index[b, p], index[b, q]])
    assert at_student_positions(None, None, index) == (None, None)


def _hidden_gap(student: Path, teacher: Path, squad: Path) -> float:
    """Mean squared distance between the student's layer states and the teacher's at the same pieces (the
    teacher run on its own spelling of each validation window), over the windows' real positions."""
    import torch

    from compress.stages.distill.intermediate import at_student_positions
    from compress.runtime.modeling import load_classifier
    from compress.tasks.question_answering.distill import teacher_windows
    from compress.tasks.question_answering.data import load_qa_data
    from compress.tasks.question_answering.features import qa_features

    t_model, t_tok, _ = load_classifier(teacher, task="question-answering")
    s_model, s_tok, _ = load_classifier(student, task="question-answering")
    split = load_qa_data(str(squad)).splits["validation"]
    windows = qa_features(s_tok, split["question"], split["context"], split["answers"], max_length=MAX_LENGTH,
                          doc_stride=16).windows
    t_ids, _, maps = teacher_windows(windows, s_tok, t_tok)
    gaps = []
    with torch.no_grad():
        for w in range(len(windows)):
            t_out = t_model(input_ids=torch.tensor([t_ids[w]]), output_hidden_states=True)
            mapped, _ = at_student_positions(t_out.hidden_states, None, torch.as_tensor(maps[w]).unsqueeze(0))
            s_out = s_model(input_ids=torch.tensor([windows.input_ids[w]]), output_hidden_states=True)
            gaps += [float(((s - t) ** 2).mean()) for s, t in zip(s_out.hidden_states[1:], mapped[1:])]
    return float(np.mean(gaps))


def test_intermediate_terms_pull_a_readers_states_towards_the_teachers_at_the_same_pieces(mpnet_reader, squad,
                                                                                           bert_student, tmp_path):
    """The BERT student of the MPNet reader again, now with the hidden-state and attention terms: its layers end
    much closer to the teacher's at the same word pieces (positions shifted by MPNet's ``</s></s>``), it still
    points at the answer, and compress.json records the terms."""
    from compress.stages.distill.trainer import distill

    encoder = make_bert(tmp_path / "bert-encoder", layers=2)
    cfg = _bert_student_config(mpnet_reader, squad, encoder, intermediate=True, alpha_embedding=0.0, alpha_hidden=5.0,
                               alpha_attention=1.0)
    out = distill(cfg, tmp_path / "student")
    meta = json.loads((out / "compress.json").read_text())
    record = meta["distillation"]
    assert record["intermediate"] is True and record["layer_map"]
    assert {(t["on"], t["weight"]) for t in record["loss_terms"]} >= {("hidden", 5.0), ("attention", 1.0)}
    gap, gap_without = _hidden_gap(out, mpnet_reader, squad), _hidden_gap(bert_student, mpnet_reader, squad)
    assert gap < 0.5 * gap_without, (gap, gap_without)
    assert meta["metrics"]["test"]["exact_match"] > 0.8, meta["metrics"]["test"]


def test_tokenizers_that_split_text_apart_are_refused_in_one_line():
    from compress.tasks.question_answering.distill import check_same_pieces
    from tests.conftest import FIXTURES

    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast

    cased = BertTokenizerFast(tokenizer_object=BertWordPieceTokenizer(str(FIXTURES / "vocab.txt"), lowercase=False)._tokenizer,
                              unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]",
                              mask_token="[MASK]")
    check_same_pieces(make_tokenizer(), make_mpnet_tokenizer(), ["The Key is Red", "what is it ?"], "--data x.json")
    with pytest.raises(CompressError, match=r"--data x\.json: the teacher and the student tokenize the text "
                                            r"'The Key is Red' differently") as info:
        check_same_pieces(make_tokenizer(), cased, ["what is it ?", "The Key is Red"], "--data x.json")
    assert "\n" not in str(info.value) and "--init teacher-layers" in str(info.value)


def test_comparing_the_pieces_of_a_whole_passage_is_not_reported_as_too_long(caplog):
    """The check tokenizes whole passages (longer than a model's window) only to compare their pieces; it must
    not print transformers' "Token indices sequence length is longer than the specified maximum" warning, which
    tells a user the model will fail on them (the model reads them in windows)."""
    from compress.tasks.question_answering.distill import check_same_pieces

    def short(tokenizer):
        tokenizer.model_max_length = 8  # each tokenizer warns once: a fresh one per call
        return tokenizer

    passage = " ".join(["the key is red ."] * 10)
    short(make_tokenizer())(passage, add_special_tokens=False)
    assert "Token indices sequence length" in caplog.text  # what the check printed before
    caplog.clear()
    check_same_pieces(short(make_tokenizer()), short(make_mpnet_tokenizer()), [passage], "--data x.json")
    assert "Token indices sequence length" not in caplog.text


def test_a_teacher_that_is_not_a_reader_and_unsupported_options_are_one_line(squad, mpnet_reader, tmp_path):
    from compress.stages.distill.trainer import distill

    classifier = make_bert(tmp_path / "classifier", layers=1, head=True)
    with pytest.raises(CompressError, match="not a trained span reader") as info:
        distill(DistillConfig(teacher=str(classifier), data=DataOptions(str(squad)), max_length=MAX_LENGTH,
                              student=StudentSpec("1x32", init="random")), tmp_path / "a")
    assert "\n" not in str(info.value)
    with pytest.raises(CompressError, match="--augment 2: distilling a span reader"):
        distill(DistillConfig(teacher=str(mpnet_reader), data=DataOptions(str(squad)), augment=2,
                              student=StudentSpec("1x32", init="random")), tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_teacher_stage_caches_its_answers_for_distill_to_reuse(mpnet_reader, squad):
    """distill scores its teacher on the splits the teacher stage has just read: the answers are reused from
    the cache (no model is given here, so running one would fail), keyed by the weights and the exact windows."""
    from compress.runtime.modeling import load_classifier
    from compress.tasks.question_answering.teacher import read_answers
    from compress.tasks.question_answering.data import load_qa_data

    meta = json.loads((mpnet_reader / "compress.json").read_text())
    _, tok, _ = load_classifier(mpnet_reader, task="question-answering")
    data = load_qa_data(str(squad))
    precision = meta["precision"]["precision"]  # what the teacher stage ran in (auto: bf16 where the CPU has it)
    answers, windows = read_answers(None, tok, data.splits["test"], MAX_LENGTH, 16, weights=meta["weights_sha256"],
                                    precision=precision)
    exact = sum(a["answer"] in g for a, g in zip(answers, data.gold_answers("test"))) / len(answers)
    assert exact == pytest.approx(meta["metrics"]["test"]["exact_match"]) and windows == meta["metrics"]["test"]["windows"]
    with pytest.raises(AttributeError):  # other windows (another length): no cached answers, so the model is needed
        read_answers(None, tok, data.splits["test"], MAX_LENGTH - 8, 16, weights=meta["weights_sha256"],
                     precision=precision)


def _question_table(path: Path, squad_json: Path, extra: list[dict] = ()) -> Path:
    """The questions and passages of a SQuAD file as a JSONL table without answers (a user's question log)."""
    doc = json.loads(squad_json.read_text())
    rows = [{"question": q["question"], "context": p["context"]}
            for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]]
    path.write_text("".join(json.dumps(r) + "\n" for r in [*rows, *extra]))
    return path


def test_transfer_questions_leave_out_held_out_passages_labelled_questions_and_duplicates(squad, tmp_path):
    from compress.tasks.question_answering.data import load_qa_data
    from compress.stages.transfer.questions import transfer_questions
    from tests.support.squad import squad_file

    full = load_qa_data(str(squad))
    labelled = full.subset(20)
    validation = json.loads((squad / "validation.json").read_text())["data"][0]["paragraphs"][0]["context"]
    own = labelled.splits["train"][0]
    table = _question_table(tmp_path / "log.jsonl", squad_file(tmp_path / "new.json", 30, seed=7), [
        {"question": "what is the key ?", "context": validation},        # a validation passage: a leak
        {"question": own["question"], "context": own["context"]},        # a labelled question: counted twice
        {"question": "  ", "context": "the key is red ."},                # empty
    ])
    questions, passages, stats = transfer_questions(str(table), full, labelled)
    assert len(questions) == len(passages) == stats["kept"]
    assert stats["about_validation_or_test_passages"] == 1 and stats["in_training"] == 1 and stats["empty"] == 1
    assert validation not in passages and own["context"] not in passages

    # The task's own source: its other training questions are transfer questions, its held-out ones never;
    # with limit the held-out passages are those of the whole split, not of the cut.
    questions, passages, stats = transfer_questions(str(squad), full, labelled, limit=50, seed=1)
    held = {c for s in ("validation", "test") for c in full.splits[s]["context"]}
    assert stats["about_validation_or_test_passages"] == 80 and stats["in_training"] == 20
    assert len(questions) == 50 and not held & set(passages)
    again, _, _ = transfer_questions(str(squad), full, labelled, limit=50, seed=1)
    assert again == questions  # seeded


def test_a_question_table_without_a_passage_column_is_one_line(squad, tmp_path):
    from compress.tasks.question_answering.data import load_qa_data
    from compress.stages.transfer.questions import transfer_questions

    table = tmp_path / "log.jsonl"
    table.write_text(json.dumps({"question": "what is the key ?", "text": "the key is red ."}) + "\n")
    full = load_qa_data(str(squad))
    with pytest.raises(CompressError, match=r"log.jsonl: no passage column 'context' or 'passage'") as info:
        transfer_questions(str(table), full, full)
    assert "\n" not in str(info.value)
    with pytest.raises(CompressError, match="no such file"):
        transfer_questions(str(tmp_path / "missing.jsonl"), full, full)


def test_transfer_windows_carry_the_soft_terms_at_their_weight_and_no_hard_term():
    """One labelled window and one transfer window (``NO_GOLD``) at weight 3: the soft term is the weighted
    mean of the two windows' values, the hard term the labelled window's value times its share (1/2); a batch
    of transfer windows alone has no hard term at all."""
    import torch

    from compress.stages.losses import LossTerm
    from compress.tasks.question_answering.distill import NO_GOLD, span_term_values

    teacher = torch.tensor([[1.0, 3.0, 0.5], [2.0, 0.0, 1.0]])
    student = torch.tensor([[0.0, 2.0, 1.0], [1.0, 1.0, -1.0]])
    mask = torch.ones(2, 3, dtype=torch.long)
    gold = torch.tensor([1, NO_GOLD])
    terms = [LossTerm("soft_ce", 1.0, name="soft_ce"), LossTerm("hard_ce", 1.0, name="hard_ce")]
    values = span_term_values(terms, student, student, mask, teacher, teacher, gold, gold, 2.0,
                              torch.tensor([1.0, 3.0]))

    def soft(i):
        return -(torch.softmax(teacher[i] / 2, -1) * torch.log_softmax(student[i] / 2, -1)).sum().item() * 4

    assert values["soft_ce"].item() == pytest.approx((soft(0) + 3 * soft(1)) / 2, rel=1e-5)
    assert values["hard_ce"].item() == pytest.approx(-torch.log_softmax(student[0], -1)[1].item() / 2, rel=1e-5)
    only_transfer = span_term_values(terms, student[1:], student[1:], mask[1:], teacher[1:], teacher[1:], gold[1:],
                                     gold[1:], 2.0, torch.tensor([3.0]))
    assert "hard_ce" not in only_transfer and only_transfer["soft_ce"].item() == pytest.approx(3 * soft(1), rel=1e-5)


def test_transfer_questions_teach_a_student_that_has_few_labelled_ones(mpnet_reader, squad, tmp_path):
    """20 labelled questions (2 optimiser steps an epoch) leave the student far from its teacher; the same run with
    200 transfer questions without answers (a question log) brings it to the teacher's answers."""
    from compress.stages.distill.trainer import distill
    from tests.support.squad import squad_file

    encoder = make_bert(tmp_path / "bert-encoder", layers=2)
    log = _question_table(tmp_path / "log.jsonl", squad_file(tmp_path / "more.json", 200, seed=11))

    def run(name: str, **extra) -> dict:
        cfg = DistillConfig(teacher=str(mpnet_reader), data=DataOptions(str(squad), limit=20), max_length=MAX_LENGTH,
                            student=StudentSpec("2x32", init=f"pretrained:{encoder}"), alpha_kd=1.0, alpha_hard=0.5,
                            train=TrainSettings(epochs=3, lr=3e-3, batch_size=16, logging_steps=1000), **extra)
        return json.loads((distill(cfg, tmp_path / name) / "compress.json").read_text())

    alone, with_log = run("alone"), run("with-log", unlabeled=str(log), unlabeled_weight=1.0)
    assert alone["transfer"] is None
    transfer = with_log["transfer"]
    assert transfer["source"] == str(log) and transfer["kept"] == 200 and transfer["weight"] == 1.0
    assert with_log["training"]["rows"] == alone["training"]["rows"] + transfer["windows"]
    assert with_log["metrics"]["test"]["exact_match"] > 0.8 > alone["metrics"]["test"]["exact_match"] + 0.2, (
        alone["metrics"]["test"], with_log["metrics"]["test"])
