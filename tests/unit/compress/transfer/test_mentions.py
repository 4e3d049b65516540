"""Mention-replaced variants of tagging sentences (``distill --mention-variants``): the words around each entity
stay, the entity becomes another training mention of its type, and the gold tags follow it."""

from __future__ import annotations

from compress.tasks.ner_metrics import extract_entities
from compress.transfer.mentions import mention_pool, mention_variants
from compress.transfer.texts import text_key

LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
BIOES = ["O", "S-LOC", "B-LOC", "E-LOC", "S-PER"]


def _ids(names, labels=LABELS):
    return [labels.index(n) for n in names]


SENTENCES = [
    (["we", "saw", "Paris", "with", "Alice"], ["O", "O", "B-LOC", "O", "B-PER"]),
    (["New", "York", "is", "big"], ["B-LOC", "I-LOC", "O", "O"]),
    (["John", "Smith", "went", "to", "Rome"], ["B-PER", "I-PER", "O", "O", "B-LOC"]),
    (["nothing", "here"], ["O", "O"]),
]
WORDS = [w for w, _ in SENTENCES]
TAGS = [_ids(t) for _, t in SENTENCES]


def test_the_pool_holds_each_training_mention_once_by_type():
    pool = mention_pool(WORDS + [WORDS[0]], TAGS + [TAGS[0]], LABELS)
    assert [m.words for m in pool["LOC"]] == [("New", "York"), ("Paris",), ("Rome",)]
    assert [m.words for m in pool["PER"]] == [("Alice",), ("John", "Smith")]
    assert pool["LOC"][0].tags == (1, 2)


def test_variants_keep_the_context_and_swap_mentions_for_others_of_their_type_with_their_tags():
    words, tags, stats = mention_variants(WORDS, TAGS, LABELS, n=3, seed=0)
    pool = mention_pool(WORDS, TAGS, LABELS)
    assert words and stats["variants"] == len(words) == len(tags) and stats["sentences_with_entities"] == 3
    originals = {text_key(" ".join(w)) for w in WORDS}
    for variant, ids in zip(words, tags):
        assert len(variant) == len(ids) and text_key(" ".join(variant)) not in originals
        names = [LABELS[i] for i in ids]
        entities = extract_entities(names)
        assert entities, names
        for entity in entities:  # every mention of a variant is a training mention of that type, tags included
            span = tuple(variant[entity.start:entity.end])
            assert span in {m.words for m in pool[entity.type]}
            assert names[entity.start].startswith("B-") and all(n.startswith("I-") for n in names[entity.start + 1:entity.end])
        context = [w for w, n in zip(variant, names) if n == "O"]  # the O words are one source sentence's, in order
        assert any(context == [w for w, t in zip(*s) if t == "O"] for s in SENTENCES), variant
    assert len({text_key(" ".join(w)) for w in words}) == len(words)  # no repeats


def test_variants_are_seeded_and_skip_seen_texts_and_sentences_without_entities():
    a = mention_variants(WORDS, TAGS, LABELS, n=2, seed=5)
    assert a == mention_variants(WORDS, TAGS, LABELS, n=2, seed=5)
    seen = {text_key(" ".join(w)) for w in a[0]}
    words, _, stats = mention_variants(WORDS, TAGS, LABELS, n=2, seed=5, seen=seen)
    assert not seen & {text_key(" ".join(w)) for w in words} and stats["repeats_dropped"] >= 1
    none, _, stats = mention_variants([WORDS[3]], [TAGS[3]], LABELS, n=2, seed=0)
    assert none == [] and stats["sentences_with_entities"] == 0


def test_bioes_mentions_carry_their_own_tags():
    words = [["in", "Rome", "today"], ["New", "York", "again"], ["by", "Ann"]]
    tags = [_ids(t, BIOES) for t in (["O", "S-LOC", "O"], ["B-LOC", "E-LOC", "O"], ["O", "S-PER"])]
    out, out_tags, _ = mention_variants(words, tags, BIOES, n=1, seed=0)
    got = {tuple(w): [BIOES[i] for i in t] for w, t in zip(out, out_tags)}
    assert got[("in", "New", "York", "today")] == ["O", "B-LOC", "E-LOC", "O"]
    assert got[("Rome", "again")] == ["S-LOC", "O"]
    assert len(got) == 2  # one PER mention only: "by Ann" has nothing to become
