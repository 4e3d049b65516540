"""A SQuAD 2.0 reader's null threshold: chosen on validation by the stage that trains it, recorded, and the one
every later reading uses (Predictor, `predict`, the ONNX export, the distilled student's own).

Synthetic SQuAD 2.0 files (tests/support/squad.py): 40% of the questions are asked of a passage whose colour is
the door's, not the key's, so the right answer is none. A tiny BERT reader learns both in seconds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from compress.config import DataOptions, DistillConfig, StudentSpec, TeacherConfig, TrainSettings
from compress.core.errors import CompressError
from tests.conftest import make_bert
from tests.support.squad import squad_splits, train_tiny_reader

MAX_LENGTH = 48


@pytest.fixture(scope="module")
def squad2(tmp_path_factory) -> Path:
    return squad_splits(tmp_path_factory.mktemp("squad2"), impossible=0.4)


@pytest.fixture(scope="module")
def reader2(squad2, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("reader2")
    return train_tiny_reader(root, squad2, make_bert(root / "encoder", layers=2), MAX_LENGTH)


def _pairs(squad2: Path, split: str) -> tuple[list[tuple[str, str]], list[bool]]:
    doc = json.loads((squad2 / f"{split}.json").read_text())
    qas = [(q["question"], p["context"], q["is_impossible"]) for a in doc["data"] for p in a["paragraphs"]
           for q in p["qas"]]
    return [(q, c) for q, c, _ in qas], [i for _, _, i in qas]


def test_the_teacher_chooses_its_null_threshold_on_validation_and_records_it(reader2, squad2):
    from compress.tasks.question_answering.teacher import choose_null_threshold, read_answers
    from compress.runtime.modeling import load_classifier
    from compress.tasks.question_answering.data import load_qa_data
    from compress.tasks.question_answering.metrics import squad_scores

    meta = json.loads((reader2 / "compress.json").read_text())
    choice = meta["null_threshold_choice"]
    assert meta["allow_null"] is True and choice["chosen_on"] == "validation"
    assert meta["null_threshold"] == choice["null_threshold"]
    assert choice["f1"] >= choice["f1_at_default"]
    assert meta["metrics"]["validation"]["f1"] == pytest.approx(choice["f1"])
    # the choice is the best threshold on a fresh reading of validation, and the test score is read at it
    model, tok, _ = load_classifier(reader2, task="question-answering")
    data = load_qa_data(str(squad2))
    precision = meta["precision"]["precision"]  # what the stage scored in (auto: bf16 where the CPU has it)
    raw, _ = read_answers(model, tok, data.splits["validation"], MAX_LENGTH, meta["stride"], True,
                          precision=precision, null_threshold=np.inf)
    assert choose_null_threshold(raw, data.gold_answers("validation")) == choice
    test, _ = read_answers(model, tok, data.splits["test"], MAX_LENGTH, meta["stride"], True,
                           precision=precision, null_threshold=meta["null_threshold"])
    assert squad_scores([a["answer"] for a in test], data.gold_answers("test"))["f1"] == \
        pytest.approx(meta["metrics"]["test"]["f1"])
    assert meta["metrics"]["test"]["no_answer_n"] > 0 and meta["metrics"]["test"]["has_answer_n"] > 0


def _reading(margins: list[float], texts: list[str]) -> list[dict]:
    """A NEVER_NULL reading by hand: each question's best span ``texts[i]`` and its null - best margin."""
    return [{"answer": t, "start": 0, "end": len(t), "score": 0.5, "logit": 1.0, "null_logit": 1.0 + m, "window": 0,
             "null_score": 0.5} for m, t in zip(margins, texts)]


@pytest.mark.parametrize("moved", [1, 10])
def test_the_threshold_moves_only_for_a_gain_told_from_noise(moved):
    """40 questions: 20 unanswerable (margin 3: empty at 0 and should stay so), 20 answerable and read right;
    ``moved`` of these have margin 0.5 (empty at 0.0, answered by any threshold past 0.5). One question's gain is
    within the noise of 40 and 0.0 stays; ten questions' moves the threshold to 1.75 (halfway to 3)."""
    from compress.tasks.question_answering.teacher import choose_null_threshold

    margins = [3.0] * 20 + [0.5] * moved + [-1.0] * (20 - moved)
    gold = [[""]] * 20 + [["red"]] * 20
    choice = choose_null_threshold(_reading(margins, ["blue"] * 20 + ["red"] * 20), gold)
    assert choice["best_threshold"] == 1.75 and choice["best_f1"] == 1.0
    assert choice["f1_at_default"] == pytest.approx(1 - moved / 40)
    if moved == 1:
        assert choice["null_threshold"] == 0.0 and choice["gain_interval"][0] == 0.0
        assert choice["f1"] == choice["f1_at_default"]
    else:
        assert choice["null_threshold"] == 1.75 and choice["gain_interval"][0] > 0 and choice["f1"] == 1.0


def test_predictor_and_the_export_answer_at_the_recorded_threshold(reader2, squad2, tmp_path):
    from compress.stages.export import export_onnx
    from compress.tasks.question_answering.teacher import read_answers
    from compress.runtime.modeling import load_classifier
    from compress.runtime.predictor import Predictor
    from compress.tasks.question_answering.data import load_qa_data

    meta = json.loads((reader2 / "compress.json").read_text())
    pairs, impossible = _pairs(squad2, "test")
    served = Predictor.load(reader2).predict(pairs)
    model, tok, _ = load_classifier(reader2, task="question-answering")
    staged, _ = read_answers(model, tok, load_qa_data(str(squad2)).splits["test"], MAX_LENGTH, meta["stride"], True,
                             null_threshold=meta["null_threshold"])
    assert [a["answer"] for a in served] == [a["answer"] for a in staged]
    assert any(a["answer"] == "" for a in served) and any(a["answer"] for a in served)
    # the threshold decides: far above every margin nothing is empty, far below everything is
    assert all(a["answer"] for a in Predictor.load(reader2).predict(pairs, null_threshold=1e9))
    assert not any(a["answer"] for a in Predictor.load(reader2).predict(pairs, null_threshold=-1e9))

    onnx = export_onnx(str(reader2), tmp_path / "onnx")
    assert json.loads((Path(onnx) / "compress.json").read_text())["null_threshold"] == meta["null_threshold"]
    assert [a["answer"] for a in Predictor.load(onnx).predict(pairs)] == [a["answer"] for a in served]


def test_predict_takes_a_null_threshold_and_a_squad11_reader_refuses_it(reader2, squad2, tmp_path, capsys):
    from compress.cli import main
    from compress.stages.teacher import train_teacher

    passage = tmp_path / "passage.txt"
    passage.write_text("the film was long . the door is red . the night was short")
    args = ["predict", "--model", str(reader2), "--question", "what is the key ?", "--context-file", str(passage)]
    assert main(args + ["--null-threshold", "1e9"]) == 0
    assert "(no answer)" not in capsys.readouterr().out
    assert main(args + ["--null-threshold=-1e9"]) == 0
    assert capsys.readouterr().out.startswith("(no answer)")

    v1 = train_teacher(TeacherConfig(model=str(make_bert(tmp_path / "encoder", layers=1)),
                                     data=DataOptions(str(squad_splits(tmp_path / "squad11"))), max_length=MAX_LENGTH,
                                     train=TrainSettings(epochs=0)), tmp_path / "v1")
    meta = json.loads((v1 / "compress.json").read_text())
    assert meta["allow_null"] is False and "null_threshold" not in meta
    from compress.runtime.predictor import Predictor

    with pytest.raises(CompressError, match="trained on SQuAD 1.1 data") as info:
        Predictor.load(v1).predict([("what is the key ?", "the key is red .")], null_threshold=1.0)
    assert "\n" not in str(info.value)


def test_the_distilled_student_chooses_its_own_threshold(reader2, squad2, tmp_path):
    """distill scores the teacher at the teacher's recorded threshold and the student at the one with the
    student's best validation F1, recorded in the student's compress.json."""
    from compress.stages.distill.trainer import distill

    t_meta = json.loads((reader2 / "compress.json").read_text())
    cfg = DistillConfig(teacher=str(reader2), data=DataOptions(str(squad2)), max_length=MAX_LENGTH,
                        student=StudentSpec("1x32", init="random"), alpha_kd=1.0, alpha_hard=0.5,
                        train=TrainSettings(epochs=1, lr=3e-3, batch_size=16, logging_steps=1000),
                        # the tiny SQuAD 2.0 reader points every window at [CLS] (answer-start accuracy at the share of
                        # windows without the answer): no better than chance, which distill refuses unless told
                        allow_untrained_teacher=True)
    meta = json.loads((distill(cfg, tmp_path / "student") / "compress.json").read_text())
    choice = meta["null_threshold_choice"]
    assert choice["chosen_on"] == "validation" and meta["null_threshold"] == choice["null_threshold"]
    assert meta["metrics"]["validation"]["f1"] == pytest.approx(choice["f1"]) and choice["f1"] >= choice["f1_at_default"]
    for split in ("validation", "test"):  # the teacher as its own stage scored it
        assert meta["metrics"][split]["teacher_f1"] == pytest.approx(t_meta["metrics"][split]["f1"])


def test_a_pruned_reader_answers_at_the_threshold_chosen_for_it(reader2, squad2, tmp_path):
    """prune scores the pruned reader at the null threshold validation chooses for that model, records it in
    each split's scores and as the artifact's reading setting, and Predictor answers with it."""
    from compress.config import PruneConfig
    from compress.stages.prune.stage import prune
    from compress.tasks.question_answering.teacher import choose_null_threshold, read_answers
    from compress.runtime.modeling import load_classifier
    from compress.runtime.predictor import Predictor
    from compress.tasks.question_answering.data import load_qa_data

    cfg = PruneConfig(model=str(reader2), data=DataOptions(str(squad2)), heads=0.5, ffn=0.5, importance="magnitude",
                      recover_epochs=0, max_length=MAX_LENGTH, train=TrainSettings(epochs=0, batch_size=16))
    out = prune(cfg, tmp_path / "pruned")
    meta = json.loads((out / "compress.json").read_text())
    assert meta["allow_null"] is True
    assert meta["metrics"]["validation"]["null_threshold"] == meta["metrics"]["test"]["null_threshold"] == \
        meta["null_threshold"]
    model, tok, _ = load_classifier(out, task="question-answering")
    data = load_qa_data(str(squad2))
    raw, _ = read_answers(model, tok, data.splits["validation"], MAX_LENGTH, meta["stride"], True,
                          null_threshold=np.inf)
    assert choose_null_threshold(raw, data.gold_answers("validation"))["null_threshold"] == meta["null_threshold"]
    pairs, _ = _pairs(squad2, "test")
    staged, _ = read_answers(model, tok, data.splits["test"], MAX_LENGTH, meta["stride"], True,
                             null_threshold=meta["null_threshold"])
    assert [a["answer"] for a in Predictor.load(out).predict(pairs)] == [a["answer"] for a in staged]


def test_bench_scores_each_reader_at_its_own_threshold_and_records_it(reader2, squad2, tmp_path):
    """bench scores a teacher and its student each at the threshold its stage chose, and results.json says which."""
    from compress.cli import main
    from compress.runtime.predictor import Predictor
    from compress.tasks.question_answering.metrics import question_scores

    meta = json.loads((reader2 / "compress.json").read_text())
    student = tmp_path / "student"
    shutil.copytree(reader2, student)  # the same weights answering at another threshold: a student of its own choice
    s_meta = {**meta, "null_threshold": meta["null_threshold"] + 1e9}  # answers every question it can
    (student / "compress.json").write_text(json.dumps(s_meta))
    out = tmp_path / "bench"
    assert main(["bench", str(student), "--reference", str(reader2), "--data", str(squad2), "--out", str(out),
                 "--quick", "--threads", "1", "--no-memory", "--seq-lens", str(MAX_LENGTH), "--precision", "fp32"]) == 0
    results = json.loads((out / "results.json").read_text())
    arts = {a["path"]: a for a in results["artifacts"]}
    data = DataOptions(**results["data"]["options"]).load_any()
    pairs = data.texts("test")
    for path, threshold in ((reader2, meta["null_threshold"]), (student, s_meta["null_threshold"])):
        art = arts[str(Path(path).resolve())]
        assert art["null_threshold"] == threshold
        answers = [a["answer"] for a in Predictor.load(path).predict(pairs)]
        assert art["quality"]["question_f1"] == pytest.approx(
            question_scores(answers, data.gold_answers("test"))["f1"].tolist())
    assert arts[str(student.resolve())]["quality"]["f1"] != arts[str(Path(reader2).resolve())]["quality"]["f1"]
