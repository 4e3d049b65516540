"""``tools.studies.compare`` for taggers: entity F1 on the same validation and test sentences, and the protocol.

A tagger's unit of evidence is a sentence's ``(correct, predicted, gold)`` entity counts (strict span and
type, :func:`compress.tasks.token_classification.metrics.sentence_counts`), because entity F1 is a ratio of sums and not a
mean over sentences. Every artifact tags the sentences through ``Predictor.predict`` (the serving path:
whitespace words, first sub-token, windows past the model's length), like ``bench``. The table reports
validation, test and pooled entity F1 (mean ± SD over a group's seeds) and the word agreement with the
teacher on test. A second table splits test recall by whether an entity's surface form occurs in the training
split (:func:`compress.tasks.token_classification.metrics.recall_by_novelty`), beside the count of entities each run predicts.
With ``--teacher``, a third table gives each group's share of the teacher's entity F1 on validation and on test
(mean over seeds, with the 95% interval of :func:`compress.core.stats.mean_f1_share_over_seeds_interval`: test
sentences and seeds both move it), the form a distillation target is stated in. ``--teacher T1,T2,...`` gives
each group its own teacher (in the groups' order: one recipe run on several teachers) and adds a row pooling the
shares over the teachers (:func:`compress.core.stats.mean_f1_share_over_teachers_interval`), because one teacher's
test F1 is partly luck and a share divides by it.
``--protocol`` decides each group against the baseline group with :func:`tools.studies.protocol.decide_f1` on
validation + test pooled.

A study script, not a feature: it lives in ``tools/studies`` (not installed) and runs from a checkout.
Produced: docs/protocol.md, "Taggers: the same protocol on entity F1"; and the entity-F1 tables of
docs/lab/ner.md (per split, by novelty, share of the teacher).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from compress.core.stats import _micro_f1, mean_f1_share_over_seeds_interval, mean_f1_share_over_teachers_interval
from compress.core.artifact import read_meta
from compress.stages.quality import SplitScorer
from compress.tasks.token_classification.metrics import recall_by_novelty, sentence_counts, surface_forms, token_agreement
from tools.studies.prediction_cache import LazyPredictor, cache_key, cached
from tools.studies.protocol import Decision, decide_f1, require_seeds

SPLITS = ("validation", "test")
POOLED = "pooled over teachers"


@dataclass
class TaggerRun:
    """One tagger's word tags and per-sentence entity counts (``(sentences, 3)``) on each split."""

    path: Path
    tags: dict[str, list[list[str]]]
    counts: dict[str, np.ndarray]
    meta: dict


@dataclass
class TaggerRow:
    name: str
    runs: list[TaggerRun]


def scorers(task: Any) -> dict[str, SplitScorer]:
    return {split: SplitScorer(task, split) for split in SPLITS}


def tagger_run(path: Path, scoring: dict[str, SplitScorer], types: Sequence[str], fingerprint: str) -> TaggerRun:
    """Tag both splits with the artifact at ``path`` (refused in one line when it is not a tagger of these tags);
    the word tags come from :mod:`tools.studies.prediction_cache` where it already tagged the data of
    ``fingerprint``."""
    model = LazyPredictor(path)

    def compute(scorer: SplitScorer) -> list[list[str]]:
        scorer.check_model(model())
        return scorer.predict(model())

    tags, counts = {}, {}
    for split, scorer in scoring.items():
        tags[split] = cached(cache_key(path, fingerprint), split, "tags", lambda: compute(scorer))
        counts[split] = sentence_counts(scorer.gold, tags[split], types)[1].sum(axis=1)
    return TaggerRun(path, tags, counts, read_meta(path) or {})


def _f1(run: TaggerRun, splits: Sequence[str]) -> float:
    return float(_micro_f1(np.concatenate([run.counts[s] for s in splits]).sum(axis=0)))


def pooled_f1(run: TaggerRun) -> float:
    """Entity F1 over validation and test together (one ratio of summed counts, not a mean of the two)."""
    return _f1(run, SPLITS)


def _fmt(values: list[float]) -> str:
    if len(values) == 1:
        return f"{100 * values[0]:.1f}"
    return f"{100 * np.mean(values):.1f} ± {100 * np.std(values, ddof=1):.1f}"


def table(rows: list[TaggerRow], baseline: TaggerRow | None, teachers: dict[str, TaggerRun]) -> str:
    """The Markdown table: entity F1 on validation, test and both, and word agreement with the row's teacher
    (``teachers``, by row name; none given: no agreement) on test."""
    head = ["run", "seeds", "validation F1", "test F1", "val + test F1", "word agreement w/ teacher (test)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        teacher = teachers.get(row.name)
        agree = [token_agreement(r.tags["test"], teacher.tags["test"]) for r in row.runs] if teacher else []
        cells = [row.name + (" (baseline)" if row is baseline else ""), str(len(row.runs)),
                 _fmt([_f1(r, ("validation",)) for r in row.runs]), _fmt([_f1(r, ("test",)) for r in row.runs]),
                 _fmt([_f1(r, SPLITS) for r in row.runs]), _fmt(agree) + "%" if agree else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def novelty_table(rows: list[TaggerRow], teachers: dict[str, TaggerRun], task: Any, split: str = "test") -> str:
    """Recall on ``split``'s gold entities whose surface form is in the training split and on the rest, and the
    entities each run predicts there (mean ± SD over a group's seeds): where a tagger's misses are. The teachers
    (``teachers``, by row name) come first, each once."""
    if "train" not in task.splits:
        return f"(no recall by name novelty: {task.source} has no train split to say which names were seen)"
    seen = surface_forms(task.splits["train"]["tokens"], task.tags("train"))
    tokens, gold = task.splits[split]["tokens"], task.tags(split)
    runs = [(name, [t]) for name, t in teacher_rows(teachers)] + [(r.name, r.runs) for r in rows]
    by = [[recall_by_novelty(tokens, gold, r.tags[split], seen) for r in group] for _, group in runs]
    first = by[0][0]
    head = ["run", "seeds", f"recall, name seen in training ({first['seen'][1]:,})",
            f"recall, new name ({first['unseen'][1]:,})",
            f"entities predicted (gold {sum(v[1] for v in first.values()):,})"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (name, group), recalls in zip(runs, by):
        predicted = [float(r.counts[split][:, 1].sum()) for r in group]  # (correct, predicted, gold) per sentence
        cells = [name, str(len(group))]
        for side in ("seen", "unseen"):
            cells.append(_fmt([f / g if g else 0.0 for f, g in (x[side] for x in recalls)]) + "%")
        cells.append(f"{np.mean(predicted):,.0f}" + (f" ± {np.std(predicted, ddof=1):,.0f}" if len(group) > 1 else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def teacher_rows(teachers: dict[str, TaggerRun]) -> list[tuple[str, TaggerRun]]:
    """Each distinct teacher once, named ``teacher`` when there is one and ``teacher of GROUP`` (its first group)
    when there are several."""
    distinct: dict[Path, tuple[str, TaggerRun]] = {}
    for name, run in teachers.items():
        distinct.setdefault(run.path, (name, run))
    if len(distinct) == 1:
        return [("teacher", run) for _, run in distinct.values()]
    return [(f"teacher of {name}", run) for name, run in distinct.values()]


def teacher_shares(rows: list[TaggerRow], teachers: dict[str, TaggerRun]) -> dict[str, dict[str, dict[str, float]]]:
    """Per group and split, its entity F1 as a share of its teacher's (``teachers``, by row name): ``estimate``,
    and for two or more seeds the 95% interval's ``low``/``high`` (paired over the sentences, the seeds' spread
    added); none where the teacher finds no entity on the split (a share of 0 means nothing). With more than one
    teacher, a last entry :data:`POOLED` means the groups' shares over the teachers
    (:func:`compress.core.stats.mean_f1_share_over_teachers_interval`)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for row in rows:
        teacher = teachers[row.name]
        out[row.name] = {}
        for split in SPLITS:
            teacher_f1 = _f1(teacher, (split,))
            if teacher_f1 == 0:
                continue
            if len(row.runs) < 2:
                out[row.name][split] = {"estimate": _f1(row.runs[0], (split,)) / teacher_f1}
                continue
            share = mean_f1_share_over_seeds_interval(teacher.counts[split], [r.counts[split] for r in row.runs])
            out[row.name][split] = {"estimate": share.estimate, "low": share.low, "high": share.high}
    if len(teacher_rows(teachers)) > 1:
        out[POOLED] = {}
        for split in SPLITS:
            if any(_f1(teachers[r.name], (split,)) == 0 for r in rows):
                continue
            if any(len(r.runs) < 2 for r in rows):  # no seed spread to weigh: the mean alone
                out[POOLED][split] = {"estimate": float(np.mean([out[r.name][split]["estimate"] for r in rows])),
                                      "teachers": len(rows)}
                continue
            groups = [(teachers[r.name].counts[split], [x.counts[split] for x in r.runs]) for r in rows]
            share = mean_f1_share_over_teachers_interval(groups)
            out[POOLED][split] = {"estimate": share.estimate, "low": share.low, "high": share.high,
                                  "teachers": len(rows)}
    return out


def share_table(rows: list[TaggerRow], teachers: dict[str, TaggerRun],
                shares: dict[str, dict[str, dict[str, float]]]) -> str:
    """:func:`teacher_shares`' ``shares`` as a Markdown table, a column per split; with several teachers each
    group's teacher F1 in its own column and the pooled row last."""
    several = len(teacher_rows(teachers)) > 1
    if several:
        head = ["run", "seeds", "its teacher's F1 (validation / test)"] + [
            f"{split}: share of its teacher's F1 [95%]" for split in SPLITS]
    else:
        teacher = next(iter(teachers.values()))
        head = ["run", "seeds"] + [f"{split}: share of the teacher's {100 * _f1(teacher, (split,)):.1f} F1 [95%]"
                                   for split in SPLITS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    listed = [(row.name, str(len(row.runs))) for row in rows]
    if several:
        listed.append((POOLED, f"{len(rows)} teachers x {'/'.join(sorted({str(len(r.runs)) for r in rows}))}"))
    for name, seeds in listed:
        cells = [name, seeds]
        if several:
            cells.append(" / ".join(f"{100 * _f1(teachers[name], (s,)):.1f}" for s in SPLITS) if name in teachers
                         else "-")
        for split in SPLITS:
            share = shares[name].get(split)
            if share is None:
                cells.append("- (the teacher finds no entity)")
            elif "low" in share:
                cells.append(f"{100 * share['estimate']:.1f}% [{100 * share['low']:.1f}, {100 * share['high']:.1f}]")
            else:
                cells.append(f"{100 * share['estimate']:.1f}%")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pooled_counts(row: TaggerRow) -> np.ndarray:
    """``(seeds, validation + test sentences, 3)`` entity counts of a row's runs."""
    return np.stack([np.concatenate([r.counts[s] for s in SPLITS]) for r in row.runs])


def protocol_decisions(rows: list[TaggerRow], baseline: TaggerRow, min_seeds: int) -> list[tuple[str, Decision]]:
    """:func:`tools.studies.protocol.decide_f1` for every row against ``baseline``."""
    base = pooled_counts(baseline)
    out = []
    for row in rows:
        if row is baseline:
            continue
        require_seeds(row.name, len(row.runs), baseline.name, len(baseline.runs), min_seeds)
        out.append((row.name, decide_f1(pooled_counts(row), base)))
    return out


def payload(rows: list[TaggerRow]) -> dict[str, Any]:
    """The per-row numbers of ``--json``: each run's entity F1 per split."""
    return {r.name: {"runs": [str(x.path) for x in r.runs], "metric": "entity_f1",
                     **{s: [_f1(x, (s,)) for x in r.runs] for s in SPLITS}} for r in rows}
