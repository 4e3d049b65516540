"""SQuAD exact match and F1 against hand-checked cases, per-question scores, SQuAD 2.0 no-answer questions, and
the question-answering task's registration."""

from __future__ import annotations

import numpy as np
import pytest

from compress.tasks import get_task, task_for_architectures, task_names
from compress.tasks.question_answering.metrics import exact_match, normalize_answer, question_scores, squad_scores, token_f1


@pytest.mark.parametrize("text, normalised", [
    ("The Eiffel Tower!", "eiffel tower"),
    ("  a  cat,  AN owl and  the\tdog. ", "cat owl and dog"),
    ("Theatre anthem", "theatre anthem"),  # articles only as whole words
    ("U.S.-born", "usborn"),  # punctuation removed, not replaced by a space
    ("£20,980", "£20980"),  # '£' is not in string.punctuation
    ("the", ""),
])
def test_normalisation_is_the_official_v11_one(text, normalised):
    assert normalize_answer(text) == normalised


def test_exact_match_by_hand():
    assert exact_match("the Denver Broncos", "Denver Broncos.") == 1.0
    assert exact_match("Denver", "Denver Broncos") == 0.0
    assert exact_match("", "") == 1.0


def test_f1_of_partial_overlaps_by_hand():
    # pred 'denver broncos won' (3 words), gold 'broncos' -> 1 shared: P 1/3, R 1, F1 = 2*(1/3)/(4/3) = 0.5
    assert token_f1("Denver Broncos won", "the Broncos") == pytest.approx(0.5)
    # pred 'in 1990s' vs gold 'early 1990s time': P 1/2, R 1/3 -> F1 = 2*(1/6)/(5/6) = 0.4
    assert token_f1("in the 1990s", "early 1990s, a time") == pytest.approx(0.4)
    # repeated words count as often as they are in both: pred 'new new york' vs 'new york': shared 2, P 2/3, R 1 -> 0.8
    assert token_f1("new new york", "New York") == pytest.approx(0.8)
    # ... and no more often: pred 'new new' vs 'new new york': shared 2 (not 1), P 1, R 2/3 -> 0.8
    assert token_f1("new new", "New new York") == pytest.approx(0.8)
    assert token_f1("Paris", "Lyon") == 0.0
    assert token_f1("", "Paris") == 0.0 and token_f1("Paris", "") == 0.0 and token_f1("the", "a") == 1.0


def test_the_best_gold_answer_counts_and_per_question_scores_are_kept():
    preds = ["Denver Broncos", "in 1990s", "Saint Bernadette Soubirous", "nothing here"]
    golds = [["Denver Broncos", "The Denver Broncos"], ["the 1990s", "early 1990s, a time"],
             ["Saint Bernadette", "a Marian place"], ["Paris"]]
    per = question_scores(preds, golds)
    np.testing.assert_allclose(per["exact_match"], [1, 0, 0, 0])
    # q2: best of 'the 1990s' (P 1/2, R 1 -> 2/3) and 0.4; q3: 'saint bernadette' P 2/3, R 1 -> 0.8
    np.testing.assert_allclose(per["f1"], [1, 2 / 3, 0.8, 0])
    assert per["has_answer"].all()
    scores = squad_scores(preds, golds)
    assert scores["exact_match"] == pytest.approx(0.25) and scores["f1"] == pytest.approx((1 + 2 / 3 + 0.8) / 4)
    assert scores["n"] == 4 and "no_answer_f1" not in scores


def test_squad_20_questions_without_an_answer():
    preds = ["", "Paris", "", "Lyon", ""]
    golds = [[], [], ["Paris"], ["Lyon", ""], ["Lyon", "The."]]  # a gold that normalises to nothing is dropped
    per = question_scores(preds, golds)
    np.testing.assert_allclose(per["exact_match"], [1, 0, 0, 1, 0])
    np.testing.assert_allclose(per["f1"], [1, 0, 0, 1, 0])
    assert per["has_answer"].tolist() == [False, False, True, True, True]
    s = squad_scores(preds, golds)
    assert (s["has_answer_n"], s["no_answer_n"]) == (3, 2)
    assert (s["has_answer_exact_match"], s["no_answer_exact_match"], s["exact_match"]) == (1 / 3, 0.5, 0.4)


def test_a_reference_answer_set_is_scored_as_the_gold():
    s = squad_scores(["Denver", "Paris"], [["Denver Broncos"], ["Paris"]], reference=["Denver", "the Paris"])
    assert s["reference_exact_match"] == 1.0 and s["f1"] == pytest.approx((2 / 3 + 1) / 2)
    with pytest.raises(ValueError, match="2 predictions for 1 questions"):
        question_scores(["a", "b"], [["a"]])


def test_question_answering_is_registered_with_what_the_stages_need():
    assert task_names()[:3] == ["sequence-classification", "token-classification", "question-answering"]
    qa = get_task("question-answering")
    assert get_task("extractive-qa") is qa and qa.auto_model == "AutoModelForQuestionAnswering"
    assert qa.outputs == {"start_logits": ("batch", "sequence"), "end_logits": ("batch", "sequence")}
    assert qa.dynamic_axes(["input_ids", "attention_mask"])["end_logits"] == {0: "batch", 1: "sequence"}
    assert qa.soft_labels == ("windows", "sequence") and qa.label_unit == "window"
    assert qa.primary_metric == "f1" and {"exact_match", "f1"} <= set(qa.metrics)
    assert qa.predictor_returns == ("answer", "start", "end", "score")
    assert task_for_architectures(["BertForQuestionAnswering"]) is qa
    assert qa.score(["Denver Broncos"], [["the Denver Broncos"]])["f1"] == 1.0
    assert qa.model_class().__name__ == "AutoModelForQuestionAnswering"


def test_best_null_threshold_by_hand():
    """Four questions, null - best margins -2, -1, 1, 3: answering the first (or the first three) scores 3 of 4,
    and of the two cuts the one nearer 0 wins, halfway between the margins it separates."""
    from compress.tasks.question_answering.metrics import best_null_threshold

    margins, answered, empty = [3.0, -1.0, 1.0, -2.0], [0, 0, 1, 1], [1, 1, 0, 0]
    assert best_null_threshold(margins, answered, empty) == (-1.5, 0.75)
    # 0 separates the best cut (answer the two below it): 0 itself is kept, the default moves only to score better
    assert best_null_threshold([-2.0, -1.0, 1.0, 3.0], [1, 1, 0, 0], [0, 0, 1, 1]) == (0.0, 1.0)
    # no valid span (inf): empty at every threshold; everything answerable and right: answer all
    assert best_null_threshold([np.inf, 5.0], [0, 1], [0, 0]) == (6.0, 0.5)
    assert best_null_threshold([], [], []) == (0.0, 0.0)
    # equal margins cannot be split (answering one of them would score 1.0): both or neither, 0.5 either way
    assert best_null_threshold([1.0, 1.0], [1, 0], [0, 1]) == (0.0, 0.5)


def test_best_null_threshold_is_the_best_of_every_threshold():
    """On random questions the chosen threshold's F1 is the best F1 any threshold gives (a dense sweep), and
    is what answering by that threshold scores."""
    from compress.tasks.question_answering.metrics import best_null_threshold

    rng = np.random.default_rng(1)
    for _ in range(30):
        n = int(rng.integers(1, 40))
        margins = np.round(rng.normal(0, 3, n), 1)  # rounded: ties among margins too
        margins[rng.random(n) < 0.1] = np.inf
        answered, empty = rng.random(n), (rng.random(n) < 0.5).astype(float)
        threshold, f1 = best_null_threshold(margins, answered, empty)
        score = lambda t: float(np.where(margins <= t, answered, empty).mean())
        assert f1 == pytest.approx(score(threshold))
        grid = np.concatenate([[-np.inf], np.linspace(-12, 12, 4801)])
        assert f1 == pytest.approx(max(score(t) for t in grid))
