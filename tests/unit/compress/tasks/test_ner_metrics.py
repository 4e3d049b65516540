"""Entity decoding and entity-level scores: hand-checked cases, and exact equality with seqeval."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

from compress.tasks.token_classification.metrics import (Entity, decode_ids, entity_scores, extract_entities, scores_from_counts,
                                        sentence_counts, token_agreement)


def test_entities_of_valid_iob2_and_bioes():
    assert extract_entities(["B-PER", "I-PER", "O", "B-LOC"]) == [Entity("PER", 0, 2), Entity("LOC", 3, 4)]
    assert extract_entities(["B-PER", "B-PER", "I-PER"]) == [Entity("PER", 0, 1), Entity("PER", 1, 3)]
    assert extract_entities(["S-PER", "B-LOC", "I-LOC", "E-LOC", "O"]) == [Entity("PER", 0, 1), Entity("LOC", 1, 4)]
    assert extract_entities(["B-creative-work", "I-creative-work"]) == [Entity("creative-work", 0, 2)]
    assert extract_entities(["O", "O"]) == [] and extract_entities([]) == []


def test_invalid_sequences_are_decoded_the_conlleval_way_not_dropped():
    # I-X after O starts an entity; a type change inside an entity ends it and starts another.
    assert extract_entities(["O", "I-PER", "I-PER"]) == [Entity("PER", 1, 3)]
    assert extract_entities(["I-PER"]) == [Entity("PER", 0, 1)]
    assert extract_entities(["B-PER", "I-LOC"]) == [Entity("PER", 0, 1), Entity("LOC", 1, 2)]
    assert extract_entities(["B-LOC", "E-LOC", "E-LOC"]) == [Entity("LOC", 0, 2), Entity("LOC", 2, 3)]
    assert extract_entities(["S-LOC", "I-LOC"]) == [Entity("LOC", 0, 1), Entity("LOC", 1, 2)]


def test_malformed_tags_are_refused():
    for bad in ("PER", "B_PER", "B-", "X-PER", "o"):
        with pytest.raises(ValueError, match="neither 'O' nor"):
            extract_entities(["O", bad])


def test_hand_checked_scores():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "I-ORG"]]
    # gold: PER(0,2) LOC(3,4) | ORG(0,1); predicted: PER(0,2) ORG(3,4) | ORG(0,2). Only PER matches:
    # ORG(0,2) has the right type and start but the wrong end, so it is not counted (strict spans).
    s = entity_scores(gold, pred)
    assert (s["correct"], s["predicted"], s["gold"]) == (1, 3, 3)
    assert s["precision"] == pytest.approx(1 / 3) and s["recall"] == pytest.approx(1 / 3)
    assert s["f1"] == pytest.approx(1 / 3)
    assert s["per_type"]["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1, "predicted": 1}
    assert s["per_type"]["LOC"]["f1"] == 0.0 and s["per_type"]["LOC"]["support"] == 1
    assert s["per_type"]["ORG"]["support"] == 1 and s["per_type"]["ORG"]["predicted"] == 2
    assert list(s["per_type"]) == ["LOC", "ORG", "PER"]
    assert entity_scores([["O"]], [["O"]])["f1"] == 0.0  # no entity on either side: 0, as seqeval


def test_token_agreement_and_decoding():
    assert token_agreement([["O", "B-A"], ["I-A"]], [["O", "B-B"], ["I-A"]]) == pytest.approx(2 / 3)
    assert token_agreement([], []) == 0.0
    assert decode_ids([[0, 2], [1]], ["O", "B-A", "I-A"]) == [["O", "I-A"], ["B-A"]]
    with pytest.raises(ValueError, match="2 gold tags but 1"):
        token_agreement([["O", "O"]], [["O"]])


def test_counts_per_sentence_sum_to_the_scores():
    rng = random.Random(3)
    gold = [_random_tags(rng, rng.randint(0, 9)) for _ in range(60)]
    pred = [_perturb(rng, g) for g in gold]
    types, counts = sentence_counts(gold, pred)
    assert counts.shape == (60, len(types), 3)
    assert scores_from_counts(types, counts) == entity_scores(gold, pred)
    # A resample of sentences (what a paired bootstrap does) equals scoring those sentences directly.
    rows = np.random.RandomState(0).randint(0, 60, size=60)
    direct = entity_scores([gold[i] for i in rows], [pred[i] for i in rows])
    assert scores_from_counts(types, counts[rows])["f1"] == direct["f1"]


TYPES = ("A", "B", "creative-work")


def _random_tags(rng: random.Random, n: int, prefixes: str = "BIES") -> list[str]:
    """Tags drawn independently, so invalid sequences (I-X after O, after B-Y, E without B) are common."""
    return ["O" if rng.random() < 0.35 else f"{rng.choice(prefixes)}-{rng.choice(TYPES)}" for _ in range(n)]


def _perturb(rng: random.Random, tags: list[str]) -> list[str]:
    out = list(tags)
    for i in range(len(out)):
        if rng.random() < 0.3:
            out[i] = _random_tags(rng, 1)[0]
    return out


@pytest.mark.parametrize("prefixes", ["BI", "BIES"])
def test_equal_to_seqeval_default_on_random_sequences(prefixes):
    from seqeval.metrics import f1_score, precision_score, recall_score
    from seqeval.metrics.sequence_labeling import get_entities

    rng = random.Random(len(prefixes))
    for trial in range(300):
        gold = [_random_tags(rng, rng.randint(1, 12), prefixes) for _ in range(rng.randint(1, 8))]
        pred = [_perturb(rng, g) if rng.random() < 0.8 else _random_tags(rng, len(g), prefixes) for g in gold]
        ours = entity_scores(gold, pred)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert ours["f1"] == f1_score(gold, pred), (trial, gold, pred)
            assert ours["precision"] == precision_score(gold, pred)
            assert ours["recall"] == recall_score(gold, pred)
            per_type = f1_score(gold, pred, average=None)
        assert [s["f1"] for s in ours["per_type"].values()] == list(per_type), (trial, gold, pred)
        for sentence in gold + pred:
            ref = [Entity(t, start, end + 1) for t, start, end in get_entities(sentence)]
            assert extract_entities(sentence) == ref, sentence


def test_recall_by_novelty_splits_gold_entities_by_whether_their_name_was_in_training():
    from compress.tasks.token_classification.metrics import recall_by_novelty, surface_forms

    train_tokens = [["I", "met", "Alice", "in", "New", "York"]]
    train_tags = [["O", "O", "B-PER", "O", "B-LOC", "I-LOC"]]
    seen = surface_forms(train_tokens, train_tags)
    assert seen == {"alice", "new york"}  # lower-cased: "ALICE" later counts as seen
    tokens = [["ALICE", "flew", "to", "Oslo"], ["Bob", "likes", "new", "york"]]
    gold = [["B-PER", "O", "O", "B-LOC"], ["B-PER", "O", "B-LOC", "I-LOC"]]
    # finds ALICE (seen) and Oslo (new); misses Bob (new); "new york" found with the wrong span (new only)
    pred = [["B-PER", "O", "O", "B-LOC"], ["O", "O", "B-LOC", "O"]]
    assert recall_by_novelty(tokens, gold, pred, seen) == {"seen": (1, 2), "unseen": (1, 2)}
    assert recall_by_novelty(tokens, gold, gold, seen) == {"seen": (2, 2), "unseen": (2, 2)}
    with pytest.raises(ValueError):
        recall_by_novelty(tokens, gold, pred[:1], seen)
