"""Real traffic: the texts of a split replayed with their real lengths, one request at a time and batched.

The fixed-shape benchmark (:mod:`benchmarks.latency`) pads or truncates every input to exactly
``seq_len`` tokens, which isolates the model but is not what a server sees: real requests are
mostly short (movie-review sentences average ~25 tokens) and vary in length, and dynamic shapes
are where some runtimes lose (shape-specialised kernels, re-planning per shape) or win (no padding
to compute). Here:

- **Batch 1, per request**: every text of the split, in the split's order, tokenized to its own
  length (no padding at all), is one request; a text longer than the artifact's window is read
  as ``Predictor`` reads it, its overlapping windows in one batch (:mod:`compress.core.windows`). Each request is run once by every artifact, the
  order of the artifacts rotating per request (the interleaving of :func:`run_interleaved`), so
  the machine's drift lands on all of them alike; per-request speedups are paired like the
  fixed-shape ones. p50/p90/p99 are over requests. Tokenization is timed separately per request
  and reported beside (a server pays both).
- **Batched throughput**: the whole split through the Predictor's own batching
  (:meth:`compress.runtime.predictor.Predictor.window_batches`: windows sorted by length, each batch padded to
  its own longest row), every batch interleaved across the artifacts; throughput is texts over the
  summed forward time, and the padding overhead (padded tokens / real tokens) is reported. Artifacts
  whose windows differ (another ``max_length``) run different batches, so only their total speedup
  is reported, not a paired one.

``bench --traffic-file FILE`` measures *agreement* rather than speed on the user's own unlabelled
texts (:func:`measure_traffic_agreement`; the statistics are in :mod:`benchmarks.agreement`):
every artifact's predictions against the reference's, with an interval and the most confident
disagreements, for the gate's ``min_traffic_agreement``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from benchmarks.agreement import traffic_agreement
from benchmarks.latency import NS_PER_MS, paired_speedup, percentile
from compress.core.errors import CompressError
from compress.core.progress import bars_enabled
from benchmarks.accuracy import split_texts
from benchmarks.load import run_load
from compress.tasks.tables import SUPPORTED_SUFFIXES, read_table, require_column
from compress.core.numerics import softmax

DEFAULT_WARMUP = 10


def traffic_requests(predictor, texts: Sequence[Any]) -> list[dict[str, np.ndarray]]:
    """One request per text, in the order of ``texts``, tokenized to its real length (no padding): one row,
    or the rows of a long text's windows (padded to the longest of them), as ``Predictor`` runs it."""
    return [_request(predictor, text) for text in texts]


def real_length_inputs(predictor, texts: Sequence[Any], batch_size: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Every input ``Predictor`` would run for ``texts`` at ``batch_size``, in a seeded random order.

    Batch 1: one request per text (:func:`traffic_requests`); larger: the Predictor's length-sorted
    batches, each padded to its own longest row. The order is shuffled so that a timing that runs
    only the first few of them (``optimize --lengths real --runs 20``) samples short and long ones
    alike, not the split's first texts or its shortest batches; the same seed gives every artifact
    with the same tokenizer and window the same inputs in the same order, which keeps rounds paired.
    """
    if not texts:
        raise CompressError("no texts to time at their real lengths; the data split is empty.")
    if batch_size == 1:
        inputs = traffic_requests(predictor, texts)
    else:
        inputs = [arrays for _, arrays in predictor.window_batches(predictor.windows(list(texts)), batch_size)]
    order = np.random.default_rng(seed).permutation(len(inputs))
    return [inputs[i] for i in order]


def _request(predictor, text: Any) -> dict[str, np.ndarray]:
    windows = predictor.windows([text])
    return predictor.window_batches(windows, len(windows))[0][1]


def _percentiles(ms: Sequence[float]) -> dict[str, float]:
    return {"p50_ms": percentile(ms, 50), "p90_ms": percentile(ms, 90), "p99_ms": percentile(ms, 99),
            "mean_ms": float(np.mean(ms)), "max_ms": max(ms)}


def _tokenize_ms(predictor, texts: Sequence[Any]) -> list[float]:
    out = []
    clock = time.perf_counter_ns
    for text in texts:
        start = clock()
        _request(predictor, text)
        out.append((clock() - start) / NS_PER_MS)
    return out


def replay_batch1(predictors: Mapping[str, Any], reference: str, texts: Sequence[Any], warmup: int = DEFAULT_WARMUP,
                  progress: bool = True) -> dict[str, dict[str, Any]]:
    """Per-request latency of every predictor on every text, interleaved request by request."""
    from tqdm.auto import tqdm

    if not texts:
        raise CompressError("--traffic: the split has no texts to replay.")
    names = list(predictors)
    requests = {name: traffic_requests(predictors[name], texts) for name in names}
    for name in names:  # untimed: lazy initialisation and first-shape planning happen off the clock
        for i in range(min(warmup, len(texts))):
            predictors[name].forward(requests[name][i])
    timings: dict[str, list[int]] = {name: [] for name in names}
    k = len(names)
    clock = time.perf_counter_ns
    for i in tqdm(range(len(texts)), desc="traffic batch 1", unit="req", disable=not progress or not bars_enabled(), file=sys.stderr,
                  leave=False):
        for j in range(k):
            name = names[(i + j) % k]
            run, arrays = predictors[name].forward, requests[name][i]
            start = clock()
            run(arrays)
            timings[name].append(clock() - start)
    out = {}
    for name in names:
        lengths = [int(r["attention_mask"].sum()) for r in requests[name]]  # a long text: all its windows' tokens
        forward_ms = [t / NS_PER_MS for t in timings[name]]
        tokenize_ms = _tokenize_ms(predictors[name], texts)
        out[name] = {
            "requests": len(texts),
            "warmup": min(warmup, len(texts)),
            "tokens": {"mean": float(np.mean(lengths)), "p50": percentile(lengths, 50), "p99": percentile(lengths, 99),
                       "max": max(lengths)},
            **_percentiles(forward_ms),
            "throughput_req_per_s": 1000.0 * len(forward_ms) / sum(forward_ms),
            "with_tokenization": _percentiles([a + b for a, b in zip(forward_ms, tokenize_ms)]),
            "tokenize_p50_ms": percentile(tokenize_ms, 50),
            "speedup": paired_speedup(timings[reference], timings[name]),
        }
    return out


def replay_batched(predictors: Mapping[str, Any], reference: str, texts: Sequence[Any], batch_sizes: Sequence[int],
                   warmup: int = 2, progress: bool = True) -> dict[str, list[dict[str, Any]]]:
    """Throughput over the whole split with the Predictor's length-sorted batching, per batch size."""
    from tqdm.auto import tqdm

    out: dict[str, list[dict[str, Any]]] = {name: [] for name in predictors}
    names = list(predictors)
    k = len(names)
    clock = time.perf_counter_ns
    for b in batch_sizes:
        batches = {}
        for name in names:
            p = predictors[name]
            batches[name] = p.window_batches(p.windows(list(texts)), b)
        count = max(len(v) for v in batches.values())
        for name in names:
            for _, arrays in batches[name][:warmup]:
                predictors[name].forward(arrays)
        timings: dict[str, list[int]] = {name: [] for name in names}
        for i in tqdm(range(count), desc=f"traffic batch {b}", unit="batch", disable=not progress or not bars_enabled(), file=sys.stderr,
                      leave=False):
            for j in range(k):
                name = names[(i + j) % k]
                if i >= len(batches[name]):
                    continue
                run, arrays = predictors[name].forward, batches[name][i][1]
                start = clock()
                run(arrays)
                timings[name].append(clock() - start)
        for name in names:
            real = sum(int(a["attention_mask"].sum()) for _, a in batches[name])
            padded = sum(int(a["attention_mask"].size) for _, a in batches[name])
            total_s = sum(timings[name]) / 1e9
            ref_s = sum(timings[reference]) / 1e9
            out[name].append({
                "batch_size": b, "batches": len(batches[name]), "texts": len(texts),
                "throughput_seq_per_s": len(texts) / total_s if total_s > 0 else float("inf"),
                "total_s": total_s,
                "padding_overhead": padded / real if real else None,
                **_percentiles([t / NS_PER_MS for t in timings[name]]),
                "speedup_total": ref_s / total_s if total_s > 0 else None,
                "speedup": (paired_speedup(timings[reference], timings[name])
                            if len(timings[name]) == len(timings[reference]) else None),
            })
    return out


def replay(predictors: Mapping[str, Any], reference: str, texts: Sequence[Any], batch_sizes: Sequence[int],
           warmup: int = DEFAULT_WARMUP, progress: bool = True) -> dict[str, dict[str, Any]]:
    """``{name: {"batch1": ..., "batched": [...]}}``: both replays for every predictor."""
    one = replay_batch1(predictors, reference, texts, warmup, progress)
    many = replay_batched(predictors, reference, texts, [b for b in batch_sizes if b > 1], progress=progress)
    return {name: {"batch1": one[name], "batched": many[name]} for name in predictors}


def measure_traffic_and_load(predictors: Mapping[str, Any], reference: str, task, traffic_split: str | None,
                             traffic_limit: int | None, batch_sizes: Sequence[int], load_clients: Sequence[int] | None,
                             load_requests: int, default_split: str, progress: bool = True
                             ) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """What ``bench --traffic`` and ``--load-clients`` add: ``({name: {"traffic", "load"}}, settings)``."""

    per: dict[str, dict[str, Any]] = {name: {} for name in predictors}
    settings: dict[str, Any] = {}
    if traffic_split:
        texts = split_texts(task, traffic_split)
        if traffic_limit is not None:
            if traffic_limit < 1:
                raise CompressError(f"--traffic-limit must be at least 1, got {traffic_limit}.")
            texts = texts[:traffic_limit]
        replayed = replay(predictors, reference, texts, batch_sizes, progress=progress)
        for name in predictors:
            per[name]["traffic"] = replayed[name]
        settings["traffic"] = {"split": traffic_split, "requests": len(texts), "warmup": DEFAULT_WARMUP,
                               "batch_sizes": [b for b in batch_sizes if b > 1],
                               "order": "split order; artifacts interleaved per request, starting one rotating"}
    if load_clients:
        split = traffic_split or default_split
        texts = split_texts(task, split)
        for name, predictor in predictors.items():
            if progress:
                print(f"load: {name} with {', '.join(map(str, load_clients))} client thread(s)", file=sys.stderr)
            per[name]["load"] = run_load(predictor, texts, load_clients, load_requests)
        settings["load"] = {"split": split, "clients": list(load_clients), "requests": load_requests,
                            "request": "one text per call through Predictor.logits (tokenization included)"}
    return per, settings


def read_traffic_file(path: str | Path, text_column: str = "text", text_pair_column: str | None = None
                      ) -> tuple[list[Any], dict[str, Any]]:
    """The texts of a ``--traffic-file`` (one a line in ``.txt``; a column of a csv/tsv/jsonl/json/parquet table)
    and what was read: ``(texts, {"path", "format", "rows", "empty", "sha256"})``.

    Empty rows are skipped and counted: unlabelled traffic has blank lines, and nothing is lost
    with them. For a sentence-pair task every row needs both texts (the task's ``--text-pair-column``).
    """
    import hashlib

    import pandas as pd

    path = Path(path).expanduser()
    fix = ("Give a .txt file (one text a line) or a csv/tsv/jsonl/json/parquet file with a text column "
           "(named like the task's --text-column).")
    if not path.is_file():
        raise CompressError(f"--traffic-file {path}: {'a folder' if path.is_dir() else 'no such file'}. {fix}")
    suffix = path.suffix.lower()
    if suffix not in (".txt", *SUPPORTED_SUFFIXES):
        raise CompressError(f"--traffic-file {path}: unsupported file type {suffix!r}. {fix}")
    raw = path.read_bytes()
    info: dict[str, Any] = {"path": str(path), "format": suffix.lstrip("."), "sha256": hashlib.sha256(raw).hexdigest()}
    if suffix == ".txt":
        if text_pair_column:
            raise CompressError(f"--traffic-file {path}: a .txt file holds one text a line, but the task takes sentence "
                                "pairs. Give a csv/tsv/jsonl/parquet file with the task's --text-column and "
                                "--text-pair-column.")
        try:
            lines = raw.decode("utf-8-sig").splitlines()
        except UnicodeDecodeError as exc:
            raise CompressError(f"--traffic-file {path}: not UTF-8 text ({exc.reason} at byte {exc.start}). Convert it "
                                "to UTF-8.") from exc
        texts: list[Any] = [line.strip() for line in lines if line.strip()]
        info.update(rows=len(lines), empty=len(lines) - len(texts))
    else:
        frame = read_table(path)
        firsts = require_column(frame, text_column, "--text-column", str(path)).tolist()
        seconds = (require_column(frame, text_pair_column, "--text-pair-column", str(path)).tolist()
                   if text_pair_column else None)

        def present(value: Any) -> bool:
            return not pd.isna(value) and bool(str(value).strip())

        keep = [i for i, v in enumerate(firsts) if present(v) and (seconds is None or present(seconds[i]))]
        texts = ([(str(firsts[i]).strip(), str(seconds[i]).strip()) for i in keep] if seconds is not None
                 else [str(firsts[i]).strip() for i in keep])
        info.update(rows=len(firsts), empty=len(firsts) - len(texts))
    if not texts:
        raise CompressError(f"--traffic-file {path}: no text in any of its {info['rows']} rows. {fix}")
    info["texts"] = len(texts)
    return texts, info


def measure_traffic_agreement(predictors: Mapping[str, Any], reference: str, texts: Sequence[Any],
                              batch_size: int = 32, progress: bool = True) -> dict[str, dict[str, Any]]:
    """``{name: traffic_agreement record}`` for every predictor against ``reference`` on unlabelled ``texts``
    (the reference agrees with itself; its record lists no disagreements)."""
    from tqdm.auto import tqdm

    probs = {}
    names = [reference] + [n for n in predictors if n != reference]
    for name in tqdm(names, desc="traffic agreement", unit="artifact", disable=not progress or not bars_enabled(),
                     file=sys.stderr, leave=False):
        probs[name] = softmax(np.asarray(predictors[name].logits(list(texts), batch_size=batch_size), dtype=np.float64))
    labels = predictors[reference].label_names
    return {name: traffic_agreement(probs[name], probs[reference], texts, labels) for name in predictors}
