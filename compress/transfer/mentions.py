"""Mention-replaced variants of a tagger's training sentences: transfer rows that keep their gold tags.

Why: nine words in ten of a tagging set are ``O``, and so are the words of raw transfer text, so the
student sees few entity words beside the teacher's; it agrees with the teacher on ~70% of the entities of
its own training sentences against 98% of the words (docs/ner.md). A variant keeps a training sentence's
context and swaps its entity mentions for other mentions of the same type from the training split
(mention replacement, as in Dai and Adel's study of augmentation for NER): the words around an entity
stay, the entity words change, and the gold tags follow the new mention (its own ``B-``/``I-`` or BIOES
tags), so a variant carries both terms of the objective, the teacher's word labels and the gold tags.

Only training mentions are used, and a variant whose text is a sentence of any split (or an earlier
variant) is dropped, so nothing of validation or test comes in.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from compress.tasks.ner_metrics import Entity, extract_entities
from compress.transfer.texts import text_key

#: Chance that each mention of a sentence is replaced in a variant (at least one always is).
P_REPLACE = 0.5
#: Draws per wanted variant before a sentence gives up (a draw can repeat a text already seen).
ATTEMPTS = 4


@dataclass(frozen=True)
class Mention:
    """One entity mention of the training split: its words and their tag ids, in the data's scheme."""

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
    return {kind: sorted(mentions, key=lambda m: (m.words, m.tags)) for kind, mentions in sorted(pool.items())}


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
                     ) -> tuple[list[list[str]], list[list[int]], dict[str, Any]]:
    """Up to ``n`` variants of each sentence with an entity (:func:`_variant`), seeded; none whose
    :func:`compress.transfer.texts.text_key` is in ``seen`` (give the held-out sentences' keys), is one of
    ``sentences`` or repeats an earlier variant. ``(words, tag ids, stats)``; the stats are what ``compress.json`` records."""
    rng = random.Random(seed)
    pool = mention_pool(sentences, tags, label_names)
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
             "variant_entities_by_type": dict(sorted(types.items()))}
    return out_words, out_tags, stats


__all__ = ["Mention", "mention_pool", "mention_variants", "P_REPLACE"]
