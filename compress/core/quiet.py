"""Context managers that silence library chatter this toolkit expects and reports in its own words.

Shared by the loaders (``compress.runtime.modeling``, ``compress.runtime.formats``) and the stages, so none of them
has to reach into another module's private helpers.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterator


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence the 'newly initialized weights' report, which is expected for a new head."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


@contextlib.contextmanager
def quiet_torch_ao() -> Iterator[None]:
    """torch.ao.quantization warns on every call that it is deprecated in favour of torchao, which is
    not installed on this stack; the eager dynamic path still works on torch 2.13 CPU."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.ao")
        warnings.filterwarnings("ignore", message=".*torch.ao.quantization is deprecated.*")
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
        warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*deprecated.*")
        yield
