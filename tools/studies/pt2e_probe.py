"""Probe: does PyTorch 2 export quantization for x86 give a BERT artifact that reloads safely and runs in INT8?

Not a runtime of bert-compress; the evidence behind leaving it out (README, "More runtimes"). Run::

    pip install --no-deps --target /tmp/pt2e torchao==0.18.0      # not a dependency of bert-compress
    PYTHONPATH=/tmp/pt2e python -m tools.studies.pt2e_probe MODEL_DIR [--compile]

What it checks, in order, printing each finding:

1. torch 2.13 no longer ships ``torch.ao.quantization.quantizer`` / ``quantize_pt2e``: the PT2E flow
   lives in torchao (``torchao.quantization.pt2e``), an extra package.
2. ``torch.export`` of the classifier with dynamic batch and sequence, ``X86InductorQuantizer``
   (static, per-channel weights), calibration, ``convert_pt2e``: the logits against fp32.
3. ``torch.export.save`` / ``load``: which archive entries could hold pickle, whether ``torch.load``
   or ``pickle.loads`` run when loading (with the example inputs stripped), and that loading fails
   unless torchao is imported first (its ``quantized_decomposed`` operators).
4. With ``--compile``: ``torch.compile`` (inductor), the only way the graph runs INT8 kernels; the
   compile time and the first call (a C++ compiler is needed where it is served).

A study script, not a feature: it lives in ``tools/studies`` (not installed) and runs from a checkout.
Produced: docs/guide.md, "More runtimes" (why PT2E x86 INT8 is left out).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import unittest.mock
import zipfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a PyTorch fp32 classifier folder (tiny is enough)")
    parser.add_argument("--compile", action="store_true", help="also torch.compile the reloaded graph (minutes)")
    a = parser.parse_args(argv)

    import torch

    print(f"torch {torch.__version__}")
    try:
        import torch.ao.quantization.quantize_pt2e  # noqa: F401
        print("1. torch.ao.quantization.quantize_pt2e: present")
    except ImportError:
        print("1. torch.ao.quantization.quantize_pt2e: absent in this torch; PT2E quantization needs torchao")
    try:
        import torchao
        import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    except ImportError as exc:
        print(f"   torchao is not importable ({exc}); install it as the docstring says and run again")
        return 1
    print(f"   torchao {torchao.__version__}")

    from compress.runtime.modeling import load_classifier
    from compress.runtime.predictor import encode_batches

    model, tokenizer, _ = load_classifier(a.model, eager_attention=True)
    model.eval()
    texts = ["a gorgeous, moving film", "a tedious mess that goes nowhere and takes its time getting there"]
    _, batches = encode_batches(tokenizer, texts, 128, 2, False)
    arrays = batches[0][1]
    args = (torch.from_numpy(arrays["input_ids"]), torch.from_numpy(arrays["attention_mask"]))

    class Logits(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask).logits

    wrapped = Logits(model).eval()
    with torch.no_grad():
        reference = wrapped(*args)
    dims = {"input_ids": {0: torch.export.Dim("batch", min=1, max=64), 1: torch.export.Dim("seq", min=2, max=128)}}
    dims["attention_mask"] = dims["input_ids"]
    program = torch.export.export(wrapped, args, dynamic_shapes=dims)
    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(program.module(), quantizer)
    prepared(*args)  # calibration
    converted = convert_pt2e(prepared)
    with torch.no_grad():
        diff = (converted(*args) - reference).abs().max().item()
    print(f"2. export + X86InductorQuantizer + convert: max |logit - fp32| = {diff:.2e}")

    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "model.pt2"
        saved = torch.export.export(converted, args, dynamic_shapes=dims)
        saved._example_inputs = None  # otherwise they are torch.save'd (pickle, loaded weights_only=True)
        torch.export.save(saved, str(file))
        names = zipfile.ZipFile(file).namelist()
        print(f"3. saved {file.stat().st_size:,} bytes; {sum('weights/' in n for n in names)} raw weight entries; "
              f"entries that could hold pickle: {[n for n in names if n.endswith(('.pt', '.pkl'))]}")
        import pickle

        calls: list[str] = []
        real_load, real_loads = torch.load, pickle.loads
        with unittest.mock.patch.object(torch, "load", lambda *x, **k: calls.append("torch.load") or real_load(*x, **k)), \
                unittest.mock.patch.object(pickle, "loads", lambda *x, **k: calls.append("pickle.loads") or real_loads(*x, **k)):
            loaded = torch.export.load(str(file))
        print(f"   load ran: {calls or 'no torch.load, no pickle.loads'} (torchao imported: its operators resolve)")
        with torch.no_grad():
            diff = (loaded.module()(*args) - reference).abs().max().item()
        print(f"   reloaded graph, eager: max |logit - fp32| = {diff:.2e} (q/dq reference ops in fp32: no INT8 kernel)")
        if a.compile:
            t0 = time.perf_counter()
            compiled = torch.compile(loaded.module())
            with torch.no_grad():
                diff = (compiled(*args) - reference).abs().max().item()
            print(f"4. torch.compile + first call: {time.perf_counter() - t0:.1f} s; max |logit - fp32| = {diff:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
