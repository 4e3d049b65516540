"""Peak memory of one artifact, measured in a process of its own.

Why a separate process: the benchmark process has every artifact, PyTorch and ONNX Runtime
loaded at once, so its resident set says nothing about any one model, and peak RSS
(``ru_maxrss``) only ever grows. A fresh interpreter per artifact that loads it and runs one batch
gives the number a deployment of that artifact would see.

Three readings are taken in the child: the bare interpreter, after importing the runtime libraries
that artifact kind needs (PyTorch and/or ONNX Runtime, transformers for the tokenizer), and the
peak after loading the model and running one batch. The report keeps the peak, the increase over
the bare interpreter (libraries + model + activations) and the increase over the libraries alone
(the model's own share).

Run by hand::

    python -m benchmarks.memory ARTIFACT_DIR [--threads 1] [--batch-size 8] [--seq-len 128]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from compress.core.errors import CompressError
from benchmarks.latency import fixed_shape_inputs
from compress.runtime.predictor import Predictor, artifact_kind

MARKER = "BERT_COMPRESS_MEMORY "
#: Used when no texts are given: any real sentence works, the batch is padded to a fixed length.
SAMPLE_TEXT = "a charming and often funny film, though the plot is thin and the ending drags"


def peak_rss_bytes() -> int:
    """This process's peak resident set, in bytes.

    On Linux this is ``VmHWM`` from ``/proc/self/status``, the high-water mark of this process's
    own memory map. ``ru_maxrss`` is not usable there: at ``exec`` the kernel carries the forked
    parent's high-water mark into it, so a child started by a 5 GB benchmark process would report
    5 GB whatever it loads. Elsewhere ``ru_maxrss`` (KiB on Linux, bytes on macOS) is the fallback.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def current_rss_bytes() -> int:
    """This process's resident set now (``/proc/self/statm``), or the peak where /proc is missing."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_rss_bytes()


def measure_in_this_process(folder: str, threads: int | None, batch_size: int, seq_len: int,
                            texts: Sequence[Any]) -> dict[str, Any]:
    """Load ``folder``, run one fixed-shape batch, and report the memory readings (the child's work)."""
    bare = current_rss_bytes()
    if not Path(folder).is_dir():  # before the imports below, which take seconds
        raise CompressError(f"{folder} does not exist or is not a folder; give an artifact folder.")

    kind = artifact_kind(folder)
    # transformers is loaded for every kind, as it was when ONNX artifacts still tokenized with it, so
    # readings stay comparable with earlier results; an ONNX artifact no longer needs it to serve.
    import transformers  # noqa: F401

    if kind.startswith("onnx"):
        import onnxruntime  # noqa: F401
    elif kind.startswith("openvino"):
        import openvino  # noqa: F401  (the runtime an OpenVINO artifact serves with; no torch)
    else:
        import torch  # noqa: F401
    libraries = current_rss_bytes()

    predictor = Predictor.load(folder, threads=threads, spinning=False)
    arrays = fixed_shape_inputs(predictor, list(texts) or [SAMPLE_TEXT], batch_size, seq_len)
    predictor.forward(arrays)  # the per-batch entry point; see benchmarks.latency.forward_runner
    peak = peak_rss_bytes()
    return {
        "kind": kind,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "threads": threads,
        "bare_rss_bytes": bare,
        "libraries_rss_bytes": libraries,
        "peak_rss_bytes": peak,
        "rss_increase_bytes": peak - bare,
        "model_rss_increase_bytes": peak - libraries,
    }


def measure_memory(folder: str | os.PathLike, threads: int | None = None, batch_size: int = 1, seq_len: int = 128,
                   texts: Sequence[Any] = (), timeout_s: float = 900) -> dict[str, Any]:
    """Run ``python -m benchmarks.memory`` on ``folder`` in a fresh interpreter and return its readings."""
    root = Path(__file__).resolve().parent.parent  # this checkout, so the child runs the same code
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory(prefix="bert-compress-memory-") as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps([list(t) if isinstance(t, tuple) else t for t in texts]), encoding="utf-8")
        cmd = [sys.executable, "-m", "benchmarks.memory", str(folder), "--batch-size", str(batch_size),
               "--seq-len", str(seq_len), "--texts-file", str(texts_file)]
        if threads is not None:
            cmd += ["--threads", str(threads)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise CompressError(f"memory measurement of {folder} took more than {timeout_s:.0f} s and was stopped. "
                                "Run it by hand to see why: python -m benchmarks.memory " + str(folder)) from exc
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
    raise CompressError(f"memory measurement of {folder} failed (exit {done.returncode}): {tail or 'no output'}. "
                        f"Run it by hand to see the whole output: python -m benchmarks.memory {folder}")


def main(argv: Sequence[str] | None = None) -> int:
    """The child process: one artifact, one batch, one JSON line on stdout."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("artifact", help="artifact folder")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--texts-file", default=None, help="JSON list of texts (or [text, pair] lists)")
    a = parser.parse_args(argv)
    texts: list[Any] = []
    if a.texts_file:
        texts = json.loads(Path(a.texts_file).read_text(encoding="utf-8"))
    try:
        result = measure_in_this_process(a.artifact, a.threads, a.batch_size, a.seq_len, texts)
    except CompressError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(MARKER + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
