"""Serving an ONNX artifact with onnxruntime, tokenizers and numpy only.

The ONNX Predictor reads ``config.json``/``compress.json`` with json and the tokenizer with the
``tokenizers`` library; these tests check that it feeds the graph exactly what the transformers
tokenizer path fed it (single texts, pairs, truncation, batching), and that an INT8 artifact
predicts in a process where torch, transformers and the rest of the training stack cannot be
imported at all (and, marked slow, in a real venv made from ``requirements-serve.txt``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compress.runtime.predictor import Predictor, encode_batches
from compress.runtime.tokenization import ArtifactTokenizer
from tests.conftest import make_bert
from tests.support.serving_env import BLOCKER, TRAINING_STACK, blocked_env

from tests.support.paths import ROOT
TEXTS = ["a wonderful and charming film", "the plot was dull, the acting weak and the story really tedious " * 6, "bad",
         "Café naïve — “quoted” [MASK] words!", "good", "  spaced   out  "]
PAIRS = [("A man is playing a guitar.", "Someone plays an instrument."), ("Is it raining?", "No."),
         ("The cat sleeps " * 20, "A dog is running through the park on a sunny afternoon " * 5)]
#: What a serving install does not have (requirements-serve.txt brings onnxruntime, tokenizers, numpy).



@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """A tiny classifier exported to ONNX (fused fp32) and quantized to ONNX Runtime INT8."""
    from compress.stages.export import export_onnx
    from compress.stages.quantize import quantize

    root = tmp_path_factory.mktemp("serving")
    model = make_bert(root / "model", head=True, seed=3)
    onnx_dir = export_onnx(model, root / "onnx")
    int8_dir = quantize(onnx_dir, root / "int8")
    return {"pytorch": model, "onnx-fp32": onnx_dir, "onnx-int8": int8_dir}


def test_artifact_tokenizer_matches_transformers(artifacts):
    from transformers import AutoTokenizer

    folder = artifacts["onnx-int8"]
    hf, lean = AutoTokenizer.from_pretrained(str(folder)), ArtifactTokenizer.from_folder(folder)
    assert (lean.pad_token_id, lean.model_max_length, len(lean)) == (hf.pad_token_id, hf.model_max_length, len(hf))
    firsts, seconds = [p[0] for p in PAIRS], [p[1] for p in PAIRS]
    for max_length in (6, 16, 128):
        for padding in (False, "max_length"):
            for args in ((TEXTS,), (firsts, seconds)):
                a = hf(*args, truncation=True, max_length=max_length, padding=padding)
                b = lean(*args, truncation=True, max_length=max_length, padding=padding)
                for key in ("input_ids", "token_type_ids", "attention_mask"):
                    assert a[key] == b[key], (max_length, padding, key)
    assert lean("wonderful")["input_ids"] == hf("wonderful")["input_ids"]


@pytest.mark.parametrize("kind", ["onnx-fp32", "onnx-int8"])
def test_onnx_predictor_feeds_what_the_transformers_path_fed(artifacts, kind):
    """Same arrays as the transformers tokenizer gives, hence bit-identical logits, in the caller's order."""
    import onnxruntime as ort
    from transformers import AutoTokenizer

    folder = artifacts[kind]
    predictor = Predictor.load(folder)
    assert predictor.kind == kind and type(predictor.tokenizer).__name__ == "ArtifactTokenizer"
    hf = AutoTokenizer.from_pretrained(str(folder))
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for inputs, batch_size in ((TEXTS, 4), (PAIRS, 2), (TEXTS, 1)):
        n, batches = encode_batches(hf, inputs, predictor.max_length, batch_size, "token_type_ids" in names)
        expected = np.zeros((n, predictor.num_labels), dtype=np.float32)
        for idx, arrays in batches:
            expected[idx] = session.run(["logits"], {k: arrays[k] for k in names})[0]
        assert np.array_equal(predictor.logits(inputs, batch_size=batch_size), expected)
    assert predictor.label_names == ["LABEL_0", "LABEL_1"]


def test_onnx_predictions_agree_with_pytorch(artifacts):
    reference = Predictor.load(artifacts["pytorch"]).logits(TEXTS)
    assert np.allclose(Predictor.load(artifacts["onnx-fp32"]).logits(TEXTS), reference, atol=1e-4)



PREDICT = BLOCKER + """
import json
try:
    import torch
except ImportError:
    pass
else:
    raise SystemExit("the blocker let torch through")
from compress.runtime.predictor import Predictor
p = Predictor.load(sys.argv[1])
single = p.logits(json.loads(sys.argv[2]), batch_size=3)
pairs = p.logits([tuple(x) for x in json.loads(sys.argv[3])], batch_size=2)
labels, probs = p.predict(json.loads(sys.argv[2]))
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
print(json.dumps({"kind": p.kind, "single": single.tolist(), "pairs": pairs.tolist(), "labels": labels,
                  "loaded": loaded}))
"""





def test_int8_onnx_predicts_with_the_training_stack_unimportable(artifacts):
    folder = artifacts["onnx-int8"]
    done = subprocess.run([sys.executable, "-c", PREDICT, ",".join(TRAINING_STACK), str(folder), json.dumps(TEXTS),
                           json.dumps(PAIRS)], capture_output=True, text=True, timeout=120, env=blocked_env(),
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["kind"] == "onnx-int8" and got["loaded"] == []
    full = Predictor.load(folder)  # the same artifact in this process, where everything is importable
    assert np.array_equal(np.asarray(got["single"], dtype=np.float32), full.logits(TEXTS, batch_size=3))
    assert np.array_equal(np.asarray(got["pairs"], dtype=np.float32), full.logits(PAIRS, batch_size=2))
    assert got["labels"] == full.predict(TEXTS)[0]


def test_predict_command_runs_with_the_training_stack_unimportable(artifacts):
    """``bert-compress predict`` itself (argument parsing included) needs nothing of the training stack."""
    code = BLOCKER + "import runpy\nrunpy.run_module('compress', run_name='__main__')\n"
    folder = artifacts["onnx-int8"]
    done = subprocess.run([sys.executable, "-c", code, ",".join(TRAINING_STACK), "predict", "--model", str(folder),
                           "a wonderful film", "bad"], capture_output=True, text=True, timeout=120,
                          env=blocked_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split("\t") for line in done.stdout.strip().splitlines()]
    labels, probs = Predictor.load(folder).predict(["a wonderful film", "bad"])
    assert [r[0] for r in rows] == labels and [r[2] for r in rows] == ["a wonderful film", "bad"]
    assert rows[0][1] == " ".join(f"LABEL_{i}={p:.4f}" for i, p in enumerate(probs[0]))


def test_a_torch_artifact_in_a_serving_environment_says_what_is_missing(artifacts):
    code = BLOCKER + "import runpy\nrunpy.run_module('compress', run_name='__main__')\n"
    done = subprocess.run([sys.executable, "-c", code, ",".join(TRAINING_STACK), "predict", "--model",
                           str(artifacts["pytorch"]), "good"], capture_output=True, text=True, timeout=120,
                          env=blocked_env(), cwd=ROOT)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "needs torch and transformers" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_requirements_serve_venv_predicts(artifacts, tmp_path):
    """A real venv with only requirements-serve.txt and ``pip install --no-deps`` of this checkout.

    Skipped only when pip has no package source at all (no index host answers, no local wheel
    folder), found by :func:`_unreachable_package_sources` without installing anything. With a
    source there, a pip failure installing requirements-serve.txt (a pin that does not exist, a
    conflict) or building this checkout fails the test: that is the documented install breaking.
    """
    venv = tmp_path / "serve-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    unreachable = _unreachable_package_sources(python)
    if unreachable:
        pytest.skip(unreachable)
    # --no-compile: byte-compiling numpy's and onnxruntime's sources is seconds of CPU and no part of the install
    # under test (Python compiles what it imports on first use either way).
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]
    got = subprocess.run(pip + ["-r", str(ROOT / "requirements-serve.txt")], capture_output=True, text=True, timeout=900)
    assert got.returncode == 0, f"pip could not install requirements-serve.txt: {got.stderr.strip()[-3000:]}"
    source = tmp_path / "source"  # a copy, so the build leaves nothing in the checkout
    source.mkdir()
    for item in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / item, source / item)
    for item in ("compress", "students", "benchmarks"):
        shutil.copytree(ROOT / item, source / item, ignore=shutil.ignore_patterns("__pycache__"))
    got = subprocess.run(pip + ["--no-deps", str(source)], capture_output=True, text=True, timeout=900)
    assert got.returncode == 0, f"pip could not build and install this checkout: {got.stderr.strip()[-3000:]}"
    listed = subprocess.run([python, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True)
    installed = {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}
    assert not installed & {"torch", "transformers", "datasets", "accelerate", "torch-pruning", "matplotlib", "onnx"}
    done = subprocess.run([python, "-m", "compress", "predict", "--model", str(artifacts["onnx-int8"]), "good", "bad"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    labels, _ = Predictor.load(artifacts["onnx-int8"]).predict(["good", "bad"])
    assert [line.split("\t")[0] for line in done.stdout.strip().splitlines()] == labels
    # And the HTTP server of that install (starlette, uvicorn, prometheus-client are in requirements-serve.txt).
    import httpx

    from benchmarks.http_server import ServerProcess

    with ServerProcess(artifacts["onnx-int8"], ["--threads", "1"], launcher=[python, "-m", "compress"],
                       cwd=tmp_path) as server:
        served = httpx.post(f"{server.url}/predict", json={"inputs": ["good", "bad"]}, timeout=30).json()
        assert server.stop(30) == 0
    assert [r["label"] for r in served] == labels


def _unreachable_package_sources(python: str) -> str | None:
    """Why pip in ``python``'s venv has no package source to install from, or ``None`` when it has one.

    Reads pip's own configuration (``pip config list``: files and ``PIP_*`` variables) for the
    index, extra indexes and find-links; a local folder counts when it exists, an http(s) index
    when a TCP connection to its host opens within a few seconds. This probes the network and the
    disk, not the packages: whether requirements-serve.txt installs is the thing under test.
    """
    import socket
    from urllib.parse import urlparse

    listed = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=120)
    settings: dict[str, list[str]] = {}
    for line in listed.stdout.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        settings.setdefault(name, []).extend(value.strip().strip("'\"").split())
    if any(v.lower() in ("1", "true", "yes", "on") for v in settings.get("no-index", [])):
        indexes: list[str] = []
    else:
        indexes = (settings.get("index-url") or ["https://pypi.org/simple"]) + settings.get("extra-index-url", [])
    tried = []
    for source in indexes + settings.get("find-links", []):
        url = urlparse(source)
        if url.scheme in ("http", "https"):
            try:
                socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)),
                                         timeout=5).close()
                return None
            except OSError as exc:
                tried.append(f"{source} ({exc})")
        else:
            folder = Path(url.path if url.scheme == "file" else source)
            if folder.is_dir() and any(folder.iterdir()):
                return None
            tried.append(f"{source} (no such folder, or empty)")
    return "no package source reachable for pip: " + ("; ".join(tried) or "none configured")
