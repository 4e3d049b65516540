"""Transfer texts chosen by their likeness to the task's (``distill --unlabeled-select similar``): TF-IDF nearest-
neighbour cosine checked by hand and against scikit-learn's vectorizer, the selection inside the corpus filter,
the settings it refuses, and the rows ``tools.studies.origins`` rebuilds from the recorded setting."""

from __future__ import annotations

import numpy as np
import pytest

from tools.studies.origins import origin_texts
from compress.config import DistillConfig
from compress.tasks.tables import load_task_data
from compress.core.errors import CompressError
from compress.stages.transfer import UnlabeledCorpus, filter_unlabeled
from compress.corpora.similarity import CHUNK, most_similar, nearest_similarity, tfidf_matrices
from tests.conftest import sentiment_rows, write_csv

LABELLED = ["the acting is superb", "a dull and tedious plot", "superb photography , tedious script"]


def test_the_nearest_labelled_text_decides_and_rare_shared_words_count_more():
    corpus = ["The acting is SUPERB", "stock prices fell today", "the plot"]
    scores = nearest_similarity(LABELLED, corpus)
    assert scores[0] == pytest.approx(1.0, abs=1e-6)  # the same words as a labelled text, case aside
    assert scores[1] == 0.0  # no word in common
    assert 0 < scores[2] < 1
    rare, common = nearest_similarity(["tedious the"], ["tedious", "the", "the cat", "the dog"])[:2]
    assert rare > common > 0  # "tedious" is in 2 texts, "the" in 4: the rarer shared word counts more
    assert nearest_similarity([], corpus).tolist() == [0.0] * 3 and nearest_similarity(LABELLED, []).size == 0


def test_tfidf_matches_scikit_learns_vectorizer_on_the_same_vocabulary():
    text = pytest.importorskip("sklearn.feature_extraction.text")
    corpus = ["a superb plot", "tedious tedious acting", "prices fell", "the script is the plot"]
    lab, cor = tfidf_matrices(LABELLED, corpus)
    words = sorted({w for t in LABELLED for w in t.lower().replace(",", " ").split()})
    reference = text.TfidfVectorizer(token_pattern=r"(?u)\w+", vocabulary=words).fit(LABELLED + corpus)
    ref_lab, ref_cor = reference.transform(LABELLED).toarray(), reference.transform(corpus).toarray()
    expected = (ref_cor @ ref_lab.T).max(axis=1)
    assert nearest_similarity(LABELLED, corpus) == pytest.approx(expected, abs=1e-6)
    assert np.abs(lab.dot(cor.T).toarray()).max() <= 1 + 1e-6  # rows are unit vectors


def test_most_similar_keeps_the_top_texts_in_corpus_order_across_chunks():
    corpus = [f"unrelated line {i}" for i in range(CHUNK + 10)]
    corpus[5], corpus[CHUNK + 3] = "the acting is superb", "dull tedious plot"
    kept, summary = most_similar(LABELLED, corpus, 2)
    assert kept == [5, CHUNK + 3]
    assert summary["lowest_kept"] > summary["median_all"] == 0.0


def test_the_corpus_filter_selects_by_similarity_and_records_it():
    texts = ["an exchange rate", "superb acting", "the acting is superb"] + [f"rain in city {i}" for i in range(20)]
    corpus = UnlabeledCorpus(texts, None, "mine.txt")
    kept, _, stats = filter_unlabeled(corpus, set(), {"the acting is superb"}, limit=2, similar_to=LABELLED)
    assert kept == ["an exchange rate", "superb acting"]  # the one alike, then the first of the ties at 0
    assert stats["selected"] == "similar" and stats["similarity"]["lowest_kept"] >= 0
    assert "the acting is superb" not in kept  # a labelled text is still removed first
    _, _, seeded = filter_unlabeled(corpus, set(), set(), limit=2)
    assert seeded["selected"] == "random" and "similarity" not in seeded
    grouped = UnlabeledCorpus(texts, None, "mine.csv", groups=["a"] * len(texts))
    with pytest.raises(CompressError, match="choose one"):
        filter_unlabeled(grouped, set(), set(), limit=2, similar_to=LABELLED)


def test_settings_that_cannot_select_by_similarity_are_refused():
    def messages(**kw) -> list[str]:
        return [p.message for p in DistillConfig(unlabeled="c.txt", **kw).problems()]

    assert any("give --unlabeled-limit N" in m for m in messages(unlabeled_select="similar"))
    assert any("choose one" in m for m in messages(unlabeled_select="similar", unlabeled_limit=5,
                                                   unlabeled_balance="source"))
    assert messages(unlabeled_select="similar", unlabeled_limit=5) == []
    _, problems = DistillConfig.build({"unlabeled": "c.txt", "unlabeled_limit": 5, "unlabeled_select": "nearest"})
    assert any("random, similar" in p.message for p in problems)


def test_origins_rebuilds_the_similar_selection(tmp_path):
    data = write_csv(tmp_path / "d.csv", sentiment_rows(60))
    task = load_task_data(str(data))
    lines = [f"completely unrelated line {i}" for i in range(30)] + list(task.splits["train"]["text"][:5])
    lines += [t + " indeed" for t in task.splits["train"]["text"][5:9]]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n")
    meta = {"config": {"unlabeled": str(corpus), "unlabeled_limit": 4, "unlabeled_select": "similar",
                       "train": {"seed": 0}},
            "transfer": {"unlabeled": 4}}
    texts, notes = origin_texts(meta, task)
    assert notes == [] and sorted(texts["unlabeled"]) == sorted(t + " indeed" for t in task.splits["train"]["text"][5:9])


def test_distill_keeps_the_corpus_lines_most_like_the_training_sentences(tmp_path, capsys):
    import json

    from compress.cli import main
    from compress.config import DataOptions
    from compress.stages.teacher import TeacherConfig, train_teacher
    from compress.stages.training import TrainSettings
    from tests.conftest import make_bert

    data = write_csv(tmp_path / "d.csv", sentiment_rows(80))
    task = load_task_data(str(data))
    alike = [t + " again" for t in task.splits["train"]["text"][:3]]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join([f"zq{i} xv{i}" for i in range(20)] + alike) + "\n")
    base = make_bert(tmp_path / "base", layers=1, head=True)
    teacher = train_teacher(TeacherConfig(model=str(base), data=DataOptions(str(data)),
                                          train=TrainSettings(epochs=1, lr=2e-3, batch_size=16)), tmp_path / "teacher")
    rc = main(["distill", "--teacher", str(teacher), "--data", str(data), "--student", "1x32", "--init", "random",
               "--epochs", "1", "--batch-size", "16", "--unlabeled", str(corpus), "--unlabeled-limit", "3",
               "--unlabeled-select", "similar", "--out", str(tmp_path / "s"), "--allow-untrained-teacher"])
    assert rc == 0, capsys.readouterr().err
    meta = json.loads((tmp_path / "s" / "compress.json").read_text())
    stats = meta["transfer"]["unlabeled_corpus"]
    assert stats["selected"] == "similar" and stats["kept"] == 3 and stats["similarity"]["lowest_kept"] > 0
    assert sorted(origin_texts(meta, task)[0]["unlabeled"]) == sorted(alike)
