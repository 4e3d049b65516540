"""A time budget as people write it: ``30m``, ``1h``, ``90s``, ``1h30m``, ``45`` (minutes)."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(h|m|s)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0}
HINT = "write it as 30m, 1h, 90s or 1h30m"


def parse_budget(value: object) -> float:
    """Seconds in a budget value; ``ValueError`` with a one-line reason (the caller names where it came from).

    A bare number is minutes, as in ``budget: 45``: nobody budgets a compression run in seconds by default.
    """
    if isinstance(value, bool) or value is None:
        raise ValueError(f"budget must be a duration, got {value!r}; {HINT}")
    if isinstance(value, (int, float)):
        seconds = float(value) * 60.0
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            seconds = float(text) * 60.0
        elif text and re.fullmatch(rf"(?:{_PART.pattern})+", text):
            seconds = sum(float(n) * _UNIT[u] for n, u in _PART.findall(text))
        else:
            raise ValueError(f"budget {value!r} is not a duration; {HINT}")
    else:
        raise ValueError(f"budget must be a duration, got {value!r}; {HINT}")
    if seconds <= 0:
        raise ValueError(f"budget must be more than 0, got {value!r}; {HINT}")
    return seconds


def format_minutes(seconds: float) -> str:
    """``1,534 s`` as ``25.6 min``: plans speak in minutes, the unit budgets are given in."""
    return f"{seconds / 60:.1f} min"
