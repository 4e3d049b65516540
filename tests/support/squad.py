"""Synthetic SQuAD-format files: the answer, one of ten colour words, sits after "the key is" among
filler words, so a tiny reader learns it in seconds and F1 means something."""

from __future__ import annotations

import json
import random
from pathlib import Path


FILLER = "the a film plot was good bad story actor scene music long short day night city town river".split()
COLOURS = "red blue green black white gold silver brown pink grey".split()


def squad_file(path: Path, questions: int, seed: int) -> Path:
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
            paragraphs.append({"context": context, "qas": [{"id": f"{seed}-{a}-{q}", "question": "what is the key ?",
                                                            "answers": [{"text": colour, "answer_start": start}]}]})
        articles.append({"title": f"article {seed}-{a}", "paragraphs": paragraphs})
    path.write_text(json.dumps({"version": "1.1", "data": articles}))
    return path


def squad_splits(root: Path) -> Path:
    """``root`` holding train (200 questions), validation and test (40 each) synthetic SQuAD files."""
    root.mkdir(parents=True, exist_ok=True)
    for split, n, seed in (("train", 200, 1), ("validation", 40, 2), ("test", 40, 3)):
        squad_file(root / f"{split}.json", n, seed)
    return root
