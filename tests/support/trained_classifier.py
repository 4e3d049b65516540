"""One tiny trained classifier and what the runtime tests compare against, shared by the modules that
quantize or convert it (tests/unit/compress/test_runtimes.py, tests/unit/compress/runtime/formats/test_openvino.py).

A test module imports the fixtures by name; they are module-scoped, so each module trains its own copy (a
few seconds) in its own temporary folder and the modules stay independent under ``pytest -n``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compress.config import DataOptions
from compress.runtime.predictor import Predictor
from tests.conftest import make_bert, sentiment_rows, train_briefly, write_csv

#: The texts every kind is compared on (not in the calibration rows of ``data``: another seed).
TEXTS = [r["text"] for r in sentiment_rows(60, seed=11)]


@pytest.fixture(scope="module")
def work(tmp_path_factory, request) -> Path:
    return tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])


@pytest.fixture(scope="module")
def trained(work) -> Path:
    """A 2-layer BERT trained for 40 steps: logit margins of ~3-6, so agreement means something."""
    return train_briefly(make_bert(work / "bert", layers=2, head=True), steps=40, seed=0)


@pytest.fixture(scope="module")
def data(work) -> DataOptions:
    return DataOptions(str(write_csv(work / "sentiment.csv", sentiment_rows(240, seed=3))))


@pytest.fixture(scope="module")
def fp32_logits(trained) -> np.ndarray:
    return Predictor.load(trained, threads=1).logits(TEXTS)


def agreement(logits: np.ndarray, reference: np.ndarray) -> float:
    """The share of rows whose top class is the reference's."""
    return float((logits.argmax(-1) == reference.argmax(-1)).mean())
