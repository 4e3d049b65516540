"""Mention-replaced variants of a tagger's training sentences: transfer rows that keep their gold tags.

Why: nine words in ten of a tagging set are ``O``, and so are the words of raw transfer text, so the
student sees few entity words beside the teacher's; it agrees with the teacher on ~70% of the entities of
its own training sentences against 98% of the words (docs/lab/ner.md). A variant keeps a training sentence's
context and swaps its entity mentions for other mentions of the same type from the training split
(mention replacement, as in Dai and Adel's study of augmentation for NER): the words around an entity
stay, the entity words change, and the gold tags follow the new mention (its own ``B-``/``I-`` or BIOES
tags), so a variant carries both terms of the objective, the teacher's word labels and the gold tags.

The replacement mentions are the training split's (``mention_pool``), and with ``--mention-pool
train+transfer`` also the ones the teacher tags with confidence in the transfer text
(:func:`teacher_mentions`): names the gold data never shows, in the contexts it does, aimed at the names a
student misses most (it recalls fewer new names than its teacher, docs/lab/ner.md). A variant whose text is a
sentence of any split (or an earlier variant) is dropped, so nothing of validation or test comes in.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from compress.core.numerics import softmax
from compress.tasks.token_classification.metrics import Entity, extract_entities
from compress.corpora.texts import text_key

#: Chance that each mention of a sentence is replaced in a variant (at least one always is).
P_REPLACE = 0.5
#: Draws per wanted variant before a sentence gives up (a draw can repeat a text already seen).
ATTEMPTS = 4
#: A transfer mention joins the pool only where the teacher gives its top tag at least this probability at every
#: word, since a pool mention is read as gold. Chosen on WNUT-17's validation split (docs/lab/ner.md): there the
#: teacher's entities are 72% right, 86.5% of those above 0.5 (430 of 660 kept); its probabilities stay under
#: ~0.75, so 0.9 kept none, and 0.5 keeps 2,390 distinct mentions of 10,000 transfer lines.
CONFIDENT = 0.5


@dataclass(frozen=True, order=True)
class Mention:
    """One entity mention of the training split: its words and their tag ids, in the data's scheme; mentions sort
    by words, then tags, so a pool has one order on every machine."""

    words: tuple[str, ...]
    tags: tuple[int, ...]


def mention_pool(sentences: Sequence[Sequence[str]], tags: Sequence[Sequence[int]],
                 label_names: Sequence[str]) -> dict[str, list[Mention]]:
    """Every distinct mention of the sentences by entity type (a mention seen twice counts once), in a fixed
    order so a seed gives the same variants on every machine."""
    pool: dict[str, set[Mention]] = {}
    for words, ids in zip(sentences, tags):
        for entity in extract_entities([label_names[i] for i in ids]):
            pool.setdefault(entity.type, set()).add(
                Mention(tuple(words[entity.start:entity.end]), tuple(ids[entity.start:entity.end])))
    return {kind: sorted(mentions) for kind, mentions in sorted(pool.items())}


def _scheme_tags(kind: str, length: int, label_names: Sequence[str]) -> tuple[int, ...] | None:
    """The tag ids of a ``length``-word mention of ``kind`` in the data's scheme (BIOES where the labels have
    ``E-``/``S-`` tags, else BIO); ``None`` where the label list lacks one of them."""
    index = {name: i for i, name in enumerate(label_names)}
    bioes = any(name[:2] in ("E-", "S-") for name in label_names)
    if bioes:
        names = [f"S-{kind}"] if length == 1 else [f"B-{kind}", *[f"I-{kind}"] * (length - 2), f"E-{kind}"]
    else:
        names = [f"B-{kind}", *[f"I-{kind}"] * (length - 1)]
    return tuple(index[n] for n in names) if all(n in index for n in names) else None


def teacher_mentions(sentences: Sequence[Sequence[str]], logits: Sequence[np.ndarray],
                     label_names: Sequence[str]) -> dict[str, list[Mention]]:
    """The mentions the teacher tags in ``sentences`` (its per-word ``logits``, as cached for the transfer rows)
    with probability >= :data:`CONFIDENT` at every word, by type, each with its tags written out in the data's
    scheme (the teacher's own top tags may open with ``I-``); in the same fixed order as :func:`mention_pool`."""
    pool: dict[str, set[Mention]] = {}
    for words, per_word in zip(sentences, logits):
        if not len(per_word):
            continue
        per_word = np.nan_to_num(per_word, nan=0.0)  # a word with no token (NaN): uniform, so never sure
        probs = softmax(per_word)
        top, sure = probs.argmax(-1), probs.max(-1) >= CONFIDENT
        for entity in extract_entities([label_names[i] for i in top]):
            tags = _scheme_tags(entity.type, entity.end - entity.start, label_names)
            if tags is not None and sure[entity.start:entity.end].all():
                pool.setdefault(entity.type, set()).add(Mention(tuple(words[entity.start:entity.end]), tags))
    return {kind: sorted(mentions) for kind, mentions in sorted(pool.items())}


def _variant(words: Sequence[str], ids: Sequence[int], entities: Sequence[Entity],
             pool: dict[str, list[Mention]], rng: random.Random) -> tuple[list[str], list[int]]:
    """One variant of a sentence whose ``entities`` (in order) each have another mention of their type to become."""
    chosen = {e for e in entities if rng.random() < P_REPLACE} or {rng.choice(entities)}
    new_words: list[str] = []
    new_ids: list[int] = []
    at = 0
    for entity in entities:
        new_words += words[at:entity.start]
        new_ids += ids[at:entity.start]
        at = entity.end
        own = tuple(words[entity.start:entity.end])
        if entity not in chosen:
            new_words += own
            new_ids += ids[entity.start:entity.end]
            continue
        mention = rng.choice(pool[entity.type])
        if mention.words == own:  # the pool holds another one: take the next in its order
            options = pool[entity.type]
            mention = options[(options.index(mention) + 1) % len(options)]
        new_words += mention.words
        new_ids += mention.tags
    new_words += words[at:]
    new_ids += ids[at:]
    return new_words, new_ids


def mention_variants(sentences: Sequence[Sequence[str]], tags: Sequence[Sequence[int]],
                     label_names: Sequence[str], n: int, seed: int, seen: Iterable[str] = (),
                     extra: dict[str, list[Mention]] | None = None,
                     ) -> tuple[list[list[str]], list[list[int]], dict[str, Any]]:
    """Up to ``n`` variants of each sentence with an entity (:func:`_variant`), seeded; none whose
    :func:`compress.corpora.texts.text_key` is in ``seen`` (give the held-out sentences' keys), is one of
    ``sentences`` or repeats an earlier variant. The replacements come from the sentences' own mentions and
    ``extra`` ones (:func:`teacher_mentions`) of the types the sentences have.
    ``(words, tag ids, stats)``; the stats are what ``compress.json`` records."""
    rng = random.Random(seed)
    pool = mention_pool(sentences, tags, label_names)
    added = {kind: sorted(set(extra[kind]) - set(own))
             for kind, own in pool.items() if kind in (extra or {})}
    pool = {kind: sorted([*own, *added.get(kind, [])]) for kind, own in pool.items()}
    keys = set(seen) | {text_key(" ".join(words)) for words in sentences}
    out_words: list[list[str]] = []
    out_tags: list[list[int]] = []
    with_entities = dropped = 0
    for words, ids in zip(sentences, tags):
        entities = extract_entities([label_names[i] for i in ids])
        with_entities += bool(entities)
        swappable = [e for e in entities if len(pool[e.type]) > 1]
        if not swappable:
            continue
        made = 0
        for _ in range(n * ATTEMPTS):
            if made == n:
                break
            variant = _variant(list(words), list(ids), swappable, pool, rng)
            key = text_key(" ".join(variant[0]))
            if key in keys:
                dropped += 1
                continue
            keys.add(key)
            out_words.append(variant[0])
            out_tags.append(variant[1])
            made += 1
    types = Counter(e.type for ids in out_tags for e in extract_entities([label_names[i] for i in ids]))
    stats = {"method": "mention replacement", "per_sentence": n, "seed": seed, "p_replace": P_REPLACE,
             "sentences_with_entities": with_entities, "variants": len(out_words), "repeats_dropped": dropped,
             "mentions_by_type": {kind: len(mentions) for kind, mentions in pool.items()},
             **({"transfer_confidence": CONFIDENT,
                 "transfer_mentions_by_type": {kind: len(m) for kind, m in sorted(extra.items())},
                 "transfer_mentions_new_by_type": {kind: len(m) for kind, m in added.items()}}
                if extra is not None else {}),
             "variant_entities_by_type": dict(sorted(types.items()))}
    return out_words, out_tags, stats


__all__ = ["CONFIDENT", "Mention", "mention_pool", "mention_variants", "P_REPLACE", "teacher_mentions"]
