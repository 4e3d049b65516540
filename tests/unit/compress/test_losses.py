"""Known-value tests of every distillation loss."""

import math

import pytest
import torch

from compress.stages.losses import LOSSES, attention_mse, hard_cross_entropy, hidden_mse, kl_divergence, soft_cross_entropy


def test_registry_names_every_loss():
    assert set(LOSSES) == {"soft_ce", "kl", "logit_mse", "teacher_ce", "hard_ce", "hidden_mse", "hidden_nmse", "hidden_cosine", "attention_mse",
                           "pooled_cosine", "pooled_nmse", "pooled_relation"}


def test_soft_ce_known_value():
    # teacher p = softmax([0, ln 3]) = [0.25, 0.75]; student q = [0.5, 0.5] at T=1
    teacher = torch.tensor([[0.0, math.log(3.0)]])
    student = torch.zeros(1, 2)
    expected = -(0.25 * math.log(0.5) + 0.75 * math.log(0.5))
    assert soft_cross_entropy(student, teacher, 1.0).item() == pytest.approx(expected, rel=1e-6)


def test_soft_ce_temperature_scaling():
    # at T=2 the logits are halved before the softmax and the loss multiplied by 4
    teacher = torch.tensor([[0.0, 2 * math.log(3.0)]])
    student = torch.zeros(1, 2)
    expected = 4 * -(0.25 * math.log(0.5) + 0.75 * math.log(0.5))
    assert soft_cross_entropy(student, teacher, 2.0).item() == pytest.approx(expected, rel=1e-6)


def test_kl_is_soft_ce_minus_teacher_entropy_and_zero_on_agreement():
    teacher = torch.tensor([[0.0, math.log(3.0)], [1.0, -1.0]])
    student = torch.tensor([[0.3, 0.1], [0.0, 0.0]])
    p = torch.softmax(teacher, -1)
    entropy = -(p * p.log()).sum(-1).mean()
    assert kl_divergence(student, teacher, 1.0).item() == pytest.approx((soft_cross_entropy(student, teacher, 1.0) - entropy).item(), rel=1e-5)
    assert kl_divergence(teacher, teacher, 3.0).item() == pytest.approx(0.0, abs=1e-7)


def test_logit_mse_compares_centred_logits_and_is_the_high_temperature_limit():
    from compress.stages.losses import logit_mse

    teacher = torch.tensor([[2.0, -2.0], [0.5, 1.5]])
    # a shift of every logit of a row changes no softmax, so it changes nothing here either
    assert logit_mse(teacher + torch.tensor([[5.0], [-3.0]]), teacher).item() == pytest.approx(0.0, abs=1e-7)
    # centred: row 1 teacher (2, -2) vs student (0, 0): errors 2 and 2 -> 4; row 2 (-0.5, 0.5) vs (0, 0) -> 0.25
    assert logit_mse(torch.zeros(2, 2), teacher).item() == pytest.approx((4.0 + 0.25) / 2)
    # soft_ce's gradient at a large T points the same way as logit_mse's (Hinton et al.'s limit)
    student = torch.tensor([[0.3, -0.1], [0.2, 0.0]], requires_grad=True)
    g_mse, = torch.autograd.grad(logit_mse(student, teacher), student)
    g_ce, = torch.autograd.grad(soft_cross_entropy(student, teacher, 1000.0), student)
    cos = torch.nn.functional.cosine_similarity(g_mse.flatten(), g_ce.flatten(), dim=0)
    assert cos.item() == pytest.approx(1.0, abs=1e-3)


def test_hard_ce_known_value():
    logits = torch.tensor([[0.0, math.log(3.0)]])
    assert hard_cross_entropy(logits, torch.tensor([1])).item() == pytest.approx(-math.log(0.75), rel=1e-6)


def test_teacher_ce_is_cross_entropy_with_the_teachers_top_class_at_any_temperature():
    from compress.stages.losses import teacher_cross_entropy

    # row 1: the teacher's top class is 1 (barely: 0.1 against 0.0), row 2: class 0; the student is uniform on
    # row 1 and sure of class 1 on row 2
    teacher = torch.tensor([[0.0, 0.1], [3.0, -3.0]])
    student = torch.tensor([[0.0, 0.0], [0.0, math.log(3.0)]])
    expected = (-math.log(0.5) - math.log(0.25)) / 2
    for temperature in (1.0, 2.0, 10.0):
        assert teacher_cross_entropy(student, teacher, temperature).item() == pytest.approx(expected, rel=1e-6)
    # a near tie counts as a decision: soft_ce sees 0.1 as almost no preference, this loss as class 1
    assert teacher_cross_entropy(student[:1], teacher[:1]).item() == pytest.approx(math.log(2.0), rel=1e-6)
    assert teacher_cross_entropy(torch.tensor([[-5.0, 5.0]]), teacher[:1]).item() < 1e-4


def test_teacher_ce_logs_under_its_own_name_beside_the_soft_term():
    from compress.config import DistillConfig
    from compress.stages.losses import LossTerm, check_terms

    terms = DistillConfig.from_dict({"losses": "logit_mse:1,teacher_ce:0.5,hard_ce:0.5"}).loss_terms()
    assert [(t.loss, t.on, t.name, t.weight) for t in terms] == [
        ("logit_mse", "logits", "kd", 1.0), ("teacher_ce", "logits", "teacher", 0.5), ("hard_ce", "labels", "hard", 0.5)]
    assert check_terms(terms) == []
    assert LossTerm("teacher_ce", on="gold").name == "gold"  # on another signal it takes that signal's name
    assert LossTerm("teacher_ce", name="mine").name == "mine"


def test_hidden_mse_ignores_padding():
    s = torch.zeros(1, 3, 2)
    t = torch.tensor([[[1.0, 1.0], [3.0, 3.0], [100.0, 100.0]]])  # last position is padding
    mask = torch.tensor([[1, 1, 0]])
    # mean over 2 real tokens x 2 units of (1, 1, 9, 9) = 5
    assert hidden_mse(s, t, mask).item() == pytest.approx(5.0)


def test_attention_mse_masks_padded_queries_and_keys():
    mask = torch.tensor([[1, 1, 0]])
    s = torch.zeros(1, 1, 3, 3)
    t = torch.zeros(1, 1, 3, 3)
    t[0, 0, 0, 0] = 0.5          # real query 0, real key 0 -> counts
    t[0, 0, 1, 2] = 7.0          # padded key -> ignored
    t[0, 0, 2, 0] = 9.0          # padded query -> ignored
    # squared error 0.25 summed over keys, averaged over 2 real queries and 1 head
    assert attention_mse(s, t, mask).item() == pytest.approx(0.125)


def test_attention_mse_averages_heads_when_counts_differ():
    mask = torch.ones(1, 2)
    s = torch.full((1, 2, 2, 2), 0.5)
    t = torch.stack([torch.eye(2), 1 - torch.eye(2)]).unsqueeze(0)  # head mean is 0.5 everywhere
    t4 = torch.cat([t, t], dim=1)  # 4 teacher heads against 2 student heads
    assert attention_mse(s, t4, mask).item() == pytest.approx(0.0, abs=1e-7)
    assert attention_mse(torch.zeros(1, 2, 2, 2), t4, mask).item() > 0
