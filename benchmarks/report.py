"""``report.md`` and the plots, made from a ``results.json`` document alone.

The report is a pure function of the results, so it can be regenerated from an old
``results.json`` and never shows a number that the JSON does not hold. Plots use matplotlib's Agg
canvas directly (no pyplot, no global backend switch), so rendering works on headless CI runners
and does not disturb a caller's own matplotlib state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence
from benchmarks.agreement import traffic_agreement_section
from benchmarks.gate_results import results_task
from benchmarks.runtime_sections import sections
from compress.stages.quality import metric_name

PARETO_PNG = "pareto.png"
SPEEDUP_PNG = "speedup.png"
SIZE_PNG = "size.png"
MB = 1e6


def _fmt(value: Any, digits: int = 2, pct: bool = False, suffix: str = "") -> str:
    if value is None:
        return "-"
    if pct:
        return f"{100 * value:.1f}%"
    if isinstance(value, int):
        return f"{value:,}{suffix}"
    return f"{value:,.{digits}f}{suffix}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int = 2) -> list[str]:
    """A Markdown table; the first ``text_columns`` columns left-aligned, the numbers right-aligned."""
    align = ["---" if i < text_columns else "---:" for i in range(len(head))]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _ci_pct(ci: Sequence[float] | None) -> str:
    return f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci and ci[0] is not None else ""


#: The helpers a task's quality table is written with (its scoring aspect's ``report_quality``).
fmt, table, ci_pct = _fmt, _table, _ci_pct


def chart_config(results: dict[str, Any]) -> tuple[int, int]:
    """The (batch, seq) of the Pareto chart: batch 1 (or the smallest measured), the longest sequence."""
    settings = results["settings"]
    return min(settings["batch_sizes"]), max(settings["seq_lens"])


def latency_at(artifact: dict[str, Any], batch_size: int, seq_len: int) -> dict[str, Any] | None:
    """The latency entry of ``artifact`` measured at ``batch_size`` x ``seq_len``, if any."""
    for entry in artifact.get("latency") or []:
        if entry["batch_size"] == batch_size and entry["seq_len"] == seq_len:
            return entry
    return None


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats: ``(latency, accuracy)``, lower latency and higher accuracy win.

    A point is dominated when another is at least as fast and at least as accurate, and strictly
    better in one of the two. Returned in order of increasing latency, ready to draw as a line.
    """
    front = []
    for i, (lat_i, acc_i) in enumerate(points):
        dominated = any(
            lat_j <= lat_i and acc_j >= acc_i and (lat_j < lat_i or acc_j > acc_i)
            for j, (lat_j, acc_j) in enumerate(points) if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (points[i][0], -points[i][1]))


def quality_metric(results: dict[str, Any]) -> tuple[str, str]:
    """``(quality key, column name)`` of the results' primary metric: accuracy, a tagger's entity F1, a reader's F1."""

    metric = (results.get("data") or {}).get("metric") or "accuracy"
    return metric, metric_name(metric)


def headline(results: dict[str, Any]) -> str:
    """A few lines for the terminal: accuracy (a tagger: entity F1), agreement, p50 and speedup at the chart's
    configuration."""
    batch, seq = chart_config(results)
    metric, title = quality_metric(results)
    lines = [f"{'artifact':<28}{'kind':<11}{title:>10}{'agree':>8}{'p50 ms':>10}{'speedup':>9}{'size MB':>9}"
             f"   (latency at batch {batch}, seq {seq})"]
    for art in results["artifacts"]:
        lat = latency_at(art, batch, seq) or {}
        speed = (lat.get("speedup") or {}).get("median")
        lines.append(f"{art['name'][:27]:<28}{art['kind']:<11}{_fmt(art['quality'].get(metric), pct=True):>10}"
                     f"{_fmt(art['quality'].get('agreement'), pct=True):>8}{_fmt(lat.get('p50_ms')):>10}"
                     f"{_fmt(speed, suffix='x'):>9}{_fmt(art['size_bytes'] / MB, 1):>9}")
    return "\n".join(lines)


def demo_table(results: dict[str, Any], markdown: bool = False) -> str:
    """The table ``make demo`` ends with: per artifact, accuracy and its share of the reference's
    accuracy, p50 latency at the smallest batch, throughput at the largest batch (both at the longest
    sequence), size, and speedup against the reference at each of those two batch sizes."""
    settings = results["settings"]
    small, large, seq = min(settings["batch_sizes"]), max(settings["batch_sizes"]), max(settings["seq_lens"])
    metric, title = quality_metric(results)
    head = ["artifact", "kind", title, "of reference", f"p50 ms (batch {small})", f"seq/s (batch {large})",
            "size MB", f"speedup b{small}", f"speedup b{large}"]
    reference = next((a for a in results["artifacts"] if a["name"] == results["reference"]), None)
    ref_acc = (reference or {}).get("quality", {}).get(metric)
    rows = []
    for art in results["artifacts"]:
        lo, hi = latency_at(art, small, seq) or {}, latency_at(art, large, seq) or {}
        acc = art["quality"].get(metric)
        share = acc / ref_acc if acc is not None and ref_acc else None
        rows.append([art["name"], art["kind"], _fmt(acc, pct=True), _fmt(share, pct=True), _fmt(lo.get("p50_ms")),
                     _fmt(hi.get("throughput_seq_per_s"), 1), _fmt(art["size_bytes"] / MB, 1),
                     _fmt((lo.get("speedup") or {}).get("median"), 1, suffix="x"),
                     _fmt((hi.get("speedup") or {}).get("median"), 1, suffix="x")])
    if markdown:
        return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                         + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines) + f"\n(sequence length {seq}, {settings['threads']} thread(s); speedups against " \
        f"{results['reference']}, paired per round)"


def render_markdown(results: dict[str, Any], plots: Sequence[str] = (PARETO_PNG, SPEEDUP_PNG, SIZE_PNG)) -> str:
    """The whole ``report.md``: context, quality, latency per configuration, size and memory, fusions."""
    arts = results["artifacts"]
    ref = next(a for a in arts if a["name"] == results["reference"])
    machine, settings, versions, data = results["machine"], results["settings"], results["versions"], results["data"]
    flags = ", ".join(f for f, on in (machine.get("cpu_flags") or {}).items() if on) or "none of note"
    out = [f"# Benchmark: {len(arts)} artifact(s) against `{ref['name']}`", ""]
    out += [
        f"- Measured {results['created']} on **{machine.get('cpu_model') or 'unknown CPU'}** "
        f"({machine.get('available_cpus')} CPUs available, {machine.get('physical_cores') or '?'} physical cores; "
        f"flags: {flags}), **{settings['threads']} thread(s)**.",
        "- Software: " + ", ".join(f"{k} {v}" for k, v in versions.items()) +
        f"; Python {machine.get('python')}; commit `{results.get('git_commit') or 'none'}`.",
        f"- Latency: {settings['warmup']} warm-up and {settings['runs']} timed runs per artifact and configuration, "
        f"{settings['order']}; forward pass only, on real texts tokenized to exactly the sequence length. "
        "Speedup = median over rounds of (reference time / artifact time) in the same round, with its 95% "
        "interval (block bootstrap over the rounds) where the file has one, and the p10-p90 spread of the ratios."
        + (" **Quick run: smoke numbers, not measurements.**" if settings.get("quick") else ""),
        f"- Data: `{data['source']}`, split `{data['split']}`, {data['n']} examples.",
        "",
        f"## Quality ({data['split']} split, {data['n']} examples)",
        "",
    ]
    out += results_task(results).aspect("scoring").report_quality(arts, ref)
    out += _served_runtimes(arts, *quality_metric(results))

    out += ["", "## Latency", ""]
    return _render_rest(results, out, plots)


def _served_runtimes(arts: Sequence[dict[str, Any]], metric: str, title: str) -> list[str]:
    """A line per choice that serves its batch sizes from different runtimes: each one's score, and which one its
    row shows (the least accurate, :func:`benchmarks.suite.score_served_runtimes`)."""
    lines = []
    for a in arts:
        served = a["quality"].get("served_runtimes")
        if not served:
            continue
        parts = "; ".join(f"batch {', '.join(str(b) for b in r['batch_sizes'])} from `{r['artifact']}` ({r['kind']}), "
                          f"{title} {_fmt(r.get(metric), pct=True)}" for r in served)
        lines.append(f"`{a['name']}` serves {parts}. Its row is the least accurate of them, "
                     f"`{a['quality']['scored_runtime']}`, so a gate on it holds at every batch size.")
    return ["", *lines] if lines else []


def _render_rest(results: dict[str, Any], out: list[str], plots: Sequence[str]) -> str:
    """``report.md`` after its quality section: latency per configuration, size and memory, fusions, plots."""
    arts = results["artifacts"]
    ref = next(a for a in arts if a["name"] == results["reference"])
    settings = results["settings"]
    for b in settings["batch_sizes"]:
        for s in settings["seq_lens"]:
            out += [f"### batch {b}, sequence {s}", ""]
            rows = []
            for a in arts:
                e = latency_at(a, b, s)
                if e is None:
                    continue
                sp = e["speedup"]
                ci = f" [{sp['ci_low']:.2f}, {sp['ci_high']:.2f}]" if sp.get("ci_low") is not None else ""
                speed = "1.00x (reference)" if a["is_reference"] else \
                    f"**{sp['median']:.2f}x**{ci} ({sp['p10']:.2f}-{sp['p90']:.2f})"
                rows.append([f"`{a['name']}`", a["kind"], _fmt(e["p50_ms"]), _fmt(e["p90_ms"]), _fmt(e["p99_ms"]),
                             _fmt(e["mean_ms"]), _fmt(e["throughput_seq_per_s"], 1), speed])
            out += _table(["artifact", "kind", "p50 ms", "p90 ms", "p99 ms", "mean ms", "throughput seq/s",
                           "speedup [95%] (p10-p90)"], rows)
            out.append("")

    mem = settings.get("memory") or {}
    out += ["## Size and memory", ""]
    if mem.get("measured"):
        out += [f"Memory: a fresh process per artifact loads it and runs one batch of {mem.get('batch_size')} x "
                f"{mem.get('seq_len')} tokens. Peak = peak resident set; increase = over the bare interpreter; "
                "model = over the interpreter with the runtime libraries imported.", ""]
    rows = []
    for a in arts:
        m = a.get("memory") or {}
        size_ratio = a["size_bytes"] / ref["size_bytes"] if ref["size_bytes"] else None
        rows.append([f"`{a['name']}`", a["kind"], _fmt(a.get("parameters")), _fmt(a["size_bytes"] / MB, 1),
                     _fmt(size_ratio, pct=True), _fmt(m["peak_rss_bytes"] / MB, 0) if m else "-",
                     _fmt(m["rss_increase_bytes"] / MB, 0) if m else "-",
                     _fmt(m["model_rss_increase_bytes"] / MB, 0) if m else "-"])
    out += _table(["artifact", "kind", "parameters", "size MB", "of reference", "peak RSS MB", "RSS increase MB",
                   "model RSS MB"], rows)

    onnx_arts = [a for a in arts if a.get("onnx")]
    if onnx_arts:
        out += ["", "## ONNX Runtime fusions (counted in each graph)", ""]
        rows = []
        for a in onnx_arts:
            f = a["onnx"]["fused_ops"]
            layers = a.get("num_hidden_layers")
            full = "yes" if layers is not None and a["onnx"]["attention_ops"] == layers else "**no**"
            rows.append([f"`{a['name']}`", a["kind"], str(a["onnx"]["attention_ops"]), _fmt(layers), full,
                         str(f.get("EmbedLayerNormalization", 0) + f.get("QEmbedLayerNormalization", 0)),
                         str(f.get("SkipLayerNormalization", 0)),
                         str(f.get("BiasGelu", 0) + f.get("FastGelu", 0) + f.get("Gelu", 0))])
        out += _table(["artifact", "kind", "attention ops", "layers", "every layer fused", "EmbedLayerNorm",
                       "SkipLayerNorm", "Gelu"], rows)

    out += sections(results)

    out += traffic_agreement_section(results)
    if plots:
        out += ["", "## Plots", ""]
        out += [f"![{p}]({p})" for p in plots]
    return "\n".join(out) + "\n"


def agg_figure(width: float, height: float):
    """A figure on its own Agg canvas (see the module docstring), for every plot of the benchmarks."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def plot_pareto(results: dict[str, Any], path: Path) -> Path:
    """p50 latency at the chart configuration against accuracy, with the Pareto front drawn."""
    batch, seq = chart_config(results)
    points, names = [], []
    for a in results["artifacts"]:
        e = latency_at(a, batch, seq)
        if e is not None:
            points.append((e["p50_ms"], a["quality"][quality_metric(results)[0]]))
            names.append(a["name"] + (" (ref)" if a["is_reference"] else ""))
    fig = agg_figure(7, 4.5)
    ax = fig.add_subplot()
    front = pareto_front(points)
    ax.scatter([p[0] for p in points], [100 * p[1] for p in points], color="tab:blue", zorder=3)
    if front:
        # Steps: at any latency, the best accuracy reachable without going slower. Ringed points are on the front.
        ax.plot([points[i][0] for i in front], [100 * points[i][1] for i in front], drawstyle="steps-post",
                color="tab:orange", marker="o", markersize=11, markerfacecolor="none", label="Pareto front", zorder=2)
        ax.legend(loc="lower right")
    # Labels alternate above and below in latency order, each tied to its point by a thin line, so
    # neighbouring points (an fp32 and an INT8 graph of one model) cannot be read as each other's.
    for rank, i in enumerate(sorted(range(len(points)), key=lambda i: points[i])):
        ax.annotate(names[i], (points[i][0], 100 * points[i][1]), textcoords="offset points",
                    xytext=(12, 16 if rank % 2 == 0 else -22), fontsize=8,
                    arrowprops={"arrowstyle": "-", "lw": 0.6, "color": "0.4"})
    ax.set_xlabel(f"p50 latency, ms (batch {batch}, sequence {seq}, {results['settings']['threads']} thread(s))")
    ax.set_ylabel(f"{quality_metric(results)[1]}, % ({results['data']['split']} split)")
    ax.set_title("Latency against accuracy: up and to the left is better")
    ax.grid(True, alpha=0.3)
    fig.savefig(path, dpi=120)
    return path


def plot_speedup(results: dict[str, Any], path: Path) -> Path:
    """Median paired speedup over the reference per batch size (one panel per sequence length), with whiskers at
    its 95% interval (p10-p90 of the per-round ratios for a version 1 file, which has no interval)."""
    settings = results["settings"]
    others = [a for a in results["artifacts"] if not a["is_reference"]]
    seqs, batches = settings["seq_lens"], settings["batch_sizes"]
    fig = agg_figure(max(6, 2.2 * len(seqs) + 1.5 * len(batches)), 4.2)
    axes = fig.subplots(1, len(seqs), squeeze=False)[0]
    width = 0.8 / max(1, len(others))
    for ax, s in zip(axes, seqs):
        for k, a in enumerate(others):
            xs, ys, lo, hi = [], [], [], []
            for i, b in enumerate(batches):
                e = latency_at(a, b, s)
                if e is None:
                    continue
                sp = e["speedup"]
                xs.append(i - 0.4 + width * (k + 0.5))
                ys.append(sp["median"])
                low, high = (sp["ci_low"], sp["ci_high"]) if sp.get("ci_low") is not None else (sp["p10"], sp["p90"])
                lo.append(max(0.0, sp["median"] - low))
                hi.append(max(0.0, high - sp["median"]))
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=a["name"])
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(len(batches)), [str(b) for b in batches])
        ax.set_xlabel("batch size")
        ax.set_title(f"sequence {s}")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel(f"speedup over {results['reference']} (x)")
    if others:
        axes[-1].legend(fontsize=8)
    else:
        axes[0].text(0.5, 0.5, "only the reference was measured", transform=axes[0].transAxes, ha="center")
    fig.savefig(path, dpi=120)
    return path


def plot_size(results: dict[str, Any], path: Path) -> Path:
    """File size on disk per artifact, and the memory increase when it was measured."""
    arts = results["artifacts"]
    names = [a["name"] for a in arts]
    has_memory = any(a.get("memory") for a in arts)
    fig = agg_figure(10 if has_memory else 6, 0.5 * len(arts) + 2)
    axes = fig.subplots(1, 2 if has_memory else 1, squeeze=False)[0]
    colors = ["tab:gray" if a["is_reference"] else "tab:blue" for a in arts]
    axes[0].barh(names, [a["size_bytes"] / MB for a in arts], color=colors)
    axes[0].set_xlabel("weights on disk, MB")
    axes[0].invert_yaxis()
    if has_memory:
        axes[1].barh(names, [(a.get("memory") or {}).get("model_rss_increase_bytes", 0) / MB for a in arts], color=colors)
        axes[1].set_xlabel("resident memory for model + one batch, MB")
        axes[1].invert_yaxis()
    for ax in axes:
        ax.grid(True, axis="x", alpha=0.3)
    fig.savefig(path, dpi=120)
    return path


def write_report(results: dict[str, Any], folder: str | Path) -> list[Path]:
    """Write ``report.md`` and the three PNG plots into ``folder``; returns the paths."""
    folder = Path(folder)
    plots = [plot_pareto(results, folder / PARETO_PNG), plot_speedup(results, folder / SPEEDUP_PNG),
             plot_size(results, folder / SIZE_PNG)]
    report = folder / "report.md"
    report.write_text(render_markdown(results, [p.name for p in plots]), encoding="utf-8")
    return [report, *plots]
