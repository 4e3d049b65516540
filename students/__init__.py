"""Student factory: named shapes and ways to build and initialise a student from a teacher."""

from students.factory import StudentSpec, build_student
from students.presets import PRESETS, StudentShape, parse_shape

__all__ = ["PRESETS", "StudentShape", "StudentSpec", "build_student", "parse_shape"]
