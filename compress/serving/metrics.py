"""The server's Prometheus metrics, in a registry of its own (not the process-global one, so that two servers
in one process, as in tests, do not collide).

With ``--workers N`` each worker process counts its own requests; a scrape reaches one worker, so scrape each
worker's port, or run one worker per container (the usual layout) and let the orchestrator add them up.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: Seconds; from a fast batch-1 answer to a request that waited out a long queue.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    """Requests by status, errors by reason, latency and batch-size histograms, queue depth."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("bert_compress_requests", "Prediction requests answered, by HTTP status",
                                ["status"], registry=self.registry)
        self.errors = Counter("bert_compress_errors", "Requests not answered 200, by reason", ["reason"],
                              registry=self.registry)
        self.latency = Histogram("bert_compress_request_latency_seconds",
                                 "Time from a prediction request's body read to its answer", buckets=LATENCY_BUCKETS,
                                 registry=self.registry)
        self.batch_size = Histogram("bert_compress_batch_size", "Inputs in each model batch the server ran",
                                    buckets=BATCH_BUCKETS, registry=self.registry)
        self.queue_depth = Gauge("bert_compress_queue_depth", "Inputs waiting for a model batch",
                                 registry=self.registry)
        self.inputs = Counter("bert_compress_inputs", "Inputs predicted", registry=self.registry)

    def answered(self, status: int, seconds: float | None = None, reason: str | None = None) -> None:
        """Count one prediction request's answer."""
        self.requests.labels(status=str(status)).inc()
        if reason:
            self.errors.labels(reason=reason).inc()
        if seconds is not None:
            self.latency.observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
