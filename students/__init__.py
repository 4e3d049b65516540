"""Student factory: named shapes and ways to build and initialise a student from a teacher.

``StudentSpec`` and ``build_student`` are loaded on first use (PEP 562): the stage configs
(:mod:`compress.config`) read the presets of this package, and the factory reads those configs, so
importing ``students.presets`` must not pull in the factory.
"""

from typing import Any

from students.presets import PRESETS, StudentShape, parse_shape

__all__ = ["PRESETS", "StudentShape", "StudentSpec", "build_student", "parse_shape"]


def __getattr__(name: str) -> Any:
    if name in ("StudentSpec", "build_student"):
        from students import factory

        return getattr(factory, name)
    raise AttributeError(f"module 'students' has no attribute {name!r}")
