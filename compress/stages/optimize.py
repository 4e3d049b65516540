"""``bert-compress optimize``: build every runtime of a model, measure them here, keep the fastest per batch size.

Which runtime is fastest depends on the CPU (docs/design.md, "Measuring"): on an AMD EPYC without AMX
ONNX Runtime INT8 won at batch 1 and batch 32; on an Intel Xeon with AMX a bf16 PyTorch student
ran batch 32 about 4x faster than ONNX INT8. So the choice is made by measurement, on the machine
that will serve, and recorded with the CPU it was made on:

1. **Build** the candidates from one PyTorch fp32 artifact (:data:`CANDIDATES`): ONNX fp32, ORT
   dynamic INT8 on the fused graph (with and without the embedding table quantized) and on the
   unfused graph, ORT static INT8 (QDQ, calibrated) on both
   graphs, PyTorch bf16, PyTorch dynamic INT8, and OpenVINO fp32 and NNCF INT8 where the optional
   ``openvino`` extra is installed (skipped with a message otherwise); the fp32 model itself is always a candidate and
   the reference. Each quantized one goes through ``quantize`` with its accuracy check and
   fallbacks. A candidate that fails to build is recorded with its error; the others go on.
   ``artifacts=`` chooses among existing folders instead.
2. **Score** every candidate on the validation split: accuracy, drop against the fp32 parent,
   agreement with the parent (how many answers it changes). Those over ``max_accuracy_drop``
   (or under ``min_agreement``) are out, whatever their speed.
3. **Time** them interleaved (:func:`benchmarks.latency.run_interleaved`: one round runs each
   once, the order rotating) at every batch size, and rank by the median of per-round speedups
   against the parent: a shared machine's drift cancels in a ratio taken within one round. The
   inputs are one batch of ``--seq-len`` tokens (``--lengths fixed``) or the validation texts at
   their own lengths, a different one each round (``--lengths real``): a runtime that wins at one
   padded shape can lose on short sentences of varying length, the traffic a tagger serves.
   **Ties go to the candidate that changes fewer answers** (:func:`rank_candidates`): each speedup
   has a 95% interval (circular block bootstrap over the rounds, :mod:`compress.core.stats`); where
   other candidates' intervals overlap the fastest one's, the speed difference is noise, so the
   tied candidate with the highest agreement with fp32 is kept. A 1% faster candidate that
   changes three times as many answers (ORT INT8 with fp32 embeddings against fused, issue 24)
   does not win on noise.
4. **Write** a ``choice`` artifact (:mod:`compress.runtime.formats.choice`): every candidate under
   ``candidates/``, ``compress.json`` naming the winner per batch size with the reason, the whole
   measured table and the CPU (model name, AVX-512 VNNI/BF16, AMX flags). ``Predictor.load(OUT)``
   serves it like any artifact; ``bench OUT/candidates/*`` measures them all again side by side.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence


from compress.core.artifact import read_meta, weights_sha256, write_artifact
from compress.config import MAX_TYPE_F1_DROP, OPTIMIZE_CANDIDATES, OptimizeConfig
from compress.config.choices import TIMING_LENGTHS
from compress.core.errors import CompressError, describe
from compress.runtime.formats.openvino import openvino_missing
from compress.core.progress import bars_enabled
from benchmarks.latency import (cycling_runner, fixed_shape_inputs, forward_runner, paired_speedup, run_interleaved,
                                summarize)
from benchmarks.traffic import real_length_inputs
from compress.core.machine import available_cpus, machine_info
from compress.core.stats import speedup_interval
from compress.core.artifact import package_versions
from compress.tasks import get_task
from compress.core.device import device_name, resolve_device
from compress.stages.export import check_out_is_not_input, export_onnx
from compress.stages.quality import SplitScorer, metric_name
from compress.stages.quantize import quantize
from compress.runtime.predictor import Predictor, artifact_kind, reading_settings

CANDIDATES = OPTIMIZE_CANDIDATES
REFERENCE = "pytorch"
#: Confidence of the speedup intervals that decide ties (circular block bootstrap over the paired rounds).
SPEEDUP_CONFIDENCE = 0.95
RANKING_RULE = ("the eligible candidate with the highest median speedup wins, unless other eligible candidates' "
                f"{SPEEDUP_CONFIDENCE:.0%} speedup intervals overlap its interval: then, of those tied, the one with "
                "the highest agreement with the fp32 model (fewest changed answers); equal agreement: the faster")
#: CPU flags that decide between the runtimes (recorded with the decision).
DECISIVE_FLAGS = ("avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


# ----------------------------------------------------------------------------- building


def _builders(parent: Path, cfg: OptimizeConfig) -> dict[str, Callable[[Path, dict[str, Path]], Path]]:
    """How each candidate is made, from the parent or from a candidate built before it."""

    common = {"data": cfg.data, "max_accuracy_drop": cfg.max_accuracy_drop, "max_type_f1_drop": cfg.max_type_f1_drop,
              "device": cfg.device}

    def onnx_fp32(out: Path, built: dict[str, Path]) -> Path:
        return export_onnx(parent, out)

    def ort_dynamic_fused(out: Path, built: dict[str, Path]) -> Path:
        # From the fp32 export when there is one (same graph as the onnx-fp32 candidate), else exported on the fly.
        return quantize(built.get("onnx-fp32", parent), out, method="ort-dynamic", graph="fused", **common)

    def ort_dynamic_fp32_embeddings(out: Path, built: dict[str, Path]) -> Path:
        # Which operators are quantized: the embedding table kept in fp32 (bigger file, fewer changed answers?).
        return quantize(built.get("onnx-fp32", parent), out, method="ort-dynamic", graph="fused",
                        op_types=["MatMul", "Attention"], **common)

    def ort_dynamic_unfused(out: Path, built: dict[str, Path]) -> Path:
        return quantize(parent, out, method="ort-dynamic", graph="unfused", **common)

    def ort_static(graph: str):
        def build(out: Path, built: dict[str, Path]) -> Path:
            return quantize(parent, out, method="ort-static", graph=graph, calibration_size=cfg.calibration_size,
                            **common)
        return build

    def torch_bf16(out: Path, built: dict[str, Path]) -> Path:
        return quantize(parent, out, method="torch-bf16", **common)

    def torch_int8(out: Path, built: dict[str, Path]) -> Path:
        return quantize(parent, out, method="torch-dynamic", **common)

    def openvino(method: str):
        def build(out: Path, built: dict[str, Path]) -> Path:
            return quantize(parent, out, method=method, calibration_size=cfg.calibration_size, **common)
        return build

    return {"onnx-fp32": onnx_fp32, "onnx-int8-fused": ort_dynamic_fused,
            "onnx-int8-fp32-embeddings": ort_dynamic_fp32_embeddings, "onnx-int8-unfused": ort_dynamic_unfused,
            "onnx-static-unfused": ort_static("unfused"), "onnx-static-fused": ort_static("fused"),
            "torch-bf16": torch_bf16, "torch-int8": torch_int8,
            "openvino-fp32": openvino("openvino-fp32"), "openvino-int8": openvino("openvino-int8")}


def build_candidates(parent: Path, cfg: OptimizeConfig, work: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """Build the requested candidates under ``work``; returns ``(built folders, errors by name)``."""
    builders = _builders(parent, cfg)
    built: dict[str, Path] = {}
    errors: dict[str, str] = {}
    for name in cfg.candidate_names():
        missing = openvino_missing(need_nncf=name == "openvino-int8") if name.startswith("openvino-") else None
        if missing:  # an optional runtime: say so and measure the others
            errors[name] = f"skipped: {missing}"
            print(f"optimize: skipping candidate {name}: {missing}", file=sys.stderr, flush=True)
            continue
        print(f"optimize: building {name}", file=sys.stderr, flush=True)
        try:
            built[name] = builders[name](work / name, built)
        except Exception as exc:  # one runtime failing (a quantizer bug, an unfusable graph) must not lose the others
            errors[name] = describe(exc)
            print(f"warning: candidate {name} could not be built: {errors[name]}", file=sys.stderr)
    return built, errors


# ----------------------------------------------------------------------------- scoring and timing


def _unique_names(paths: Sequence[Path]) -> list[str]:
    names: list[str] = []
    for path in paths:
        name, i = path.name, 2
        while name in names or name == REFERENCE:
            name, i = f"{path.name}-{i}", i + 1
        names.append(name)
    return names


def choose(parent: str | os.PathLike, candidates: dict[str, str | os.PathLike], data, batch_sizes: Sequence[int] = (1, 32),
           seq_len: int = 128, threads: int | None = None, warmup: int = 10, runs: int = 60,
           max_accuracy_drop: float = 0.01, min_agreement: float | None = None,
           progress: bool = True, device: str = "auto", max_type_f1_drop: float = MAX_TYPE_F1_DROP,
           lengths: str = "fixed") -> dict[str, Any]:
    """Score and time ``candidates`` against their fp32 ``parent``; return the decision and the table.

    The parent is candidate ``pytorch`` (the reference of every speedup). Nothing is written.
    ``device`` (``--device``): where every candidate runs (:meth:`Predictor.load`); ``max_type_f1_drop`` a
    tagger's per-type budget (:func:`compress.stages.quality.types_over_budget`). ``lengths`` (``--lengths``):
    ``fixed`` times every candidate on one batch of ``seq_len`` tokens; ``real`` on the validation texts
    at their own lengths (:func:`benchmarks.traffic.real_length_inputs`), a different input each round.
    """
    if lengths not in TIMING_LENGTHS:
        raise CompressError(f"--lengths {lengths!r}: choose one of {', '.join(TIMING_LENGTHS)}.")

    threads = threads if threads is not None else available_cpus()  # fixed: a timing means nothing without it
    parent_path = Path(parent).expanduser().resolve()
    paths = {REFERENCE: parent_path, **{n: Path(p).expanduser().resolve() for n, p in candidates.items()}}
    device = device_name(resolve_device(device))
    predictors = {n: Predictor.load(p, threads=threads, spinning=False, device=device) for n, p in paths.items()}
    ref = predictors[REFERENCE]
    if ref.kind != "pytorch":
        raise CompressError(f"--model {parent_path} is {ref.kind}; optimize starts from the PyTorch fp32 model, the "
                            "reference every candidate is compared with.")
    for name, p in predictors.items():
        # a label count is compared where the task has labels (a sentence encoder's config keeps a default)
        if (p.task != ref.task or get_task(ref.task).has_labels) and p.num_labels != ref.num_labels:
            raise CompressError(f"{paths[name]} predicts {p.num_labels} labels but {parent_path} predicts "
                                f"{ref.num_labels}: not the same model. Give artifacts derived from --model.")
        if p.max_length != ref.max_length:
            raise CompressError(f"{paths[name]} truncates at {p.max_length} tokens but {parent_path} at "
                                f"{ref.max_length}: its answers would differ for long texts. Rebuild it from --model.")

    scorer = SplitScorer(data.load_any(num_labels=ref.num_labels, model=str(ref.path)), "validation")
    scorer.check_model(ref)
    texts = scorer.inputs
    metric = scorer.metric

    rows: dict[str, dict[str, Any]] = {}
    ref_pred = scorer.predict(ref)
    ref_metrics = scorer.metrics(ref_pred)
    for name, predictor in predictors.items():
        pred = ref_pred if name == REFERENCE else scorer.predict(predictor)
        rows[name] = {"name": name, "kind": predictor.kind, "path": str(paths[name]),
                      **scorer.compare(pred, ref_pred, ref_metrics), "size_bytes": predictor.size_bytes}
    for row in rows.values():
        reasons = scorer.failures(row, max_accuracy_drop, min_agreement, max_type_f1_drop)
        row["eligible"] = not reasons
        row["excluded_because"] = "; ".join(reasons) or None
        row["latency"] = []

    from tqdm.auto import tqdm

    names = list(predictors)
    with tqdm(total=len(batch_sizes) * len(names) * (warmup + runs), desc="optimize timing", unit="call",
              disable=not progress or not bars_enabled(), file=sys.stderr) as bar:
        shapes: dict[int, str] = {}
        for b in batch_sizes:
            if lengths == "real":
                inputs = {n: real_length_inputs(predictors[n], texts, b) for n in names}
                runners = {n: cycling_runner(predictors[n], inputs[n]) for n in names}
                timed = [inputs[REFERENCE][i % len(inputs[REFERENCE])] for i in range(warmup, warmup + runs)]
                tokens = sum(int(a["attention_mask"].sum()) for a in timed) / sum(len(a["attention_mask"]) for a in timed)
                shape = {"seq_len": None, "lengths": "real", "tokens_mean": round(tokens, 1)}
                shapes[b] = f"validation texts at their real lengths (timed rows: mean {tokens:.1f} tokens)"
            else:
                runners = {n: forward_runner(predictors[n], fixed_shape_inputs(predictors[n], texts, b, seq_len))
                           for n in names}
                shape = {"seq_len": seq_len, "lengths": "fixed"}
                shapes[b] = f"sequence {seq_len}"
            timings = run_interleaved(runners, warmup, runs, tick=bar.update)
            for n in names:
                interval = speedup_interval(timings[REFERENCE], timings[n], confidence=SPEEDUP_CONFIDENCE)
                rows[n]["latency"].append({"batch_size": b, **shape, **summarize(timings[n], b),
                                           "speedup": {**paired_speedup(timings[REFERENCE], timings[n]),
                                                       "ci_low": interval.low, "ci_high": interval.high,
                                                       "confidence": SPEEDUP_CONFIDENCE, "ci_method": interval.method}})

    by_batch: dict[str, str] = {}
    reasons: dict[str, str] = {}
    decided_by: dict[str, dict[str, Any]] = {}
    for b in batch_sizes:
        record = rank_candidates(list(rows.values()), b)
        by_batch[str(b)] = record["winner"]
        decided_by[str(b)] = record
        reasons[str(b)] = f"batch {b}, {shapes[b]}: {record['why']}"
    machine = machine_info()
    return {
        "by_batch_size": by_batch,
        "reasons": reasons,
        "decided_by": decided_by,
        "table": [rows[n] for n in names],
        "reference": REFERENCE,
        "task": scorer.task.name,
        "metric": metric,
        "settings": {"device": device, "batch_sizes": list(batch_sizes), "lengths": lengths,
                     "seq_len": seq_len if lengths == "fixed" else None, "threads": threads,
                     "warmup": warmup,
                     "runs": runs, "max_accuracy_drop": max_accuracy_drop, "min_agreement": min_agreement,
                     **scorer.budgets(max_type_f1_drop),
                     "split": "validation", "n": scorer.n,
                     "order": "interleaved, starting variant rotating each round; speedup = median of per-round "
                              "ratios against the PyTorch fp32 parent",
                     "ranking": RANKING_RULE},
        "decided_on": {"cpu_model": machine.get("cpu_model"),
                       "cpu_flags": {f: bool((machine.get("cpu_flags") or {}).get(f)) for f in DECISIVE_FLAGS},
                       "available_cpus": machine.get("available_cpus"), "threads": threads},
        "machine": machine,
    }


def _at(row: dict[str, Any], batch_size: int) -> dict[str, Any]:
    return next(e for e in row["latency"] if e["batch_size"] == batch_size)


def _interval(row: dict[str, Any], batch_size: int) -> tuple[float, float]:
    """The speedup's confidence interval at ``batch_size`` (a record without one: the median alone)."""
    speedup = _at(row, batch_size)["speedup"]
    return float(speedup.get("ci_low", speedup["median"])), float(speedup.get("ci_high", speedup["median"]))


def rank_candidates(rows: Sequence[dict[str, Any]], batch_size: int) -> dict[str, Any]:
    """Which eligible candidate serves ``batch_size``, by :data:`RANKING_RULE`, and why.

    ``rows`` are :func:`choose`'s table rows (``eligible``, ``agreement``, ``size_bytes`` and a
    ``latency`` entry per batch size whose ``speedup`` has ``median``, ``ci_low``, ``ci_high``).
    A pure function of those numbers, so the rule is tested on constructed records. Returns
    ``{"winner", "rule", "leader", "tied", "why"}``: ``rule`` is ``"fastest"`` when no other
    candidate's interval overlaps the fastest one's, ``"agreement"`` when some do and one with a
    higher agreement than the fastest was kept, ``"fastest-among-tied"`` when some do but none of
    them agrees more often than the fastest.
    """
    eligible = [r for r in rows if r.get("eligible")]
    if not eligible:
        raise CompressError("optimize: no candidate is within the accuracy budget, not even the fp32 reference; "
                            "this is a bug.")
    leader = max(eligible, key=lambda r: (_at(r, batch_size)["speedup"]["median"], -r["size_bytes"]))
    low, high = _interval(leader, batch_size)
    tied = [r for r in eligible if r is leader
            or (_interval(r, batch_size)[0] <= high and low <= _interval(r, batch_size)[1])]
    tied.sort(key=lambda r: -_at(r, batch_size)["speedup"]["median"])

    def speed(r: dict[str, Any]) -> str:
        lo, hi = _interval(r, batch_size)
        return f"{r['name']} {_at(r, batch_size)['speedup']['median']:.2f}x [{lo:.2f}, {hi:.2f}]"

    if len(tied) == 1:
        others = sorted((r for r in eligible if r is not leader),
                        key=lambda r: -_at(r, batch_size)["speedup"]["median"])
        why = (f"fastest within the accuracy budget: {speed(leader)} the PyTorch fp32 model (p50 "
               f"{_at(leader, batch_size)['p50_ms']:.2f} ms); no other candidate's interval overlaps it"
               + (f" (next {speed(others[0])})" if others else ""))
        return {"winner": leader["name"], "rule": "fastest", "leader": leader["name"], "tied": [leader["name"]],
                "why": why}
    winner = max(tied, key=lambda r: (r["agreement"], _at(r, batch_size)["speedup"]["median"], -r["size_bytes"]))
    listed = "; ".join(f"{speed(r)} agreement {100 * r['agreement']:.1f}%" for r in tied)
    if winner["agreement"] > leader["agreement"]:
        rule, kept = "agreement", "the one that changes the fewest answers against fp32"
    else:
        rule, kept = "fastest-among-tied", "the fastest, as none of the tied agrees with fp32 more often"
    why = (f"speedup intervals overlap, so the speed difference is within the noise: {listed}; kept "
           f"{winner['name']}, {kept} (agreement {100 * winner['agreement']:.1f}%, p50 "
           f"{_at(winner, batch_size)['p50_ms']:.2f} ms)")
    return {"winner": winner["name"], "rule": rule, "leader": leader["name"], "tied": [r["name"] for r in tied],
            "why": why}


# ----------------------------------------------------------------------------- the stage


def optimize(cfg: OptimizeConfig, out: str | os.PathLike, progress: bool = True) -> Path:
    """Build (or take) the candidates, choose per batch size, and write the ``choice`` artifact at ``out``."""

    cfg.validate()
    started = time.perf_counter()
    parent = Path(cfg.model).expanduser().resolve()
    if not parent.is_dir():
        raise CompressError(f"--model {parent} does not exist or is not a folder. Give the PyTorch fp32 artifact "
                            "(distill, prune or teacher output).")
    check_out_is_not_input(parent, out)
    kind = artifact_kind(parent)
    if kind != "pytorch":
        raise CompressError(f"--model {parent} is {kind}; optimize starts from the PyTorch fp32 model (the folder that "
                            "distill, prune or teacher wrote).")
    out_path = Path(out).expanduser().resolve()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out_path.name}.optimize-", dir=out_path.parent))
    try:
        errors: dict[str, str] = {}
        if cfg.artifacts:
            given = [Path(a).expanduser().resolve() for a in cfg.artifacts]
            for path in given:
                if not path.is_dir():
                    raise CompressError(f"--artifacts {path} does not exist or is not a folder.")
                if path == parent:
                    raise CompressError(f"--artifacts {path} is --model itself, which is always the reference candidate "
                                        f"'{REFERENCE}'; leave it out.")
            built = dict(zip(_unique_names(given), given))
        else:
            built, errors = build_candidates(parent, cfg, work)
        t0 = time.perf_counter()
        decision = choose(parent, built, cfg.data, cfg.batch_sizes, cfg.seq_len, cfg.threads, cfg.warmup, cfg.runs,
                          cfg.max_accuracy_drop, cfg.min_agreement, progress, device=cfg.device,
                          max_type_f1_drop=cfg.max_type_f1_drop, lengths=cfg.lengths)
        measure_s = round(time.perf_counter() - t0, 2)
        for name, error in errors.items():
            decision["table"].append({"name": name, "error": error, "eligible": False,
                                      "excluded_because": "could not be built"})
        chosen = sorted(set(decision["by_batch_size"].values()))
        folders = {name: (parent if name == REFERENCE else built[name]) for name in chosen}
        # Everything measured travels with the choice (bench can measure it again); the choice points at its winners.
        keep = {REFERENCE: parent, **built}
        parent_meta = read_meta(parent) or {}
        meta: dict[str, Any] = {
            "stage": "optimize",
            "kind": "choice",
            "model_type": parent_meta.get("model_type"),
            "parameters": parent_meta.get("parameters"),
            "max_length": parent_meta.get("max_length") or (parent_meta.get("config") or {}).get("max_length"),
            "parent": {"path": str(parent), "kind": "pytorch", "stage": parent_meta.get("stage"),
                       "weights_sha256": parent_meta.get("weights_sha256") or weights_sha256(parent)},
            "parent_meta": {k: parent_meta.get(k) for k in ("stage", "kind", "data", "metrics", "config", "parent")
                            if k in parent_meta},
            **reading_settings(parent_meta),
            "config": cfg.to_dict(),
            "device": decision["settings"]["device"],
            "data": parent_meta.get("data"),
            "task": decision["task"],
            "choice": {"by_batch_size": {b: f"candidates/{n}" for b, n in decision["by_batch_size"].items()},
                       "names": decision["by_batch_size"], "reasons": decision["reasons"],
                       # Per batch size: which rule decided (fastest, or agreement among tied intervals) and who tied.
                       "decided_by": decision["decided_by"], "ranking": RANKING_RULE,
                       "rule": "each batch goes to the artifact chosen for the nearest measured batch size (log scale)"},
            "optimize": {k: decision[k] for k in ("table", "reference", "metric", "settings", "decided_on", "machine")},
            "timings": {"measure_s": measure_s, "total_s": None},
            "software": package_versions(),
        }

        def fill(tmp: Path) -> None:
            (tmp / "candidates").mkdir()
            for name, folder in keep.items():
                target = tmp / "candidates" / name
                if folder.is_relative_to(work):
                    shutil.move(str(folder), target)
                else:
                    shutil.copytree(folder, target, ignore=shutil.ignore_patterns("*.checkpoints", "checkpoint-*"))
            meta["timings"]["total_s"] = round(time.perf_counter() - started, 2)
            meta["weights_sha256"] = None  # the weights are the sub-artifacts'; each records its own

        path = write_artifact(out_path, fill, meta)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(format_decision(meta))
    print(f"optimize: {path} (chosen: {', '.join(f'batch {b}: {n}' for b, n in decision['by_batch_size'].items())}; "
          f"serving folders: {', '.join(str(path / 'candidates' / n) for n in folders)})")
    return path


def format_decision(meta: dict[str, Any]) -> str:
    """The measured table and the decision, for the terminal and the docs."""
    opt, choice = meta["optimize"], meta["choice"]
    batches = opt["settings"]["batch_sizes"]
    flags = ", ".join(f for f, on in opt["decided_on"]["cpu_flags"].items() if on) or "none"
    width = max([len("candidate")] + [len(row["name"]) for row in opt["table"]]) + 2

    metric = opt.get("metric", "accuracy")
    head = f"{'candidate':<{width}}{'kind':<12}{metric_name(metric):>10}{'drop':>8}{'agree':>8}" + "".join(
        f"{f'b{b} p50 ms':>12}{f'b{b} x':>8}" for b in batches) + "  status"
    settings = opt["settings"]
    shape = ("validation texts at their real lengths" if settings.get("lengths") == "real"
             else f"sequence {settings['seq_len']}")
    lines = [f"CPU: {opt['decided_on']['cpu_model']} (flags: {flags}); threads {settings['threads']}; "
             f"{shape}; speedups against the PyTorch fp32 model", head]
    for row in opt["table"]:
        if row.get("error"):
            lines.append(f"{row['name']:<{width}}{'-':<12}{'':>10}{'':>8}{'':>8}" + "".join(f"{'-':>12}{'-':>8}" for _ in batches)
                         + f"  not built: {row['error'][:80]}")
            continue
        cells = "".join(f"{_at(row, b)['p50_ms']:>12.2f}{_at(row, b)['speedup']['median']:>7.2f}x" for b in batches)
        won = [b for b, n in choice["names"].items() if n == row["name"]]
        by = choice.get("decided_by") or {}
        ties = [b for b in won if (by.get(b) or {}).get("rule") == "agreement"]
        lost = [b for b, d in by.items() if d.get("rule") == "agreement" and row["name"] in d.get("tied", ())
                and d.get("winner") != row["name"]]  # the faster one that lost on agreement
        status = (f"chosen for batch {', '.join(won)}" + (f" (tie at batch {', '.join(ties)}: higher agreement)"
                                                          if ties else "") if won
                  else row["excluded_because"] or (f"tied at batch {', '.join(lost)}, lower agreement" if lost
                                                   else "slower"))
        lines.append(f"{row['name']:<{width}}{row['kind']:<12}{100 * row[metric]:>9.1f}%{100 * row[f'{metric}_drop']:>7.1f}"
                     f"{100 * row['agreement']:>7.1f}%{cells}  {status}")
    worst = [f"{row['name']} {_worst_type(row)}" for row in opt["table"]
             if row.get("per_type_f1_drop_interval") and row["name"] != opt.get("reference")]
    if worst:
        lines.append("the type that lost most F1 (points, paired 95% interval over sentences, gold entities): "
                     + "; ".join(worst))
    return "\n".join(lines)


def _worst_type(row: dict[str, Any]) -> str:
    """A tagger candidate's largest per-type F1 loss against the fp32 model, with its interval and support."""
    t = max(row["per_type_f1_drop_interval"], key=lambda k: row["per_type_f1_drop"].get(k, 0.0))
    low, high = row["per_type_f1_drop_interval"][t]
    support = (row.get("per_type_support") or {}).get(t)
    return (f"{t} {-100 * row['per_type_f1_drop'][t]:+.1f} [{-100 * high:+.1f}, {-100 * low:+.1f}]"
            + (f" ({support})" if support is not None else ""))
