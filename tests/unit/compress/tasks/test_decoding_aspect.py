"""The decoding aspect (compress.tasks.protocol.decoding): the runtime and the server meet a task only through it.

Checked here: the aspect modules import nothing of the training stack (the ONNX runtime and the server import them),
a task whose model gives a pooled vector instead of logits plugs in with its decoding aspect alone
(:mod:`tests.support.vector_task`), and a classifier asked for vectors says so in one line.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from compress.core.errors import CompressError
from compress.runtime.predictor import Predictor
from tests.conftest import make_bert
from tests.support import vector_task
from tests.support.paths import ROOT
from tests.support.serving_env import BLOCKER, TRAINING_STACK, blocked_env

IMPORTS = BLOCKER + """
import importlib, json
for name in ("compress.tasks.sequence_classification.decoding", "compress.tasks.token_classification.decoding",
             "compress.tasks.question_answering.decoding", "compress.serving.schemas", "compress.runtime.predictor"):
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)))
"""


def test_the_decoding_aspects_import_nothing_of_the_training_stack():
    done = subprocess.run([sys.executable, "-c", IMPORTS, ",".join(TRAINING_STACK)], capture_output=True, text=True,
                          timeout=120, env=blocked_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_a_task_giving_vectors_plugs_into_the_runtime_through_its_decoding_aspect(tmp_path):
    import torch
    from transformers import AutoTokenizer, BertModel

    folder = vector_task.mark_as_toy(make_bert(tmp_path / "encoder", layers=2, hidden=32))
    texts = ["a short text", "a somewhat longer text about the weather and the sea", "word " * 60]
    with vector_task.registered():
        predictor = Predictor.load(folder, max_length=24, stride=4)
        assert predictor.task == vector_task.NAME and predictor.output_names == ["last_hidden_state"]
        vectors = predictor.encode(texts, batch_size=2)
        windows = predictor.windows(texts)
    assert vectors.shape == (3, 32) and vectors.dtype == np.float32
    assert windows.n_samples == 3 and len(windows) > 3  # the long text is read in several windows

    # the same vectors by hand: each window's token states mean-pooled, then the windows of a text averaged
    model, tokenizer = BertModel.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    expected = []
    with torch.inference_mode():
        for i in range(len(texts)):
            rows = [model(input_ids=torch.tensor([windows.input_ids[w]])).last_hidden_state[0].mean(0).numpy()
                    for w in range(len(windows)) if windows.sample[w] == i]
            expected.append(np.mean(rows, axis=0))
    assert np.allclose(vectors, np.stack(expected), atol=1e-5)
    assert tokenizer("a short text")["input_ids"] == windows.input_ids[0]


def test_a_classifier_asked_for_vectors_says_what_it_gives(tmp_path):
    folder = make_bert(tmp_path / "clf", layers=1, hidden=16, heads=2, ffn=32, head=True)
    predictor = Predictor.load(folder)
    with pytest.raises(CompressError, match="sequence-classification model: it gives labels and no sentence vector"):
        predictor.encode(["a text"])
    assert predictor.output_names == ["logits"]
    assert [o.shape for o in predictor.outputs(["a text", "another"])] == [(2,), (2,)]


def test_a_recorded_alias_is_read_as_the_registered_task():
    from compress.runtime.predictor import artifact_task

    assert artifact_task({"task": "ner"}, {}) == "token-classification"
    assert artifact_task({"parent_meta": {"task": "extractive-qa"}}, {}) == "question-answering"
    assert artifact_task({"task": "multiple-choice"}, {}) == "multiple-choice"  # refused where it is served
    assert artifact_task(None, {"architectures": ["BertForTokenClassification"]}) == "token-classification"
    assert artifact_task(None, {}) == "sequence-classification"
