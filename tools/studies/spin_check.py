"""Does thread spinning colour interleaved timings here? ``python -m tools.studies.spin_check PT_DIR ONNX_DIR [spin|nospin]``.

Times a PyTorch artifact and an ONNX artifact at batch 1 x 128 tokens on 2 threads, each alone
and then interleaved, and prints p50/p90 in ms. Run it once as is (both runtimes spin) and once
with ``OMP_WAIT_POLICY=PASSIVE ... nospin`` (idle threads sleep), which is what ``bench`` does.

A study script, not a feature: it lives in ``tools/studies`` (not installed) and runs from a checkout.
Produced: docs/ci.md, "`bert-compress bench`" (why bench times with idle threads asleep).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np


def main(argv: list[str]) -> int:
    pt_dir, onnx_dir = argv[0], argv[1]
    spin = (argv[2] if len(argv) > 2 else "spin") == "spin"
    from benchmarks.latency import fixed_shape_inputs
    from compress.runtime.predictor import Predictor

    texts = ["a gorgeous, moving and funny film that never once feels long or tired"] * 4
    pt = Predictor.load(pt_dir, threads=2)
    ox = Predictor.load(onnx_dir, threads=2, spinning=spin)
    a_pt, a_ox = fixed_shape_inputs(pt, texts, 1, 128), fixed_shape_inputs(ox, texts, 1, 128)

    def timed(run, arrays) -> float:
        start = time.perf_counter()
        run(arrays)
        return (time.perf_counter() - start) * 1000

    for _ in range(10):
        pt.forward(a_pt), ox.forward(a_ox)
    alone_pt = [timed(pt.forward, a_pt) for _ in range(40)]
    alone_ox = [timed(ox.forward, a_ox) for _ in range(40)]
    mixed_pt, mixed_ox = [], []
    for _ in range(40):
        mixed_pt.append(timed(pt.forward, a_pt))
        mixed_ox.append(timed(ox.forward, a_ox))

    def show(x: list[float]) -> str:
        return f"p50 {np.median(x):.1f} / p90 {np.percentile(x, 90):.1f} ms"

    print(f"spinning={'on' if spin else 'off'} OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'default')}")
    print(f"  alone:       pytorch {show(alone_pt)}; onnx {show(alone_ox)}")
    print(f"  interleaved: pytorch {show(mixed_pt)}; onnx {show(mixed_ox)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
