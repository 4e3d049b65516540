"""benchmarks.answers: the reference first, every model checked before the first pass, answers kept per batch size."""

import pytest

from benchmarks.answers import Answers, answer_each
from compress.core.errors import CompressError


class Model:
    """A model that answers with its name and the batch size, counting its passes."""

    def __init__(self, name: str, fits: bool = True) -> None:
        self.name, self.fits, self.passes = name, fits, 0


def answer(model: Model, batch_size: int) -> str:
    model.passes += 1
    return f"{model.name}@{batch_size}"


def check(model: Model) -> None:
    if not model.fits:
        raise CompressError(f"{model.name} cannot answer this split")


def test_reference_first_and_batch_sizes_per_name():
    models = {"student": Model("student"), "teacher": Model("teacher")}
    order: list[str] = []

    def predict(model, batch_size):
        order.append(model.name)
        return answer(model, batch_size)

    out = answer_each(models, "teacher", {"teacher": 32, "student": 1}, predict, progress=False)
    assert order == ["teacher", "student"]
    assert out == {"teacher": "teacher@32", "student": "student@1"}


def test_a_model_that_cannot_answer_fails_before_any_pass():
    models = {"teacher": Model("teacher"), "bad": Model("bad", fits=False)}
    with pytest.raises(CompressError, match="bad cannot answer"):
        answer_each(models, "teacher", 32, answer, progress=False, check=check)
    assert models["teacher"].passes == 0


def test_a_missing_reference_is_one_clear_error():
    with pytest.raises(CompressError, match="reference 'teacher' is not among"):
        answer_each({"student": Model("student")}, "teacher", 32, answer, progress=False)


def test_the_memo_answers_once_per_model_and_batch_size():
    teacher, student = Model("teacher"), Model("student")
    memo = Answers()
    for _ in range(3):
        answer_each({"teacher": teacher, "student": student}, "teacher", 32, answer, progress=False, memo=memo)
    answer_each({"teacher": teacher}, "teacher", 1, answer, progress=False, memo=memo)
    assert (teacher.passes, student.passes) == (2, 1)
