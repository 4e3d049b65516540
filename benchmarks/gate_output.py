"""The gate's verdicts written out: the terminal table, the exit code, JUnit XML and the Markdown step summary."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

from benchmarks.gate_rules import EXIT_FAIL, EXIT_INCONCLUSIVE, EXIT_PASS, Check
from compress.core.errors import CompressError


def _limit_text(check: Check) -> str:
    if check.limit is True:
        return "required"
    return f"{check.limit:g}" if isinstance(check.limit, (int, float)) else str(check.limit)


def format_table(checks: list[Check]) -> str:
    """A plain-text table for the log: measured value, interval and verdict per artifact and rule."""
    head = ["artifact", "rule", "limit", "measured", "interval", "result"]
    rows = [[c.artifact, c.rule, _limit_text(c), c.measured, c.interval or "-", c.status.upper()] for c in checks]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    for c in checks:
        if c.status not in ("pass",) and c.message:
            lines.append(f"{c.status.upper()}: {c.artifact} {c.rule}: {c.message}")
    return "\n".join(lines)


def _counts(checks: list[Check]) -> dict[str, int]:
    return {status: sum(c.status == status for c in checks) for status in ("pass", "fail", "inconclusive", "skip")}


def outcome(checks: list[Check], on_inconclusive: str | None = None) -> tuple[str, int]:
    """The headline word and exit code: fail (1) beats inconclusive (4, or as ``on_inconclusive`` says) beats pass."""
    counts = _counts(checks)
    if counts["fail"]:
        return "FAILED", EXIT_FAIL
    if counts["inconclusive"]:
        if on_inconclusive == "pass":
            return "passed (inconclusive counted as pass)", EXIT_PASS
        if on_inconclusive == "fail":
            return "FAILED (inconclusive counted as fail)", EXIT_FAIL
        return "INCONCLUSIVE", EXIT_INCONCLUSIVE
    return "passed", EXIT_PASS


def _summary_line(checks: list[Check]) -> str:
    c = _counts(checks)
    return f"{c['pass']} passed, {c['fail']} failed, {c['inconclusive']} inconclusive, {c['skip']} skipped"


def junit_xml(checks: list[Check], error: str | None = None, name: str = "bert-compress gate",
              on_inconclusive: str | None = None) -> str:
    """JUnit XML: one testcase per artifact x rule, or one ``<error>`` for bad input.

    A failed rule is a ``<failure>``; an inconclusive one is a ``<failure type="GateInconclusive">``
    (or ``<skipped>`` with ``on_inconclusive="pass"``), so a merge request shows it either way; a
    rule that does not apply is ``<skipped>``.
    """
    counts = _counts(checks)
    inconclusive_fails = on_inconclusive != "pass"
    fails = counts["fail"] + (counts["inconclusive"] if inconclusive_fails else 0)
    skips = counts["skip"] + (0 if inconclusive_fails else counts["inconclusive"])
    errors = 1 if error else 0
    tests = len(checks) + errors
    root = ET.Element("testsuites", name=name, tests=str(tests), failures=str(fails), errors=str(errors),
                      skipped=str(skips))
    suite = ET.SubElement(root, "testsuite", name=name, tests=str(tests), failures=str(fails), errors=str(errors),
                          skipped=str(skips))
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname=f"gate.{c.artifact}", name=c.rule, time="0")
        detail = f"{c.artifact} {c.rule}: limit {_limit_text(c)}, measured {c.measured}" + \
            (f", interval {c.interval}" if c.interval else "") + f"\n{c.message}"
        if c.status == "fail" or (c.status == "inconclusive" and inconclusive_fails):
            kind = "GateFailure" if c.status == "fail" else "GateInconclusive"
            node = ET.SubElement(case, "failure", message=c.message, type=kind)
            node.text = detail
        elif c.status in ("skip", "inconclusive"):
            ET.SubElement(case, "skipped", message=c.message)
        out = ET.SubElement(case, "system-out")
        out.text = f"limit {_limit_text(c)}; measured {c.measured}" + (f"; interval {c.interval}" if c.interval else "") \
            + f"; {c.status}"
    if error:
        case = ET.SubElement(suite, "testcase", classname="gate", name="inputs", time="0")
        node = ET.SubElement(case, "error", message=error, type="GateInputError")
        node.text = error
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def markdown_summary(checks: list[Check], error: str | None = None, on_inconclusive: str | None = None) -> str:
    """The GitHub step summary: a headline and the table (measured value, interval, verdict), a mark per result."""
    if error:
        return f"## bert-compress gate: input error\n\n```\n{error}\n```\n"
    word, _ = outcome(checks, on_inconclusive)
    mark = {"pass": "✅ pass", "fail": "❌ fail", "inconclusive": "❔ inconclusive", "skip": "⏭️ skip"}
    lines = [f"## bert-compress gate: {word} ({_summary_line(checks)})", "",
             "| artifact | rule | limit | measured | interval | result | note |",
             "|---|---|---:|---|---|---|---|"]
    for c in checks:
        note = c.message.replace("|", "\\|")
        lines.append(f"| `{c.artifact}` | {c.rule} | {_limit_text(c)} | {c.measured} | {c.interval or '-'} | "
                     f"{mark[c.status]} | {note} |")
    return "\n".join(lines) + "\n"


def _write(path: str | os.PathLike, text: str, option: str, append: bool = False) -> None:
    try:
        path = Path(path)
        if not append:
            path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a" if append else "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise CompressError(f"{option} {path}: cannot write it ({exc}). Give a writable path.") from exc


