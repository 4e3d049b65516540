"""What ``bert-compress serve`` takes, with its defaults declared once: the command's flags read them here (this
module imports no web framework, so building the command line needs none installed)."""

from __future__ import annotations

from dataclasses import dataclass

from compress.core.errors import CompressError
from compress.tasks.token_classification.decoding import DEFAULT_AGGREGATION

#: This machine only: serving beyond it is a choice made with ``--host``.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_WORKERS = 1


@dataclass(frozen=True)
class ServeSettings:
    """What ``bert-compress serve`` takes besides the model and the address."""

    #: Inputs in one model batch, and the most one request may send (413 past it).
    max_batch: int = 32
    #: How long the oldest waiting request is held for a batch to fill. 0: a batch runs as soon as the model is free,
    #: of the requests that arrived while the last one ran: under load batches fill that way, and a lone request
    #: waits for nothing.
    max_wait_ms: float = 0.0
    #: Inputs waiting at most; past it, 503 with Retry-After.
    queue_size: int = 512
    #: Seconds from a request's arrival to its answer, else 504.
    request_timeout_s: float = 30.0
    #: Bytes of request body at most; past it, 413.
    max_body_bytes: int = 1 << 20
    #: A tagger's default ``aggregation_strategy``.
    aggregation: str = DEFAULT_AGGREGATION

    def check(self) -> "ServeSettings":
        """Refuse settings that cannot work, in one line naming the flag."""
        for flag, value, least in (("--max-batch", self.max_batch, 1), ("--queue-size", self.queue_size, 1),
                                   ("--max-body-bytes", self.max_body_bytes, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise CompressError(f"{flag} must be a whole number of at least {least}, got {value!r}.")
        if self.queue_size < self.max_batch:
            raise CompressError(f"--queue-size {self.queue_size} is below --max-batch {self.max_batch}: a full "
                                "request could never be queued; give a queue at least one batch long.")
        if not self.max_wait_ms >= 0:
            raise CompressError(f"--max-wait-ms must be 0 or more, got {self.max_wait_ms!r}.")
        if not self.request_timeout_s > 0:
            raise CompressError(f"--request-timeout must be above 0 seconds, got {self.request_timeout_s!r}.")
        return self
