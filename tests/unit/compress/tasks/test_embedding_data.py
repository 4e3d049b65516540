"""The sentence-embedding task's data: unlabelled text split for neighbour recall; it claims no other task's data."""

from __future__ import annotations

import pytest

from compress.core.errors import CompressError
from compress.tasks import get_task
from compress.tasks.protocol import missing_members
from compress.tasks.protocol.data import DataSource
from compress.tasks.sentence_embedding.data import MIN_HELD_OUT, split_texts
from compress.tasks.task_choice import data_task
from tests.conftest import sentiment_rows, write_csv
from tests.support.embedding import corpus


def test_the_split_holds_out_a_seeded_slice_never_seen_in_training():
    texts = corpus(400, seed=0)
    data = split_texts(texts + texts[:20], seed=1)  # duplicates count once
    unique = len(set(texts))
    assert len(data.held_out) == max(MIN_HELD_OUT, round(0.1 * unique))
    assert not set(data.held_out) & set(data.train) and len(data.train) + len(data.held_out) == unique
    assert split_texts(texts, seed=1).held_out == data.held_out and split_texts(texts, seed=2).held_out != data.held_out
    assert len(split_texts(texts, seed=1, limit=30).train) == 30
    with pytest.raises(CompressError, match="99 distinct texts; .* needs at least 100"):
        split_texts([f"text {i}" for i in range(99)])


def test_load_reads_a_text_file(tmp_path):
    from compress.config import DataOptions

    path = tmp_path / "domain.txt"
    path.write_text("\n".join(corpus(300, seed=2)) + "\n\n", encoding="utf-8")
    data = get_task("sentence-embedding").aspect("data").load(DataOptions(data=str(path), limit=40, split_seed=3))
    assert len(data.train) == 40 and len(data.held_out) >= MIN_HELD_OUT and data.task == "sentence-embedding"
    # A bare encoder's config says 2 labels by default; an encoder's data has none to bound.
    again = get_task("sentence-embedding").aspect("data").load(DataOptions(data=str(path), limit=40, split_seed=3),
                                                               num_labels=2)
    assert again.train == data.train


def test_registering_it_claims_no_classification_data(tmp_path):
    table = write_csv(tmp_path / "reviews.csv", sentiment_rows(40))
    lines = tmp_path / "lines.txt"
    lines.write_text("a good film\na dull film\n", encoding="utf-8")
    aspect = get_task("sentence-embedding").aspect("data")
    for spec in (table, lines):
        assert not aspect.recognises(DataSource(str(spec))) and not aspect.accepts(DataSource(str(spec)))
    assert data_task(str(table)) == "sequence-classification" and data_task("movie-reviews") == "sequence-classification"
    assert missing_members(get_task("sentence-embedding"), "data") == []
