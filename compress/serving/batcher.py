"""Dynamic batching: concurrent requests queued and run as one model batch.

A model batch of 32 texts costs far less than 32 batches of one (the batch-32 rate ``bench`` measures), but a
caller sends one request at a time. The batcher holds requests for at most ``max_wait`` seconds, or until
``max_batch`` inputs are waiting, then runs them together on one model thread, so the event loop keeps reading
requests (and a batch keeps forming) while the model runs.

A batch is formed around the oldest waiting request (no request waits behind newer ones for ever) with the
waiting requests nearest to it in length, within a bounded ratio of lengths, so one long text does not pad a
batch of short ones; requests whose model settings differ (a tagger's aggregation) never share one. The queue is bounded: :meth:`Batcher.submit`
raises :class:`QueueFull` instead of letting it grow without limit, and the server answers 503.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from compress.serving.metrics import Metrics
from compress.serving.schemas import Parsed


#: The longest request in a batch is at most this many times as long as the shortest (in characters, a text
#: under SHORT_CHARS counting as SHORT_CHARS: at that length the special tokens and the per-batch cost dominate).
#: On a CPU every padded token costs as much as a real one, so a batch padded to more than twice its texts' length
#: would cost more than the same texts run in two batches of their own length.
LENGTH_RATIO = 2.0
SHORT_CHARS = 32


class QueueFull(Exception):
    """The queue holds ``queue_size`` inputs already, or the server is shutting down."""


@dataclass(eq=False)
class Job:
    """One request waiting for (or in) a batch; ``future`` gets its inputs' raw results."""

    parsed: Parsed
    future: asyncio.Future
    arrived: float
    #: Inputs in the model batch that answered it (the X-Batch-Size header).
    batch_size: int = 0


class Batcher:
    """Queue requests, group them into batches and run ``run(key, inputs)`` on one model thread."""

    def __init__(self, run: Callable[[tuple[Any, ...], list[Any]], list[Any]], max_batch: int, max_wait_s: float,
                 queue_size: int, metrics: Metrics):
        self.run = run
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.queue_size = queue_size
        self.metrics = metrics
        self._pending: list[Job] = []
        self._pending_inputs = 0
        self._wake = asyncio.Event()
        self._closing = False
        # One thread: the Predictor is not shared between threads, and its runtime has its own intra-op threads.
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="bert-compress-model")
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="bert-compress-batcher")

    @property
    def depth(self) -> int:
        """Inputs waiting for a batch."""
        return self._pending_inputs

    def submit(self, parsed: Parsed) -> Job:
        """Queue one request; :class:`QueueFull` when it would take the queue over ``queue_size`` inputs."""
        n = len(parsed.inputs)
        if self._closing:
            raise QueueFull("the server is shutting down")
        if self._pending_inputs + n > self.queue_size:
            raise QueueFull(f"the queue holds {self._pending_inputs} inputs of at most {self.queue_size}")
        job = Job(parsed, asyncio.get_running_loop().create_future(), time.monotonic())
        self._pending.append(job)
        self._set_depth(self._pending_inputs + n)
        self._wake.set()
        return job

    def withdraw(self, job: Job) -> bool:
        """Take a request out of the queue (its caller went away or timed out); False when it is already running."""
        if job in self._pending:
            self._pending.remove(job)
            self._set_depth(self._pending_inputs - len(job.parsed.inputs))
            return True
        return False

    async def call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the model thread (loading and warming up the model: an OpenVINO infer request belongs to the
        thread that made it)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    async def close(self) -> None:
        """Stop taking requests and run every one still queued, without waiting for more to arrive."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        self._pool.shutdown(wait=True)

    def _set_depth(self, value: int) -> None:
        self._pending_inputs = value
        self.metrics.queue_depth.set(value)

    def _ready_inputs(self, key: tuple[Any, ...]) -> int:
        return sum(len(j.parsed.inputs) for j in self._pending if j.parsed.key == key)

    async def _loop(self) -> None:
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            oldest = self._pending[0]
            deadline = oldest.arrived + self.max_wait_s
            while (not self._closing and self._ready_inputs(oldest.parsed.key) < self.max_batch
                   and oldest in self._pending):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), left)
                except asyncio.TimeoutError:
                    break
            if oldest not in self._pending:  # withdrawn while the batch formed: start again from the new oldest
                continue
            await self._run_batch(self._take(oldest))

    def _take(self, oldest: Job) -> list[Job]:
        """``oldest`` and the waiting requests of its key nearest to it in length, up to ``max_batch`` inputs, none
        more than :data:`LENGTH_RATIO` times as long as another (the rest wait for a batch of their own length)."""
        others = sorted((j for j in self._pending if j is not oldest and j.parsed.key == oldest.parsed.key),
                        key=lambda j: (abs(j.parsed.length - oldest.parsed.length), j.arrived))
        batch, size = [oldest], len(oldest.parsed.inputs)
        low = high = max(oldest.parsed.length, SHORT_CHARS)
        for job in others:
            length = max(job.parsed.length, SHORT_CHARS)
            if size + len(job.parsed.inputs) <= self.max_batch and max(high, length) <= LENGTH_RATIO * min(low, length):
                batch.append(job)
                size += len(job.parsed.inputs)
                low, high = min(low, length), max(high, length)
        for job in batch:
            self._pending.remove(job)
        self._set_depth(self._pending_inputs - size)
        return batch

    async def _run_batch(self, batch: list[Job]) -> None:
        loop = asyncio.get_running_loop()
        inputs = [x for job in batch for x in job.parsed.inputs]
        self.metrics.batch_size.observe(len(inputs))
        try:
            results = await loop.run_in_executor(self._pool, self.run, batch[0].parsed.key, inputs)
        except Exception as exc:  # noqa: BLE001 - answered per request below, never lost
            if len(batch) == 1:
                _finish(batch[0], exc=exc)
                return
            # One request's input broke the batch: run each alone, so only that request fails.
            for job in batch:
                await self._run_batch([job])
            return
        start = 0
        for job in batch:
            n = len(job.parsed.inputs)
            job.batch_size = len(inputs)
            _finish(job, results[start:start + n])
            start += n
        self.metrics.inputs.inc(len(inputs))


def _finish(job: Job, result: Any = None, exc: BaseException | None = None) -> None:
    if job.future.done():  # its caller timed out or went away
        return
    if exc is not None:
        job.future.set_exception(exc)
    else:
        job.future.set_result(result)
