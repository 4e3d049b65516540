"""The two distillation losses of a sentence encoder, against hand computations."""

from __future__ import annotations

import math

import pytest
import torch

from compress.tasks.sentence_embedding.losses import ProjectedMSE, cosine_matrix_loss


def test_mse_without_a_projection_when_the_widths_match():
    loss = ProjectedMSE(2, 2)
    assert loss.projection is None and not list(loss.parameters())
    student, teacher = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    assert loss(student, teacher).item() == pytest.approx((0 + 4 + 9 + 16) / 4)


def test_mse_through_the_learned_projection_when_the_widths_differ():
    loss = ProjectedMSE(2, 3)
    with torch.no_grad():
        loss.projection.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        loss.projection.bias.copy_(torch.tensor([0.0, 0.0, 1.0]))
    # W s + b = [1, 2, 4] against [0, 2, 2]: squared errors 1, 0, 4.
    value = loss(torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 2.0, 2.0]]))
    assert value.item() == pytest.approx(5 / 3)
    value.backward()
    assert loss.projection.weight.grad is not None  # trained with the student
    assert ProjectedMSE(384, 768).projection.weight.shape == (768, 384)


def test_mse_refuses_vectors_of_another_width():
    with pytest.raises(ValueError, match="against teacher vectors"):
        ProjectedMSE(2, 2)(torch.zeros(1, 2), torch.zeros(1, 3))


def test_the_cosine_matrix_loss_by_hand_and_across_widths():
    # Student: orthogonal rows (cosine matrix I). Teacher: rows 45 degrees apart (off-diagonal 1/sqrt 2).
    student = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    expected = 2 * (1 / math.sqrt(2)) ** 2 / 4
    assert cosine_matrix_loss(student, torch.tensor([[1.0, 0.0], [1.0, 1.0]])).item() == pytest.approx(expected)
    assert cosine_matrix_loss(student, torch.tensor([[2.0, 0.0, 0.0], [3.0, 3.0, 0.0]])).item() == pytest.approx(expected)
    # Blind to each vector's length and to a rotation of the space.
    rotated = student @ torch.tensor([[0.6, -0.8], [0.8, 0.6]])
    assert cosine_matrix_loss(5 * rotated, student).item() == pytest.approx(0.0, abs=1e-7)
