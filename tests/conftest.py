"""Shared fixtures: tiny BERT and MPNet models built in-process with the real bert-base-uncased
vocabulary (MPNet's in its real layout: shifted by four ids), and small but learnable sentiment
data written to disk like a user's file."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

POSITIVE = ["good", "great", "wonderful", "moving", "funny", "brilliant", "charming", "superb"]
NEGATIVE = ["bad", "awful", "boring", "dull", "terrible", "tedious", "clumsy", "weak"]
FILLER = ["the", "movie", "film", "plot", "was", "really", "acting", "story", "quite", "and", "a", "cast"]


def make_tokenizer():
    """A real WordPiece tokenizer over bert-base-uncased's 30,522-token vocabulary."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast

    wp = BertWordPieceTokenizer(str(FIXTURES / "vocab.txt"), lowercase=True)
    tok = BertTokenizerFast(tokenizer_object=wp._tokenizer, unk_token="[UNK]", sep_token="[SEP]",
                            pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]", model_max_length=128)
    assert tok.convert_ids_to_tokens(tok("wonderful")["input_ids"])[1] == "wonderful"
    return tok


def make_bert(path: Path, layers: int = 4, hidden: int = 32, heads: int = 4, ffn: int = 64, seed: int = 0,
              head: bool = False, num_labels: int = 2, max_positions: int = 128,
              model_max_length: int = 128) -> Path:
    """Save a tiny random BERT (encoder only, or with a classifier head) and the tokenizer to ``path``.

    ``max_positions`` below ``model_max_length`` gives a position table shorter than the
    tokenizer's limit, as a compact student under a 512-token tokenizer has."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=ffn, max_position_embeddings=max_positions, num_labels=num_labels)
    model = BertForSequenceClassification(config) if head else BertModel(config)
    model.save_pretrained(path, safe_serialization=True)
    tok = make_tokenizer()
    tok.model_max_length = model_max_length
    tok.save_pretrained(path)
    return path


#: MPNet's special tokens before bert-base-uncased's vocabulary, and its mask token after it: the
#: layout of the real mpnet-base vocabulary (30,527 ids; /work/shared/ASSETS.md).
MPNET_HEAD_TOKENS = ("<s>", "<pad>", "</s>", "<unk>")
MPNET_VOCAB_SIZE = 30527
MPNET_SHIFT = len(MPNET_HEAD_TOKENS)


def make_mpnet_tokenizer(model_max_length: int = 512):
    """MPNet's real tokenizer layout over tests/fixtures/vocab.txt: bert-base-uncased's word pieces at
    their id + 4, ``<s> <pad> </s> <unk>`` at 0..3, ``<mask>`` last (30526); ``<s> A </s>`` and
    ``<s> A </s></s> B </s>`` framing, no token types, unknown words as ``[UNK]`` (104), as mpnet-base's
    tokenizer_config says. The limit is the real one's 512 unless given."""
    from transformers import MPNetTokenizer

    words = (FIXTURES / "vocab.txt").read_text(encoding="utf-8").splitlines()
    vocab = {token: i for i, token in enumerate([*MPNET_HEAD_TOKENS, *words, "<mask>"])}
    assert len(vocab) == MPNET_VOCAB_SIZE
    tok = MPNetTokenizer(vocab=vocab, model_max_length=model_max_length)
    bert_ids = {w: i for i, w in enumerate(words)}
    ids = tok("wonderful")["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["<s>", "wonderful", "</s>"], ids
    assert ids[1] == bert_ids["wonderful"] + MPNET_SHIFT and tok.mask_token_id == MPNET_VOCAB_SIZE - 1
    return tok


def make_mpnet(path: Path, layers: int = 2, hidden: int = 32, heads: int = 4, ffn: int = 64, seed: int = 0,
               head: bool = False, num_labels: int = 2, max_positions: int = 66,
               model_max_length: int = 512) -> Path:
    """Save a tiny random MPNet (encoder only, or ``MPNetForSequenceClassification``) and its tokenizer.

    As in the real mpnet-base, positions count from ``padding_idx + 1`` (= 2), so a table of
    ``max_positions`` rows holds sequences of ``max_positions - 2`` tokens; the default 66 rows (64
    tokens) under the tokenizer's 512 make the position cap, not the tokenizer, decide the length."""
    import torch
    from transformers import MPNetConfig, MPNetForSequenceClassification, MPNetModel

    torch.manual_seed(seed)
    config = MPNetConfig(vocab_size=MPNET_VOCAB_SIZE, hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, intermediate_size=ffn, max_position_embeddings=max_positions,
                         num_labels=num_labels)  # 32 relative-attention buckets, as the real one (and the code) has
    model = MPNetForSequenceClassification(config) if head else MPNetModel(config)
    model.save_pretrained(path, safe_serialization=True)
    make_mpnet_tokenizer(model_max_length).save_pretrained(path)
    return path


def train_briefly(folder: Path, steps: int = 30, seed: int = 5) -> Path:
    """A few AdamW steps on sentiment rows for a ``make_bert``/``make_mpnet(..., head=True)`` folder, saved in place:
    a classifier clearly better than chance (the teacher and distill stages test for that)."""
    import json

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    rows = sentiment_rows(320, seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(steps):
        batch = [rows[(step * 32 + i) % len(rows)] for i in range(32)]
        enc = tok([r["text"] for r in batch], padding=True, return_tensors="pt")
        model(**enc, labels=torch.tensor([r["label"] for r in batch])).loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(folder, safe_serialization=True)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": [type(model).__name__]}))
    return folder


def sentiment_rows(n: int, seed: int = 0) -> list[dict]:
    """Sentences whose label follows from one sentiment word among filler: learnable in seconds."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = i % 2
        word = rng.choice(POSITIVE if label else NEGATIVE)
        words = rng.sample(FILLER, rng.randint(3, 8))
        words.insert(rng.randint(0, len(words)), word)
        rows.append({"text": " ".join(words), "label": label})
    return rows


def write_csv(path: Path, rows: list[dict]) -> Path:
    import pandas as pd

    pd.DataFrame(rows).to_csv(path, index=False)
    return path

def gate_verdict(results_dir: Path, tmp_path: Path, rules: str, baseline: Path | None = None) -> tuple[int, str]:
    """``bert-compress gate`` on ``results_dir/results.json`` with the rules text ``rules``: (exit code, its table)."""
    import io

    from benchmarks.gate import run_gate

    path = tmp_path / "rules.toml"
    path.write_text(rules)
    buf = io.StringIO()
    code = run_gate(results_dir / "results.json", path, baseline=baseline, out=buf, step_summary="")
    return code, buf.getvalue()



def run_cli(argv: list[str], capsys, threads: int = 1):
    """``bert-compress ARGV`` through the CLI's ``main`` in this process, as a ``CompletedProcess``.

    For the runs beside one that must be a process of its own (killed, interrupted, torchrun): the same
    command line without another interpreter start-up (torch and transformers imports cost most of ten
    seconds on two busy cores). ``threads`` torch threads, 1 as ``OMP_NUM_THREADS=1`` gives the
    subprocesses, so the floating-point sums are the ones they make."""
    import subprocess

    import torch

    from compress.cli import main

    capsys.readouterr()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        code = main(argv)
    finally:
        torch.set_num_threads(before)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Every cache (fetched assets, prepared data, soft labels) goes to a fresh folder for the
    session, so tests see what a new machine sees and never touch the user's cache."""
    old = os.environ.get("BERT_COMPRESS_CACHE")
    os.environ["BERT_COMPRESS_CACHE"] = str(tmp_path_factory.mktemp("bert-compress-cache"))
    yield
    if old is None:
        os.environ.pop("BERT_COMPRESS_CACHE", None)
    else:
        os.environ["BERT_COMPRESS_CACHE"] = old


@pytest.fixture
def tokenizer():
    return make_tokenizer()


@pytest.fixture
def sentiment_csv(tmp_path) -> Path:
    return write_csv(tmp_path / "sentiment.csv", sentiment_rows(240))


@pytest.fixture
def tiny_encoder(tmp_path) -> Path:
    return make_bert(tmp_path / "tiny-encoder")


@pytest.fixture
def tiny_mpnet_encoder(tmp_path) -> Path:
    """A tiny MPNet encoder (no head) in the real mpnet-base layout: the default teacher's shape."""
    return make_mpnet(tmp_path / "tiny-mpnet-encoder")
