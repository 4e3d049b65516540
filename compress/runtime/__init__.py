"""The runtime: :class:`Predictor` over every artifact kind (:mod:`.predictor`), its tokenizer, model loading and
stored formats. ``from compress.runtime import Predictor`` reads the name from :mod:`.predictor` on first use, so
importing a submodule (``compress.runtime.modeling``) does not load the Predictor and its runtimes.
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:  # PEP 562: compress.runtime.Predictor without importing .predictor up front
    # import_module, not ``from compress.runtime import predictor``: that asks this module for the attribute first
    predictor = importlib.import_module("compress.runtime.predictor")

    try:
        return getattr(predictor, name)
    except AttributeError:
        raise AttributeError(f"module 'compress.runtime' has no attribute {name!r}") from None
