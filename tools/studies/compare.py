"""Compare trained artifacts on the same held-out sentences: the table behind an ablation.

    python -m tools.studies.compare --data movie-reviews --teacher runs/teacher --baseline runs/base \\
        runs/base runs/variant-a seeds:runs/b-s0,runs/b-s1,runs/b-s2

For every artifact (or group of seeds, written ``seeds:DIR,DIR,...`` or ``NAME=DIR,DIR,...``) it
reports validation, test and pooled (validation + test) accuracy, agreement with the teacher, and
the exact McNemar p-value of the difference against the baseline on the same test sentences (and
on the pooled ones). For a group of seeds the accuracies are the mean ± standard deviation over
the seeds, and the McNemar test pairs seed i with the baseline's seed i when the baseline is a
group of the same size (else with the baseline's first run); the median p of those pairs is shown.
1,058 test sentences carry about ±2.2 points of noise on a single accuracy; the paired test and
the pooled 2,114 sentences are how a difference of a point or two can be told from chance.

``--protocol`` adds the decision protocol of :mod:`tools.studies.protocol` for every group against the
baseline group (at least 3 seeds each, seed i paired with seed i, validation + test pooled): the
pooled paired permutation test over all seed-sentence pairs and the seed-level paired t-test, each
with the difference, its 95% interval, the p-value and the smallest effect detectable at 80%
power, and the verdict::

    python -m tools.studies.compare --protocol --baseline base=runs/b-s0,runs/b-s1,runs/b-s2 \\
        base=runs/b-s0,runs/b-s1,runs/b-s2 lever=runs/l-s0,runs/l-s1,runs/l-s2

``--trend KEY`` fits the pooled metric of every run against a number its ``compress.json`` records
(``rows``: the rows a student was distilled on, labelled ones included; or a dotted key) on a log scale (:mod:`tools.studies.trend`): the gain per
tenfold with its interval, and with ``--trend-target SHARE`` (of the teacher's pooled metric) the x at which the
line would reach it; ``--trend-plot PNG`` draws it::

    python -m tools.studies.compare --teacher runs/t --trend rows --trend-target 0.98 --trend-plot trend.png \\
        none=runs/u0-s0,runs/u0-s1,runs/u0-s2 10k=runs/b-s0,runs/b-s1,runs/b-s2 all=runs/u46-s0,runs/u46-s1,runs/u46-s2

Predictions (label ids, or a tagger's word tags) are cached per artifact and data (:mod:`tools.studies.prediction_cache`),
so a table is cheap to rebuild.
On tagging data (``--data wnut17``, a CoNLL file) the same command compares entity F1 instead
(:mod:`tools.studies.compare_tagging`), and ``--protocol`` decides on it (:func:`tools.studies.protocol.decide_f1`).
There ``--teacher T1,T2,T3`` reads one recipe on several teachers, a group per teacher in the same order, and
pools each group's share of its teacher's F1 over the teachers::

    python -m tools.studies.compare --data wnut17 --teacher runs/t1,runs/t2 \
        t1=runs/t1-s0,runs/t1-s1,runs/t1-s2 t2=runs/t2-s0,runs/t2-s1,runs/t2-s2

A study script, not a feature: it lives in ``tools/studies`` (not installed) and runs from a checkout.
Produced: docs/ablation.md, every table of its levers; docs/protocol.md, "Decide a lever"; and, through
:mod:`tools.studies.compare_tagging`, the entity-F1 tables of docs/lab/ner.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from benchmarks.accuracy import mcnemar_p, split_texts_and_labels
from compress.core.errors import CompressError
from compress.core.artifact import read_meta
from compress.config import DataOptions
from compress.corpora.texts import atomic_write_text
from tools.studies.protocol import MIN_SEEDS, Decision, decide, require_seeds
from tools.studies import trend as trends
from tools.studies.prediction_cache import LazyPredictor, cache_key, cached

SPLITS = ("validation", "test")


@dataclass
class Run:
    """One trained artifact's predictions on the validation and test splits."""

    path: Path
    pred: dict[str, np.ndarray]
    meta: dict


@dataclass
class Row:
    name: str
    runs: list[Run]


def _predictions(path: Path, task, texts: dict[str, list], batch_size: int = 64) -> dict[str, np.ndarray]:
    """Label ids on each split, from :mod:`tools.studies.prediction_cache` where this artifact already ran."""
    key, model = cache_key(path, task.fingerprint), LazyPredictor(path)
    return {split: cached(key, split, "labels", lambda: model().logits(texts[split], batch_size=batch_size).argmax(-1))
            for split in SPLITS}


def parse_rows(specs: Sequence[str]) -> list[tuple[str, list[Path]]]:
    """``DIR`` -> one run named after the folder; ``seeds:DIR,DIR`` or ``NAME=DIR,DIR`` -> a group."""
    rows = []
    for spec in specs:
        if "=" in spec:
            name, dirs = spec.split("=", 1)
        elif spec.startswith("seeds:"):
            dirs = spec[len("seeds:"):]
            name = Path(dirs.split(",")[0]).name.rsplit("-s", 1)[0] + f" ({len(dirs.split(','))} seeds)"
        else:
            name, dirs = Path(spec).name, spec
        rows.append((name, [Path(d) for d in dirs.split(",") if d]))
    return rows


def _acc(pred: np.ndarray, labels: np.ndarray) -> float:
    return float((pred == labels).mean())


def _fmt(values: list[float]) -> str:
    if len(values) == 1:
        return f"{100 * values[0]:.1f}%"
    return f"{100 * np.mean(values):.1f} ± {100 * np.std(values, ddof=1):.1f}%"


def _p(values: list[float]) -> str:
    if not values:
        return "-"
    p = float(np.median(values))
    return f"{p:.2g}" if p < 0.01 else f"{p:.2f}"


def table(rows: list[Row], labels: dict[str, np.ndarray], baseline: Row | None, teacher: Run | None) -> str:
    """The Markdown table (see the module docstring for what each column means)."""
    pooled_labels = np.concatenate([labels[s] for s in SPLITS])
    head = ["run", "seeds", "validation", "test", "val + test", "agreement w/ teacher (test)",
            "McNemar p vs baseline (test)", "(val + test)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        val = [_acc(r.pred["validation"], labels["validation"]) for r in row.runs]
        test = [_acc(r.pred["test"], labels["test"]) for r in row.runs]
        pooled = [_pooled_accuracy(r, labels) for r in row.runs]
        agree = [float((r.pred["test"] == teacher.pred["test"]).mean()) for r in row.runs] if teacher else []
        p_test, p_pooled = [], []
        if baseline is not None and row is not baseline:
            for i, run in enumerate(row.runs):
                base = baseline.runs[i] if len(baseline.runs) == len(row.runs) else baseline.runs[0]
                p_test.append(mcnemar_p(run.pred["test"] == labels["test"], base.pred["test"] == labels["test"]))
                both = [np.concatenate([x.pred[s] for s in SPLITS]) == pooled_labels for x in (run, base)]
                p_pooled.append(mcnemar_p(*both))
        cells = [row.name + (" (baseline)" if row is baseline else ""), str(len(row.runs)), _fmt(val), _fmt(test),
                 _fmt(pooled), _fmt(agree) if agree else "-", _p(p_test), _p(p_pooled)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pooled_accuracy(run: Run, labels: dict[str, np.ndarray]) -> float:
    """One run's accuracy over validation and test together."""
    return _acc(np.concatenate([run.pred[s] for s in SPLITS]), np.concatenate([labels[s] for s in SPLITS]))


def _pooled_correct(row: Row, labels: dict[str, np.ndarray]) -> np.ndarray:
    """``(seeds, validation + test sentences)`` correctness of a row's runs."""
    pooled_labels = np.concatenate([labels[s] for s in SPLITS])
    return np.stack([np.concatenate([r.pred[s] for s in SPLITS]) == pooled_labels for r in row.runs])


def protocol_decisions(rows: list[Row], labels: dict[str, np.ndarray], baseline: Row,
                       min_seeds: int = MIN_SEEDS) -> list[tuple[str, Decision]]:
    """The protocol's decision for every row against ``baseline`` (refused with a clear error when the seeds
    do not pair up, or are fewer than ``min_seeds``)."""
    base = _pooled_correct(baseline, labels)
    out = []
    for row in rows:
        if row is baseline:
            continue
        require_seeds(row.name, len(row.runs), baseline.name, len(baseline.runs), min_seeds)
        out.append((row.name, decide(_pooled_correct(row, labels), base)))
    return out


def protocol_table(decisions: list[tuple[str, Decision]], baseline: str) -> str:
    """The Markdown table of :func:`protocol_decisions`, differences in points, then one verdict line per row."""
    def pts(x: float) -> str:
        return f"{100 * x:+.2f}"

    def p(x: float) -> str:
        return f"{x:.2g}" if x < 0.01 else f"{x:.2f}"

    head = ["lever vs " + baseline, "seeds x sentences", "difference (pooled)", "95% interval", "p (permutation)",
            "detectable (80%)", "seed-level mean", "95% interval (t)", "p (t)", "detectable (t, 80%)", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, d in decisions:
        pool, seed = d.pooled, d.seeds
        cells = [name, f"{pool.seeds} x {pool.sentences}", pts(pool.difference), f"[{pts(pool.low)}, {pts(pool.high)}]",
                 p(pool.p_value), f"{100 * pool.detectable:.2f}"]
        cells += ([pts(seed.mean), f"[{pts(seed.low)}, {pts(seed.high)}]", p(seed.p_value), f"{100 * seed.detectable:.2f}"]
                  if seed is not None else ["-"] * 4)
        lines.append("| " + " | ".join(cells + [d.verdict]) + " |")
    lines.append("")
    lines += [f"- {name}: {d.summary}" for name, d in decisions]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.studies.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="artifact folders, or seeds:DIR,DIR,... / NAME=DIR,DIR,... groups")
    parser.add_argument("--data", default="movie-reviews", help="dataset (default movie-reviews)")
    parser.add_argument("--teacher", default=None,
                        help="teacher artifact, for the agreement column (and on tagging data the share of its "
                             "F1); on tagging data also DIR,DIR,...: one teacher per group, in the groups' order, "
                             "with the shares pooled over the teachers")
    parser.add_argument("--baseline", default=None, help="the row (as written among RUNS) the p-values compare with")
    parser.add_argument("--json", default=None, help="also write the per-row numbers to this JSON file")
    parser.add_argument("--protocol", action="store_true",
                        help="decide every group against the --baseline group: pooled paired permutation test and "
                             f"seed-level t-test over validation + test (at least {MIN_SEEDS} seeds each)")
    parser.add_argument("--trend", default=None, metavar="KEY",
                        help=f"fit every run's validation + test metric on a log scale against {trends.DEFAULT_KEY} (the "
                             "rows it was distilled on, labelled ones included) or the number at a dotted key of its "
                             "compress.json (training.global_steps)")
    parser.add_argument("--trend-target", type=float, default=None, metavar="SHARE",
                        help="with --trend and --teacher: say where the fitted line reaches this share of the "
                             "teacher's validation + test metric (for example 0.98)")
    parser.add_argument("--trend-plot", default=None, metavar="PNG", help="with --trend: draw the fit to this file")
    args = parser.parse_args(argv)
    if (args.trend_target is not None or args.trend_plot) and not args.trend:
        print("--trend-target and --trend-plot need --trend KEY", file=sys.stderr)
        return 2
    if args.trend_target is not None and not args.teacher:
        print("--trend-target is a share of the teacher's metric: give --teacher DIR", file=sys.stderr)
        return 2

    specs = parse_rows(args.runs)
    teachers = [t for t in (args.teacher or "").split(",") if t]
    if len(teachers) > 1:  # one recipe read on several teachers: each group its own
        if (len(teachers) != len(specs) or len(set(teachers)) != len(teachers)
                or len({name for name, _ in specs}) != len(specs)):
            print(f"--teacher gives {len(teachers)} teachers for {len(specs)} groups: give one teacher for all, or "
                  "one different teacher per group (groups with different names), in the groups' order",
                  file=sys.stderr)
            return 2
        if args.trend_target is not None:
            print("--trend-target is a share of one teacher's metric: give a single --teacher", file=sys.stderr)
            return 2
    wanted = parse_rows([args.baseline])[0][0] if args.baseline else None
    if args.baseline and wanted not in [name for name, _ in specs]:
        print(f"--baseline {args.baseline} is not among the runs", file=sys.stderr)
        return 2
    if args.protocol:  # refuse before minutes of predicting, not after
        if not args.baseline:
            print("--protocol needs --baseline NAME=DIR,DIR,DIR (the group every other group is decided against)",
                  file=sys.stderr)
            return 2
        base_dirs = dict(specs)[wanted]
        try:
            for name, dirs in specs:
                if name != wanted:
                    require_seeds(name, len(dirs), wanted, len(base_dirs))
        except CompressError as exc:
            print(exc, file=sys.stderr)
            return 2
    if args.trend:  # refuse a key the runs lack, or x a line cannot be fitted to, before predicting
        try:
            trends.check_xs([trends.run_x(read_meta(d) or {}, args.trend, str(d)) for _, dirs in specs for d in dirs])
        except CompressError as exc:
            print(exc, file=sys.stderr)
            return 2
    task = DataOptions(args.data).load_any()
    if getattr(task, "task", None) == "token-classification":
        return _main_tagging(args, specs, wanted, task, teachers)
    if len(teachers) > 1:
        print("several --teacher artifacts are read on tagging data (a share of each teacher's entity F1); give "
              "one teacher here", file=sys.stderr)
        return 2
    texts, labels = {}, {}
    for split in SPLITS:
        texts[split], labels[split] = split_texts_and_labels(task, split)
    rows = []
    for name, dirs in specs:
        runs = [Run(d, _predictions(d, task, texts), read_meta(d) or {}) for d in dirs]
        rows.append(Row(name, runs))
    baseline = next((r for r in rows if r.name == wanted), None)
    teacher = Run(Path(args.teacher), _predictions(Path(args.teacher), task, texts), {}) if args.teacher else None
    print(table(rows, labels, baseline, teacher))
    decisions = []
    if args.protocol:
        decisions = protocol_decisions(rows, labels, baseline)
        print()
        print(protocol_table(decisions, baseline.name))
    fitted = None
    if args.trend:
        points = [(r.name, [(x.path, x.meta, _pooled_accuracy(x, labels)) for x in r.runs]) for r in rows]
        fitted = _print_trend(args, points, _pooled_accuracy(teacher, labels) if teacher else None,
                              "validation + test accuracy")
    if args.json:
        payload = {r.name: {"runs": [str(x.path) for x in r.runs],
                            **{s: [_acc(x.pred[s], labels[s]) for x in r.runs] for s in SPLITS}} for r in rows}
        for name, d in decisions:
            payload[name]["protocol"] = {"baseline": baseline.name, **d.as_dict()}
        if fitted is not None:
            payload["trend"] = fitted
        atomic_write_text(Path(args.json), json.dumps(payload, indent=2) + "\n")
    return 0


def _print_trend(args: argparse.Namespace, rows: list[tuple[str, list[tuple[Path, dict, float]]]],
                 teacher_metric: float | None, metric: str) -> dict:
    """Fit, print and (with ``--trend-plot``) draw ``--trend``; the fit as a JSON-ready dict. :func:`main` has
    checked the runs' x before predicting, so the fit cannot be refused here."""
    groups = [trends.TrendGroup(name, [(trends.run_x(meta, args.trend, str(path)), value)
                                       for path, meta, value in runs]) for name, runs in rows]
    fit = trends.fit_groups(groups)
    target = teacher_metric * args.trend_target if args.trend_target is not None else None
    label = f"{100 * args.trend_target:g}% of the teacher's {100 * teacher_metric:.2f}" if target is not None else ""
    print()
    print("\n".join(trends.trend_lines(groups, fit, metric, args.trend, target, label)))
    if args.trend_plot:
        trends.plot_trend(groups, fit, Path(args.trend_plot), metric, args.trend, target, label or "target")
        print(f"\nplot: {args.trend_plot}")
    out = {"key": args.trend, "metric": metric, **{k: getattr(fit, k) for k in (
        "points", "slope", "slope_low", "slope_high", "centre_log_x", "centre_y", "r_squared", "level")}}
    if target is not None:
        out.update(target=target, x_reaching=fit.x_reaching(target), x_reaching_range=list(fit.reach_range(target)))
    return out


def _main_tagging(args: argparse.Namespace, specs: list[tuple[str, list[Path]]], wanted: str | None, task,
                  teacher_dirs: list[str]) -> int:
    """:func:`main` on tagging data: entity F1 instead of accuracy (:mod:`tools.studies.compare_tagging`); one
    teacher for every group, or one per group (``teacher_dirs`` in the groups' order)."""
    from tools.studies import compare_tagging as ct

    scoring, types = ct.scorers(task), task.entity_types
    try:
        rows = [ct.TaggerRow(name, [ct.tagger_run(d, scoring, types, task.fingerprint) for d in dirs]) for name, dirs in specs]
        runs = [ct.tagger_run(Path(d), scoring, types, task.fingerprint) for d in teacher_dirs]
    except CompressError as exc:
        print(exc, file=sys.stderr)
        return 2
    teachers = {row.name: runs[i if len(runs) > 1 else 0] for i, row in enumerate(rows)} if runs else {}
    teacher = runs[0] if len(runs) == 1 else None  # the one teacher a trend's target is a share of
    baseline = next((r for r in rows if r.name == wanted), None)
    print(ct.table(rows, baseline, teachers))
    print()
    print(ct.novelty_table(rows, teachers, task))
    shares = ct.teacher_shares(rows, teachers) if teachers else None
    if shares is not None:
        print()
        print(ct.share_table(rows, teachers, shares))
    decisions = ct.protocol_decisions(rows, baseline, MIN_SEEDS) if args.protocol else []
    if decisions:
        print()
        print(protocol_table(decisions, baseline.name))
    fitted = None
    if args.trend:
        points = [(r.name, [(x.path, x.meta, ct.pooled_f1(x)) for x in r.runs]) for r in rows]
        fitted = _print_trend(args, points, ct.pooled_f1(teacher) if teacher else None, "validation + test entity F1")
    if args.json:
        out = ct.payload(rows)
        for name, d in decisions:
            out[name]["protocol"] = {"baseline": baseline.name, **d.as_dict()}
        for name, by_split in (shares or {}).items():
            out.setdefault(name, {})["teacher_share"] = by_split
        if fitted is not None:
            out["trend"] = fitted
        atomic_write_text(Path(args.json), json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
