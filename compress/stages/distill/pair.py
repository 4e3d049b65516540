"""The teacher and the student of one distillation, as a task's distiller holds them once both are loaded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelPair:
    """The teacher (its path as given, and its weights' sha256: the key of its cached soft labels) and the student,
    both loaded with the head of the task they are distilled for; ``student_info`` is what ``compress.json`` records
    of how the student was built."""

    t_model: Any
    t_tok: Any
    weights: str
    teacher: str
    s_model: Any
    s_tok: Any
    student_info: dict[str, Any]
