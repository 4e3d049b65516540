"""bert-compress: distil, prune, quantize and export BERT-family classifiers, and prove it.

Every stage is a plain function taking an input artifact folder and a config and writing a new
artifact folder; the ``bert-compress`` command is a thin layer over those functions.
"""

from __future__ import annotations

__version__ = "0.1.0"

from compress.core.errors import CompressError

__all__ = ["CompressError", "__version__"]
