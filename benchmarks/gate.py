"""CI gates: thresholds from a TOML file checked against ``results.json`` -> exit code, JUnit, summary.

``bert-compress gate RESULTS.json --rules gates.toml [--baseline OLD.json] [--junit FILE]
[--on-inconclusive pass|fail] [--history FILE.jsonl --window N]``

Every rule on a measured quantity is decided on a confidence interval (95% unless the rules say
``confidence = ...``), not on the point estimate: it *passes* when the whole interval is on the
good side of the limit, *fails* when the whole interval is on the bad side, and is *inconclusive*
when the interval straddles the limit (more rounds or more examples would decide). The intervals
are described in :mod:`compress.core.stats`; speedups come from the benchmark's interleaved paired
rounds, accuracy differences from the same examples.

Exit codes, so CI can tell a model that got worse from a pipeline that is broken:

- 0 every rule passed (rules that do not apply, such as fusion rules on a PyTorch artifact, or
  regression rules without ``--baseline``, are reported as skipped);
- 1 at least one rule failed;
- 4 nothing failed, but at least one rule was inconclusive (``--on-inconclusive pass`` or ``fail``
  turns that into 0 or 1);
- 3 the rules or a results or history file is malformed (bad TOML, unknown rule, wrong type, wrong
  schema, missing field, a rule table naming an artifact the results do not hold, a broken history
  line). The message names the file, the key or line, and the fix;
- 2 (from the command line's usual handling) any other input problem, such as an unwritable
  ``--junit`` path.

Rules file::

    [rules]                      # every artifact except the reference
    min_speedup = 2.0            # lower 95% bound of the paired speedup over the reference, at every measured config
    speedup_batch_size = 1       # ... or only at this batch size (and/or speedup_seq_len)
    max_accuracy_drop = 0.01     # upper 95% bound of reference accuracy - artifact accuracy (paired)
    min_agreement = 0.98

    [artifacts."student-int8"]   # overrides for one artifact (the reference too); false turns a rule off
    max_size_mb = 40
    min_speedup = false

Every rule and field is documented in ``docs/ci.md``.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

from benchmarks import f1_rules
from benchmarks.gate_output import _summary_line, _write, format_table, junit_xml, markdown_summary, outcome
from benchmarks.gate_results import (READABLE_VERSIONS, SCHEMA, SCHEMA_VERSION, device_mismatch, load_results,
                                     results_device, results_task)
from benchmarks.gate_rules import (CLASSIFIER_RULES, DEFAULT_CONFIDENCE, EPS, EXIT_FAIL, EXIT_INCONCLUSIVE,
                                   EXIT_MALFORMED, EXIT_PASS, QUALITY_RULES, RULES, SELECTORS, SETTINGS, TAGGING_RULES,
                                   VECTOR_RULES, Check,
                                   GateInputError, GateRules, RuleSpec, _header_line, load_rules)
from benchmarks.verdicts import fall_report
from compress.core.errors import CompressError
from benchmarks.history import (DEFAULT_TEST, DEFAULT_THRESHOLD, DEFAULT_WINDOW, check_artifact, read_history,
                                summarize_run)
from compress.core.stats import (Interval, accuracy_drop_interval, detectable_drop, mean_interval,
                              mean_over_seeds_interval, percentile_interval, proportion_interval, ratio_of_independent, series_median_interval,
                              speedup_replicates, throughput_interval, unpaired_accuracy_drop_interval)

#: The gate's public names, importable from this one module whichever of the gate's modules defines them:
#: the rules (:mod:`benchmarks.gate_rules`), the results (:mod:`benchmarks.gate_results`) and the written
#: verdicts (:mod:`benchmarks.gate_output`); this module decides the rules (:func:`evaluate`) and runs the command.
__all__ = ["CLASSIFIER_RULES", "DEFAULT_CONFIDENCE", "EXIT_FAIL", "EXIT_INCONCLUSIVE", "EXIT_MALFORMED", "EXIT_PASS",
           "QUALITY_RULES", "READABLE_VERSIONS", "RULES", "SCHEMA", "SCHEMA_VERSION", "SELECTORS", "SETTINGS",
           "TAGGING_RULES", "VECTOR_RULES", "Check", "GateInputError", "GateRules", "RuleSpec", "combine", "comparability", "device_mismatch", "evaluate",
           "format_table", "history_checks", "junit_xml", "load_results", "load_rules", "markdown_summary", "outcome",
           "results_device", "run_gate"]

# ----------------------------------------------------------------------------- evaluation

NO_SAMPLES = ("{which} is a schema version 1 results file: it holds no {what}, so no interval can be computed and the "
              "rule cannot be decided. Run bench again with this bert-compress (schema version 2)")


def _select(latency: list[dict], batch: int | None, seq: int | None) -> list[dict]:
    return [e for e in latency if (batch is None or e["batch_size"] == batch) and (seq is None or e["seq_len"] == seq)]


def _configs(latency: list[dict]) -> str:
    return ", ".join(f"batch {e['batch_size']} seq {e['seq_len']}" for e in latency) or "none"


def _missing_config(name: str, rule: str, latency: list[dict], batch: int | None, seq: int | None, keys: str) -> Check:
    want = " ".join(p for p in (f"batch {batch}" if batch else "", f"seq {seq}" if seq else "") if p)
    return Check(name, rule, None, "-", "fail",
                 f"no latency measured at {want} (measured: {_configs(latency)}). Run bench with that batch size and "
                 f"sequence length, or change {keys} in the rules.")


def combine(statuses: list[str]) -> str:
    """One verdict from several: any fail fails; else any inconclusive is inconclusive; else pass."""
    if "fail" in statuses:
        return "fail"
    return "inconclusive" if "inconclusive" in statuses else "pass"


def _ci(interval, fmt: str = "{:.4g}", scale: float = 1.0, suffix: str = "") -> str:
    return interval.text(fmt, scale, suffix)


@dataclass
class _Subject:
    """What a rules table gates: one artifact, or a group of seeds (quality on their mean, the rest on the
    first member, which is the one timed)."""

    name: str
    art: dict  # the artifact (for a group: the first member) whose latency, size and graph are gated
    members: list[dict] | None = None

    @property
    def is_group(self) -> bool:
        return self.members is not None


class _Context:
    """The documents and caches one evaluation works on."""

    def __init__(self, results: dict, baseline: dict | None):
        self.results, self.baseline = results, baseline
        self.arts = {a["name"]: a for a in results["artifacts"]}
        self.ref = self.arts[results["reference"]]
        self.version = results["schema_version"]
        self.labels = np.asarray((results.get("data") or {}).get("labels") or [], dtype=np.int64)
        #: The results' task: which quality rules apply and how each is decided (its scoring aspect's
        #: ``gate_rules``), and how its per-unit records are read (``gate_records``: the F1 rules').
        self.task = results_task(results)
        self.scoring = self.task.aspect("scoring")
        self.quality_rules = dict(self.scoring.gate_rules())
        self.records = self.scoring.gate_records()
        self.base_arts = {a["name"]: a for a in (baseline or {}).get("artifacts", [])}
        self.base_groups = {g["name"]: g["members"] for g in (baseline or {}).get("groups") or []}
        self._cache: dict = {}

    def correct(self, art: dict, doc: dict | None = None) -> np.ndarray | None:
        doc = doc or self.results
        pred = art["quality"].get("predictions")
        labels = (doc.get("data") or {}).get("labels")
        if doc.get("schema_version", 1) < 2 or pred is None or labels is None:
            return None
        return np.asarray(pred) == np.asarray(labels)

    def rounds(self, art: dict, b: int, s: int, doc: dict | None = None) -> list[int] | None:
        doc = doc or self.results
        if doc.get("schema_version", 1) < 2:
            return None
        entry = next((e for e in art.get("latency") or [] if (e["batch_size"], e["seq_len"]) == (b, s)), None)
        return None if entry is None else entry.get("rounds_ns")

    def speedup(self, art: dict, ref: dict, b: int, s: int, doc: dict | None = None):
        """``(estimate, bootstrap replicates)`` of the paired speedup at one configuration, or ``None`` (v1)."""

        doc = doc or self.results
        key = ("speedup", id(doc), art["name"], b, s)
        if key not in self._cache:
            art_rounds, ref_rounds = self.rounds(art, b, s, doc), self.rounds(ref, b, s, doc)
            if art_rounds is None or ref_rounds is None:
                self._cache[key] = None
            else:
                if len(art_rounds) != len(ref_rounds):
                    raise GateInputError(f"{art['name']} has {len(art_rounds)} rounds at batch {b} seq {s} but the "
                                         f"reference has {len(ref_rounds)}: the rounds are not paired. The file was "
                                         "edited or damaged; run the benchmark again.")
                est, reps, _ = speedup_replicates(ref_rounds, art_rounds)
                self._cache[key] = (est, reps, len(art_rounds))
        return self._cache[key]


def _subjects(results: dict, rules: GateRules) -> list[_Subject]:
    arts = {a["name"]: a for a in results["artifacts"]}
    groups = {g["name"]: g["members"] for g in results.get("groups") or []}
    members = {m for ms in groups.values() for m in ms}
    unknown = [n for n in rules.artifacts if n not in arts and n not in groups]
    if unknown:
        text = rules.path.read_text(encoding="utf-8")
        line = _header_line(text.splitlines(), ("artifacts", unknown[0]))
        where = f"{rules.path}:{line + 1}" if line is not None else str(rules.path)
        raise GateInputError(f"{where}: [artifacts.\"{unknown[0]}\"] names no artifact or seed group of the results "
                             f"(they are: {', '.join([*arts, *groups])}). Use one of those names (the artifact "
                             "folder's name, or the NAME of bench --seeds NAME=...).")
    out = []
    for name, art in arts.items():
        # A group's members are gated through their group; a table naming one member gates it alone.
        if name not in members or name in rules.artifacts:
            out.append(_Subject(name, art))
    for name, names in groups.items():
        out.append(_Subject(name, arts[names[0]], [arts[m] for m in names]))
    return out


def evaluate(results: dict[str, Any], rules: GateRules, baseline: dict[str, Any] | None = None) -> list[Check]:
    """Every rule in force on every artifact (and seed group), in the rules' order: one :class:`Check` each."""
    ctx = _Context(results, baseline)
    checks: list[Check] = []
    for subject in _subjects(results, rules):
        in_group = any(subject.name in g["members"] for g in results.get("groups") or [])
        active = rules.for_artifact(subject.name, subject.art["is_reference"] and not subject.is_group)
        if in_group and subject.name in rules.artifacts:
            active = dict(rules.artifacts[subject.name])  # a member named on its own: only its own table
            active = {k: v for k, v in active.items() if v is not False}
        for rule, limit in active.items():
            if rule in SETTINGS:
                continue
            checks.append(_evaluate_rule(rule, limit, subject, ctx, active))
    return checks


def _evaluate_rule(rule: str, limit: Any, subject: _Subject, ctx: _Context, active: dict) -> Check:
    name, art = subject.name, subject.art
    confidence = active.get("confidence", DEFAULT_CONFIDENCE)

    def point(ok: bool, measured: str, message: str = "") -> Check:
        return Check(name, rule, limit, measured, "pass" if ok else "fail", "" if ok else message)

    if rule in ("min_speedup", "max_p50_ms", "min_throughput"):
        return _latency_rule(rule, limit, subject, ctx, active, confidence)
    if rule in QUALITY_RULES:
        return _quality_rule(rule, limit, subject, ctx, confidence)
    if rule == "max_size_mb":
        mb = art["size_bytes"] / 1e6
        return point(mb <= limit + EPS, f"{mb:.2f} MB", f"size {mb:.2f} MB is over {limit:g} MB")
    if rule == "max_regression":
        return _regression(limit, subject, ctx, active, confidence)
    if rule in ("min_fused_attention", "require_full_attention_fusion"):
        onnx = art.get("onnx")
        if onnx is None:
            return Check(name, rule, limit, "-", "skip", f"{art['kind']} artifact: fusions apply to ONNX graphs only")
        ops = onnx["attention_ops"]
        if rule == "min_fused_attention":
            return point(ops >= limit, f"{ops} attention ops", f"{ops} fused attention operators, fewer than {limit}")
        layers = art.get("num_hidden_layers")
        if layers is None:
            return Check(name, rule, limit, f"{ops} attention ops", "fail",
                         "the layer count is unknown (no num_hidden_layers in config.json), so full fusion cannot "
                         "be shown; export the model again with bert-compress export")
        return point(ops == layers, f"{ops} of {layers} layers",
                     f"{ops} fused attention operators for {layers} layers: the unfused layers run as separate "
                     "MatMul/Softmax operators. Export with bert-compress export (eager attention, dynamo=False)")
    raise AssertionError(f"unhandled rule {rule}")  # RULES and this function are kept in step by the tests


def _latency_rule(rule: str, limit: float, subject: _Subject, ctx: _Context, active: dict,
                  confidence: float) -> Check:
    """``min_speedup`` (paired, against the in-run reference), ``max_p50_ms``, ``min_throughput`` (absolute)."""

    name, art = subject.name, subject.art
    keys = "speedup_batch_size/speedup_seq_len" if rule == "min_speedup" else "latency_batch_size/latency_seq_len"
    prefix = "speedup" if rule == "min_speedup" else "latency"
    b, s = active.get(f"{prefix}_batch_size"), active.get(f"{prefix}_seq_len")
    entries = _select(art["latency"], b, s)
    if not entries:
        return _missing_config(name, rule, art["latency"], b, s, keys)
    results = []  # (entry, interval or None)
    for e in entries:
        cfg = (e["batch_size"], e["seq_len"])
        if rule == "min_speedup":
            boot = ctx.speedup(art, ctx.ref, *cfg)
            interval = None if boot is None else percentile_interval(
                boot[0], boot[1], confidence, f"circular block bootstrap over {boot[2]} paired rounds")
        else:
            rounds = ctx.rounds(art, *cfg)
            interval = None if rounds is None else (
                series_median_interval(rounds, confidence) if rule == "max_p50_ms"
                else throughput_interval(rounds, e["batch_size"], confidence))
        results.append((e, interval))
    higher = rule != "max_p50_ms"
    unit = {"min_speedup": "x", "max_p50_ms": " ms", "min_throughput": " seq/s"}[rule]
    fmt = {"min_speedup": "{:.3f}", "max_p50_ms": "{:.3f}", "min_throughput": "{:.2f}"}[rule]
    if any(i is None for _, i in results):
        def point(e: dict) -> float:
            return {"min_speedup": e["speedup"]["median"], "max_p50_ms": e["p50_ms"],
                    "min_throughput": e["throughput_seq_per_s"] or 0.0}[rule]

        e = (min if higher else max)(entries, key=point)  # the worst point value, shown for information
        value = point(e)
        return Check(name, rule, limit, f"{fmt.format(value)}{unit} at batch {e['batch_size']} seq {e['seq_len']}",
                     "inconclusive", NO_SAMPLES.format(which="RESULTS", what="per-round timings"))
    verdicts = [(e, i, i.verdict(limit, higher_is_better=higher)) for e, i in results]
    status = combine([v for _, _, v in verdicts])
    # Show the configuration that decided: a failing one, else an inconclusive one, else the tightest.
    shown = [x for x in verdicts if x[2] == status] or verdicts
    e, interval, _ = min(shown, key=lambda x: x[1].low if higher else -x[1].high)
    where = f"at batch {e['batch_size']} seq {e['seq_len']}"
    measured = f"{fmt.format(interval.estimate)}{unit} {where}"
    shown_ci = _ci(interval, fmt)
    what = {"min_speedup": "speedup", "max_p50_ms": "p50 latency", "min_throughput": "throughput"}[rule]
    other = "upper" if higher else "lower"
    message = ""
    if status == "fail":
        message = (f"{what} {measured}: even the {other} bound of its {100 * confidence:g}% interval {shown_ci} is "
                   f"{'below' if higher else 'over'} {limit:g}{unit} (worst of {len(entries)} config(s))")
    elif status == "inconclusive":
        message = (f"inconclusive: the {100 * confidence:g}% interval of the {what} {where}, {shown_ci}, straddles "
                   f"{limit:g}{unit}; run more rounds (bench --runs) to decide")
    if rule != "min_speedup" and status != "pass":
        message += ". Absolute times depend on the runner's CPU; min_speedup compares against the in-run reference"
    return Check(name, rule, limit, measured, status, message, shown_ci)


def _quality_samples(subject: _Subject, ctx: _Context):
    """Per-member correctness and predictions, and the reference's, or ``None`` for a version 1 file."""
    members = subject.members or [subject.art]
    ref_correct = ctx.correct(ctx.ref)
    correct = [ctx.correct(m) for m in members]
    if ref_correct is None or any(c is None for c in correct):
        return None
    preds = [np.asarray(m["quality"]["predictions"]) for m in members]
    return ref_correct, correct, np.asarray(ctx.ref["quality"]["predictions"]), preds


def _accuracy_drop(rule: str, limit: float, subject: _Subject, ctx: _Context, confidence: float) -> Check:
    from statistics import NormalDist

    name = subject.name
    relative = rule == "max_relative_accuracy_drop"
    samples = _quality_samples(subject, ctx)
    rq = ctx.ref["quality"]
    accs = [m["quality"]["accuracy"] for m in subject.members or [subject.art]]
    acc = float(np.mean(accs))
    if samples is None:
        drop = rq["accuracy"] - acc
        value = drop / rq["accuracy"] if relative and rq["accuracy"] > 0 else drop
        return Check(name, rule, limit, f"{100 * value:+.2f}{'%' if relative else ' pt'}", "inconclusive",
                     NO_SAMPLES.format(which="RESULTS", what="per-example predictions"))
    ref_correct, correct, _, _ = samples
    if subject.is_group:
        per_seed = np.stack([ref_correct.astype(float) - c for c in correct])
        interval = mean_over_seeds_interval(per_seed, confidence)
        ref_acc = float(ref_correct.mean())
        if relative and ref_acc > 0:
            interval = type(interval)(interval.estimate / ref_acc, interval.low / ref_acc, interval.high / ref_acc,
                                      confidence, interval.method + ", divided by the reference accuracy")
        z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
        detectable = (z + NormalDist().inv_cdf(0.8)) * (interval.high - interval.low) / (2 * z)
        of = f"mean of {len(correct)} seeds"
    else:
        interval = accuracy_drop_interval(ref_correct, correct[0], confidence, relative=relative)
        detectable = detectable_drop(ref_correct, correct[0], confidence)
        if relative and ref_correct.mean() > 0:
            detectable /= float(ref_correct.mean())
        of = f"{acc:.4f} vs {rq['accuracy']:.4f}"
    unit, scale = ("%", 100) if relative else (" pt", 100)
    measured = f"{scale * interval.estimate:+.2f}{unit} ({of})"
    shown_ci = _ci(interval, "{:+.2f}", scale, unit)
    status = interval.verdict(limit, higher_is_better=False)
    size = f"this test set ({len(ref_correct)} examples) detects a true drop of {scale * detectable:.1f}{unit} with 80% power"
    message = ""
    if status == "fail":
        message = (f"accuracy fell by {measured}: even the lower bound of its {100 * confidence:g}% paired interval "
                   f"{shown_ci} is over {scale * limit:g}{unit}")
    elif status == "inconclusive":
        message = (f"inconclusive: the {100 * confidence:g}% paired interval of the drop, {shown_ci}, straddles "
                   f"{scale * limit:g}{unit}; {size}. More test examples (or seeds) would decide")
    else:
        message = size
    return Check(name, rule, limit, measured, status, message, shown_ci)


def _agreement(rule: str, limit: float, subject: _Subject, ctx: _Context, confidence: float) -> Check:
    name = subject.name
    members = subject.members or [subject.art]
    agreement = float(np.mean([m["quality"]["agreement"] for m in members]))
    samples = _quality_samples(subject, ctx)
    if samples is None:
        return Check(name, "min_agreement", limit, f"{agreement:.4f}", "inconclusive",
                     NO_SAMPLES.format(which="RESULTS", what="per-example predictions"))
    _, _, ref_pred, preds = samples
    agree = [p == ref_pred for p in preds]
    if subject.is_group:
        interval = mean_over_seeds_interval(np.stack(agree).astype(float), confidence)
    else:
        interval = proportion_interval(int(agree[0].sum()), len(agree[0]), confidence)
    measured = f"{interval.estimate:.4f}" + (f" (mean of {len(members)} seeds)" if subject.is_group else "")
    shown_ci = _ci(interval, "{:.4f}")
    status = interval.verdict(limit, higher_is_better=True)
    message = ""
    if status == "fail":
        message = f"agreement {measured}: even the upper bound of its interval {shown_ci} is below {limit:g}"
    elif status == "inconclusive":
        message = (f"inconclusive: the {100 * confidence:g}% interval of the agreement, {shown_ci}, straddles "
                   f"{limit:g}; more test examples would decide")
    return Check(name, "min_agreement", limit, measured, status, message, shown_ci)


def _traffic_agreement(rule: str, limit: float, subject: _Subject, ctx: _Context, confidence: float) -> Check:
    """``min_traffic_agreement``: ``min_agreement`` on the ``bench --traffic-file`` texts, from their predictions
    (Clopper-Pearson; for a seed group, the mean over seeds with seed and text variance)."""

    name = subject.name
    members = subject.members or [subject.art]
    ref = ctx.ref.get("traffic_agreement")
    records = [m.get("traffic_agreement") for m in members]
    if ref is None or any(r is None for r in records):
        return Check(name, rule, limit, "-", "fail", "the results hold no traffic agreement: run bench with "
                                                      "--traffic-file FILE (unlabelled texts of your traffic)")
    ref_pred = np.asarray(ref["predictions"])
    agree = []
    for member, record in zip(members, records):
        if len(record["predictions"]) != len(ref_pred):
            raise GateInputError(f"{member['name']} has {len(record['predictions'])} traffic predictions but the "
                                 f"reference has {len(ref_pred)}: they are not paired. The file was edited or damaged; "
                                 "run the benchmark again.")
        agree.append(np.asarray(record["predictions"]) == ref_pred)
    if subject.is_group:
        interval = mean_over_seeds_interval(np.stack(agree).astype(float), confidence)
    else:
        interval = proportion_interval(int(agree[0].sum()), len(agree[0]), confidence)
    measured = (f"{interval.estimate:.4f} of {len(ref_pred)} texts"
                + (f" (mean of {len(members)} seeds)" if subject.is_group else ""))
    shown_ci = _ci(interval, "{:.4f}")
    status = interval.verdict(limit, higher_is_better=True)
    message = ""
    if status == "fail":
        message = (f"traffic agreement {measured}: even the upper bound of its interval {shown_ci} is below {limit:g}; "
                   "results.json lists the most confident disagreements under traffic_agreement.disagreements")
    elif status == "inconclusive":
        message = (f"inconclusive: the {100 * confidence:g}% interval of the traffic agreement, {shown_ci}, straddles "
                   f"{limit:g}; more traffic texts would decide")
    return Check(name, rule, limit, measured, status, message, shown_ci)


def comparability(results: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    """Why two runs may not be comparable: another CPU, thread count or data."""
    notes = []
    pairs = [("CPU", ("machine", "cpu_model")), ("threads", ("settings", "threads")),
             ("data", ("data", "fingerprint")), ("quick", ("settings", "quick"))]
    for label, (section, key) in pairs:
        new, old = (results.get(section) or {}).get(key), (baseline.get(section) or {}).get(key)
        if new is not None and old is not None and new != old:
            shown = "differs" if key == "fingerprint" else f"{old!r} -> {new!r}"
            why = ("accuracy is then compared on other examples (unpaired, a much wider interval)" if label == "data"
                   else "max_regression compares speedups against the in-run reference, which move less than "
                        "absolute times but still depend on the CPU kind (VNNI, AMX) and thread count")
            notes.append(f"the baseline was measured with other {label} ({shown}); {why}")
    return notes


def _regression(limit: float, subject: _Subject, ctx: _Context, active: dict, confidence: float) -> Check:
    """Against ``--baseline``: the normalised latency (reference time / speedup) may grow, and the accuracy may
    fall, by at most ``limit`` (a share), each decided on the interval of the change."""

    name, rule, art = subject.name, "max_regression", subject.art
    if ctx.baseline is None:
        return Check(name, rule, limit, "-", "skip", "no --baseline given")
    base = _baseline_of(subject, ctx)
    if base is None:
        return Check(name, rule, limit, "-", "skip", "not in the baseline (a new artifact)")
    base_ref = ctx.base_arts.get(ctx.baseline["reference"])
    b, s = active.get("latency_batch_size"), active.get("latency_seq_len")
    old_cfgs = {(e["batch_size"], e["seq_len"]) for e in base.get("latency") or []}
    cfgs = [(e["batch_size"], e["seq_len"]) for e in _select(art["latency"], b, s)
            if (e["batch_size"], e["seq_len"]) in old_cfgs]
    parts = []  # (status, measured, interval text, message)
    no_samples = []
    for cfg in cfgs:
        new = ctx.speedup(art, ctx.ref, *cfg)
        old = ctx.speedup(base, base_ref, *cfg, doc=ctx.baseline) if base_ref is not None else None
        if new is None or old is None:
            no_samples.append("per-round timings")
            continue
        # Normalised latency = 1 / speedup, so its growth is old speedup / new speedup - 1.
        growth = ratio_of_independent((old[0], old[1]), (new[0], new[1]), confidence,
                                      "ratio of two independent block bootstraps")
        interval = type(growth)(growth.estimate - 1, growth.low - 1, growth.high - 1, confidence, growth.method)
        status = interval.verdict(limit, higher_is_better=False)
        where = f"batch {cfg[0]} seq {cfg[1]}"
        measured = f"latency/reference {interval.estimate:+.1%} at {where} (speedup {old[0]:.2f}x -> {new[0]:.2f}x)"
        message = {"fail": f"normalised latency at {where} grew {interval.estimate:.1%}; even the lower bound of its "
                           f"interval {_ci(interval, '{:+.1%}')} is over {limit:.0%}",
                   "inconclusive": f"inconclusive: the interval of the normalised latency change at {where}, "
                                   f"{_ci(interval, '{:+.1%}')}, straddles {limit:.0%}; run more rounds (bench --runs)",
                   "pass": ""}[status]
        parts.append((status, measured, _ci(interval, "{:+.1%}"), message, interval.high))
    fall = FALLS.get(ctx.quality_rules.get("max_regression", ""))  # a task whose quality no rule gates has none
    acc_part = fall(limit, subject, base, ctx, confidence) if fall is not None else None
    if acc_part is not None:
        parts.append(acc_part)
    elif fall is not None:
        no_samples.append("per-example predictions")
    if not parts and not no_samples:
        return Check(name, rule, limit, "-", "skip", "no latency configuration in common with the baseline, and no "
                                                     f"quality rule for {ctx.scoring.who()}'s results")
    if no_samples and not parts:
        return Check(name, rule, limit, "-", "inconclusive",
                     NO_SAMPLES.format(which="RESULTS or --baseline", what=" or ".join(dict.fromkeys(no_samples))))
    status = combine([p[0] for p in parts] + (["inconclusive"] if no_samples else []))
    decisive = [p for p in parts if p[0] == status] or parts
    worst = max(decisive, key=lambda p: p[4])
    measured = worst[1] + ("" if cfgs else " (no latency config in common with the baseline)")
    messages = [p[3] for p in parts if p[3]]
    if no_samples:
        messages.append(NO_SAMPLES.format(which="RESULTS or --baseline", what=" or ".join(dict.fromkeys(no_samples))))
    return Check(name, rule, limit, measured, status, "; ".join(messages), worst[2])


def _quality_rule(rule: str, limit: float, subject: _Subject, ctx: _Context, confidence: float) -> Check:
    """A quality rule, decided as the results' task says (its ``gate_rules``: :data:`DECIDERS`); a quality rule of
    another task (the classifier rules on a tagger's results, the F1 rules on a classifier's) is refused in one
    line: a rule that silently passed because its numbers were missing would hide a regression."""
    how = ctx.quality_rules.get(rule)
    if how is None:
        raise GateInputError(ctx.scoring.gate_refusal(rule))
    return DECIDERS[how](rule, limit, subject, ctx, confidence)


def _f1_drop(rule: str, limit: float, subject: _Subject, ctx: _Context, confidence: float) -> Check:
    """``max_f1_drop`` (:mod:`benchmarks.f1_rules`, the task's records): of an artifact, or a seed group's mean."""
    if subject.is_group:
        members = [m["quality"] for m in subject.members]
        return Check(subject.name, rule, limit, *f1_rules.f1_drop_over_seeds(ctx.ref["quality"], members, limit,
                                                                             confidence, ctx.records))
    return Check(subject.name, rule, limit, *f1_rules.f1_drop(ctx.ref["quality"], subject.art["quality"], limit,
                                                              confidence, ctx.records))


def _f1_regression_check(rule: str, limit: float, subject: _Subject, ctx: _Context, confidence: float) -> Check:
    """``max_f1_regression``: the F1 fall against ``--baseline``, in points."""
    name = subject.name
    if ctx.baseline is None:
        return Check(name, rule, limit, "-", "skip", "no --baseline given")
    base = _baseline_of(subject, ctx)
    if base is None:
        return Check(name, rule, limit, "-", "skip", "not in the baseline (a new artifact)")
    part = _f1_fall(limit, subject, base, ctx, confidence, relative=False)
    if part is None:
        return Check(name, rule, limit, "-", "inconclusive", "the baseline has no seed group of this name, or "
                                                             "one of the two has fewer than two seeds")
    status, measured, shown, message, _ = part
    return Check(name, rule, limit, measured, status, message, shown)


def _unit_agreement(rule: str, limit: float, subject: _Subject, ctx: _Context, confidence: float) -> Check:
    """``min_agreement`` from the task's per-unit agreement records (words, answers): an artifact's or a group's."""
    if subject.is_group:
        members = [m["quality"] for m in subject.members]
        return Check(subject.name, rule, limit, *f1_rules.word_agreement_over_seeds(members, limit, confidence,
                                                                                    ctx.records))
    return Check(subject.name, rule, limit, *f1_rules.word_agreement(subject.art["quality"], limit, confidence,
                                                                     ctx.records))


def _unit_mean(rule: str, limit: float, subject: _Subject, ctx: _Context, confidence: float) -> Check:
    """A floor on the mean of the task's per-unit scores (a sentence encoder's neighbour recall of each held-out
    text: ``records.mean_units``): decided on the bootstrap interval over the units (a seed group's mean: over
    seeds and units), which must lie above ``limit``."""
    records = ctx.records
    members = subject.members or [subject.art]
    values = [records.mean_units(m["quality"]) for m in members]
    if subject.is_group:
        interval = mean_over_seeds_interval(np.asarray(values, dtype=float), confidence)
    else:
        interval = mean_interval(values[0], confidence, unit=records.mean_unit)
    measured = f"{interval.estimate:.4f}" + (f" (mean of {len(members)} seeds)" if subject.is_group else "")
    shown = _ci(interval, "{:.4f}")
    status = interval.verdict(limit, higher_is_better=True)
    message = {"fail": f"{records.mean_name} {measured}: even the upper bound of its interval {shown} is below "
                       f"{limit:g}",
               "inconclusive": f"inconclusive: the {100 * confidence:g}% interval of the {records.mean_name}, {shown}, "
                               f"straddles {limit:g}; more test {records.mean_unit} would decide",
               "pass": ""}[status]
    return Check(subject.name, rule, limit, measured, status, message, shown)


def _f1_fall(limit: float, subject: _Subject, base: dict, ctx: _Context, confidence: float, relative: bool = True):
    """The F1 fall against the baseline, of an artifact or a seed group (``max_f1_regression``, and the quality half
    of ``max_regression`` when ``relative``): ``(status, measured, interval, message, upper)`` or ``None``."""
    if subject.is_group:
        return _f1_group_regression(limit, subject, ctx, confidence, relative=relative)
    return _f1_regression(limit, subject, base, ctx, confidence, relative)


def _f1_group_regression(limit: float, subject: _Subject, ctx: _Context, confidence: float, relative: bool = False):
    """The F1 fall of a seed group of taggers against the baseline's group of that name, in points or
    (``relative``) as a share of the baseline's mean F1: Welch's t over the per-seed entity F1 (between two
    groups scored on the same sentences the seed spread dominates), or no change at all when every member's
    entity counts equal the baseline member's. ``(status, measured, interval text, message, upper)``, or
    ``None`` when the baseline has no such group or either has fewer than two seeds."""
    base_names = ctx.base_groups.get(subject.name)
    if not base_names:
        return None
    old = [ctx.base_arts[n]["quality"] for n in base_names]
    new = [m["quality"] for m in subject.members]
    _same_task(ctx)
    records = ctx.records
    if len(old) == len(new) and [records.units(q) for q in old] == [records.units(q) for q in new]:
        interval = Interval(0.0, 0.0, 0.0, confidence, "the same per-example scores as the baseline, seed for seed")
    else:
        interval = _welch_drop([records.f1(q) for q in old], [records.f1(q) for q in new], confidence,
                               relative=relative)
    if interval is None:
        return None
    return fall_report(records.metric_name, interval, limit, relative,
                       f"mean of {len(new)} seeds against {len(old)}", "more seeds")


def _same_task(ctx: _Context) -> None:
    """Refuse a baseline of another task than RESULTS' (F1 rules only)."""
    base_task = results_task(ctx.baseline)
    if base_task.name != ctx.task.name:
        raise GateInputError(f"--baseline holds {base_task.aspect('scoring').who()}'s results and RESULTS "
                             f"{ctx.scoring.who()}'s: compare results of the same task.")


def _f1_regression(limit: float, subject: _Subject, base: dict, ctx: _Context, confidence: float, relative: bool):
    _same_task(ctx)
    return f1_rules.f1_regression(base["quality"], subject.art["quality"], ctx.baseline.get("data") or {},
                                  ctx.results.get("data") or {}, limit, confidence, ctx.records, relative)


def _baseline_of(subject: _Subject, ctx: _Context) -> dict | None:
    """The baseline's artifact (for a seed group: its first member) that ``subject`` is compared with."""
    if subject.is_group:
        members = ctx.base_groups.get(subject.name)
        return ctx.base_arts.get(members[0]) if members else None
    return ctx.base_arts.get(subject.name)


def _accuracy_regression_check(rule: str, limit: float, subject: _Subject, ctx: _Context, confidence: float) -> Check:
    """``max_accuracy_regression``: the accuracy fall against ``--baseline`` in absolute points, decided on
    the paired interval. ``max_regression`` holds accuracy to the same *share* as latency (8% of 88% is
    7 points: no real regression of a student is that large); this rule gives accuracy its own limit, so
    that a 2-3 point loss of a retrained student fails while a rerun of the same models, whose predictions
    are identical, passes."""
    name = subject.name
    if ctx.baseline is None:
        return Check(name, rule, limit, "-", "skip", "no --baseline given")
    base = _baseline_of(subject, ctx)
    if base is None:
        return Check(name, rule, limit, "-", "skip", "not in the baseline (a new artifact)")
    part = _accuracy_regression(limit, subject, base, ctx, confidence, relative=False)
    if part is None:
        return Check(name, rule, limit, "-", "inconclusive",
                     NO_SAMPLES.format(which="RESULTS or --baseline", what="per-example predictions"))
    status, measured, shown, message, _ = part
    return Check(name, rule, limit, measured, status, message, shown)


def _accuracy_regression(limit: float, subject: _Subject, base: dict, ctx: _Context, confidence: float,
                         relative: bool = True):
    """The accuracy fall against the baseline, relative (the accuracy half of ``max_regression``) or in
    absolute points (``max_accuracy_regression``): ``(status, measured, interval, message, upper)``, or
    ``None`` when either file holds no per-example predictions (v1)."""

    if subject.is_group:
        base_names = ctx.base_groups.get(subject.name) or []
        old_accs = [ctx.base_arts[n]["quality"]["accuracy"] for n in base_names]
        new_accs = [m["quality"]["accuracy"] for m in subject.members]
        if _same_predictions([ctx.base_arts[n] for n in base_names], subject.members):
            # The same seeds benchmarked again: no seed noise to allow for; Welch's t would still put an
            # interval of the seed spread around 0 and call an unchanged run inconclusive.
            interval = Interval(0.0, 0.0, 0.0, confidence, "the same predictions as the baseline, seed for seed")
        else:
            interval = _welch_drop(old_accs, new_accs, confidence, relative)
        if interval is None:
            return None
        how = f"mean of {len(new_accs)} seeds against {len(old_accs)}"
    else:
        old_correct, new_correct = ctx.correct(base, ctx.baseline), ctx.correct(subject.art)
        if old_correct is None or new_correct is None:
            return None
        same = (len(old_correct) == len(new_correct)
                and ctx.baseline["data"].get("labels") == ctx.results["data"].get("labels")
                and ctx.baseline["data"].get("fingerprint") == ctx.results["data"].get("fingerprint"))
        interval = (accuracy_drop_interval(old_correct, new_correct, confidence, relative=relative) if same
                    else unpaired_accuracy_drop_interval(old_correct, new_correct, confidence, relative=relative))
        how = "paired" if same else "unpaired: other examples"
    assert isinstance(interval, Interval)
    return fall_report("accuracy", interval, limit, relative, how, "more test examples (or --seeds)")


def _same_predictions(old: list[dict], new: list[dict]) -> bool:
    """Whether two seed groups hold the same models: equal per-example predictions, member for member."""
    def preds(arts: list[dict]) -> list:
        return [a["quality"].get("predictions") for a in arts]

    return len(old) == len(new) and None not in preds(old) and preds(old) == preds(new)


def _welch_drop(old: list[float], new: list[float], confidence: float, relative: bool = True):
    """Interval of ``mean(old) - mean(new)`` (divided by ``mean(old)`` when ``relative``) over per-seed
    accuracies (Welch's t): between two seed groups scored on the same test set, the test-set noise largely
    cancels and the seed spread dominates."""
    from scipy.stats import t as student_t

    if len(old) < 2 or len(new) < 2:
        return None
    o, n = np.asarray(old, float), np.asarray(new, float)
    vo, vn = o.var(ddof=1) / len(o), n.var(ddof=1) / len(n)
    est = o.mean() - n.mean()
    se = math.sqrt(vo + vn)
    if se == 0:
        half = 0.0
    else:
        df = (vo + vn) ** 2 / (vo ** 2 / (len(o) - 1) + vn ** 2 / (len(n) - 1))
        half = float(student_t.ppf(1 - (1 - confidence) / 2, df)) * se
    scale = (1 / o.mean() if o.mean() > 0 else 0.0) if relative else 1.0
    return Interval(float(est * scale), float((est - half) * scale), float((est + half) * scale), confidence,
                    f"Welch t over {len(o)} and {len(n)} seeds")


#: How each quality rule is decided, by the name a task's ``gate_rules`` gives (:mod:`compress.tasks.protocol.scoring`):
#: from per-example predictions against the labels (accuracy), or from the task's per-unit records (F1, and a mean
#: score per unit such as an encoder's neighbour recall per text).
DECIDERS = {"accuracy_drop": _accuracy_drop, "accuracy_regression": _accuracy_regression_check,
            "agreement": _agreement, "traffic_agreement": _traffic_agreement,
            "f1_drop": _f1_drop, "f1_regression": _f1_regression_check, "unit_agreement": _unit_agreement,
            "unit_mean": _unit_mean}
#: The quality half of ``max_regression``, relative to the baseline's score, by the same names.
FALLS = {"accuracy_regression": _accuracy_regression, "f1_regression": _f1_fall}


def history_checks(results: dict[str, Any], history: str | os.PathLike, window: int, threshold: float,
                   test: str) -> list[Check]:
    """One ``history`` check per non-reference artifact: is this run unlike the last ``window`` comparable runs?"""

    past = read_history(history, error=GateInputError)
    current = summarize_run(results)
    limit = f"{test} {threshold:g} sd, last {window}"
    checks = []
    for art in results["artifacts"]:
        if art["is_reference"]:
            continue
        verdict = check_artifact(current, past, art["name"], window, threshold, test)
        checks.append(Check(art["name"], "history", limit, verdict["measured"], verdict["status"], verdict["message"]))
    return checks


def run_gate(results: str | os.PathLike, rules: str | os.PathLike, baseline: str | os.PathLike | None = None,
             junit: str | os.PathLike | None = None, step_summary: str | None = None,
             out: TextIO | None = None, on_inconclusive: str | None = None,
             history: str | os.PathLike | None = None, window: int | None = None,
             history_threshold: float | None = None, history_test: str | None = None,
             allow_device_mismatch: bool = False) -> int:
    """Check ``results`` against ``rules``; print the table, write JUnit and the step summary; return the exit code.

    ``step_summary`` defaults to ``$GITHUB_STEP_SUMMARY``. Malformed input returns 3 after printing
    the problem (and recording it in the JUnit file and the step summary, so CI shows it). With
    ``history``, every non-reference artifact also gets a ``history`` check against the last
    ``window`` comparable runs of that file. A ``baseline`` measured on another device (GPU against
    CPU) is refused (exit 3) unless ``allow_device_mismatch``.
    """

    out = out or sys.stdout
    step_summary = step_summary if step_summary is not None else os.environ.get("GITHUB_STEP_SUMMARY")
    if on_inconclusive not in (None, "pass", "fail"):
        raise CompressError(f"--on-inconclusive must be pass or fail, got {on_inconclusive!r}.")
    window = DEFAULT_WINDOW if window is None else window
    threshold = DEFAULT_THRESHOLD if history_threshold is None else history_threshold
    test = history_test or DEFAULT_TEST
    if window < 3 or threshold <= 0 or test not in ("z", "t"):
        raise CompressError(f"--window must be 3 or more (got {window}), --history-threshold above 0 (got {threshold}), "
                            f"--history-test z or t (got {test!r}).")
    try:
        parsed_rules = load_rules(rules)
        doc = load_results(results)
        base = load_results(baseline, option="--baseline") if baseline else None
        if base is not None:
            mismatch = device_mismatch(doc, base)
            if mismatch and not allow_device_mismatch:
                raise GateInputError(f"--baseline {baseline}: {mismatch}, so its speeds are not comparable with these. "
                                     "Bench the baseline on the same --device, or pass --allow-device-mismatch to "
                                     "compare anyway.")
            if mismatch:
                print(f"warning: {mismatch} (--allow-device-mismatch)", file=sys.stderr)
        checks = evaluate(doc, parsed_rules, base)
        if history is not None:
            checks += history_checks(doc, history, window, threshold, test)
        if base is not None:
            for note in comparability(doc, base):
                print(f"warning: {note}", file=sys.stderr)
    except GateInputError as exc:
        message = str(exc)
        print(f"error: {message}", file=sys.stderr)
        if junit:
            _write(junit, junit_xml([], error=message), "--junit")
        if step_summary:
            _write(step_summary, markdown_summary([], error=message), "$GITHUB_STEP_SUMMARY", append=True)
        return EXIT_MALFORMED
    if checks:
        print(format_table(checks), file=out)
    else:
        print(f"warning: no rule of {rules} applies to any artifact of {results}; nothing was checked.", file=sys.stderr)
    word, code = outcome(checks, on_inconclusive)
    print(f"gate: {word}: {_summary_line(checks)}", file=out)
    if code == EXIT_INCONCLUSIVE:
        print("gate: exit code 4 (inconclusive): an interval straddles its limit. Run bench with more --runs (latency) "
              "or more test examples (accuracy), or choose --on-inconclusive pass|fail.", file=out)
    if junit:
        _write(junit, junit_xml(checks, on_inconclusive=on_inconclusive), "--junit")
    if step_summary:
        _write(step_summary, markdown_summary(checks, on_inconclusive=on_inconclusive), "$GITHUB_STEP_SUMMARY",
               append=True)
    return code
