"""Distillation under torchrun (2 CPU processes, gloo) against a single process with the same
effective batch: the same soft-label cache and, within a stated tolerance, the same student."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import make_tokenizer, run_cli, sentiment_rows, write_csv

from tests.support.paths import ROOT
#: Largest weight difference allowed between the 2-rank and the 1-rank student. Both see the
#: same 16 examples per step (2 x 8 against 16) in the same order; what differs is the order of
#: floating-point sums (gradient all-reduce, batch shapes), so the gap stays near float32 rounding.
WEIGHT_ATOL = 1e-4


def _teacher_without_dropout(root: Path) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, num_labels=2,
                        architectures=["BertForSequenceClassification"])
    BertForSequenceClassification(config).save_pretrained(root / "teacher")
    make_tokenizer().save_pretrained(root / "teacher")
    return root / "teacher"


@pytest.mark.slow
def test_two_ranks_match_one(tmp_path, capsys, monkeypatch):
    teacher = _teacher_without_dropout(tmp_path)
    data = write_csv(tmp_path / "data.csv", sentiment_rows(160))
    # the teacher's head is random (distill would refuse it): what is compared is 2 ranks against 1
    common = ["distill", "--teacher", str(teacher), "--data", str(data), "--student", "1x32", "--init", "random",
              "--epochs", "1", "--lr", "1e-3", "--sampling", "sequential", "--no-intermediate", "--seed", "0",
              "--allow-untrained-teacher", "--precision", "fp32"]  # the fp32 sums DDP must reproduce, on any CPU
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def run(prefix, out, batch, cache):
        e = {**env, "BERT_COMPRESS_CACHE": str(tmp_path / cache)}
        result = subprocess.run(prefix + common + ["--batch-size", str(batch), "--out", str(tmp_path / out)],
                                cwd=ROOT, env=e, capture_output=True, text=True, timeout=400)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result

    # The single process runs the same command line in this process (one torch thread, as each rank has):
    # torchrun's three interpreters are what this test is about, a fourth start-up would only add seconds.
    monkeypatch.setenv("BERT_COMPRESS_CACHE", str(tmp_path / "cache1"))
    single = run_cli(common + ["--batch-size", "16", "--out", str(tmp_path / "single")], capsys)
    assert single.returncode == 0, single.stdout[-3000:] + single.stderr[-3000:]
    ddp = run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "compress"],
              "ddp", 8, "cache2")

    # the soft-label cache of the 2-rank run has the same key and the same values
    one = sorted((tmp_path / "cache1" / "soft-labels").glob("*.npy"))
    two = sorted((tmp_path / "cache2" / "soft-labels").glob("*.npy"))
    assert [p.name for p in one] == [p.name for p in two] and len(one) == 3
    for a, b in zip(one, two):
        np.testing.assert_allclose(np.load(a), np.load(b), atol=1e-5)

    import json

    from safetensors.torch import load_file

    meta = json.loads((tmp_path / "ddp" / "compress.json").read_text())
    assert meta["training"]["effective_batch_size"] == 16
    w1, w2 = load_file(tmp_path / "single" / "model.safetensors"), load_file(tmp_path / "ddp" / "model.safetensors")
    worst = max(float((w1[k] - w2[k]).abs().max()) for k in w1)
    assert worst < WEIGHT_ATOL, f"2-rank student differs from 1-rank by {worst}"
    assert "soft labels (train" in ddp.stdout
