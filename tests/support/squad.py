"""Synthetic SQuAD-format files: the answer, one of ten colour words, sits after "the key is" among
filler words, so a tiny reader learns it in seconds and F1 means something. With ``impossible``, that share
of the questions (SQuAD 2.0) is asked of a passage without a key: no answer."""

from __future__ import annotations

import json
import random
from pathlib import Path


FILLER = "the a film plot was good bad story actor scene music long short day night city town river".split()
COLOURS = "red blue green black white gold silver brown pink grey".split()


def squad_file(path: Path, questions: int, seed: int, impossible: float = 0.0) -> Path:
    rng = random.Random(seed)
    articles = []
    for a in range(questions // 10):
        paragraphs = []
        for q in range(10):
            before = " ".join(rng.choice(FILLER) for _ in range(rng.randint(2, 30)))
            after = " ".join(rng.choice(FILLER) for _ in range(rng.randint(2, 30)))
            colour = rng.choice(COLOURS)
            context = f"{before} the key is {colour} . {after}"
            start = len(before) + len(" the key is ")
            assert context[start:start + len(colour)] == colour
            qa = {"id": f"{seed}-{a}-{q}", "question": "what is the key ?",
                  "answers": [{"text": colour, "answer_start": start}]}
            if impossible and rng.random() < impossible:
                context = f"{before} the door is {colour} . {after}"  # a colour, but not the key's
                qa.update(answers=[], is_impossible=True)
            elif impossible:
                qa["is_impossible"] = False
            paragraphs.append({"context": context, "qas": [qa]})
        articles.append({"title": f"article {seed}-{a}", "paragraphs": paragraphs})
    path.write_text(json.dumps({"version": "2.0" if impossible else "1.1", "data": articles}))
    return path


def squad_splits(root: Path, impossible: float = 0.0) -> Path:
    """``root`` holding train (200 questions), validation and test (40 each) synthetic SQuAD files (SQuAD 2.0
    with ``impossible`` of the questions unanswerable)."""
    root.mkdir(parents=True, exist_ok=True)
    for split, n, seed in (("train", 200, 1), ("validation", 40, 2), ("test", 40, 3)):
        squad_file(root / f"{split}.json", n, seed, impossible)
    return root


def train_tiny_reader(root: Path, data: Path, encoder: Path, max_length: int = 48) -> Path:
    """The teacher stage on ``data`` from the tiny ``encoder``: 2 epochs at a learning rate that fits the synthetic
    files in seconds."""
    from compress.config import DataOptions, TeacherConfig, TrainSettings
    from compress.stages.teacher import train_teacher

    cfg = TeacherConfig(model=str(encoder), data=DataOptions(str(data)), max_length=max_length,
                        train=TrainSettings(epochs=2, lr=3e-3, batch_size=16, logging_steps=1000))
    return train_teacher(cfg, root / "teacher")
