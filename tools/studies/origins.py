"""Where the gap is: a distilled student's agreement with its teacher by the origin of the rows.

    python -m tools.studies.origins --teacher runs/teacher runs/student-s0 runs/student-s1 [--per-origin 2000]

For every student (a ``distill`` artifact) it rebuilds, from the student's own ``compress.json``,
the rows it was trained on: the labelled training rows of its data, the augmented variants (read
back from the augmentation cache the distill stage recorded under ``transfer.augment.cache``) and
the unlabelled corpus rows (read and filtered again with the recorded settings: the same corpus,
limit and seed give the same rows); then the validation and test splits. Each origin is sampled
(seeded, at most ``--per-origin`` rows; 0 = all), both models label the rows through the same
``Predictor`` path serving uses, and it prints the agreement per origin with its Wilson interval
and within bands of the teacher's confidence, and the diagnosis of
:func:`benchmarks.agreement.gap_diagnosis`: the disagreement on the test split is split into the part
already there on the training rows (optimisation) and the part lost from the training rows to new text
(data), the training rows taken at the test split's mix of teacher confidence (transfer sentences are
far more often borderline for the teacher than the task's own, and a borderline row's agreement is near
a coin toss). Predictions are cached per model weights and texts (:mod:`tools.studies.prediction_cache`).

For a tagger (a ``distill`` artifact of tagging data) the origins are its labelled training sentences, its
transfer sentences (rebuilt from the recorded ``--unlabeled*`` settings, as ``distill`` drew them) and the held-out
splits, and the unit is an **entity** either model finds: it agrees when the other model finds the same span
with the same type. Word agreement would not do: nine words in ten are ``O`` for both models, so it reads 98%
for a student that shares only half of the entities either model finds on test. No confidence bands for
taggers (the diagnosis is then unmatched): an entity's confidence is not one probability.

A study script, not a feature: it lives in ``tools/studies`` (not installed) and runs from a checkout.
Produced: docs/protocol.md, "Where the gap is" (the agreement-by-origin table); the entity-agreement table of
docs/lab/ner.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from benchmarks.agreement import agreement_by_band, agreement_by_origin, gap_diagnosis
from compress.core.errors import CompressError
from compress.core.artifact import read_meta
from compress.config import DataOptions
from compress.tasks.task_choice import SEQUENCE, TOKEN
from compress.tasks.token_classification.metrics import extract_entities
from compress.tasks.token_classification.data import word_texts
from compress.core.numerics import softmax
from compress.stages.transfer.augment import MASK
from compress.corpora.corpus import filter_unlabeled, load_unlabeled
from compress.corpora.texts import atomic_write_text, joined_texts, split_keys
from tools.studies.prediction_cache import LazyPredictor, cache_key, cached

#: Origins in report order; the first three are rows the student trained on.
TRAINED = ("train", "augmented", "unlabeled")
HELD_OUT = ("test",)
ORIGINS = TRAINED + ("validation",) + HELD_OUT
DEFAULT_PER_ORIGIN = 2000


def _texts(rows: list[dict], is_pair: bool) -> list[Any]:
    return [(r["text"], r["text_pair"]) if is_pair else r["text"] for r in rows]


def origin_texts(meta: dict[str, Any], task, where: str = "STUDENT") -> tuple[dict[str, list[Any]], list[str]]:
    """``({origin: texts}, notes)``: the rows a distill artifact trained on, by origin, and the held-out splits.

    ``meta`` is the student's ``compress.json``, ``task`` its data loaded from the recorded options.
    A transfer part that cannot be rebuilt (a cleared augmentation cache) is left out with a note.
    """

    cfg = meta.get("config") or {}
    transfer = meta.get("transfer") or {}
    out: dict[str, list[Any]] = {"train": list(task.texts("train"))}
    notes: list[str] = []
    augment = transfer.get("augment") or {}
    if transfer.get("augmented"):
        cache = Path(augment.get("cache") or "")
        if not augment.get("cache") or not cache.is_file():
            notes.append(f"{where}: its {transfer['augmented']} augmented rows are not at {cache} (the augmentation cache "
                         "was cleared or the artifact was made elsewhere); run distill again with the same settings "
                         "to rebuild them, or read the other origins")
        else:
            with open(cache, encoding="utf-8") as handle:
                rows = [json.loads(line) for line in handle if line.strip()]
            out["augmented"] = _texts(rows, task.is_pair)
    if transfer.get("unlabeled") and cfg.get("unlabeled"):
        corpus = load_unlabeled(cfg["unlabeled"], cfg.get("unlabeled_text_column", "text"),
                                cfg.get("unlabeled_text_pair_column"), task.is_pair, cfg.get("unlabeled_balance"))
        seed = int((cfg.get("train") or {}).get("seed", 0))
        similar = joined_texts(task, "train") if cfg.get("unlabeled_select") == "similar" else None
        texts, pairs, _ = filter_unlabeled(corpus, split_keys(task, ("validation", "test")), split_keys(task, ("train",)),
                                           cfg.get("unlabeled_limit"), seed, similar_to=similar)
        if len(texts) != transfer["unlabeled"]:
            notes.append(f"{where}: the unlabelled corpus {cfg['unlabeled']} now gives {len(texts)} rows, the student "
                         f"trained on {transfer['unlabeled']} (the corpus changed); its agreement is on today's rows")
        out["unlabeled"] = list(zip(texts, pairs)) if pairs is not None else texts
    for split in ("validation", "test"):
        if split in task.splits:
            out[split] = list(task.texts(split))
    return out, notes


def sample(texts: list[Any], limit: int, seed: int = 0) -> list[Any]:
    """At most ``limit`` of ``texts`` (seeded, in their original order); all of them for ``limit`` 0."""
    if not limit or len(texts) <= limit:
        return list(texts)
    return [texts[i] for i in sorted(random.Random(seed).sample(range(len(texts)), limit))]


def _with_mask_token(texts: list[Any], tokenizer) -> list[Any]:
    """Augmentation writes ``[MASK]`` for a masked word; distill showed each model its own mask token."""

    token = getattr(tokenizer, "mask_token", None) or MASK
    if token == MASK:
        return texts
    swap = (lambda t: t.replace(MASK, token))  # noqa: E731
    return [(swap(t[0]), swap(t[1])) if isinstance(t, tuple) else swap(t) for t in texts]


def _texts_digest(texts: list[Any]) -> str:
    digest = hashlib.sha256()
    for t in texts:
        digest.update(json.dumps(t, ensure_ascii=False).encode("utf-8") + b"\x00")
    return digest.hexdigest()


def predicted_probabilities(path: Path, texts_by_origin: dict[str, list[Any]],
                            batch_size: int = 64) -> dict[str, np.ndarray]:
    """Label probabilities of one artifact per origin (``[rows, labels]``), cached by weights and texts."""

    model = LazyPredictor(path)

    def compute(texts: list[Any]) -> np.ndarray:
        return softmax(model().logits(_with_mask_token(texts, model().tokenizer), batch_size=batch_size))

    return {origin: cached(cache_key(path, _texts_digest(texts)), "origin", "probabilities", lambda: compute(texts))
            for origin, texts in texts_by_origin.items()}


def predicted_tags(path: Path, sentences_by_origin: dict[str, list[str]],
                   batch_size: int = 64) -> dict[str, list[list[str]]]:
    """A tagger's word tags per origin (through ``Predictor.predict``, the serving path), cached by weights and
    sentences."""

    model = LazyPredictor(path)

    def compute(sentences: list[str]) -> list[list[str]]:
        return [r["word_tags"] for r in model().predict(sentences, batch_size=batch_size, word_tags=True)]

    return {origin: cached(cache_key(path, _texts_digest(texts)), "origin", "tags", lambda: compute(texts))
            for origin, texts in sentences_by_origin.items()}


def tagger_origin_texts(meta: dict[str, Any], task, where: str = "STUDENT") -> tuple[dict[str, list[str]], list[str]]:
    """``({origin: sentences}, notes)`` for a tagger's distill artifact: its labelled training sentences, the
    transfer sentences drawn again from the recorded settings, and the held-out splits, each sentence as the one
    text ``Predictor`` splits back into the same words (:func:`compress.tasks.token_classification.data.word_texts`)."""
    from compress.tasks.token_classification.distill import transfer_sentences
    from compress.stages.transfer.assemble import TransferOptions

    cfg, transfer = meta.get("config") or {}, meta.get("transfer") or {}
    out: dict[str, list[str]] = {"train": task.texts("train")}
    notes: list[str] = []
    if transfer.get("training_rows") and cfg.get("unlabeled"):
        options = TransferOptions(unlabeled=cfg["unlabeled"], unlabeled_text_column=cfg.get("unlabeled_text_column",
                                                                                              "text"),
                                  unlabeled_limit=cfg.get("unlabeled_limit"), unlabeled_balance=cfg.get("unlabeled_balance"),
                                  unlabeled_select=cfg.get("unlabeled_select", "random"),
                                  seed=int((cfg.get("train") or {}).get("seed", 0)))
        sentences, _ = transfer_sentences(options, task)
        if len(sentences) != transfer.get("kept"):
            notes.append(f"{where}: the unlabelled corpus {cfg['unlabeled']} now gives {len(sentences)} sentences, the "
                         f"student trained on {transfer.get('kept')} (the corpus changed); its agreement is on today's")
        out["unlabeled"] = word_texts(sentences)
    for split in ("validation", "test"):
        if split in task.splits:
            out[split] = task.texts(split)
    return out, notes


def entity_agreement_rows(tags: Sequence[Sequence[str]],
                          reference_tags: Sequence[Sequence[str]]) -> tuple[list[int], list[int]]:
    """``(found by the model, found by the reference)`` for every entity (span and type) either finds, sentence by
    sentence: 1/1 where both find it, so ``agreement_by_origin`` on them is the share of the union found by both."""
    ours, theirs = [], []
    for mine, ref in zip(tags, reference_tags, strict=True):
        a, b = set(extract_entities(mine)), set(extract_entities(ref))
        for entity in sorted(a | b, key=lambda e: (e.start, e.end, e.type)):
            ours.append(int(entity in a))
            theirs.append(int(entity in b))
    return ours, theirs


def _tagger_report(student: Path, teacher: Path, meta: dict[str, Any], task, per_origin: int,
                   seed: int) -> dict[str, Any]:
    texts, notes = tagger_origin_texts(meta, task, str(student))
    chosen = {o: sample(texts[o], per_origin, seed) for o in ORIGINS if texts.get(o)}
    ours, theirs = predicted_tags(student, chosen), predicted_tags(teacher, chosen)
    pred, ref, origins = [], [], []
    for origin in chosen:
        a, b = entity_agreement_rows(ours[origin], theirs[origin])
        pred += a
        ref += b
        origins += [origin] * len(a)
    by_origin = agreement_by_origin(pred, ref, origins)
    for o in by_origin:
        by_origin[o]["of"] = len(texts[o])
        by_origin[o]["sentences"] = len(chosen[o])
    trained, held_out = [o for o in TRAINED if o in by_origin], [o for o in HELD_OUT if o in by_origin]
    diagnosis = gap_diagnosis(by_origin, trained, held_out) if trained and held_out else None
    if diagnosis is None:
        notes.append(f"{student}: no diagnosis without entities on both the training rows and the test split")
    return {"student": str(student), "teacher": str(teacher), "unit": "entities either model finds",
            "by_origin": by_origin, "by_band": {}, "diagnosis": diagnosis, "notes": notes, "per_origin": per_origin,
            "seed": seed}


def origin_report(student: Path, teacher: Path, per_origin: int = DEFAULT_PER_ORIGIN, seed: int = 0) -> dict[str, Any]:
    """``{"student", "by_origin", "diagnosis", "notes"}`` for one distill artifact against its teacher."""

    meta = read_meta(student)
    if not meta or meta.get("stage") != "distill":
        raise CompressError(f"{student}: not a distill artifact (its compress.json records stage "
                            f"{(meta or {}).get('stage')!r}); give the folder bert-compress distill wrote, whose "
                            "compress.json says what it was trained on.")
    if meta.get("task") not in (None, SEQUENCE, TOKEN):
        raise CompressError(f"{student}: a {meta.get('task')} student; the origins report reads classifiers and "
                            "taggers (their rows and labels are one answer per text or per word)")
    options = DataOptions.from_dict((meta.get("config") or {}).get("data") or {}, where="config.data", check=False)
    task = options.load_any() if meta.get("task") == TOKEN else options.load()
    recorded = (meta.get("data") or {}).get("fingerprint")
    if recorded and recorded != task.fingerprint:
        raise CompressError(f"{student}: its data {options.data!r} no longer loads the rows it was trained on "
                            "(the data fingerprint in compress.json differs). Run this where that data is unchanged.")
    if meta.get("task") == TOKEN:
        return _tagger_report(student, teacher, meta, task, per_origin, seed)
    texts, notes = origin_texts(meta, task, str(student))
    chosen = {o: sample(texts[o], per_origin, seed) for o in ORIGINS if texts.get(o)}
    ours, theirs = predicted_probabilities(student, chosen), predicted_probabilities(teacher, chosen)
    origins = [o for o in chosen for _ in chosen[o]]
    pred = np.concatenate([ours[o] for o in chosen]).argmax(-1)
    reference = np.concatenate([theirs[o] for o in chosen])
    ref, sure = reference.argmax(-1), reference.max(-1)
    by_origin = agreement_by_origin(pred, ref, origins)
    by_band = agreement_by_band(pred, ref, sure, origins)
    for o in by_origin:
        by_origin[o]["of"] = len(texts[o])
    trained, held_out = [o for o in TRAINED if o in by_origin], [o for o in HELD_OUT if o in by_origin]
    diagnosis = gap_diagnosis(by_origin, trained, held_out, by_band=by_band) if trained and held_out else None
    if diagnosis is None:
        notes.append(f"{student}: no diagnosis without both training rows and a test split")
    return {"student": str(student), "teacher": str(teacher), "by_origin": by_origin, "by_band": by_band,
            "diagnosis": diagnosis, "notes": notes, "per_origin": per_origin, "seed": seed}


def render(reports: Sequence[dict[str, Any]]) -> str:
    """The Markdown table and one diagnosis line per student."""
    head = ["student", "origin", "rows (of)", "agreement with teacher", "95% Wilson"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|---:|---:|---:|"]
    for rep in reports:
        name = Path(rep["student"]).name
        for origin, row in rep["by_origin"].items():
            rows = (f"{row['n']:,} entities in {row['sentences']:,} sentences (of {row['of']:,})" if "sentences" in row
                    else f"{row['n']:,} ({row['of']:,})")
            lines.append(f"| {name} | {origin} | {rows} | {100 * row['agreement']:.2f}% | "
                         f"[{100 * row['low']:.2f}, {100 * row['high']:.2f}] |")
    if any(rep.get("by_band") for rep in reports):  # taggers have none (module docstring)
        lines += ["", "| student | origin | teacher's confidence | share of the rows | agreement |", "|---|---|---|---:|---:|"]
    for rep in reports:
        for origin, bands in (rep.get("by_band") or {}).items():
            for band, row in bands.items():
                lines.append(f"| {Path(rep['student']).name} | {origin} | {band} | {100 * row['share']:.1f}% | "
                             f"{100 * row['agreement']:.2f}% ({row['agreeing']:,} of {row['n']:,}) |")
    lines.append("")
    for rep in reports:
        d = rep["diagnosis"]
        if d is None:
            lines += [f"  - note: {n}" for n in rep["notes"]]
            continue
        g_low, g_high = d["generalisation_interval"]
        lines.append(f"- {Path(rep['student']).name}: **{d['verdict']}**. Disagreement on {'+'.join(d['held_out'])}: "
                     f"{100 * (1 - d['held_out_agreement']):.2f} points = fit {100 * d['fit']:.2f} (disagreement on the "
                     f"rows it trained on: {'+'.join(d['trained'])}) + generalisation {100 * d['generalisation']:.2f} "
                     f"[{100 * g_low:.2f}, {100 * g_high:.2f}]: {d['explanation']}.")
        if d.get("matched"):
            m = d["matched"]
            left = f"; bands without trained rows left out: {', '.join(m['bands_left_out'])}" if m["bands_left_out"] else ""
            lines.append(f"  - the trained rows' agreement is taken at {m['to']}: {100 * d['trained_agreement']:.2f}% "
                         f"(unmatched {100 * m['unmatched_trained_agreement']:.2f}%){left}.")
        lines += [f"  - note: {n}" for n in rep["notes"]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.studies.origins", description=__doc__.split("\n\n")[0])
    parser.add_argument("students", nargs="+", help="distill artifact folders (one per seed, or several levers)")
    parser.add_argument("--teacher", required=True, help="the teacher artifact the students were distilled from")
    parser.add_argument("--per-origin", type=int, default=DEFAULT_PER_ORIGIN,
                        help=f"rows sampled per origin (seeded; 0 = all; default {DEFAULT_PER_ORIGIN})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the per-origin sample (default 0)")
    parser.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    args = parser.parse_args(argv)
    if args.per_origin < 0:
        print(f"--per-origin must be 0 (all rows) or more, got {args.per_origin}", file=sys.stderr)
        return 2
    try:
        reports = [origin_report(Path(s), Path(args.teacher), args.per_origin, args.seed) for s in args.students]
    except CompressError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(reports))
    if args.json:
        atomic_write_text(Path(args.json), json.dumps(reports, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
