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
import time
from typing import Any, Callable, Iterator


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


#: A loop shorter than this prints nothing to a log; a longer one prints a line at least this often.
LOG_AFTER_S = 30.0


def progress(iterable: Any, desc: str, total: int | None = None, unit: str = "batch", enabled: bool = True,
             clock: Callable[[], float] = time.monotonic, say: Callable[[str], None] | None = None) -> Iterator[Any]:
    """``iterable`` with its progress shown: a tqdm bar on a terminal; in a log file (where bars are off) a line
    every :data:`LOG_AFTER_S` seconds once the loop has run that long, with the share done and the time left, so
    a minutes-long step (labelling 10,000 transfer rows) is never silent."""
    total = len(iterable) if total is None and hasattr(iterable, "__len__") else total
    if not enabled:
        yield from iterable
        return
    if bars_enabled():
        from tqdm.auto import tqdm

        yield from tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, leave=False)
        return
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    start = last = clock()
    done = 0
    for item in iterable:
        yield item
        done += 1
        now = clock()
        if now - last >= LOG_AFTER_S:
            last = now
            elapsed = now - start
            if total:
                left = elapsed / done * (total - done)
                say(f"{desc}: {done / total:.0%} ({done} of {total} {unit}), {elapsed:.0f} s, about {left:.0f} s left")
            else:
                say(f"{desc}: {done} {unit} done, {elapsed:.0f} s")
