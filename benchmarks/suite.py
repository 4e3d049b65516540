"""The benchmark matrix: artifacts x batch sizes x sequence lengths, plus quality, memory and size.

:func:`run_benchmark` measures and returns the ``results.json`` document (schema
``bert-compress-bench`` version 2, described field by field in ``docs/bench-schema.md``);
:func:`bench` also writes the output folder (``results.json``, ``report.md`` and the plots)
atomically. Every artifact, the reference included, is opened through the one
:class:`compress.runtime.predictor.Predictor`, so PyTorch fp32/INT8 and ONNX fp32/INT8 are measured by
the same code on the same inputs.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import uuid
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from benchmarks.answers import Answers
from benchmarks.gate_results import SCHEMA, SCHEMA_VERSION  # the format bench writes is the one the gate reads
from benchmarks.latency import fixed_shape_inputs, forward_runner, paired_speedup, run_interleaved, summarize
from compress.core.machine import machine_info
from compress.core.artifact import git_commit, now_iso, package_versions, read_meta, write_folder_atomically
from compress.config import FULL, QUICK, BenchConfig  # noqa: F401 (FULL, QUICK: the old import path)
from compress.core.errors import CompressError
from compress.core.progress import bars_enabled
from compress.stages.quality import task_of_data
from compress.tasks import get_task
from benchmarks.agreement import traffic_agreement_lines
from benchmarks.history import append_history, check_history_writable
from benchmarks.memory import measure_memory
from benchmarks.report import headline, write_report
from compress.core.stats import speedup_interval
from benchmarks.teacher_runtimes import add_teacher_best
from benchmarks.traffic import measure_traffic_agreement, measure_traffic_and_load, read_traffic_file
from compress.core.device import device_name, resolve_device, resolve_precision
from compress.runtime.predictor import ONNX_FILE, Predictor

RESULTS_FILE = "results.json"
REPORT_FILE = "report.md"

#: Fused operators worth recording from an ONNX graph (the fp32 fusions and their INT8 forms).
GRAPH_OPS = ("Attention", "MultiHeadAttention", "QAttention", "EmbedLayerNormalization", "QEmbedLayerNormalization",
             "SkipLayerNormalization", "LayerNormalization", "BiasGelu", "FastGelu", "Gelu")
ATTENTION_OPS = ("Attention", "MultiHeadAttention", "QAttention")


def artifact_names(paths: Sequence[Path]) -> list[str]:
    """Short unique display names: the folder name, with its parent's name where two collide."""
    names = [p.name for p in paths]
    counts = Counter(names)
    names = [f"{p.parent.name}/{p.name}" if counts[n] > 1 else n for p, n in zip(paths, names)]
    counts = Counter(names)
    seen: Counter[str] = Counter()
    unique = []
    for n in names:
        seen[n] += 1
        unique.append(f"{n}#{seen[n]}" if counts[n] > 1 else n)
    return unique


def onnx_facts(path: Path, meta: dict[str, Any] | None) -> dict[str, Any]:
    """Fused-operator counts of an ONNX artifact: counted in the graph that runs, plus what export recorded.

    The graph count is the truth the gate checks (an INT8 graph turns ``Attention`` into
    ``QAttention``; both are fused attention). The recorded counts are kept for the report.
    """
    import onnx

    counts = Counter(n.op_type for n in onnx.load(str(path / ONNX_FILE), load_external_data=False).graph.node)
    fused = {op: int(counts.get(op, 0)) for op in GRAPH_OPS}
    recorded = (meta or {}).get("onnx") or {}
    export = ((meta or {}).get("export") or {}).get("onnx") or ((meta or {}).get("parent_meta") or {}).get("onnx") or {}
    return {
        "fused_ops": fused,
        "attention_ops": sum(fused[op] for op in ATTENTION_OPS),
        "recorded_fused_ops": recorded.get("fused_ops") or recorded.get("fused_ops_fp32") or export.get("fused_ops"),
        "optimized": recorded.get("optimized", export.get("optimized")),
    }


def _load_predictors(config: BenchConfig, precision: str = "fp32") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Open the reference and the artifacts (the reference first; listed twice, it is opened once);
    PyTorch fp32 artifacts run in ``precision``, as decided for the bench's ``--precision``, and every artifact
    reads long texts with ``--stride`` / ``--pooling`` where given (else as it recorded)."""

    ref_path = Path(config.reference).expanduser().resolve()
    paths = [ref_path]
    group_of: dict[Path, tuple[str, int]] = {}
    for group, members in config.seeds.items():
        for i, item in enumerate(members):
            group_of.setdefault(Path(item).expanduser().resolve(), (group, i))
    for item in [*config.artifacts, *(m for members in config.seeds.values() for m in members)]:
        path = Path(item).expanduser().resolve()
        if path not in paths:
            paths.append(path)
    for path in paths:
        if not path.is_dir():
            which = "--reference" if path == ref_path else "ARTIFACT"
            raise CompressError(f"{which} {path} does not exist or is not a folder. Give artifact folders written by "
                                "bert-compress (teacher, distill, prune, export, quantize) or save_pretrained folders.")
    entries = []
    predictors = {}
    for path, name in zip(paths, artifact_names(paths)):
        predictor = Predictor.load(path, threads=config.threads, spinning=False, device=config.device,
                                   precision=precision, stride=config.stride, pooling=config.pooling)
        predictors[name] = predictor
        group, index = group_of.get(path, (None, None))
        entries.append({"name": name, "path": str(path), "is_reference": path == ref_path, "predictor": predictor,
                        "group": group, "seed_index": index})
    ref = predictors[entries[0]["name"]]
    for entry in entries[1:]:
        other = entry["predictor"]
        # a label count is compared where the task has labels (a sentence encoder's config keeps a default)
        labelled = other.task != ref.task or get_task(ref.task).has_labels
        if labelled and other.num_labels != ref.num_labels:
            raise CompressError(f"{entry['path']} predicts {other.num_labels} labels but the reference {ref_path} "
                                f"predicts {ref.num_labels}: they are not models of the same task. Bench artifacts "
                                "derived from the reference.")
    return entries, predictors


def _config_facts(entry: dict[str, Any]) -> dict[str, Any]:
    predictor = entry["predictor"]
    meta = predictor.meta or read_meta(entry["path"]) or {}
    layers = getattr(predictor.config, "num_hidden_layers", None)
    facts = {
        "name": entry["name"],
        "path": entry["path"],
        "kind": predictor.kind,
        "is_reference": entry["is_reference"],
        "stage": meta.get("stage"),
        "model_type": getattr(predictor.config, "model_type", None),
        "parameters": predictor.num_parameters,
        "size_bytes": predictor.size_bytes,
        "num_hidden_layers": layers if isinstance(layers, int) else None,
        "max_length": predictor.max_length,
        "stride": predictor.stride,  # a longer text: windows overlapping by this many tokens (compress.core.windows),
        "pooling": predictor.pooling,  # and how their logits became the text's
        # a SQuAD 2.0 reader: the null threshold its answers were scored at (its own, recorded by its stage)
        "null_threshold": meta.get("null_threshold") if meta.get("allow_null") else None,
        "onnx": onnx_facts(Path(entry["path"]), meta) if predictor.kind.startswith("onnx") else None,
        "device": predictor.device,
        "provider": predictor.provider,
        # the autocast a PyTorch fp32 artifact ran in (settings.precision says why); null for other kinds
        "precision": predictor.precision,
        "group": entry.get("group"),
    }
    return facts


def served_runtimes(predictors: dict[str, Any], reference: str) -> dict[str, list[tuple[Any, list[int]]]]:
    """The choices among ``predictors`` that serve their batch sizes from more than one runtime:
    ``{name: [(runtime predictor, the batch sizes it serves), ...]}``."""
    out = {}
    for name, predictor in predictors.items():
        by_batch = getattr(predictor, "by_batch_size", None)
        if name == reference or not by_batch:
            continue
        runtimes: dict[int, tuple[Any, list[int]]] = {}
        for batch_size, sub in sorted(by_batch.items()):
            runtimes.setdefault(id(sub), (sub, []))[1].append(int(batch_size))
        if len(runtimes) > 1:
            out[name] = list(runtimes.values())
    return out


def score_served_runtimes(predictors: dict[str, Any], reference: str, served: dict[str, list[tuple[Any, list[int]]]],
                          quality: dict[str, dict[str, Any]], metric: str,
                          score: Callable[[dict[str, Any], bool, Any], dict[str, dict[str, Any]]]) -> None:
    """Report each choice of ``served`` (:func:`served_runtimes`) by the least accurate runtime it serves.

    Quality is scored at one batch size (32), so a choice (``optimize``) that serves batch 1 from ORT INT8 and
    batch 32 from OpenVINO INT8 was judged by OpenVINO's answers alone, and a gate on it said nothing of what a
    batch-1 server returns (measured: ORT INT8 1.5 F1 points under OpenVINO on WNUT-17 test, docs/lab/ner.md). Each
    served runtime is scored on the same examples against the reference, in batches of the smallest size it
    serves (ORT's dynamic INT8 sets its activation scales per batch, padding included, so its batch-1 answers are
    not its batch-32 answers), the reference in batches of 32 as in the other rows (its answers from that pass,
    kept by the ``score`` callable's :class:`benchmarks.answers.Answers`); the choice's quality becomes
    the one with the lowest ``metric``, and ``served_runtimes`` lists every runtime with its batch sizes and score.
    """
    for name, runtimes in served.items():
        scored = [(score({reference: predictors[reference], name: sub}, False, {reference: 32, name: min(sizes)})[name],
                   sub, sizes) for sub, sizes in runtimes]
        worst = min(scored, key=lambda item: item[0][metric])
        quality[name] = {**worst[0], "scored_runtime": Path(worst[1].path).name,
                         "served_runtimes": [{"artifact": Path(sub.path).name, "kind": sub.kind, "batch_sizes": sizes,
                                              metric: q[metric], "agreement": q.get("agreement")}
                                             for q, sub, sizes in scored]}


def measure_latency(predictors: dict[str, Any], reference: str, texts: Sequence[Any], batch_sizes: Sequence[int],
                    seq_lens: Sequence[int], warmup: int, runs: int, progress: bool = True,
                    keep_samples: bool = True) -> dict[str, list[dict[str, Any]]]:
    """Latency of every predictor at every batch size x sequence length, interleaved, with paired speedups.

    Inputs for every configuration are built (and checked against each model's position table)
    before the first timing, so a bad ``--seq-lens`` fails at once rather than after an hour.
    Every entry keeps its raw per-round timings (``rounds_ns``: entry ``i`` of every artifact comes from
    the same round), from which the gate computes its intervals; ``keep_samples=False`` leaves them out.
    """

    from tqdm.auto import tqdm

    configs = [(b, s) for b in batch_sizes for s in seq_lens]
    inputs = {(b, s): {name: fixed_shape_inputs(p, texts, b, s) for name, p in predictors.items()} for b, s in configs}
    k = len(predictors)
    # Progress in tokens processed (calls x batch x seq): calls at batch 32 cost ~32x those at batch 1,
    # so counting tokens, not calls, keeps the ETA honest across configurations.
    total = sum(k * (warmup + runs) * b * s for b, s in configs)
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in predictors}
    with tqdm(total=total, desc="latency", unit="tok", unit_scale=True, disable=not progress or not bars_enabled(), file=sys.stderr,
              dynamic_ncols=True) as bar:
        for b, s in configs:
            bar.set_postfix_str(f"batch {b} seq {s}")
            runners = {name: forward_runner(predictors[name], inputs[(b, s)][name]) for name in predictors}
            timings = run_interleaved(runners, warmup, runs, tick=lambda n, w=b * s: bar.update(n * w))
            for name in predictors:
                speedup = paired_speedup(timings[reference], timings[name])
                interval = speedup_interval(timings[reference], timings[name])
                speedup.update(ci_low=interval.low, ci_high=interval.high, confidence=interval.confidence,
                               method=interval.method)
                entry = {"batch_size": b, "seq_len": s, **summarize(timings[name], b), "speedup": speedup}
                if keep_samples:
                    entry["rounds_ns"] = [int(t) for t in timings[name]]
                out[name].append(entry)
    return out


def run_benchmark(config: BenchConfig) -> dict[str, Any]:
    """Measure everything and return the ``results.json`` document (nothing is written)."""
    from tqdm.auto import tqdm

    config = config.resolved()
    started = time.perf_counter()
    traffic_texts, traffic_file = None, None
    if config.traffic_file:  # read first: a bad file fails before anything is loaded or measured

        traffic_texts, traffic_file = read_traffic_file(config.traffic_file, config.data.text_column,
                                                        config.data.text_pair_column)
    # One device for every artifact; results.json records it and the gate compares like with like.
    config = replace(config, device=device_name(resolve_device(config.device)))
    precision = resolve_precision(config.precision, config.device)
    entries, predictors = _load_predictors(config, precision.precision)
    reference = entries[0]["name"]
    ref_predictor = predictors[reference]
    # the reference may claim its own task for the data (a sentence encoder reads text or scored pairs)
    task = config.data.load_any(num_labels=ref_predictor.num_labels, model=str(ref_predictor.path))
    task_kind = task_of_data(task)
    scoring = task_kind.aspect("scoring")
    if not scoring.labels_per_text() and config.load_clients:
        raise CompressError(f"--load-clients measures a sentence classifier's serving calls; for {scoring.who()} use "
                            "--traffic SPLIT (its inputs replayed at their real lengths). Drop --load-clients.")
    if not scoring.labels_per_text() and traffic_texts is not None:
        raise CompressError(f"--traffic-file {config.traffic_file}: traffic agreement is measured for sentence "
                            f"classifiers; {scoring.who()}'s agreement with the reference is measured on --split. "
                            "Drop --traffic-file.")
    memo = Answers()  # the reference's answers are made once, though served runtimes are scored beside it again
    # the task's quality section: accuracy per example, entity F1 per sentence, SQuAD F1 per question
    section = scoring.bench_quality(task, config.split, ref_predictor, memo)
    texts, metric = section.texts, task_kind.primary_metric

    def score(chosen: dict[str, Any], bar: bool, batch: int | dict[str, int] = 32) -> dict[str, dict[str, Any]]:
        return section.score(chosen, reference, batch_size=batch, progress=bar)

    served = served_runtimes(predictors, reference)  # scored through each runtime below, not through the choice
    quality = score({n: p for n, p in predictors.items() if n not in served}, config.progress)
    score_served_runtimes(predictors, reference, served, quality, metric, score)
    traffic_agreement: dict[str, Any] = {}
    if traffic_texts is not None:  # every artifact, seed-group members too: it is quality, not speed

        traffic_agreement = measure_traffic_agreement(predictors, reference, traffic_texts, progress=config.progress)
    # Seeds of one recipe share one shape, hence one speed: only the first member of a group is timed.
    timed = [e for e in entries if not e["seed_index"]]
    timed_predictors = {e["name"]: predictors[e["name"]] for e in timed}
    latency = measure_latency(timed_predictors, reference, texts, config.batch_sizes, config.seq_lens, config.warmup,
                              config.runs, progress=config.progress, keep_samples=True)

    realistic, realistic_settings = measure_traffic_and_load(
        timed_predictors, reference, task, config.traffic, config.traffic_limit, config.batch_sizes,
        config.load_clients, config.load_requests, config.split, progress=config.progress)
    memory: dict[str, Any] = {}
    mem_batch, mem_seq = max(config.batch_sizes), max(config.seq_lens)
    if config.memory:
        for entry in tqdm(timed, desc="memory", unit="artifact", disable=not config.progress or not bars_enabled(), file=sys.stderr,
                          leave=False):
            memory[entry["name"]] = measure_memory(entry["path"], config.threads, mem_batch, mem_seq,
                                                   texts[:mem_batch])

    artifacts = []
    for entry in entries:
        record = _config_facts(entry)
        record["quality"] = quality[entry["name"]]
        record["memory"] = memory.get(entry["name"])
        record["latency"] = latency.get(entry["name"], [])
        record.update(realistic.get(entry["name"], {}))
        if entry["name"] in traffic_agreement:
            record["traffic_agreement"] = traffic_agreement[entry["name"]]
        artifacts.append(record)
    groups = [{"name": group, "members": [e["name"] for e in sorted(
        (e for e in entries if e["group"] == group), key=lambda e: e["seed_index"])]} for group in config.seeds]

    teacher_runtimes = add_teacher_best(artifacts, reference)
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "run_id": uuid.uuid4().hex,
        "created": now_iso(),
        "git_commit": git_commit(),
        "versions": package_versions(),
        "machine": machine_info(),
        "settings": {
            "device": config.device,
            "precision": precision.to_dict(),
            "threads": config.threads,
            "warmup": config.warmup,
            "runs": config.runs,
            "batch_sizes": list(config.batch_sizes),
            "seq_lens": list(config.seq_lens),
            "quick": config.quick,
            "split": config.split,
            "timer": "time.perf_counter_ns",
            "order": "interleaved, starting variant rotating each round",
            "memory": {"measured": config.memory, "batch_size": mem_batch, "seq_len": mem_seq},
            **realistic_settings,
            **({"traffic_file": traffic_file} if traffic_file else {}),
        },
        "data": {"task": task_kind.name, **task.describe(), "split": config.split, "n": len(texts),
                 "options": asdict(config.data), **section.data_record()},
        "reference": reference,
        "artifacts": artifacts,
        "groups": groups,
        "teacher_runtimes": teacher_runtimes,
        "wall_s": round(time.perf_counter() - started, 2),
    }


def _check_out(out: Path, artifact_paths: Sequence[str]) -> None:
    """Refuse an ``--out`` that would replace a model folder (the rename replaces the whole folder)."""
    if out.exists() and not out.is_dir():
        raise CompressError(f"--out {out} exists and is a file; give a folder path for the benchmark results.")
    if str(out) in {str(Path(p).expanduser().resolve()) for p in artifact_paths}:
        raise CompressError(f"--out {out} is one of the artifacts being measured; give a separate results folder.")
    if out.is_dir() and any(out.iterdir()) and not (out / RESULTS_FILE).exists():
        raise CompressError(f"--out {out} already holds files that are not benchmark results; it would be replaced. "
                            "Give a new folder, or an older benchmark results folder to overwrite.")


def write_results_folder(out: str | os.PathLike, results: dict[str, Any]) -> Path:
    """Write ``results.json``, ``report.md`` and the plots into ``out`` atomically.

    Everything goes into a temporary sibling folder first, which is renamed into place only when
    complete: an interrupted run never leaves a results file without its report, or half a JSON.
    """

    out = Path(out).expanduser().resolve()
    _check_out(out, [a["path"] for a in results.get("artifacts", [])])

    def fill(tmp: Path) -> None:
        with open(tmp / RESULTS_FILE, "w", encoding="utf-8") as handle:
            json.dump(_finite(results), handle, indent=2, allow_nan=False)
            handle.write("\n")
        write_report(results, tmp)

    return write_folder_atomically(out, fill)


def _finite(value: Any) -> Any:
    """The document with NaN/infinity turned into null: strict JSON, readable by any parser."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return _finite(value.item())
    return value


def bench(config: BenchConfig, out: str | os.PathLike) -> Path:
    """Measure and write the results folder; prints where it went and the headline numbers."""
    out_path = Path(out).expanduser().resolve()
    _check_out(out_path, [config.reference, *config.artifacts])  # fail before an hour of measuring, not after
    if config.history:
        check_history_writable(config.history)
    results = run_benchmark(config)
    path = write_results_folder(out_path, results)
    print(f"bench: {path} ({len(results['artifacts'])} artifacts, {results['wall_s']:.0f} s)")
    if config.history:
        append_history(config.history, results)
        print(f"bench: appended this run's summary to {config.history}")

    print(headline(results))

    for line in traffic_agreement_lines(results):
        print(line)
    return path
