"""Every link between the repository's documents resolves: a moved page or renamed heading fails here.

Checked: Markdown links ``[text](path)`` and ``[text](path#anchor)`` in README.md and docs/ (the file must
exist; the anchor must be a heading of it, slugged as GitHub slugs them), and every ``docs/<page>.md`` path
named in the docs, the recipes and the code's comments (the code cites the page that holds its numbers).
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import ROOT

LINK = re.compile(r"\]\(([^)\s]+)\)")
DOC_PATH = re.compile(r"\bdocs/[\w./-]+\.md\b")
CITING = ("compress", "students", "benchmarks", "tools", "tests", "recipes")


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but hyphens dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        slug = _slug(line.lstrip("#"))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")  # GitHub numbers repeated headings
    return anchors


def test_slugs_follow_githubs_rule():
    assert _slug(" `make demo` on each CPU kind") == "make-demo-on-each-cpu-kind"
    assert _slug("Measured: 20,000 lines (3 seeds)") == "measured-20000-lines-3-seeds"


def test_markdown_links_reach_a_file_and_a_heading():
    broken = []
    for doc in _markdown_files():
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            resolved = (doc.parent / path) if path else doc
            if not resolved.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_every_cited_docs_page_exists():
    sources = _markdown_files()
    for folder in CITING:
        sources += sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".yaml", ".md"})
    missing = sorted({f"{src.relative_to(ROOT)}: {name}" for src in sources
                      for name in DOC_PATH.findall(src.read_text(encoding="utf-8", errors="replace"))
                      if not (ROOT / name).is_file()})
    assert missing == []
