"""Load mode: N client threads calling one ``Predictor`` at once, as a web server's workers would.

A runtime that is fast alone can crash, return another request's answer, or collapse under
concurrent calls (a tokenizer shared between threads, an inference session used by two threads
at once, thread pools oversubscribing the cores). Here ``requests`` single-text requests are
handed out to ``clients`` threads through a shared counter; each thread calls
``predictor.logits([text])`` (tokenization included: that is the call a server worker makes) and
records its latency and answer. Every answer is then compared with the single-threaded answer for
the same text: the predicted label must be equal, and the largest logit difference is reported
(kernels may split work differently when cores are shared, so the last bits can move).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Sequence

import numpy as np

from benchmarks.latency import NS_PER_MS, percentile
from compress.core.errors import CompressError

#: Logit difference above which an answer counts as different even when its label is the same.
DEFAULT_ATOL = 1e-3


def run_load(predictor, texts: Sequence[Any], clients: Sequence[int], requests: int,
             atol: float = DEFAULT_ATOL) -> list[dict[str, Any]]:
    """One entry per client count: latency percentiles, throughput and the answer check."""
    if not texts:
        raise CompressError("load mode: no texts to send.")
    if requests < 1:
        raise CompressError(f"--load-requests must be at least 1, got {requests}.")
    if not clients or any(not isinstance(n, int) or n < 1 for n in clients):
        raise CompressError(f"--load-clients must be positive whole numbers such as 1,2,4; got {list(clients)}.")
    work = [texts[k % len(texts)] for k in range(requests)]
    # The single-threaded answers, one request at a time: what every concurrent answer must equal.
    expected = np.stack([predictor.logits([texts[i]], batch_size=1)[0] for i in range(min(requests, len(texts)))])
    return [_one_level(predictor, work, expected, len(texts), n, atol) for n in clients]


def _one_level(predictor, work: list[Any], expected: np.ndarray, n_texts: int, clients: int,
               atol: float) -> dict[str, Any]:
    results: list[np.ndarray | None] = [None] * len(work)
    latencies_ns = [0] * len(work)
    errors: list[str] = []
    counter = iter(range(len(work)))
    lock = threading.Lock()
    start_line = threading.Barrier(clients + 1)
    clock = time.perf_counter_ns

    def client() -> None:
        start_line.wait()
        while True:
            with lock:
                k = next(counter, None)
            if k is None:
                return
            t0 = clock()
            try:
                results[k] = predictor.logits([work[k]], batch_size=1)[0]
            except Exception as exc:  # a crash is a finding: count it, keep the other clients going
                with lock:
                    errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            latencies_ns[k] = clock() - t0

    threads = [threading.Thread(target=client, name=f"load-client-{i}", daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    start_line.wait()
    began = clock()
    for t in threads:
        t.join()
    wall_ns = clock() - began

    answered = [k for k, r in enumerate(results) if r is not None]
    diffs = [float(np.max(np.abs(results[k] - expected[k % n_texts]))) for k in answered]
    label_mismatch = sum(int(results[k].argmax() != expected[k % n_texts].argmax()) for k in answered)
    ms = [latencies_ns[k] / NS_PER_MS for k in answered] or [float("nan")]
    return {
        "clients": clients,
        "requests": len(work),
        "answered": len(answered),
        "errors": len(errors),
        "error_examples": sorted(set(errors))[:3],
        "label_mismatches": label_mismatch,
        "logit_mismatches": sum(d > atol for d in diffs),
        "bitwise_equal": sum(d == 0.0 for d in diffs),
        "max_abs_logit_diff": max(diffs) if diffs else None,
        "atol": atol,
        "p50_ms": percentile(ms, 50),
        "p90_ms": percentile(ms, 90),
        "p99_ms": percentile(ms, 99),
        "mean_ms": float(np.mean(ms)),
        "wall_s": wall_ns / 1e9,
        "throughput_req_per_s": len(answered) / (wall_ns / 1e9) if wall_ns else None,
        "ok": not errors and label_mismatch == 0 and not any(d > atol for d in diffs) and len(answered) == len(work),
    }
