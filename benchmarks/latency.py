"""Latency: fixed-shape inputs, an interleaved timing loop, percentiles and paired speedups.

Why this shape:

- **Fixed shapes.** Every variant gets the same texts tokenized and padded/truncated to exactly
  ``seq_len`` tokens, so a timing difference comes from the model, not from one variant seeing
  shorter rows. Tokenization happens once, before the clock starts: only the forward is timed.
- **Interleaving.** These machines are shared and their speed drifts (other jobs, turbo, thermal).
  Timing A 300 times and then B 300 times lets that drift land on one variant only. Here every round
  runs each variant once (A B C, then B C A, then C A B, ...: the starting variant rotates so no
  variant always runs right after the same neighbour), and the speedup of each artifact is the
  median of the per-round ratios ``reference_i / artifact_i``: a slow round slows both sides of a
  ratio, so the drift cancels.
- **Percentiles by hand.** :func:`percentile` is a small pure function (numpy's default "linear"
  method) so the numbers in a report can be checked with pencil and paper and by a unit test.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from compress.core.errors import CompressError
from compress.runtime.predictor import normalize_texts, position_limit as limit

NS_PER_MS = 1_000_000


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``samples`` by linear interpolation between order statistics.

    Same definition as ``numpy.percentile(..., method="linear")``: sort, take the fractional rank
    ``h = (n - 1) * q / 100`` and interpolate between the values at ``floor(h)`` and ``ceil(h)``.
    """
    if not 0 <= q <= 100 or math.isnan(q):
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    values = sorted(float(v) for v in samples)
    if not values:
        raise ValueError("percentile of no samples")
    h = (len(values) - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (h - lo) * (values[hi] - values[lo])


def summarize(times_ns: Sequence[int], batch_size: int) -> dict[str, float]:
    """Latency statistics (milliseconds) and throughput (sequences per second) of one variant's runs."""
    if not times_ns:
        raise ValueError("no timings to summarize")
    ms = [t / NS_PER_MS for t in times_ns]
    mean = sum(ms) / len(ms)
    return {
        "runs": len(ms),
        "p50_ms": percentile(ms, 50),
        "p90_ms": percentile(ms, 90),
        "p99_ms": percentile(ms, 99),
        "mean_ms": mean,
        "min_ms": min(ms),
        "max_ms": max(ms),
        # Total sequences over total time: a mean-based rate, which is what a saturated server sees.
        "throughput_seq_per_s": batch_size * 1000.0 / mean if mean > 0 else float("inf"),
    }


def paired_speedup(reference_ns: Sequence[int], artifact_ns: Sequence[int]) -> dict[str, float]:
    """Speedup of an artifact over the reference from timings taken in the same rounds.

    Ratio ``reference[i] / artifact[i]`` per round (above 1: the artifact is faster), then the
    median of the ratios with its p10..p90 spread. Pairing by round cancels the machine's drift
    that a ratio of two separately taken medians would keep.
    """
    if len(reference_ns) != len(artifact_ns):
        raise ValueError(f"paired speedup needs as many reference as artifact timings "
                         f"({len(reference_ns)} != {len(artifact_ns)})")
    if not reference_ns:
        raise ValueError("paired speedup of no timings")
    ratios = [r / max(a, 1) for r, a in zip(reference_ns, artifact_ns)]  # perf_counter_ns never gives 0 for a real call
    return {"median": percentile(ratios, 50), "p10": percentile(ratios, 10), "p90": percentile(ratios, 90),
            "n": len(ratios)}


def run_interleaved(runners: Mapping[str, Callable[[], Any]], warmup: int, runs: int,
                    tick: Callable[[int], None] | None = None) -> dict[str, list[int]]:
    """Time each runner ``runs`` times, interleaved round by round, after ``warmup`` untimed calls each.

    Warm-up runs per variant, back to back (it fills caches and lets lazy initialisation, such as
    ONNX Runtime's first-run allocations, happen off the clock). Then round ``r`` calls every
    runner once, starting at the ``r mod k``-th, each timed with ``time.perf_counter_ns``.
    Returns the timings in nanoseconds per name; every list has exactly ``runs`` entries, and
    entry ``i`` of each list comes from the same round. ``tick(n)`` reports progress.
    """
    if runs < 1:
        raise CompressError(f"--runs must be at least 1, got {runs}.")
    if warmup < 0:
        raise CompressError(f"--warmup must be 0 or more, got {warmup}.")
    names = list(runners)
    for name in names:
        fn = runners[name]
        for _ in range(warmup):
            fn()
        if tick and warmup:
            tick(warmup)
    timings: dict[str, list[int]] = {name: [] for name in names}
    k = len(names)
    clock = time.perf_counter_ns
    for r in range(runs):
        for j in range(k):
            name = names[(r + j) % k]
            fn = runners[name]
            start = clock()
            fn()
            timings[name].append(clock() - start)
        if tick:
            tick(k)
    return timings


def position_limit(config: Any) -> int | None:
    """The longest sequence the model's position table allows (RoBERTa-style models and MPNet lose two):
    :func:`compress.runtime.predictor.position_limit`, the one place that knows which families those are."""

    return limit(config)


def fixed_shape_inputs(predictor, texts: Sequence[Any], batch_size: int, seq_len: int) -> dict[str, np.ndarray]:
    """One batch of real texts, tokenized by the artifact's own tokenizer to exactly ``seq_len`` tokens.

    Texts are taken in order (repeated when there are fewer than ``batch_size``); longer ones are
    truncated and shorter ones padded, so the tensor shape, hence the work, is the same for every
    variant whatever its tokenizer.
    """

    if batch_size < 1 or seq_len < 2:
        raise CompressError(f"batch size and sequence length must be at least 1 and 2, got {batch_size} and {seq_len}.")
    limit = position_limit(predictor.config)
    if limit is not None and seq_len > limit:
        raise CompressError(f"--seq-lens {seq_len}: {predictor.path} has {limit} position embeddings, so it cannot run "
                            f"sequences longer than {limit}. Give --seq-lens values up to {limit}.")
    if not texts:
        raise CompressError("no texts to build benchmark inputs from; the data split is empty.")
    chosen = [texts[i % len(texts)] for i in range(batch_size)]
    firsts, seconds = normalize_texts(chosen)
    args = (firsts, seconds) if seconds is not None else (firsts,)
    enc = predictor.tokenizer(*args, truncation=True, max_length=seq_len, padding="max_length")
    arrays = {"input_ids": np.asarray(enc["input_ids"], dtype=np.int64),
              "attention_mask": np.asarray(enc["attention_mask"], dtype=np.int64)}
    if predictor.need_token_types:
        types = enc.get("token_type_ids")
        arrays["token_type_ids"] = (np.asarray(types, dtype=np.int64) if types is not None
                                    else np.zeros_like(arrays["input_ids"]))
    if arrays["input_ids"].shape != (batch_size, seq_len):
        raise CompressError(f"{predictor.path}: its tokenizer produced shape {arrays['input_ids'].shape} instead of "
                            f"({batch_size}, {seq_len}); it does not pad to a fixed length. Re-save the tokenizer with "
                            "a pad token.")
    return arrays


def forward_runner(predictor, arrays: dict[str, np.ndarray]) -> Callable[[], Any]:
    """A zero-argument call running one forward of ``predictor`` on pre-tokenized ``arrays``.

    Uses the runtime's per-batch entry point (the same code ``Predictor.logits`` runs per batch),
    so the timed work is exactly what serving does after tokenization.
    """
    run = predictor.forward  # the one per-batch entry point every Predictor kind implements

    def call() -> Any:
        return run(arrays)

    return call


def cycling_runner(predictor, inputs: Sequence[dict[str, np.ndarray]]) -> Callable[[], Any]:
    """A zero-argument call running one forward on the next of ``inputs``, wrapping round at the end.

    Under :func:`run_interleaved` every runner is called once per round (and ``warmup`` times
    before), so round ``r`` of every artifact runs input ``(warmup + r) mod n`` of its own list:
    given lists in the same order (:func:`benchmarks.traffic.real_length_inputs`), the per-round
    ratios stay paired on the same text while the shapes vary from round to round.
    """
    if not inputs:
        raise CompressError("no inputs to time.")
    run = predictor.forward
    position = [0]

    def call() -> Any:
        arrays = inputs[position[0] % len(inputs)]
        position[0] += 1
        return run(arrays)

    return call
