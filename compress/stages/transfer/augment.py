"""Augmented variants of the training examples (TinyBERT-style), seeded, deduplicated and cached.

Each variant applies one operation (``replace``, ``mask``, ``delete`` or ``swap``) to a segmented
text; variants equal to a labelled, validation or test text are discarded. The teacher labels
them later, like every transfer row.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from compress.config import AUGMENT_OPS, parse_augment_ops
from compress.stages.transfer.segment import Segmented, segment, whole_words
from compress.corpora.texts import atomic_write_text, digest_keys, text_key
from compress.core.assets import cache_dir
from compress.core.progress import bars_enabled

#: Augmentation operations, in the order ``--augment-ops`` lists them by default (defined with the config).
OPS = AUGMENT_OPS
#: ``--augment-ops`` as a checked tuple of operations.
parse_ops = parse_augment_ops
#: How a masked word is written in augmented text; each tokenizer gets its own mask token in its place.
MASK = "[MASK]"
#: Bump when the augmentation recipe changes, so old cached variants are not reused.
AUGMENT_VERSION = 1


@dataclass
class AugmentOptions:
    """How variants are made. Probabilities follow TinyBERT (0.4 per word for ``replace``) and EDA-style
    light edits for the others, so a variant stays close to its source sentence."""

    n: int = 0
    ops: tuple[str, ...] = OPS
    seed: int = 0
    top_k: int = 15
    p_replace: float = 0.4
    p_mask: float = 0.15
    p_delete: float = 0.1
    p_swap: float = 0.1
    #: Tries per wanted variant before giving up on an example (duplicates and leaks are retried).
    attempts: int = 3
    mlm_groups: int = 4
    batch_size: int = 32


def _edit(op: str, seg: Segmented, cands: dict[int, list[str]], opts: AugmentOptions,
          rng: random.Random) -> list[str | None] | None:
    """One operation on a segmented text (``None`` entries are deleted words); ``None`` when the
    text does not allow the operation."""
    words: list[str | None] = list(seg.words)
    n = len(words)
    content = [i for i, w in enumerate(words) if any(ch.isalnum() for ch in w)]
    if op == "replace":
        slots = [i for i in range(n) if cands.get(i)]
        if not slots:
            return None
        chosen = [i for i in slots if rng.random() < opts.p_replace] or [rng.choice(slots)]
        for i in chosen:
            words[i] = _match_case(rng.choice(cands[i]), words[i])
    elif op == "mask":
        if not content:
            return None
        chosen = [i for i in content if rng.random() < opts.p_mask] or [rng.choice(content)]
        for i in chosen:
            words[i] = MASK
    elif op == "delete":
        if len(content) < 2:
            return None
        chosen = [i for i in content if rng.random() < opts.p_delete] or [rng.choice(content)]
        if len(chosen) >= len(content):
            chosen = chosen[:-1]
        for i in chosen:
            words[i] = None
    elif op == "swap":
        if len(content) < 2:
            return None
        for _ in range(max(1, round(opts.p_swap * len(content)))):
            a, b = rng.sample(content, 2)
            words[a], words[b] = words[b], words[a]
    else:  # pragma: no cover - parse_ops rejects others
        raise ValueError(op)
    return words


def _match_case(candidate: str, original: str) -> str:
    if len(original) > 1 and original.isupper():
        return candidate.upper()
    if original[:1].isupper():
        return candidate[:1].upper() + candidate[1:]
    return candidate


def augment_examples(texts: Sequence[str], pairs: Sequence[str] | None, opts: AugmentOptions, source,
                     exclude: set[str], precision: str = "fp32") -> list[dict[str, Any]]:
    """Make up to ``opts.n`` variants of every example; uncached (see :func:`augmented_rows`).

    Each example has its own seeded generator, so its variants do not depend on the others. Each
    variant applies one operation, cycling through ``opts.ops`` from a seeded start so that every
    operation is used about equally. A variant equal (by :func:`normalize_text`) to any labelled
    text, any key in ``exclude`` (validation and test texts) or an earlier variant is discarded
    and another tried. Returns rows ``{"source", "op", "text"[, "text_pair"]}``.
    """
    if opts.n <= 0:
        return []
    sides = [list(texts)] + ([list(pairs)] if pairs is not None else [])
    segments = [segment(source.tokenizer, side) for side in sides]
    _, strings = whole_words(source.tokenizer)
    candidates: list[list[dict[int, list[str]]]] = [[{} for _ in side] for side in sides]
    if "replace" in opts.ops:
        for s, segs in enumerate(segments):
            proposed = source.propose(segs, opts.top_k, opts.batch_size, precision)
            for row, (seg, lists) in enumerate(zip(segs, proposed)):
                slots = [w for w, p in enumerate(seg.positions) if p is not None]
                candidates[s][row] = {w: [strings[t] for t in ids if strings[t]] for w, ids in zip(slots, lists)}
    seen = {text_key(t, p) for t, p in zip(texts, pairs if pairs is not None else [None] * len(texts))}
    from tqdm.auto import tqdm

    rows: list[dict[str, Any]] = []
    for i in tqdm(range(len(texts)), desc="augmenting", unit="example", file=sys.stderr, leave=False,
                  disable=len(texts) < 2000 or not bars_enabled()):
        rng = random.Random(f"augment:{opts.seed}:{i}")
        start = rng.randrange(len(opts.ops))
        made = 0
        for attempt in range(opts.n * max(1, opts.attempts)):
            if made == opts.n:
                break
            op = opts.ops[(start + attempt) % len(opts.ops)]
            side = rng.randrange(len(sides))
            edited = None
            for s in (side, 1 - side) if len(sides) == 2 else (side,):
                edited = _edit(op, segments[s][i], candidates[s][i], opts, rng)
                if edited is not None:
                    side = s
                    break
            if edited is None:
                continue
            new = [sides[0][i]] + ([sides[1][i]] if len(sides) == 2 else [])
            new[side] = segments[side][i].render(edited)
            if not new[side].strip():
                continue
            key = text_key(new[0], new[1] if len(new) == 2 else None)
            if key in seen or key in exclude:
                continue
            seen.add(key)
            row = {"source": i, "op": op, "text": new[0]}
            if len(new) == 2:
                row["text_pair"] = new[1]
            rows.append(row)
            made += 1
    return rows


def augmented_rows(texts: Sequence[str], pairs: Sequence[str] | None, opts: AugmentOptions, source,
                   exclude: set[str], precision: str = "fp32") -> tuple[list[dict[str, Any]], bool, Path]:
    """:func:`augment_examples`, cached under ``cache_dir()/augment/<hash>.jsonl``.

    The key covers the recipe version, every option, the candidate source's identity (weights
    hash), the texts and the excluded keys, so any change makes new variants. Returns
    ``(rows, reused, path)``.
    """

    digest = hashlib.sha256()
    digest.update(json.dumps({"version": AUGMENT_VERSION, "options": asdict(opts), "source": source.identity},
                             sort_keys=True).encode())
    for i, text in enumerate(texts):
        digest.update(text.encode("utf-8"))
        digest.update(b"\x1f" + (pairs[i].encode("utf-8") if pairs is not None else b"") + b"\x00")
    digest.update(digest_keys(exclude).encode())
    path = cache_dir() / "augment" / f"{digest.hexdigest()}.jsonl"
    if path.exists():
        with open(path, encoding="utf-8") as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
        print(f"augmentation ({len(rows)} variants of {len(texts)} examples): reusing the cache {path}")
        return rows, True, path
    t0 = time.perf_counter()
    rows = augment_examples(texts, pairs, opts, source, exclude, precision)
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"augmentation ({len(rows)} variants of {len(texts)} examples): made in {time.perf_counter() - t0:.1f} s, "
          f"cached at {path}")
    return rows, False, path
