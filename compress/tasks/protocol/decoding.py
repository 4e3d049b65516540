"""The ``decoding``-aspect protocol: what a stage asks of a task's ``decoding`` module (see :mod:`compress.tasks.protocol`)."""

from __future__ import annotations

from typing import Any, Protocol


class PROTOCOL(Protocol):
    """The members every task's ``decoding`` aspect provides (filled in as the stages' task branches move here)."""
