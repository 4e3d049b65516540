"""Probe: is torchao's CPU INT8 (dynamic activations, INT8 weights) faster than the deprecated ``torch.ao`` path?

Not a runtime of bert-compress; the evidence behind what ``torch-int8`` runs (docs, "PyTorch INT8").
torch 2.13 warns that ``torch.ao.quantization.quantize_dynamic`` "will be removed in a future
PyTorch release" (pytorch/ao #2259); torchao's replacement is ``quantize_(model,
Int8DynamicActivationInt8WeightConfig())``, a tensor subclass that runs INT8 matmuls only after
``torch.compile`` (inductor), so both eager and compiled are timed. Run::

    pip install --no-deps --target /tmp/torchao torchao==0.18.0   # not a dependency of bert-compress
    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=/tmp/torchao python -m tools.studies.torch_int8_probe [--layers 6 --hidden 384]

(Outside the venv on purpose: with torchao installed, ``import transformers`` imports it too, and
prints its failed CUDA-extension loads, in every process.)

Variants, on one random-initialised BERT classifier (the latency does not depend on the weights'
values): fp32 eager; ``torch.ao`` dynamic INT8 exactly as :mod:`compress.runtime.formats.torch_int8` builds
it; torchao INT8 eager; torchao INT8 compiled. They are timed interleaved in one process
(:func:`benchmarks.latency.run_interleaved`) at each batch size, and each speedup is the median of
per-round ratios against the ``torch.ao`` path, so a shared machine's drift cancels.

A study script, not a feature: it lives in ``tools/studies`` (not installed) and runs from a checkout.
Produced: docs/torch-int8.md, "Measured".
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import warnings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant (minutes to compile)")
    parser.add_argument("--json", help="also write the numbers here")
    a = parser.parse_args(argv)

    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from benchmarks.latency import paired_speedup, run_interleaved, summarize
    from compress.core.machine import machine_info

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    machine = machine_info()
    print(f"CPU: {machine.get('cpu_model')}; torch {torch.__version__}; threads {a.threads}; "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}")
    config = BertConfig(hidden_size=a.hidden, num_hidden_layers=a.layers, num_attention_heads=a.hidden // 64,
                        intermediate_size=4 * a.hidden, num_labels=2, attn_implementation="eager")
    fp32 = BertForSequenceClassification(config).eval()

    from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ao = quantize_dynamic(copy.deepcopy(fp32), {n: default_dynamic_qconfig for n, m in fp32.named_modules()
                                                    if isinstance(m, torch.nn.Linear)}, dtype=torch.qint8)
    deprecations = sorted({str(w.message).splitlines()[0][:160] for w in caught
                           if issubclass(w.category, (DeprecationWarning, FutureWarning, UserWarning))})
    print(f"torch.ao quantize_dynamic warnings: {deprecations or 'none'}")

    variants = {"fp32": fp32, "torch.ao-dynamic": ao}
    try:
        import torchao
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    except ImportError as exc:
        print(f"torchao is not importable ({exc}); only the torch.ao path is timed")
        torchao = None
    if torchao is not None:
        print(f"torchao {torchao.__version__}: Int8DynamicActivationInt8WeightConfig")
        tao = copy.deepcopy(fp32)
        quantize_(tao, Int8DynamicActivationInt8WeightConfig())
        variants["torchao-eager"] = tao
        if not a.no_compile:
            variants["torchao-compiled"] = torch.compile(copy.deepcopy(tao))

    results: dict = {"cpu_model": machine.get("cpu_model"), "threads": a.threads, "seq_len": a.seq_len,
                     "torch": torch.__version__, "torchao": getattr(torchao, "__version__", None),
                     "model": f"BERT {a.layers}L/{a.hidden}, random init", "batches": {}}
    generator = torch.Generator().manual_seed(1)
    for b in [int(x) for x in a.batch_sizes.split(",")]:
        ids = torch.randint(1000, config.vocab_size, (b, a.seq_len), generator=generator)
        mask = torch.ones_like(ids)
        with torch.inference_mode():
            reference = fp32(input_ids=ids, attention_mask=mask).logits
            compile_s = {}
            for name, model in variants.items():  # first call off the clock: compiles the compiled variant
                t0 = time.perf_counter()
                out = model(input_ids=ids, attention_mask=mask).logits
                compile_s[name] = round(time.perf_counter() - t0, 2)
                print(f"batch {b}: {name} first call {compile_s[name]} s, max |logit - fp32| "
                      f"{(out - reference).abs().max().item():.2e}", flush=True)
            runners = {n: (lambda m=m: m(input_ids=ids, attention_mask=mask)) for n, m in variants.items()}
            timings = run_interleaved(runners, a.warmup, a.runs)
        row = {}
        for name in variants:
            s = summarize(timings[name], b)
            row[name] = {"p50_ms": round(s["p50_ms"], 2), "first_call_s": compile_s[name],
                         "speedup_vs_torch_ao": paired_speedup(timings["torch.ao-dynamic"], timings[name])}
            sp = row[name]["speedup_vs_torch_ao"]
            print(f"batch {b}: {name:18s} p50 {s['p50_ms']:8.2f} ms   x torch.ao {sp['median']:.2f} "
                  f"(p10 {sp['p10']:.2f}, p90 {sp['p90']:.2f})", flush=True)
        results["batches"][str(b)] = row
    if a.json:
        with open(a.json, "w") as handle:
            json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
