"""Load test of ``bert-compress serve`` over loopback, beside the in-process ``Predictor``, in one run.

    python -m benchmarks.load_http --model DIR [--clients 32] [--duration 60] [--max-batch 8,32] [--out load.json]
    python -m benchmarks.load_http --model DIR --soak 600        # memory under steady load

The arms, on the same texts (short movie-review sentences by default):

- **in-process, batch 1**: ``Predictor.predict([text])``, one text a call: the latency floor (tokenization
  included, as a server pays it).
- **in-process, batch 32**: ``Predictor.predict`` on 512 texts a call, which it sorts by length and runs 32 to a
  batch, each padded to its own longest text: the batched rate ``bench`` measures on a split, the ceiling of
  the model.
- **served, --max-batch N** (one arm per value of ``--max-batch``): the real server driven by ``--clients``
  concurrent clients over HTTP, each sending one text and waiting for its answer before the next (a closed loop).
- **served, one at a time**: the same with ``--max-batch 1``: what a server without batching gives.
- **served, half load**: the first ``--max-batch`` server under an open loop at half the throughput it reached
  (Poisson arrivals; latency counted from each request's scheduled time, so a slow answer cannot hide the
  requests that queued behind it).

Every server is started (and warmed up) first; then the arms take turns, ``--rounds`` times in a rotating order,
so that a change in the machine's load during the run lands on all of them alike (each arm's per-round rates
are in the JSON). The half-load arm runs last, once. Each arm reports throughput, p50/p95/p99 latency and errors;
a served arm the model batch sizes its server formed (from its ``/metrics``). The clients share the machine with
the server: on few cores their CPU counts against the server's, as it would for a sidecar, not for clients on
other machines.

``--soak SECONDS`` instead runs the first ``--max-batch`` server under the closed loop for that long, sampling its
resident memory every ``--soak-interval`` seconds, and reports the growth from the first sample (taken after
one interval, once the allocator has seen every batch shape) and the errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import h11

from benchmarks.http_client import Connection
from benchmarks.http_server import ServerProcess
from benchmarks.latency import percentile
from compress.core.machine import machine_info
from compress.core.errors import CompressError
from compress.serving.settings import ServeSettings

#: Seconds of load on each server before the measured rounds: connections opened, every batch shape seen.
DEFAULT_WARMUP_S = 2.0
#: Texts per in-process batched call: enough for Predictor's length sort to group texts of like length.
SORTED_CALL = 512


def load_texts(path: str | None, limit: int = 2000) -> list[str]:
    """``path`` (one text a line), else the built-in movie-review sentences (short: ~20 words)."""
    if path:
        texts = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        from compress.core.assets import movie_review_snippets_path

        rows = movie_review_snippets_path().read_text(encoding="utf-8", errors="replace").splitlines()
        texts = [r.split("\t", 2)[2].strip() for r in rows if r.count("\t") >= 2 and r.split("\t", 2)[2].strip()]
    if not texts:
        raise CompressError(f"--texts {path}: no texts in it (one text a line).")
    random.Random(0).shuffle(texts)
    return texts[:limit]


@dataclass
class Tally:
    """What one arm measured, added up over its rounds."""

    latencies: list[float] = field(default_factory=list)  # seconds, one per answered request (none when batched)
    texts: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    #: Texts per second of each round: how much the rate moved during the run.
    rounds: list[float] = field(default_factory=list)

    def add(self, other: "Tally") -> "Tally":
        self.latencies += other.latencies
        self.texts += other.texts
        for k, v in other.errors.items():
            self.errors[k] = self.errors.get(k, 0) + v
        self.seconds += other.seconds
        self.rounds.append(round(other.texts / other.seconds, 1) if other.seconds else 0.0)
        return self

    def fail(self, status: str) -> None:
        self.errors[status] = self.errors.get(status, 0) + 1

    def stats(self) -> dict[str, Any]:
        ms = [x * 1000 for x in self.latencies]
        return {"texts": self.texts, "errors": self.errors, "seconds": round(self.seconds, 2),
                "throughput": self.texts / self.seconds if self.seconds > 0 else 0.0, "rounds": self.rounds,
                **{f"p{q}_ms": (percentile(ms, q) if ms else None) for q in (50, 95, 99)}}


def in_process(predictor: Any, texts: Sequence[str], batch_size: int, duration: float, start_at: int = 0) -> Tally:
    """``predictor.predict`` for ``duration`` s: one text a call at batch 1 (each call's latency), else
    :data:`SORTED_CALL` texts a call in batches of ``batch_size`` (throughput only: a call is not a request)."""
    per_call = 1 if batch_size == 1 else SORTED_CALL
    tally, k = Tally(), start_at
    start = time.perf_counter()
    while time.perf_counter() - start < duration:
        chunk = [texts[(k + i) % len(texts)] for i in range(per_call)]
        k += per_call
        t0 = time.perf_counter()
        predictor.predict(chunk, batch_size=batch_size)
        if batch_size == 1:
            tally.latencies.append(time.perf_counter() - t0)
        tally.texts += per_call
    tally.seconds = time.perf_counter() - start
    return tally


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


async def _closed_loop(url: str, texts: Sequence[str], clients: int, duration: float, on_tick: Any = None,
                       start_at: int = 0) -> Tally:
    tally = Tally()
    counter = iter(range(start_at, 1 << 62))
    deadline = time.perf_counter() + duration

    async def one_client() -> None:
        connection = Connection.to(url)
        try:
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                status = await _send(connection, texts[next(counter) % len(texts)])
                if status == "200":
                    tally.latencies.append(time.perf_counter() - t0)
                    tally.texts += 1
                else:
                    tally.fail(status)
        finally:
            await connection.close()

    start = time.perf_counter()
    tasks = [asyncio.ensure_future(one_client()) for _ in range(clients)]
    if on_tick is not None:
        tasks.append(asyncio.ensure_future(on_tick(deadline)))
    await asyncio.gather(*tasks)
    tally.seconds = time.perf_counter() - start
    return tally


async def _open_loop(url: str, texts: Sequence[str], rate: float, duration: float, seed: int = 0) -> Tally:
    tally = Tally()
    rng = random.Random(seed)
    idle: list[Connection] = []  # keep-alive connections between requests; a new one when all are busy

    async def one(text: str, scheduled: float) -> None:
        connection = idle.pop() if idle else Connection.to(url)
        status = await _send(connection, text)
        idle.append(connection)
        if status == "200":
            tally.latencies.append(time.perf_counter() - scheduled)
            tally.texts += 1
        else:
            tally.fail(status)

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
    tally.seconds = time.perf_counter() - start
    return tally


def _batch_histogram(url: str) -> tuple[float, float, dict[str, float]]:
    """(sum, count, cumulative buckets) of the server's batch-size histogram."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    total = count = 0.0
    buckets: dict[str, float] = {}
    for line in text.splitlines():
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


def _batched_flags(max_batch: int, max_wait_ms: float, threads: list[str]) -> list[str]:
    return ["--max-batch", str(max_batch), "--max-wait-ms", str(max_wait_ms), *threads]


def measure(model: str, texts: Sequence[str], clients: int, duration: float, max_batches: Sequence[int],
            max_wait_ms: float, threads: int | None, rounds: int, warmup: float) -> dict[str, Any]:
    """Every arm of the module docstring, in rotating rounds; ``{arm: stats}``."""
    from compress.runtime.predictor import Predictor

    thread_flags = ["--threads", str(threads)] if threads else []
    predictor = Predictor.load(model, threads=threads)
    predictor.predict(list(texts[:32]), batch_size=32)  # its first calls plan and allocate
    with contextlib.ExitStack() as stack:
        servers = {f"served_max_batch_{mb}": stack.enter_context(
            ServerProcess(model, _batched_flags(mb, max_wait_ms, thread_flags))) for mb in max_batches}
        servers["served_one_at_a_time"] = stack.enter_context(
            ServerProcess(model, ["--max-batch", "1", "--max-wait-ms", "0", *thread_flags]))
        for server in servers.values():
            asyncio.run(_closed_loop(server.url, texts, clients, warmup))
        before = {name: _batch_histogram(server.url) for name, server in servers.items()}
        arms = ["in_process_b1", "in_process_b32", *servers]
        tallies = {arm: Tally() for arm in arms}
        per_round = duration / rounds
        for r in range(rounds):
            for arm in arms[r % len(arms):] + arms[:r % len(arms)]:
                offset = r * 7919  # another stretch of the texts each round
                if arm == "in_process_b1":
                    tallies[arm].add(in_process(predictor, texts, 1, per_round, offset))
                elif arm == "in_process_b32":
                    tallies[arm].add(in_process(predictor, texts, 32, per_round, offset))
                else:
                    tallies[arm].add(asyncio.run(_closed_loop(servers[arm].url, texts, clients, per_round,
                                                              start_at=offset)))
        results = {arm: tallies[arm].stats() for arm in arms}
        for name, server in servers.items():
            results[name].update(_batches_between(before[name], _batch_histogram(server.url)),
                                 rss_mb=server.rss_bytes() >> 20)
        first = servers[f"served_max_batch_{max_batches[0]}"]
        rate = results[f"served_max_batch_{max_batches[0]}"]["throughput"] / 2
        if rate > 0:
            before_half = _batch_histogram(first.url)
            half = Tally().add(asyncio.run(_open_loop(first.url, texts, rate, duration / rounds))).stats()
            results["served_half_load"] = {**half, **_batches_between(before_half, _batch_histogram(first.url)),
                                           "rate": round(rate, 1), "max_batch": max_batches[0]}
    return results


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

        result = asyncio.run(_closed_loop(server.url, texts, clients, duration, on_tick=sampler)).stats()
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

    return (f"| {name} | {f(r['throughput'])} | {f(r['p50_ms'])} | {f(r['p95_ms'])} | {f(r['p99_ms'])} | "
            f"{f(r.get('mean_batch'), '.1f')} | {sum(r['errors'].values())} |")


def report(results: dict[str, Any]) -> str:
    """The Markdown table docs/serving.md shows, and the ratios the targets are stated in."""
    arms, clients = results["arms"], results["clients"]
    lines = ["| arm | texts/s | p50 ms | p95 ms | p99 ms | mean batch | errors |", "|---|---:|---:|---:|---:|---:|---:|"]
    names = {"in_process_b1": "in-process Predictor, batch 1",
             "in_process_b32": f"in-process Predictor, batch 32 ({SORTED_CALL} texts a call, length-sorted)"}
    names.update({f"served_max_batch_{mb}": f"served, --max-batch {mb}, {clients} clients"
                  for mb in results["max_batch"]})
    names["served_one_at_a_time"] = f"served, --max-batch 1 (one at a time), {clients} clients"
    if "served_half_load" in arms:
        half = arms["served_half_load"]
        names["served_half_load"] = f"served, --max-batch {half['max_batch']}, open loop at {half['rate']:g}/s (half)"
    lines += [_row(name, arms[key]) for key, name in names.items() if key in arms]
    lines.append("")
    one, b32, b1 = arms["served_one_at_a_time"]["throughput"], arms["in_process_b32"]["throughput"], \
        arms["in_process_b1"]
    for mb in results["max_batch"]:
        rate = arms[f"served_max_batch_{mb}"]["throughput"]
        lines.append(f"--max-batch {mb}: {rate / one:.2f}x serving one at a time, {rate / b32:.0%} of in-process "
                     "batch 32")
    if "served_half_load" in arms and arms["served_half_load"]["p99_ms"] is not None and b1["p50_ms"]:
        lines.append(f"half-load p99 / in-process batch-1 p50: {arms['served_half_load']['p99_ms'] / b1['p50_ms']:.2f}x")
    return "\n".join(lines)


def _counts(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers such as 8,32") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: each must be at least 1")
    return values


def main(argv: Sequence[str] | None = None) -> int:
    # As the bert-compress command does: tokenizers' own thread pool would fight the runtime's threads for the
    # cores (in-process batch 1 measured at a third of its rate with it on, on 2 cores).
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    p = argparse.ArgumentParser(prog="python -m benchmarks.load_http", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="artifact folder to serve")
    p.add_argument("--texts", default=None, help="one text a line (default: the built-in movie-review sentences)")
    p.add_argument("--clients", type=int, default=32, help="concurrent clients (default 32)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds each arm is measured, over all its rounds "
                   "(default 60)")
    p.add_argument("--rounds", type=int, default=3, help="turns each arm takes, in rotating order (default 3)")
    p.add_argument("--max-batch", type=_counts, default=[8, 32],
                   help="the batched servers' --max-batch, one arm each (default 8,32)")
    p.add_argument("--max-wait-ms", type=float, default=ServeSettings.max_wait_ms,
                   help=f"the batched servers' --max-wait-ms (default {ServeSettings.max_wait_ms:g}, the server's)")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads, servers and in-process alike")
    p.add_argument("--warmup", type=float, default=DEFAULT_WARMUP_S,
                   help=f"seconds of load on each server before the rounds (default {DEFAULT_WARMUP_S:g})")
    p.add_argument("--soak", type=float, default=None, help="run the soak for this many seconds instead")
    p.add_argument("--soak-interval", type=float, default=10.0, help="seconds between memory samples (default 10)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    a = p.parse_args(argv)
    if a.clients < 1 or not a.duration > 0 or a.rounds < 1:
        p.error("--clients and --rounds must be at least 1 and --duration above 0")
    texts = load_texts(a.texts)
    threads = ["--threads", str(a.threads)] if a.threads else []
    command = " ".join(["python -m benchmarks.load_http", *(argv if argv is not None else sys.argv[1:])])
    results: dict[str, Any] = {"model": a.model, "clients": a.clients, "duration_s": a.duration, "rounds": a.rounds,
                               "max_batch": a.max_batch, "max_wait_ms": a.max_wait_ms, "threads": a.threads,
                               "machine": machine_info(), "command": command, "arms": {}}
    try:
        if a.soak is not None:
            results["soak"] = s = soak(a.model, texts, a.clients, a.soak, a.soak_interval,
                                       _batched_flags(a.max_batch[0], a.max_wait_ms, threads))
            print(f"soak {a.soak:g} s, {a.clients} clients, --max-batch {a.max_batch[0]}: {s['texts']} answered, "
                  f"errors {sum(s['errors'].values())}, {s['throughput']:.1f} texts/s; server RSS "
                  f"{s['rss_first_mb']} MB -> {s['rss_last_mb']} MB ({s['rss_growth']:+.1%}; peak {s['rss_peak_mb']} MB)")
        else:
            results["arms"] = measure(a.model, texts, a.clients, a.duration, a.max_batch, a.max_wait_ms, a.threads,
                                      a.rounds, a.warmup)
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
