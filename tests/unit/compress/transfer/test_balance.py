"""``--unlabeled-balance``: a transfer sample drawn evenly across a corpus column (its sources or channels)."""

from __future__ import annotations

from collections import Counter

import pytest

from compress.core.errors import CompressError
from compress.stages.transfer import filter_unlabeled, load_unlabeled, read_unlabeled
from compress.corpora.corpus import NO_GROUP, UnlabeledCorpus, balanced_sample


def _groups(sizes: dict[str, int]) -> list[str]:
    # interleaved, so corpus order and group order differ
    rows = [g for g, n in sizes.items() for _ in range(n)]
    return rows[::2] + rows[1::2]


@pytest.mark.parametrize("limit, expected", [
    (9, {"a": 2, "b": 3, "c": 4}),        # a gives its 2; b and c share 7, the odd row to the larger group
    (30, {"a": 2, "b": 10, "c": 18}),     # a and b give all they have, c the rest
    (112, {"a": 2, "b": 10, "c": 100}),   # the whole corpus
    (2, {"b": 1, "c": 1}),                # fewer rows than groups: the largest groups first
])
def test_each_group_gets_an_equal_share_and_a_small_group_gives_all_it_has(limit, expected):
    groups = _groups({"a": 2, "b": 10, "c": 100})
    chosen = balanced_sample(groups, limit, seed=0)
    assert chosen == sorted(set(chosen)) and len(chosen) == limit
    assert Counter(groups[i] for i in chosen) == Counter(expected)


def test_the_share_rule_by_hand():
    # three groups of 40, 5 and 1 rows, 12 to draw: 1 + 5 from the small ones, 6 from the large one
    groups = ["x"] * 40 + ["y"] * 5 + ["z"]
    assert Counter(groups[i] for i in balanced_sample(groups, 12)) == {"x": 6, "y": 5, "z": 1}
    # equal groups split evenly; the seed picks which rows, not how many
    groups = ["p", "q"] * 50
    one, two = balanced_sample(groups, 10, seed=1), balanced_sample(groups, 10, seed=2)
    assert Counter(groups[i] for i in one) == Counter(groups[i] for i in two) == {"p": 5, "q": 5}
    assert one != two and balanced_sample(groups, 10, seed=1) == one


def test_filter_unlabeled_draws_the_limit_evenly_and_reports_it_per_group():
    texts = [f"text number {i}" for i in range(60)]
    groups = ["forum"] * 6 + ["chat"] * 54
    corpus = UnlabeledCorpus(texts + ["text number 0"], None, "mine.csv", {}, groups + ["forum"])
    kept, _, stats = filter_unlabeled(corpus, {"text number 1"}, set(), limit=20, seed=0)
    assert stats["duplicates"] == 1 and stats["in_validation_or_test"] == 1
    assert stats["kept_by_group"] == {"chat": 15, "forum": 5} and len(kept) == 20
    # without the column the same limit is a plain seeded sample: mostly the large group
    plain, _, plain_stats = filter_unlabeled(UnlabeledCorpus(texts, None, "mine.csv"), set(), set(), limit=20)
    assert "kept_by_group" not in plain_stats and sum(t in texts[:6] for t in plain) < 5


def test_a_table_column_is_read_as_the_groups_and_an_empty_cell_is_its_own(tmp_path):
    path = tmp_path / "traffic.csv"
    path.write_text("text,channel\nfirst ticket text,email\nsecond ticket text,\nthird one here,chat\n,chat\n",
                    encoding="utf-8")
    corpus = read_unlabeled(path, balance_column="channel")
    assert corpus.texts == ["first ticket text", "second ticket text", "third one here"]
    assert corpus.groups == ["email", NO_GROUP, "chat"]
    with pytest.raises(CompressError, match=r"traffic\.csv: no column 'source' .*--unlabeled-balance"):
        read_unlabeled(path, balance_column="source")
    txt = tmp_path / "lines.txt"
    txt.write_text("one line of text\n", encoding="utf-8")
    with pytest.raises(CompressError, match=r"lines\.txt: a \.txt corpus has no columns to balance over"):
        read_unlabeled(txt, balance_column="channel")


def test_wnut17_unlabeled_names_each_lines_platform():
    corpus = load_unlabeled("wnut17-unlabeled", balance_column="source")
    counts = Counter(corpus.groups)
    assert set(counts) == {"twitter", "reddit", "stackexchange", "youtube"} and sum(counts.values()) == 86004
    assert counts["youtube"] > 50000 and counts["reddit"] < 2000  # the raw mix is mostly YouTube comments
    kept, _, stats = filter_unlabeled(corpus, set(), set(), limit=10000, seed=0)
    by = stats["kept_by_group"]
    assert by["reddit"] == counts["reddit"] and by["stackexchange"] == counts["stackexchange"]
    assert by["twitter"] == by["youtube"] == (10000 - counts["reddit"] - counts["stackexchange"]) // 2
    with pytest.raises(CompressError, match=r"--unlabeled-balance channel: the built-in corpus wnut17-unlabeled has "
                                            r"no such column \(its columns to balance over: source\)"):
        load_unlabeled("wnut17-unlabeled", balance_column="channel")
