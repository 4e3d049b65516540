"""A history of benchmark runs, one JSON line per run, and the gate's "unlike the last N runs" check.

``bert-compress bench --history FILE.jsonl`` appends one line per run: the run's id, time, commit,
machine kind, settings, and per artifact its speedups (with intervals) per configuration,
accuracy and agreement (with intervals) and size. ``bert-compress gate --history FILE.jsonl
--window N`` then compares this run with the last ``N`` runs *of the same machine kind* (CPU
model, available CPUs, threads) and, for latency, the same batch size and sequence length, and
for quality the same data (fingerprint and split). A value is flagged when it lies below the
window's mean by more than ``threshold`` standard deviations (``z``), or, with the default ``t``
test, by a deviation that is as unlikely under Student's t for a window of that size (a short
window's spread is itself uncertain). The standard deviation is never taken below the current
run's own standard error, so a metric that happened to be identical in every past run does not
flag a change of one example as infinitely unusual.

This is Bencher's idea (thresholds over a window of past runs) applied to quantities that survive
a change of machine (paired speedups) and to accuracy.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from statistics import NormalDist
from typing import Any, Iterable

from compress.core.errors import CompressError
from compress.core.stats import history_flagged, history_score

HISTORY_SCHEMA = "bert-compress-bench-history"
HISTORY_VERSION = 1
DEFAULT_WINDOW = 20
DEFAULT_THRESHOLD = 3.0
DEFAULT_TEST = "t"
MIN_RUNS = 3


def _interval(value: Any, low: Any = None, high: Any = None) -> dict[str, Any]:
    return {"estimate": value, "low": low, "high": high}


def summarize_run(results: dict[str, Any]) -> dict[str, Any]:
    """The history line of one ``results.json`` document."""
    machine, settings, data = results.get("machine") or {}, results.get("settings") or {}, results.get("data") or {}
    arts = {}
    for art in results["artifacts"]:
        q = art["quality"]
        acc_ci = q.get("accuracy_ci") or [None, None]
        agree_ci = q.get("agreement_ci") or ([1.0, 1.0] if art["is_reference"] else [None, None])
        arts[art["name"]] = {
            "kind": art["kind"],
            "is_reference": art["is_reference"],
            "group": art.get("group"),
            "size_bytes": art["size_bytes"],
            "accuracy": _interval(q["accuracy"], *acc_ci),
            "agreement": _interval(q["agreement"], *agree_ci),
            "accuracy_drop": q.get("accuracy_drop"),
            "latency": [{"batch_size": e["batch_size"], "seq_len": e["seq_len"], "p50_ms": e["p50_ms"],
                         "speedup": _interval(e["speedup"]["median"], e["speedup"].get("ci_low"),
                                              e["speedup"].get("ci_high"))}
                        for e in art.get("latency") or []],
        }
    return {
        "schema": HISTORY_SCHEMA,
        "version": HISTORY_VERSION,
        "run_id": results.get("run_id"),
        "created": results.get("created"),
        "git_commit": results.get("git_commit"),
        "machine": {"cpu_model": machine.get("cpu_model"), "available_cpus": machine.get("available_cpus"),
                    "threads": settings.get("threads")},
        "settings": {"runs": settings.get("runs"), "warmup": settings.get("warmup"), "quick": settings.get("quick")},
        "data": {"fingerprint": data.get("fingerprint"), "split": data.get("split"), "n": data.get("n")},
        "reference": results["reference"],
        "artifacts": arts,
    }


def check_history_writable(path: str | os.PathLike) -> None:
    """Fail before measuring when the history file cannot be appended to."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise CompressError(f"--history {path} is not a file; give a .jsonl file path (created if missing).")
    if not path.parent.is_dir():
        raise CompressError(f"--history {path}: the folder {path.parent} does not exist; create it or give another "
                            "path.")
    if not os.access(path if path.exists() else path.parent, os.W_OK):
        raise CompressError(f"--history {path}: not writable; give a writable path.")


def append_history(path: str | os.PathLike, results: dict[str, Any]) -> dict[str, Any]:
    """Append the run's summary as one line (a single ``write`` in append mode, so a concurrent reader never
    sees half a line from this process)."""
    line = summarize_run(results)
    text = json.dumps(line, separators=(",", ":"), allow_nan=False) + "\n"
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise CompressError(f"--history {path}: cannot append to it ({exc}). Give a writable path.") from exc
    return line


def read_history(path: str | os.PathLike, error: type[Exception] = CompressError) -> list[dict[str, Any]]:
    """Every run of a history file, oldest first. A malformed line raises ``error`` naming the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"--history {path}: cannot read it ({exc}). Give the .jsonl file that bert-compress bench "
                    "--history appends to.") from exc
    runs = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"--history {path}:{number}"
        try:
            line = json.loads(raw)
        except ValueError as exc:
            raise error(f"{where}: not a JSON line ({exc}). Each line must be one run written by bert-compress "
                        "bench --history; delete or fix that line.") from exc
        if not isinstance(line, dict) or line.get("schema") != HISTORY_SCHEMA:
            raise error(f"{where}: not a bert-compress history line (schema {_get(line, 'schema')!r}, expected "
                        f"{HISTORY_SCHEMA!r}); delete or fix that line.")
        if line.get("version") != HISTORY_VERSION:
            raise error(f"{where}: history line version {line.get('version')!r}; this bert-compress reads version "
                        f"{HISTORY_VERSION}. Delete that line or upgrade bert-compress.")
        for key, kind in (("machine", dict), ("artifacts", dict), ("data", dict)):
            if not isinstance(line.get(key), kind):
                raise error(f"{where}: {key!r} is missing or not an object; the line was edited or cut. Delete or fix "
                            "that line.")
        for name, art in line["artifacts"].items():
            if not isinstance(art, dict) or not isinstance(art.get("latency"), list) or not all(
                    isinstance(art.get(k), dict) for k in ("accuracy", "agreement")):
                raise error(f"{where}: artifact {name!r} lacks its latency list or accuracy/agreement; the line was "
                            "edited or cut. Delete or fix that line.")
            for e in art["latency"]:
                if not (isinstance(e, dict) and isinstance(e.get("speedup"), dict)
                        and _is_number(e["speedup"].get("estimate"))):
                    raise error(f"{where}: artifact {name!r} has a latency entry without a speedup estimate. Delete "
                                "or fix that line.")
        runs.append(line)
    return runs


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else type(obj).__name__


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def same_machine(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keys = ("cpu_model", "available_cpus", "threads")
    return all(a["machine"].get(k) == b["machine"].get(k) for k in keys)


def same_data(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a["data"].get(k) == b["data"].get(k) for k in ("fingerprint", "split"))


def _standard_error(interval: dict[str, Any] | None, confidence: float = 0.95) -> float:
    if not interval or interval.get("low") is None or interval.get("high") is None:
        return 0.0
    return (interval["high"] - interval["low"]) / (2 * NormalDist().inv_cdf(1 - (1 - confidence) / 2))


def metric_series(current: dict[str, Any], past: Iterable[dict[str, Any]], name: str,
                  window: int) -> list[tuple[str, dict[str, Any], list[float]]]:
    """``(metric label, current interval, last window values)`` for each metric of artifact ``name``.

    Only runs of the same machine kind count; latency metrics need the same configuration, quality
    metrics the same data. The current run itself (same ``run_id``) is left out, so ``bench
    --history`` may append before ``gate --history`` reads.
    """
    art = current["artifacts"][name]
    runs = [r for r in past if r.get("run_id") != current.get("run_id") or current.get("run_id") is None]
    runs = [r for r in runs if same_machine(r, current) and name in r["artifacts"]
            and bool((r.get("settings") or {}).get("quick")) == bool((current.get("settings") or {}).get("quick"))]
    out = []
    for e in art["latency"]:
        values = [p["speedup"]["estimate"] for r in runs for p in r["artifacts"][name]["latency"]
                  if (p["batch_size"], p["seq_len"]) == (e["batch_size"], e["seq_len"])]
        out.append((f"speedup at batch {e['batch_size']} seq {e['seq_len']}", e["speedup"], values[-window:]))
    same = [r for r in runs if same_data(r, current)]
    for metric in ("accuracy", "agreement"):
        if art["is_reference"] and metric == "agreement":
            continue
        values = [r["artifacts"][name][metric]["estimate"] for r in same
                  if _is_number(r["artifacts"][name][metric].get("estimate"))]
        out.append((metric, art[metric], values[-window:]))
    return out


def check_artifact(current: dict[str, Any], past: list[dict[str, Any]], name: str, window: int, threshold: float,
                   test: str) -> dict[str, Any]:
    """The history verdict of one artifact: ``{status, measured, message, rows}``.

    ``status`` is ``fail`` when any metric is flagged, ``skip`` when no metric has ``MIN_RUNS``
    comparable earlier runs, else ``pass``. ``rows`` lists every metric's value, window mean, sd and score.
    """

    rows, flagged = [], []
    for label, interval, values in metric_series(current, past, name, window):
        if len(values) < MIN_RUNS:
            rows.append({"metric": label, "value": interval["estimate"], "runs": len(values), "score": None})
            continue
        score, mean, sd = history_score(interval["estimate"], values, _standard_error(interval))
        bad = history_flagged(score, len(values), threshold, test)
        rows.append({"metric": label, "value": interval["estimate"], "runs": len(values), "mean": mean, "sd": sd,
                     "score": score, "flagged": bad})
        if bad:
            flagged.append(rows[-1])
    scored = [r for r in rows if r["score"] is not None]
    if not scored:
        most = max((r["runs"] for r in rows), default=0)
        return {"status": "skip", "measured": "-", "rows": rows,
                "message": f"fewer than {MIN_RUNS} comparable earlier runs in the history (at most {most}, same "
                           "machine kind, threads, configuration and data)"}
    worst = min(scored, key=lambda r: r["score"])
    measured = (f"worst {worst['metric']}: {worst['value']:.4g} vs {worst['mean']:.4g} ± {worst['sd']:.2g} "
                f"({test} score {worst['score']:+.2f}, {worst['runs']} runs)")
    if not flagged:
        return {"status": "pass", "measured": measured, "rows": rows, "message": ""}
    message = "; ".join(f"{r['metric']} {r['value']:.4g} is {abs(r['score']):.1f} sd below the last {r['runs']} "
                        f"runs' mean {r['mean']:.4g}" for r in flagged)
    return {"status": "fail", "measured": measured, "rows": rows, "message": message}
