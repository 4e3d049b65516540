"""The toy tagging task of the NER tests: city names (one or two words) are LOC, a few first names PER,
everything else O; learnable by a tiny BERT in a few dozen steps."""

from __future__ import annotations

import random
from pathlib import Path


CITIES = [["Paris"], ["London"], ["Berlin"], ["Madrid"], ["Rome"], ["New", "York"], ["San", "Francisco"]]
PEOPLE = [["Alice"], ["Maria"], ["Peter"], ["John"]]
FILLER = "the a we went to and saw with visited yesterday then later friends from".split()


def toy_sentences(n: int, seed: int = 0, types: tuple[str, ...] = ("LOC", "PER")) -> list[tuple[list[str], list[str]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words, tags = [], []
        for _ in range(rng.randint(4, 9)):
            r = rng.random()
            pick = CITIES if r < 0.22 and "LOC" in types else PEOPLE if r < 0.34 and "PER" in types else None
            if pick is None:
                words.append(rng.choice(FILLER))
                tags.append("O")
            else:
                name = rng.choice(pick)
                kind = "LOC" if pick is CITIES else "PER"
                words += name
                tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(name) - 1)
        out.append((words, tags))
    return out


def write_conll(path: Path, sentences) -> Path:
    path.write_text("\n\n".join("\n".join(f"{w}\t{t}" for w, t in zip(*s)) for s in sentences) + "\n",
                    encoding="utf-8")
    return path


def teacher_config(model: Path, data: Path, epochs: float = 2.0):
    from compress.config import TeacherConfig

    return TeacherConfig.from_dict({"model": str(model), "data": {"data": str(data)}, "max_length": 48,
                                    "train": {"epochs": epochs, "lr": 6e-3, "batch_size": 8, "save_steps": 100000,
                                              "sampling": "sequential", "logging_steps": 1000}})


def toy_tagger(folder: Path, sentences: int = 160, epochs: float = 2.0, data: Path | None = None,
               name: str = "teacher") -> tuple[Path, Path]:
    """A tiny 2-layer BERT fine-tuned as a tagger in ``folder / name`` on ``data`` (default: ``sentences`` toy
    sentences written to ``folder / "toy.conll"``); ``(data file, tagger folder)``."""
    from compress.stages.teacher import train_teacher
    from tests.conftest import make_bert

    data = data or write_conll(folder / "toy.conll", toy_sentences(sentences))
    encoder = make_bert(folder / f"{name}-encoder", layers=2, hidden=32, heads=4, ffn=64)
    return data, train_teacher(teacher_config(encoder, data, epochs), folder / name)
