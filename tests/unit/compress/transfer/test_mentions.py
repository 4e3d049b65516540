"""Mention-replaced variants of tagging sentences (``distill --mention-variants``): the words around each entity
stay, the entity becomes another training mention of its type, and the gold tags follow it."""

from __future__ import annotations

from compress.tasks.token_classification.metrics import extract_entities
import numpy as np
import pytest

from compress.config import DistillConfig
from compress.core.errors import CompressError
from compress.stages.transfer.mentions import CONFIDENT, Mention, mention_pool, mention_variants, teacher_mentions
from compress.corpora.texts import text_key

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


def _logits(names, labels=LABELS, sure=(), nan=()):
    """Per-word logits whose top tag is each of ``names``: probability ~0.99 at the words in ``sure``, ~0.6 elsewhere;
    NaN rows (a word with no token) at ``nan``."""
    out = np.zeros((len(names), len(labels)), np.float32)
    for i, name in enumerate(names):
        out[i, labels.index(name)] = 6.0 if i in sure else 1.2
    out[list(nan)] = np.nan
    return out


def test_the_teachers_confident_mentions_join_with_tags_written_in_the_datas_scheme():
    sentences = [["we", "met", "Zoe", "in", "Oslo", "Town"], ["I", "Kim", "left"], ["at", "Lima", "now"], ["Bo", "ran"]]
    logits = [_logits(["O", "O", "B-PER", "O", "B-LOC", "I-LOC"], sure={2, 4, 5}),
              _logits(["O", "I-PER", "O"], sure={1}),  # an entity opened by I-: its tags are written B-
              _logits(["O", "B-LOC", "O"], sure={0, 2}),  # the teacher is unsure of Lima: left out
              _logits(["B-PER", "O"], sure={0, 1}, nan={0})]  # a word with no token is never sure
    assert np.exp(1.2) / (np.exp(1.2) + len(LABELS) - 1) < CONFIDENT  # the unsure words really are
    pool = teacher_mentions(sentences, logits, LABELS)
    assert pool == {"LOC": [Mention(("Oslo", "Town"), (1, 2))], "PER": [Mention(("Kim",), (3,)), Mention(("Zoe",), (3,))]}
    bioes = teacher_mentions([["Oslo", "Town", "and", "Rome"]],
                             [_logits(["B-LOC", "E-LOC", "O", "S-LOC"], BIOES, sure={0, 1, 2, 3})], BIOES)
    assert bioes == {"LOC": [Mention(("Oslo", "Town"), (2, 3)), Mention(("Rome",), (1,))]}


def test_variants_draw_transfer_mentions_beside_the_training_ones_and_count_them():
    extra = {"LOC": [Mention(("Oslo",), (1,)), Mention(("Paris",), (1,))], "ORG": [Mention(("Acme",), (1,))]}
    words, tags, stats = mention_variants(WORDS, TAGS, LABELS, n=6, seed=0, extra=extra)
    assert stats["transfer_mentions_by_type"] == {"LOC": 2, "ORG": 1} and stats["transfer_mentions_new_by_type"] == {"LOC": 1}
    assert stats["mentions_by_type"] == {"LOC": 4, "PER": 2}
    assert stats["transfer_confidence"] == CONFIDENT
    assert any("Oslo" in w for w in words) and not any("Acme" in w for w in words)
    for variant, ids in zip(words, tags):  # a transfer mention carries its tags like a training one
        if "Oslo" in variant:
            assert LABELS[ids[variant.index("Oslo")]] == "B-LOC"
    assert "transfer_mentions_by_type" not in mention_variants(WORDS, TAGS, LABELS, n=1, seed=0)[2]


def test_a_transfer_pool_needs_variants_and_transfer_text_and_a_tagger():
    def problems(**kw):
        return [p.message for p in DistillConfig(mention_pool="train+transfer", **kw).problems()
                if "--mention-pool" in p.message]

    assert problems() and problems(mention_variants=4) and problems(unlabeled="wnut17-unlabeled")
    assert not problems(mention_variants=4, unlabeled="wnut17-unlabeled")
    with pytest.raises(CompressError, match="--mention-pool 'train\\+transfer': mention pools apply to token"):
        DistillConfig(mention_pool="train+transfer").refuse_tagger_only("sentence classification")
