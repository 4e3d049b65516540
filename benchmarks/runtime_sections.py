"""Report sections for the runtime comparisons: the teacher's best runtime, real traffic, load.

Pure functions of ``results.json`` like the rest of :mod:`benchmarks.report` (which calls
:func:`sections`); they render nothing when the run did not measure them.
"""

from __future__ import annotations

from typing import Any, Sequence


def _fmt(value: Any, digits: int = 2, suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}{suffix}"
    return f"{value:,.{digits}f}{suffix}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int = 2) -> list[str]:
    align = ["---" if i < text_columns else "---:" for i in range(len(head))]
    return ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"] + ["| " + " | ".join(r) + " |" for r in rows]


def teacher_best_section(results: dict[str, Any]) -> list[str]:
    info = results.get("teacher_runtimes")
    if not info:
        return []
    arts = results["artifacts"]
    out = ["", "## Speedup against the teacher's best runtime", "",
           f"The teacher was measured in {len(info['artifacts'])} runtimes ({', '.join(f'`{n}`' for n in info['artifacts'])}). "
           "Beside the speedup against the reference (what a user compares with), each other artifact's speedup "
           "against the fastest of those in the same configuration and the same rounds: what the smaller model itself "
           "buys when both run the same way. 'Same kind': against the teacher in the artifact's own runtime, when "
           "it was measured (ONNX INT8 against ONNX INT8).", ""]
    rows = []
    for a in arts:
        if a["name"] in info["artifacts"]:
            continue
        for e in a.get("latency") or []:
            best = e.get("speedup_vs_teacher_best")
            if not best:
                continue
            same = e.get("speedup_vs_teacher_same_kind")
            rows.append([f"`{a['name']}`", a["kind"], str(e["batch_size"]), str(e["seq_len"]),
                         _fmt(e["speedup"]["median"], suffix="x"), f"`{best['against']}` ({best.get('against_kind')})",
                         f"**{best['median']:.2f}x**",
                         f"{same['median']:.2f}x (`{same['against']}`)" if same else "-"])
    out += _table(["artifact", "kind", "batch", "sequence", f"vs {results['reference']}", "teacher's best runtime",
                   "vs the teacher's best runtime", "vs the teacher, same kind"], rows, text_columns=4)
    return out


def traffic_section(results: dict[str, Any]) -> list[str]:
    settings = (results.get("settings") or {}).get("traffic")
    if not settings:
        return []
    arts = [a for a in results["artifacts"] if a.get("traffic")]
    out = ["", f"## Real traffic: split `{settings['split']}`, {settings['requests']} requests at their real lengths", "",
           "Batch 1: each text is one request tokenized to its own length (no padding), in the split's order, every "
           "artifact running each request in turn (the order rotating). Latency is the forward pass; the p99 with "
           "tokenization adds the artifact's own tokenizer, as a server pays it.", ""]
    rows = []
    for a in arts:
        t = a["traffic"]["batch1"]
        sp = t["speedup"]
        rows.append([f"`{a['name']}`", a["kind"], _fmt(t["tokens"]["mean"], 1), _fmt(t["p50_ms"]), _fmt(t["p90_ms"]),
                     _fmt(t["p99_ms"]), _fmt(t["with_tokenization"]["p99_ms"]), _fmt(t["throughput_req_per_s"], 1),
                     "1.00x (reference)" if a["is_reference"] else
                     f"**{sp['median']:.2f}x** ({sp['p10']:.2f}-{sp['p90']:.2f})"])
    out += _table(["artifact", "kind", "mean tokens", "p50 ms", "p90 ms", "p99 ms", "p99 ms with tokenization",
                   "requests/s", "speedup (p10-p90)"], rows)
    for b in settings.get("batch_sizes") or []:
        out += ["", f"### Batched through the Predictor: batch {b}, sorted by length, each batch padded to its longest", ""]
        rows = []
        for a in arts:
            e = next((x for x in a["traffic"]["batched"] if x["batch_size"] == b), None)
            if e is None:
                continue
            rows.append([f"`{a['name']}`", a["kind"], _fmt(e["throughput_seq_per_s"], 1), _fmt(e["p50_ms"]),
                         _fmt(e["p99_ms"]), _fmt(e["padding_overhead"], 3),
                         "1.00x (reference)" if a["is_reference"] else f"**{e['speedup_total']:.2f}x**"])
        out += _table(["artifact", "kind", "seq/s", "batch p50 ms", "batch p99 ms", "padded / real tokens",
                       "throughput vs reference"], rows)
    return out


def load_section(results: dict[str, Any]) -> list[str]:
    settings = (results.get("settings") or {}).get("load")
    if not settings:
        return []
    out = ["", f"## Load: client threads calling one Predictor at once ({settings['requests']} requests per level, "
           f"split `{settings['split']}`)", "",
           "Each request is one text through `Predictor.logits` (tokenization included), as a server worker calls it. "
           "'mismatches' counts answers whose label differs from the single-threaded answer for the same text.", ""]
    rows = []
    for a in results["artifacts"]:
        for e in a.get("load") or []:
            rows.append([f"`{a['name']}`", a["kind"], str(e["clients"]), _fmt(e["p50_ms"]), _fmt(e["p90_ms"]),
                         _fmt(e["p99_ms"]), _fmt(e["throughput_req_per_s"], 1), str(e["errors"]),
                         str(e["label_mismatches"]), f"{e['max_abs_logit_diff']:.1e}" if e["max_abs_logit_diff"] is not None
                         else "-", "yes" if e["ok"] else "**no**"])
    out += _table(["artifact", "kind", "clients", "p50 ms", "p90 ms", "p99 ms", "requests/s", "errors", "mismatches",
                   "max logit diff", "ok"], rows)
    return out


def sections(results: dict[str, Any]) -> list[str]:
    """Every runtime section the results hold, in report order."""
    return teacher_best_section(results) + traffic_section(results) + load_section(results)
