"""Shared fixtures: tiny BERT models built in-process with the real bert-base-uncased vocabulary,
and small but learnable sentiment data written to disk like a user's file."""

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
              head: bool = False, num_labels: int = 2) -> Path:
    """Save a tiny random BERT (encoder only, or with a classifier head) and the tokenizer to ``path``."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=ffn, max_position_embeddings=128, num_labels=num_labels)
    model = BertForSequenceClassification(config) if head else BertModel(config)
    model.save_pretrained(path, safe_serialization=True)
    make_tokenizer().save_pretrained(path)
    return path


def train_briefly(folder: Path, steps: int = 30, seed: int = 5) -> Path:
    """A few AdamW steps on sentiment rows for a ``make_bert(..., head=True)`` folder, saved in place:
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
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["BertForSequenceClassification"]}))
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
