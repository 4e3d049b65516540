"""STS correlation, neighbour recall@k and cosine agreement, against scipy and by hand on a toy corpus."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from compress.core.errors import CompressError
from compress.tasks import get_task
from compress.tasks.sentence_embedding.metrics import (cosine_agreement, nearest_neighbours, neighbour_recall,
                                                       neighbour_recalls, pearson, rank, recall_difference_interval,
                                                       spearman, sts_scores)


def _circle(degrees, width=2, scale=None):
    radians = np.deg2rad(np.asarray(degrees, dtype=float))
    points = np.zeros((len(radians), width))
    points[:, 0], points[:, 1] = np.cos(radians), np.sin(radians)
    return points * (np.asarray(scale)[:, None] if scale is not None else 1.0)


#: Six texts as angles. The student moves text 2 from 20 to 95 degrees; the rest stay.
TEACHER, STUDENT = [0, 10, 20, 90, 100, 200], [0, 10, 95, 90, 100, 200]


def test_neighbour_recall_by_hand_on_a_toy_corpus():
    teacher = _circle(TEACHER)
    student = _circle(STUDENT, width=3, scale=[1, 2, 3, 4, 5, 6])  # another width, any lengths: only angles count
    # k = 2 by hand: teacher 0:{1,2} 1:{0,2} 2:{0,1} 3:{2,4} 4:{2,3} 5:{3,4};
    #                student 0:{1,3} 1:{0,3} 2:{3,4} 3:{2,4} 4:{2,3} 5:{2,4}.
    assert [set(row) for row in nearest_neighbours(teacher, 2)] == [{1, 2}, {0, 2}, {0, 1}, {2, 4}, {2, 3}, {3, 4}]
    recalls = neighbour_recalls(student, teacher, k=2)
    np.testing.assert_allclose(recalls, [0.5, 0.5, 0.0, 1.0, 1.0, 0.5])
    assert neighbour_recall(student, teacher, k=2) == pytest.approx(3.5 / 6)
    assert neighbour_recall(teacher * 3, teacher, k=2) == 1.0


def test_neighbours_leave_the_text_itself_out_and_need_more_texts_than_k():
    vectors = _circle([0, 0, 90])
    assert nearest_neighbours(vectors, 1).tolist() == [[1], [0], [0]]
    with pytest.raises(CompressError, match="needs more than 10 held-out texts, got 10"):
        nearest_neighbours(np.eye(10), 10)


def test_recall_is_the_same_when_the_matrix_is_read_in_blocks(monkeypatch):
    rng = np.random.default_rng(0)
    teacher, student = rng.normal(size=(40, 8)), rng.normal(size=(40, 5))
    whole = neighbour_recalls(student, teacher, k=10)
    monkeypatch.setattr("compress.tasks.sentence_embedding.metrics.BLOCK", 7)
    np.testing.assert_array_equal(neighbour_recalls(student, teacher, k=10), whole)


def test_spearman_and_pearson_against_scipy_with_ties():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 6, size=60).astype(float)  # many ties, as STS's gold scores have
    y = x + rng.normal(scale=2.0, size=60)
    np.testing.assert_allclose(rank(x), stats.rankdata(x))
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
    assert pearson([1, 1, 1], [1, 2, 3]) == 0.0


def test_sts_scores_are_the_correlation_of_the_cosines_times_100():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(30, 4)), rng.normal(size=(30, 4))
    gold = rng.uniform(0, 5, size=30)
    cosines = np.sum(a * b, axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    got = sts_scores(a, b, gold)
    assert got["spearman"] == pytest.approx(100 * stats.spearmanr(cosines, gold).statistic, abs=1e-9)
    assert got["pearson"] == pytest.approx(100 * stats.pearsonr(cosines, gold).statistic, abs=1e-9)
    assert got["n"] == 30


def test_cosine_agreement_only_at_one_width():
    teacher = _circle([0, 90])
    assert cosine_agreement(_circle([60, 90]), teacher) == pytest.approx((0.5 + 1.0) / 2)
    assert cosine_agreement(_circle([0, 90], width=3), teacher) is None


def test_the_paired_bootstrap_of_a_recall_difference():
    from compress.core.stats import mean_drop_interval

    rng = np.random.default_rng(3)
    worse = rng.uniform(0.2, 0.6, size=200)
    better = np.clip(worse + rng.normal(0.1, 0.05, size=200), 0, 1)
    interval = recall_difference_interval(better, worse)
    assert interval.estimate == pytest.approx(better.mean() - worse.mean())
    assert 0 < interval.low < interval.estimate < interval.high
    # The same paired resampling as the gate's mean-drop interval over questions.
    reference = mean_drop_interval(better, worse)
    assert (interval.low, interval.high) == pytest.approx((reference.low, reference.high))
    assert "200 texts" in interval.method
    with pytest.raises(ValueError, match="not paired"):
        recall_difference_interval(better, worse[:-1])


def test_the_task_scores_sts_pairs_and_recall_against_the_teacher():
    task = get_task("sentence-embedding")
    assert get_task("bi-encoder") is task and task.primary_metric == "spearman"
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(12, 4)), rng.normal(size=(12, 4))
    gold = rng.uniform(0, 5, size=12)
    out = task.score((a, b), gold, reference=(a, b))
    assert out["neighbour_recall"] == 1.0 and out["cosine_agreement"] == pytest.approx(1.0)
    assert out["spearman"] == pytest.approx(sts_scores(a, b, gold)["spearman"])
    label_free = task.score(a, reference=_circle(np.arange(12) * 30.0, width=4))
    assert set(label_free) == {"n", "neighbour_recall", "cosine_agreement"} and label_free["n"] == 12
    assert math.isfinite(label_free["neighbour_recall"])
