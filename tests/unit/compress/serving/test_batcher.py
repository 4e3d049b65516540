"""The batcher's rules on their own, with a run function that records the batches it is given: grouping by
length around the oldest request, never mixing model settings, a bounded queue, withdrawal, one bad request
failing alone, and a close that runs what is queued."""

from __future__ import annotations

import asyncio

import pytest

from compress.serving.batcher import Batcher, QueueFull
from compress.serving.metrics import Metrics
from compress.serving.schemas import Parsed


def parsed(*texts: str, key: tuple = ("classify",)) -> Parsed:
    return Parsed(list(texts), False, key, length=max(map(len, texts)))


def run_with(batches: list, fail_on: str | None = None):
    def run(key, inputs):
        batches.append((key, list(inputs)))
        if fail_on in inputs:
            raise ValueError(f"cannot read {fail_on}")
        return [f"{key[0]}:{x}" for x in inputs]
    return run


def test_a_batch_is_the_oldest_request_and_those_nearest_it_in_length():
    async def scenario():
        batches: list = []
        batcher = Batcher(run_with(batches), max_batch=2, max_wait_s=0.05, queue_size=16, metrics=Metrics())
        jobs = [batcher.submit(parsed(t)) for t in ("short", "x" * 400, "shorter", "y" * 390)]
        batcher.start()
        results = await asyncio.gather(*(j.future for j in jobs))
        await batcher.close()
        return batches, results, [j.batch_size for j in jobs]

    batches, results, sizes = asyncio.run(scenario())
    assert [b[1] for b in batches] == [["short", "shorter"], ["x" * 400, "y" * 390]]
    assert results == [["classify:short"], ["classify:" + "x" * 400], ["classify:shorter"], ["classify:" + "y" * 390]]
    assert sizes == [2, 2, 2, 2]


def test_requests_with_other_model_settings_never_share_a_batch():
    async def scenario():
        batches: list = []
        batcher = Batcher(run_with(batches), max_batch=8, max_wait_s=0.01, queue_size=16, metrics=Metrics())
        jobs = [batcher.submit(parsed("a", key=("tag", "first"))), batcher.submit(parsed("b", key=("tag", "max"))),
                batcher.submit(parsed("c", key=("tag", "first")))]
        batcher.start()
        await asyncio.gather(*(j.future for j in jobs))
        await batcher.close()
        return batches

    assert asyncio.run(scenario()) == [(("tag", "first"), ["a", "c"]), (("tag", "max"), ["b"])]


def test_the_queue_is_bounded_and_a_withdrawn_request_is_not_run():
    async def scenario():
        batches: list = []
        metrics = Metrics()
        batcher = Batcher(run_with(batches), max_batch=4, max_wait_s=0.01, queue_size=4, metrics=metrics)
        first = batcher.submit(parsed("a", "b", "c"))
        with pytest.raises(QueueFull):
            batcher.submit(parsed("d", "e"))
        assert batcher.withdraw(first) and batcher.depth == 0
        kept = batcher.submit(parsed("d", "e"))
        batcher.start()
        await kept.future
        await batcher.close()
        return batches, metrics.queue_depth._value.get()

    batches, depth = asyncio.run(scenario())
    assert batches == [(("classify",), ["d", "e"])] and depth == 0


def test_a_request_that_breaks_its_batch_fails_alone():
    async def scenario():
        batches: list = []
        batcher = Batcher(run_with(batches, fail_on="bad"), max_batch=8, max_wait_s=0.01, queue_size=16,
                          metrics=Metrics())
        good, bad = batcher.submit(parsed("good")), batcher.submit(parsed("bad"))
        batcher.start()
        await asyncio.wait({good.future, bad.future})
        await batcher.close()
        return good.future.result(), bad.future.exception()

    result, error = asyncio.run(scenario())
    assert result == ["classify:good"] and isinstance(error, ValueError)


def test_close_runs_what_is_queued_without_waiting_for_the_batch_to_fill():
    async def scenario():
        batches: list = []
        batcher = Batcher(run_with(batches), max_batch=8, max_wait_s=60, queue_size=16, metrics=Metrics())
        batcher.start()
        job = batcher.submit(parsed("late"))
        await asyncio.sleep(0.01)
        await asyncio.wait_for(batcher.close(), 5)
        with pytest.raises(QueueFull):
            batcher.submit(parsed("after"))
        return job.future.result()

    assert asyncio.run(scenario()) == ["classify:late"]


def test_a_long_request_does_not_pad_a_batch_of_short_ones_even_with_room_in_it():
    async def scenario():
        batches: list = []
        batcher = Batcher(run_with(batches), max_batch=8, max_wait_s=0.01, queue_size=16, metrics=Metrics())
        jobs = [batcher.submit(parsed(t)) for t in ("a short text", "x" * 70, "tiny", "y" * 60, "z" * 130)]
        batcher.start()
        await asyncio.gather(*(j.future for j in jobs))
        await batcher.close()
        return [b[1] for b in batches]

    # Under 32 characters counts as 32: the oldest, "tiny" and the 60 (within twice 32), not the 70; the 70 leads
    # the next batch, and the 130 is within twice its length.
    assert asyncio.run(scenario()) == [["a short text", "tiny", "y" * 60], ["x" * 70, "z" * 130]]
