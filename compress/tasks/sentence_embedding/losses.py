"""The two losses a student encoder learns a teacher's vectors by, on unlabelled text.

- :class:`ProjectedMSE`: mean squared error between the student's vector and the teacher's. A 384-wide
  student cannot equal a 768-wide teacher's vector, so a learned linear map (student -> teacher width) sits in
  between when the widths differ; it is trained with the student and is not part of the deployed encoder (the
  student answers with its own vector). Same widths: no map, the student learns the teacher's vectors directly.
- :func:`cosine_matrix_loss`: mean squared error between the batch's cosine-similarity matrices, student's and
  teacher's. It asks the student to *rank* texts as the teacher does (what retrieval uses), is blind to the
  widths and to any rotation of the space, and needs no projection.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class ProjectedMSE(torch.nn.Module):
    """``mean((W s + b - t)^2)`` over the batch and the teacher's width; ``W`` only when the widths differ."""

    def __init__(self, student_dim: int, teacher_dim: int) -> None:
        super().__init__()
        self.student_dim, self.teacher_dim = int(student_dim), int(teacher_dim)
        self.projection = (torch.nn.Linear(self.student_dim, self.teacher_dim) if self.student_dim != self.teacher_dim
                           else None)

    def forward(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        mapped = self.projection(student) if self.projection is not None else student
        if mapped.shape != teacher.shape:
            raise ValueError(f"student vectors {tuple(mapped.shape)} against teacher vectors {tuple(teacher.shape)}")
        return F.mse_loss(mapped, teacher)


def cosine_matrix(vectors: torch.Tensor) -> torch.Tensor:
    """``(batch, batch)`` cosine similarities of the rows of ``vectors``."""
    unit = F.normalize(vectors, p=2, dim=1)
    return unit @ unit.T


def cosine_matrix_loss(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """``mean((cos_s - cos_t)^2)`` over every pair of the batch (the diagonal, 1 = 1, included)."""
    if len(student) != len(teacher):
        raise ValueError(f"{len(student)} student vectors against {len(teacher)} teacher vectors")
    return F.mse_loss(cosine_matrix(student), cosine_matrix(teacher))
