"""Tiny sentence-transformers folders and a toy corpus, for the sentence-embedding task's tests."""

from __future__ import annotations

import random
from pathlib import Path

from compress.tasks.sentence_embedding.folder import SentenceConfig, write_sentence_config
from tests.conftest import FILLER, NEGATIVE, POSITIVE, make_bert

#: Topics whose sentences share words, so a trained encoder would put each topic's texts near one another.
TOPICS = {
    "food": ["pizza", "bread", "cheese", "soup", "salad", "pasta"],
    "sport": ["football", "tennis", "goal", "match", "team", "coach"],
    "weather": ["rain", "snow", "wind", "storm", "sunny", "cloud"],
}


def make_st_folder(path: Path, pooling: str = "mean", normalize: bool = True, hidden: int = 32, layers: int = 2,
                   seed: int = 0, max_seq_length: int | None = None) -> Path:
    """A tiny random BERT saved as a sentence-transformers folder (modules.json, 1_Pooling/config.json)."""
    make_bert(path, layers=layers, hidden=hidden, heads=4, ffn=2 * hidden, seed=seed)
    write_sentence_config(path, SentenceConfig(pooling=pooling, normalize=normalize, max_seq_length=max_seq_length),
                          dimension=hidden)
    return path


def corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` short texts of varying length over three topics and the sentiment words (unlabelled in-domain text)."""
    rng = random.Random(seed)
    words = [w for group in TOPICS.values() for w in group]
    texts = []
    for _ in range(n):
        topic = rng.choice(list(TOPICS.values()))
        picked = rng.choices(topic, k=rng.randint(2, 4)) + rng.choices(FILLER + POSITIVE + NEGATIVE + words,
                                                                      k=rng.randint(1, 8))
        rng.shuffle(picked)
        texts.append(" ".join(picked))
    return texts


def onnx_encoder_artifact(st_folder: Path, out: Path, max_length: int = 32) -> Path:
    """An ONNX artifact of a sentence-transformers folder, pooling and normalisation in the graph: ``model.onnx``
    (output ``sentence_embedding``), the encoder's config and tokenizer, and a ``compress.json`` naming the task
    (what the export stage writes for this task, done here by ``torch.onnx.export`` directly)."""
    import torch

    from compress.core.artifact import write_artifact
    from compress.tasks.sentence_embedding.pooling import load_pooled_encoder

    model, tok, _ = load_pooled_encoder(st_folder, eager=True)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = tok(["a short one", "a longer text about the football match"], padding=True, return_tensors="pt")

    def fill(tmp: Path) -> None:
        with torch.no_grad():
            torch.onnx.export(model, tuple(example[n] for n in names), str(tmp / "model.onnx"), input_names=names,
                              output_names=["sentence_embedding"], opset_version=17, dynamo=False,
                              dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in names},
                                            "sentence_embedding": {0: "batch"}})
        model.encoder.config.save_pretrained(tmp)
        tok.save_pretrained(tmp)

    return write_artifact(out, fill, {"task": "sentence-embedding", "kind": "onnx-fp32", "max_length": max_length})
