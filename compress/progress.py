"""Progress bars for terminals, plain log lines for files.

A tqdm bar redraws itself with carriage returns; written to a log file, every redraw becomes
another segment of one endless line (one ``make demo`` log held ~1,900 of them). So bars are shown
only when standard error is a terminal; otherwise they are switched off everywhere (ours,
transformers', datasets') and the training loop prints its periodic log line instead.
``BERT_COMPRESS_PROGRESS=1`` (or ``0``) forces them on (or off).
"""

from __future__ import annotations

import os
import sys


def bars_enabled() -> bool:
    """Whether to draw progress bars: forced by ``BERT_COMPRESS_PROGRESS``, else only on a terminal."""
    forced = os.environ.get("BERT_COMPRESS_PROGRESS")
    if forced is not None:
        return forced.strip().lower() not in ("0", "false", "no", "off", "")
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def configure() -> None:
    """Switch every library's bars off when :func:`bars_enabled` says so (call once, early)."""
    if bars_enabled():
        return
    os.environ["TQDM_DISABLE"] = "1"  # tqdm's own default for bars created without an explicit disable=
    os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    for module in ("datasets", "transformers"):
        if module in sys.modules:
            try:
                sys.modules[module].utils.logging.disable_progress_bar()
            except AttributeError:
                pass
