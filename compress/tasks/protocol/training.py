"""The ``training``-aspect protocol: the teacher and distillation stages, and pruning's scoring and recovery.

The stage modules (``compress/teacher.py``, ``compress/distill/``, ``compress/prune/``) hold what every task shares
(the config, the device and precision, the artifact folder); the task's ``training`` module does the rest.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol


class PROTOCOL(Protocol):
    """The members every task's ``training`` aspect provides."""

    def train_teacher(self, cfg: Any, out: str | os.PathLike) -> Path:
        """Fine-tune (or keep, when its head is trained) and evaluate a teacher of this task from ``cfg``
        (:class:`compress.config.TeacherConfig`); write it as an artifact at ``out`` and return that folder."""

    def distill(self, cfg: Any, out: str | os.PathLike) -> Path:
        """Distil ``cfg.teacher`` into ``cfg.student`` on this task's data (:class:`compress.config.DistillConfig`);
        write the student artifact at ``out`` and return that folder."""
