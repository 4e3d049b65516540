"""Entity-word weights of a tagger's distillation (``distill --entity-weight``): which words weigh more, the
loss by hand, and the settings it refuses."""

from __future__ import annotations

import pytest
import torch

from compress.config import DistillConfig
from compress.core.errors import CompressError
from compress.stages.losses import hard_cross_entropy, soft_cross_entropy
from compress.tasks.token_classification.distill import entity_weights, word_distillation_loss

O, B, I = 0, 1, 2  # tag indices: O, B-X, I-X


def _batch():
    """Row 0, labelled: words O (teacher O), B (teacher B), O (teacher I: the teacher sees an entity the gold does
    not). Row 1, transfer (no gold): words the teacher tags O and B. Positions 0 are [CLS]."""
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 3)
    labels = torch.tensor([[-100, O, B, O], [-100, -100, -100, -100]])
    first = torch.tensor([[1, 2, 3], [1, 2, -1]])
    soft = torch.full((2, 3, 3), -5.0)
    soft[0, 0, O] = soft[0, 1, B] = soft[0, 2, I] = 5.0
    soft[1, 0, O] = soft[1, 1, B] = 5.0
    soft[1, 2] = float("nan")  # row 1 has two words
    return logits, labels, first, soft


def test_an_entity_word_is_one_the_gold_or_the_teacher_puts_in_an_entity():
    logits, labels, first, soft = _batch()
    has = (first >= 0) & torch.isfinite(soft).all(-1)
    weights = entity_weights(labels, first, soft, has, O, 4.0, torch.tensor([1.0, 0.5]))
    assert weights.tolist() == [[1.0, 1.0, 4.0, 4.0], [0.5, 0.5, 2.0, 0.5]]


def test_the_entity_words_pull_harder_in_the_soft_and_the_hard_term_by_hand():
    logits, labels, first, soft = _batch()
    w = 3.0
    plain = word_distillation_loss(logits, labels, first, soft, 2.0, 1.0, 0.5)
    same = word_distillation_loss(logits, labels, first, soft, 2.0, 1.0, 0.5, entity_weight=1.0, outside=O)
    assert torch.allclose(plain["loss"], same["loss"])
    got = word_distillation_loss(logits, labels, first, soft, 2.0, 1.0, 0.5, entity_weight=w, outside=O)
    words = [(0, 1, 0, 1.0), (0, 2, 1, w), (0, 3, 2, w), (1, 1, 0, 1.0), (1, 2, 1, w)]  # row, position, word, weight
    soft_terms = [weight * soft_cross_entropy(logits[r, p:p + 1], soft[r, i:i + 1], 2.0) for r, p, i, weight in words]
    assert torch.allclose(got["soft_ce"], sum(soft_terms) / len(words))
    hard = [weight * hard_cross_entropy(logits[0, p:p + 1], labels[0, p:p + 1]) for _, p, _, weight in words[:3]]
    assert torch.allclose(got["hard_ce"], sum(hard) / 3)
    assert torch.allclose(got["loss"], got["soft_ce"] + 0.5 * got["hard_ce"])
    assert not torch.allclose(got["soft_ce"], plain["soft_ce"])


def test_teacher_ce_trains_every_word_the_teacher_labelled_transfer_rows_included():
    from compress.stages.losses import LossTerm, teacher_cross_entropy
    from compress.tasks.token_classification.distill import word_term_values

    logits, labels, first, soft = _batch()
    got = word_term_values([LossTerm("teacher_ce", 1.0)], logits, labels, first, soft, 2.0)
    words = [(0, 1, 0), (0, 2, 1), (0, 3, 2), (1, 1, 0), (1, 2, 1)]  # row, position, word: row 1 has no gold tag
    by_hand = sum(teacher_cross_entropy(logits[r, p:p + 1], soft[r, i:i + 1]) for r, p, i in words) / len(words)
    assert torch.allclose(got["teacher"], by_hand)
    # the target is the teacher's top tag (row 0's last word: I, where the gold says O), not the gold tag
    assert torch.allclose(teacher_cross_entropy(logits[0, 3:4], soft[0, 2:3]),
                          hard_cross_entropy(logits[0, 3:4], torch.tensor([I])))


def test_an_entity_weight_is_refused_where_it_does_not_apply():
    with pytest.raises(CompressError, match="entity-word weights apply to token classification .* leave it out for "
                                            "question answering"):
        DistillConfig(entity_weight=2.0).refuse_tagger_only("question answering")
    DistillConfig().refuse_tagger_only("sentence classification")  # the default is off
    assert any("--entity-weight must be > 0" in p.message for p in DistillConfig(entity_weight=0.0).problems())
    with pytest.raises(CompressError, match="index of the O tag"):
        word_distillation_loss(*_batch(), 2.0, 1.0, 0.5, entity_weight=2.0)
