"""The ``training``-aspect protocol: what a stage asks of a task's ``training`` module (see :mod:`compress.tasks.protocol`)."""

from __future__ import annotations

from typing import Any, Protocol


class PROTOCOL(Protocol):
    """The members every task's ``training`` aspect provides (filled in as the stages' task branches move here)."""
