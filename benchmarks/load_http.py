"""Load test of ``bert-compress serve`` over loopback, beside the in-process ``Predictor``, in one run.

    python -m benchmarks.load_http --model DIR [--clients 32] [--duration 30] [--out load.json]
    python -m benchmarks.load_http --model DIR --soak 600        # memory under steady load

The arms, measured one after another on the same texts (short movie-review sentences by default):

- **in-process, batch 1**: ``Predictor.predict([text])``, one text at a time: the latency floor (tokenization
  included, as a server pays it).
- **in-process, batch 32**: ``Predictor.predict(32 texts)``: the throughput ceiling of the model.
- **served, batched**: the real server (``--max-batch``, ``--max-wait-ms``) driven by ``--clients`` concurrent
  clients over HTTP, each sending one text and waiting for its answer before the next (a closed loop).
- **served, one at a time**: the same server and clients with ``--max-batch 1``: what a server without batching
  gives.
- **served, half load**: the batched server under an open loop at half the throughput the batched arm measured
  (Poisson arrivals; latency counted from each request's scheduled time, so a slow answer cannot hide the
  requests that queued behind it).

Each served arm reports throughput, p50/p95/p99 latency, the errors and the model batch sizes the server formed
(from its ``/metrics``). The clients share the machine with the server: on few cores their CPU counts against
the server's, as it would for a sidecar, not for a client on another machine.

``--soak SECONDS`` instead runs the batched server under the closed loop for that long, sampling the server's
resident memory every ``--soak-interval`` seconds, and reports its growth from the first sample (taken after the
first interval, once the allocator has seen every batch shape) and the errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import h11

from benchmarks.http_client import Connection
from benchmarks.http_server import ServerProcess
from benchmarks.latency import percentile
from benchmarks.machine import machine_info
from compress.errors import CompressError

#: Seconds of load before each served arm's measured window: connections opened, every batch shape seen.
DEFAULT_WARMUP_S = 2.0


def load_texts(path: str | None, limit: int = 2000) -> list[str]:
    """``path`` (one text a line), else the built-in movie-review sentences (short: ~20 words)."""
    if path:
        texts = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        from compress.assets import movie_review_snippets_path

        rows = movie_review_snippets_path().read_text(encoding="utf-8", errors="replace").splitlines()
        texts = [r.split("\t", 2)[2].strip() for r in rows if r.count("\t") >= 2 and r.split("\t", 2)[2].strip()]
    if not texts:
        raise CompressError(f"--texts {path}: no texts in it (one text a line).")
    random.Random(0).shuffle(texts)
    return texts[:limit]


def _stats(latencies_s: list[float], ok: int, errors: dict[str, int], elapsed: float) -> dict[str, Any]:
    ms = [x * 1000 for x in latencies_s]
    return {"requests": ok, "errors": errors, "seconds": round(elapsed, 2),
            "throughput": ok / elapsed if elapsed > 0 else 0.0,
            **{f"p{q}_ms": (percentile(ms, q) if ms else None) for q in (50, 95, 99)}}


def in_process(predictor: Any, texts: Sequence[str], batch_size: int, duration: float) -> dict[str, Any]:
    """Texts per second and per-call latency of ``predictor.predict`` on ``batch_size`` texts a call."""
    predictor.predict(list(texts[:batch_size]), batch_size=batch_size)  # warm-up
    latencies, done, k = [], 0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < duration:
        chunk = [texts[(k + i) % len(texts)] for i in range(batch_size)]
        k += batch_size
        t0 = time.perf_counter()
        predictor.predict(chunk, batch_size=batch_size)
        latencies.append(time.perf_counter() - t0)
        done += batch_size
    return _stats(latencies, done, {}, time.perf_counter() - start)


def _body(text: str) -> bytes:
    return json.dumps({"inputs": text}).encode()


async def _send(connection: Connection, text: str) -> str:
    """One request; its status, or the name of the error that kept it from an answer."""
    try:
        status, _, _ = await connection.post("/predict", _body(text))
    except (OSError, h11.ProtocolError) as exc:
        await connection.close()  # a fresh one for the next request
        return type(exc).__name__
    return str(status)


async def _closed_loop(url: str, texts: Sequence[str], clients: int, duration: float,
                       on_tick: Any = None) -> dict[str, Any]:
    latencies: list[float] = []
    errors: dict[str, int] = {}
    counter = iter(range(1 << 62))
    deadline = time.perf_counter() + duration

    async def one_client() -> None:
        connection = Connection.to(url)
        try:
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                status = await _send(connection, texts[next(counter) % len(texts)])
                if status == "200":
                    latencies.append(time.perf_counter() - t0)
                else:
                    errors[status] = errors.get(status, 0) + 1
        finally:
            await connection.close()

    start = time.perf_counter()
    tasks = [asyncio.ensure_future(one_client()) for _ in range(clients)]
    if on_tick is not None:
        tasks.append(asyncio.ensure_future(on_tick(deadline)))
    await asyncio.gather(*tasks)
    return _stats(latencies, len(latencies), errors, time.perf_counter() - start)


async def _open_loop(url: str, texts: Sequence[str], rate: float, duration: float, seed: int = 0) -> dict[str, Any]:
    latencies: list[float] = []
    errors: dict[str, int] = {}
    rng = random.Random(seed)
    idle: list[Connection] = []  # keep-alive connections between requests; a new one when all are busy

    async def one(text: str, scheduled: float) -> None:
        connection = idle.pop() if idle else Connection.to(url)
        status = await _send(connection, text)
        idle.append(connection)
        if status == "200":
            latencies.append(time.perf_counter() - scheduled)
        else:
            errors[status] = errors.get(status, 0) + 1

    start = time.perf_counter()
    at, k, tasks = start, 0, []
    while True:
        at += rng.expovariate(rate)
        if at - start > duration:
            break
        await asyncio.sleep(max(0.0, at - time.perf_counter()))
        tasks.append(asyncio.ensure_future(one(texts[k % len(texts)], at)))
        k += 1
    await asyncio.gather(*tasks)
    for connection in idle:
        await connection.close()
    return _stats(latencies, len(latencies), errors, time.perf_counter() - start)


def _batch_histogram(url: str) -> tuple[float, float, dict[str, float]]:
    """(sum, count, cumulative buckets) of the server's batch-size histogram."""
    import httpx

    total = count = 0.0
    buckets: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith("bert_compress_batch_size_sum "):
            total = float(line.split()[1])
        elif line.startswith("bert_compress_batch_size_count "):
            count = float(line.split()[1])
        elif line.startswith("bert_compress_batch_size_bucket{"):
            buckets[line.split('le="', 1)[1].split('"', 1)[0]] = float(line.split()[1])
    return total, count, buckets


def _batches_between(before: tuple, after: tuple) -> dict[str, Any]:
    """Model batches formed between two histogram readings: how many, their mean size, share per size range."""
    n = after[1] - before[1]
    shares, previous = {}, 0.0
    for le in after[2]:
        cumulative = after[2][le] - before[2].get(le, 0.0)
        if cumulative - previous > 0:
            shares[f"<={le}"] = round((cumulative - previous) / n, 3)
        previous = cumulative
    return {"batches": int(n), "mean_batch": round((after[0] - before[0]) / n, 2) if n else None, "sizes": shares}


def served(model: str, texts: Sequence[str], clients: int, duration: float, flags: Sequence[str],
           rate: float | None = None, warmup: float = DEFAULT_WARMUP_S) -> dict[str, Any]:
    """One served arm: a fresh server with ``flags``, warmed up, then the closed loop (or an open loop at ``rate``)."""
    with ServerProcess(model, flags) as server:
        asyncio.run(_closed_loop(server.url, texts, clients, warmup))
        before = _batch_histogram(server.url)
        if rate is None:
            result = asyncio.run(_closed_loop(server.url, texts, clients, duration))
        else:
            result = asyncio.run(_open_loop(server.url, texts, rate, duration))
        return {**result, **_batches_between(before, _batch_histogram(server.url)), "rss_mb": server.rss_bytes() >> 20}


def soak(model: str, texts: Sequence[str], clients: int, duration: float, interval: float,
         flags: Sequence[str]) -> dict[str, Any]:
    """The batched server under the closed loop for ``duration`` s, its RSS sampled every ``interval`` s."""
    with ServerProcess(model, flags) as server:
        samples: list[tuple[float, int]] = []
        start = time.perf_counter()

        async def sampler(deadline: float) -> None:
            while time.perf_counter() + interval <= deadline + 1e-3:
                await asyncio.sleep(interval)
                samples.append((round(time.perf_counter() - start, 1), server.rss_bytes()))

        result = asyncio.run(_closed_loop(server.url, texts, clients, duration, on_tick=sampler))
        if len(samples) < 2:
            raise CompressError(f"--soak {duration:g} with --soak-interval {interval:g} takes fewer than two memory "
                                "samples; give a soak at least two intervals long.")
        first, last = samples[0][1], samples[-1][1]
        return {**result, "rss_first_mb": round(first / 2**20, 1), "rss_last_mb": round(last / 2**20, 1),
                "rss_peak_mb": round(max(s[1] for s in samples) / 2**20, 1),
                "rss_growth": (last - first) / first, "samples": [(t, round(b / 2**20, 1)) for t, b in samples]}


def _row(name: str, r: dict[str, Any]) -> str:
    def f(v: Any, spec: str = ".1f") -> str:
        return "-" if v is None else format(v, spec)

    errors = sum(r.get("errors", {}).values())
    return (f"| {name} | {f(r['throughput'])} | {f(r['p50_ms'])} | {f(r['p95_ms'])} | {f(r['p99_ms'])} | "
            f"{f(r.get('mean_batch'), '.1f')} | {errors} |")


def report(results: dict[str, Any]) -> str:
    """The Markdown table docs/serving.md shows, and the ratios the targets are stated in."""
    lines = ["| arm | texts/s | p50 ms | p95 ms | p99 ms | mean batch | errors |", "|---|---:|---:|---:|---:|---:|---:|"]
    names = {"in_process_b1": "in-process Predictor, batch 1", "in_process_b32": "in-process Predictor, batch 32",
             "served_batched": f"served, batched, {results['clients']} clients",
             "served_one_at_a_time": f"served, --max-batch 1, {results['clients']} clients",
             "served_half_load": "served, batched, open loop at half its throughput"}
    for key, name in names.items():
        if key in results["arms"]:
            lines.append(_row(name, results["arms"][key]))
    arms = results["arms"]
    if {"served_batched", "served_one_at_a_time", "in_process_b32", "in_process_b1"} <= set(arms):
        batched = arms["served_batched"]["throughput"]
        lines += ["", f"served batched / served one at a time: {batched / arms['served_one_at_a_time']['throughput']:.2f}x",
                  f"served batched / in-process batch 32: {batched / arms['in_process_b32']['throughput']:.0%}"]
        if "served_half_load" in arms and arms["served_half_load"]["p99_ms"] is not None:
            lines.append(f"half-load p99 / in-process batch-1 p50: "
                         f"{arms['served_half_load']['p99_ms'] / arms['in_process_b1']['p50_ms']:.2f}x")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.load_http", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="artifact folder to serve")
    p.add_argument("--texts", default=None, help="one text a line (default: the built-in movie-review sentences)")
    p.add_argument("--clients", type=int, default=32, help="concurrent clients (default 32)")
    p.add_argument("--duration", type=float, default=30.0, help="seconds each arm is measured (default 30)")
    p.add_argument("--max-batch", type=int, default=32, help="the batched server's --max-batch (default 32)")
    p.add_argument("--max-wait-ms", type=float, default=2.0, help="the batched server's --max-wait-ms (default 2)")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads, server and in-process alike")
    p.add_argument("--warmup", type=float, default=DEFAULT_WARMUP_S,
                   help=f"seconds of load before each served arm is measured (default {DEFAULT_WARMUP_S:g})")
    p.add_argument("--soak", type=float, default=None, help="run the soak for this many seconds instead")
    p.add_argument("--soak-interval", type=float, default=10.0, help="seconds between memory samples (default 10)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    a = p.parse_args(argv)
    if a.clients < 1 or not a.duration > 0:
        p.error("--clients must be at least 1 and --duration above 0")
    texts = load_texts(a.texts)
    threads = ["--threads", str(a.threads)] if a.threads else []
    batched = ["--max-batch", str(a.max_batch), "--max-wait-ms", str(a.max_wait_ms), *threads]
    results: dict[str, Any] = {"model": a.model, "clients": a.clients, "duration_s": a.duration,
                               "max_batch": a.max_batch, "max_wait_ms": a.max_wait_ms, "threads": a.threads,
                               "machine": machine_info(), "command": " ".join(["python -m benchmarks.load_http",
                                                                               *(argv if argv is not None else
                                                                                 sys.argv[1:])]), "arms": {}}
    try:
        if a.soak is not None:
            results["soak"] = soak(a.model, texts, a.clients, a.soak, a.soak_interval, batched)
            s = results["soak"]
            print(f"soak {a.soak:g} s, {a.clients} clients: {s['requests']} answered, errors {s['errors'] or 0}, "
                  f"{s['throughput']:.1f} texts/s; server RSS {s['rss_first_mb']} MB -> {s['rss_last_mb']} MB "
                  f"({s['rss_growth']:+.1%}; peak {s['rss_peak_mb']} MB)")
        else:
            from compress.runtime import Predictor

            predictor = Predictor.load(a.model, threads=a.threads)
            arms = results["arms"]
            arms["in_process_b1"] = in_process(predictor, texts, 1, a.duration)
            arms["in_process_b32"] = in_process(predictor, texts, 32, a.duration)
            del predictor
            arms["served_batched"] = served(a.model, texts, a.clients, a.duration, batched, warmup=a.warmup)
            arms["served_one_at_a_time"] = served(a.model, texts, a.clients, a.duration,
                                                  ["--max-batch", "1", "--max-wait-ms", "0", *threads],
                                                  warmup=a.warmup)
            half = arms["served_batched"]["throughput"] / 2
            if half > 0 and math.isfinite(half):
                arms["served_half_load"] = {**served(a.model, texts, a.clients, a.duration, batched, rate=half,
                                                     warmup=a.warmup), "rate": round(half, 1)}
            print(report(results))
    except CompressError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if a.out:
        out = Path(a.out)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        tmp.replace(out)  # atomically: a reader never sees half a file
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
