"""Entities from tag sequences, and the entity-level scores a tagger is judged on (numpy only).

The rules are those of ``seqeval``'s default mode (the ``conlleval.pl`` rules), so a number here
is the number a user gets from ``seqeval.metrics.f1_score`` on the same tags, and the tests check
that exactly on many random sequences:

- an entity starts at ``B-X`` or ``S-X``, at ``I-X``/``E-X`` after ``O`` (or after an entity that
  has ended: ``E``/``S``), and wherever the type changes;
- it ends before ``B``/``S``/``O``, after ``E``/``S``, and where the type changes.

So an invalid sequence (``I-X`` after ``O``; ``I-X`` after ``B-Y``) is decoded the lenient
conlleval way, never dropped: an ``I-X`` after ``O`` is an entity of its own. Data loading
reports such sequences (:mod:`compress.tasks.token_classification.data`); scoring does not repair them.

Matching is strict: a predicted entity counts only when its type, start and end all equal a gold
entity's. Scores are micro averages over all entities, with per-type scores beside them; a ratio
whose denominator is 0 is 0 (seqeval's ``zero_division`` default). Tags must be ``O`` or
``P-TYPE`` with ``P`` in ``B I E S``; anything else is a :class:`ValueError` (the loaders reject
such tags before they reach a model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

PREFIXES = ("B", "I", "E", "S")


@dataclass(frozen=True, order=True)
class Entity:
    """One entity: its type and the words ``start`` (inclusive) to ``end`` (exclusive) of its sentence."""

    type: str
    start: int
    end: int


def split_tag(tag: str) -> tuple[str, str]:
    """``("B", "person")`` for ``B-person``, ``("O", "")`` for ``O``; a :class:`ValueError` for anything else."""
    if tag == "O":
        return "O", ""
    if len(tag) > 2 and tag[1] == "-" and tag[0] in PREFIXES:
        return tag[0], tag[2:]
    raise ValueError(f"tag {tag!r} is neither 'O' nor B-/I-/E-/S- followed by a type")


def _ends(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """seqeval's ``end_of_chunk``: did an entity end between the previous word and this one?"""
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag != "O" and prev_type != type_


def _starts(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """seqeval's ``start_of_chunk``: does an entity start at this word?"""
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag != "O" and prev_type != type_


def extract_entities(tags: Sequence[str]) -> list[Entity]:
    """The entities of one sentence's tags (BIO/IOB2 or BIOES), in order of their start."""
    entities: list[Entity] = []
    prev_tag, prev_type, begin = "O", "", 0
    for i, tag in enumerate([*tags, "O"]):
        prefix, type_ = split_tag(tag)
        if _ends(prev_tag, prefix, prev_type, type_):
            entities.append(Entity(prev_type, begin, i))
        if _starts(prev_tag, prefix, prev_type, type_):
            begin = i
        prev_tag, prev_type = prefix, type_
    return entities


def _check_pairs(true: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> None:
    if len(true) != len(pred):
        raise ValueError(f"{len(true)} gold sentences but {len(pred)} predicted ones")
    for i, (t, p) in enumerate(zip(true, pred)):
        if len(t) != len(p):
            raise ValueError(f"sentence {i}: {len(t)} gold tags but {len(p)} predicted ones")


def sentence_counts(true: Sequence[Sequence[str]], pred: Sequence[Sequence[str]],
                    types: Sequence[str] | None = None) -> tuple[list[str], np.ndarray]:
    """Per sentence and type: ``(correct, predicted, gold)`` entity counts, shape ``(sentences, types, 3)``.

    The scores are sums over sentences of these counts, so a paired bootstrap over sentences
    (resample rows, sum, :func:`scores_from_counts`) needs no second pass over the tags.
    ``types`` defaults to every type seen in either side, sorted.
    """
    _check_pairs(true, pred)
    gold = [extract_entities(t) for t in true]
    guess = [extract_entities(p) for p in pred]
    if types is None:
        types = sorted({e.type for ents in gold + guess for e in ents})
    index = {t: i for i, t in enumerate(types)}
    counts = np.zeros((len(gold), len(types), 3), dtype=np.int64)
    for row, (g, p) in enumerate(zip(gold, guess)):
        for e in set(g) & set(p):
            counts[row, index[e.type], 0] += 1
        for e in p:
            counts[row, index[e.type], 1] += 1
        for e in g:
            counts[row, index[e.type], 2] += 1
    return list(types), counts


def _prf(correct: int, predicted: int, gold: int) -> tuple[float, float, float]:
    """Precision, recall, F1 computed as seqeval computes them (same float operations, 0 for 0/0)."""
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    denom = precision + recall
    f1 = 2.0 * precision * recall / denom if denom else 0.0
    return precision, recall, f1


def scores_from_counts(types: Sequence[str], counts: np.ndarray) -> dict:
    """Micro and per-type precision/recall/F1 from :func:`sentence_counts` (summed over its first axis)."""
    counts = np.asarray(counts)
    per_type_counts = counts.sum(axis=0) if counts.ndim == 3 else counts.reshape(len(types), 3)
    c, p, g = (int(x) for x in per_type_counts.sum(axis=0))
    precision, recall, f1 = _prf(c, p, g)
    per_type = {}
    for name, (tc, tp, tg) in zip(types, per_type_counts.tolist()):
        tpr, trc, tf1 = _prf(tc, tp, tg)
        per_type[name] = {"precision": tpr, "recall": trc, "f1": tf1, "support": int(tg), "predicted": int(tp)}
    return {"precision": precision, "recall": recall, "f1": f1, "correct": c, "predicted": p, "gold": g,
            "per_type": per_type}


def entity_scores(true: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict:
    """Entity-level micro precision/recall/F1 with strict span-and-type matching, and per-type scores.

    ``f1`` equals ``seqeval.metrics.f1_score(true, pred)``; ``per_type[T]["f1"]`` equals seqeval's
    ``f1_score(..., average=None)`` entry for ``T``.
    """
    types, counts = sentence_counts(true, pred)
    return scores_from_counts(types, counts)


def surface_form(words: Sequence[str], entity: Entity) -> str:
    """An entity's words as one lower-cased string: the key of "was this name seen in training?"."""
    return " ".join(words[entity.start:entity.end]).lower()


def surface_forms(tokens: Sequence[Sequence[str]], tags: Sequence[Sequence[str]]) -> set[str]:
    """Every entity surface form (:func:`surface_form`) of a split: what a tagger could have memorised."""
    _check_pairs(tokens, tags)
    return {surface_form(w, e) for w, t in zip(tokens, tags) for e in extract_entities(t)}


def recall_by_novelty(tokens: Sequence[Sequence[str]], true: Sequence[Sequence[str]], pred: Sequence[Sequence[str]],
                      seen: set[str]) -> dict[str, tuple[int, int]]:
    """``{"seen": (found, gold), "unseen": (found, gold)}``: gold entities whose surface form is / is not in
    ``seen`` (the training split's :func:`surface_forms`), and how many of them ``pred`` finds exactly (span and
    type). WNUT-17 was built so that almost every test entity is unseen. A student that keeps its teacher's recall
    on seen names but not on new ones falls short in generalising, which more labels of the same names would not
    show."""
    _check_pairs(true, pred)
    out = {"seen": [0, 0], "unseen": [0, 0]}
    for words, t, p in zip(tokens, true, pred):
        found = set(extract_entities(p))
        for e in extract_entities(t):
            side = out["seen" if surface_form(words, e) in seen else "unseen"]
            side[1] += 1
            side[0] += e in found
    return {k: (v[0], v[1]) for k, v in out.items()}


def token_agreement(a: Sequence[Sequence[str]], b: Sequence[Sequence[str]]) -> float:
    """Share of words on which two taggings give the same tag (a student against its teacher, or gold).

    Counts every word, ``O`` included; 0.0 when there are no words.
    """
    _check_pairs(a, b)
    total = sum(len(s) for s in a)
    same = sum(x == y for s, t in zip(a, b) for x, y in zip(s, t))
    return same / total if total else 0.0


def decode_ids(ids: Sequence[Sequence[int]], label_names: Sequence[str]) -> list[list[str]]:
    """Tag ids (argmax of per-word logits) as tag names."""
    return [[label_names[int(i)] for i in row] for row in ids]
