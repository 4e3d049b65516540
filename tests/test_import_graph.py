"""The layers of docs/design.md ("Layers"), checked on the source: who may import whom.

Every ``import`` in ``compress/``, ``students/`` and ``benchmarks/`` counts, those inside functions
too (a lazy import is still a dependency). Left out: ``if TYPE_CHECKING:`` blocks, and the body of a
module-level ``__getattr__`` (PEP 562; none is left), which runs only when that attribute of the package
is read, never when the package or one of its submodules is imported. Importing ``a.b.c`` runs
``a/__init__.py`` and ``a/b/__init__.py`` as well, so those count as imported.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

from tests.support.paths import ROOT
PACKAGES = ("compress", "students", "benchmarks")
#: The stages (artifact + config -> artifact) and the two ways of driving them.
STAGES = ("compress.stages.teacher", "compress.stages.distill", "compress.stages.prune", "compress.stages.transfer", "compress.stages.export",
          "compress.stages.quantize", "compress.pipeline", "compress.cli", "compress.run_stage", "benchmarks.suite",
          "benchmarks.gate")
#: What serves a model: it may import formats, never a stage.
RUNTIME = ("compress.runtime.predictor", "compress.runtime.modeling", "compress.runtime.tokenization", "compress.runtime.formats", "compress.serving")
FACTORY = ("students.factory",)

#: The layers, bottom first (docs/development.md, "Layers"): a module imports its own layer and the ones below.
LAYERS = ("core", "task records", "data", "runtime", "config", "training", "stages", "drivers")
#: Which layer each module is in: the first pattern that matches its name. A task package spans layers by aspect:
#: its record and metrics at the bottom, its data readers, its decoding with the runtime, its stage bodies on top.
PLACES = (
    ("compress", "core"), ("compress.core*", "core"), ("benchmarks", "core"),
    ("compress.tasks", "task records"), ("compress.tasks.registry", "task records"),
    ("compress.tasks.protocol*", "task records"), ("compress.tasks.*.metrics", "task records"),
    ("compress.tasks.*.alignment", "task records"), ("compress.tasks.*.features", "task records"),
    ("compress.tasks.tables", "data"), ("compress.tasks.sources", "data"), ("compress.tasks.task_choice", "data"),
    ("compress.corpora*", "data"),
    ("compress.tasks.*.*", None),  # a task's other modules: by aspect, below
    ("compress.tasks.*", "task records"),
    ("compress.runtime*", "runtime"), ("compress.serving*", "runtime"), ("benchmarks.latency", "runtime"),
    ("compress.config*", "config"), ("compress.stages", "config"), ("compress.stages.registry", "config"),
    ("compress.stages.losses", "config"), ("compress.stages.fingerprint", "config"), ("students", "config"),
    ("students.presets", "config"), ("students.layer_map", "config"),
    ("compress.stages.training", "training"), ("compress.stages.long_texts", "training"),
    ("compress.stages.gold_labels", "training"), ("compress.stages.quality", "training"), ("students.factory", "training"),
    ("benchmarks.suite", "stages"), ("benchmarks.gate", "stages"), ("benchmarks.gate_output", "stages"),
    ("benchmarks.f1_rules", "stages"), ("benchmarks.load_http", "stages"), ("benchmarks.*", "training"),
    ("compress.stages.*", "stages"),
    ("compress.cli", "drivers"), ("compress.pipeline", "drivers"), ("compress.run_stage", "drivers"),
    ("compress.summary", "drivers"), ("compress.__main__", "drivers"), ("compress.budget*", "drivers"),
)
#: A task module's layer by its name (the aspect it serves); any other module of a task sits with its stages.
TASK_MODULES = {"data": "data", "folder": "data", "decoding": "runtime", "pooling": "runtime", "long_texts": "runtime",
                "vectors": "task records", "words": "training", "losses": "training"}


def layer_of(module: str) -> str:
    for pattern, layer in PLACES:
        if module == pattern or fnmatch.fnmatchcase(module, pattern):
            if layer is not None:
                return layer
            if module.count(".") == 3:  # compress.tasks.<task>.<module>
                return TASK_MODULES.get(module.rsplit(".", 1)[1], "stages")
    raise AssertionError(f"{module} is in no layer: give it a place in PLACES")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    targets: set[str] = set()
    top_level = list(getattr(tree, "body", []))

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__" and node in top_level:
            return
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return targets


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own_ancestors = {".".join(name.split(".")[:i]) for i in range(1, len(name.split(".")))}
        edges = set()
        for target in _imports(tree, name, path.name == "__init__.py", known):
            parts = target.split(".")
            for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b too
                prefix = ".".join(parts[:i])
                if prefix in known and prefix != name and prefix not in own_ancestors:
                    edges.add(prefix)
        graph[name] = edges
    return graph


def _closure(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _in(module: str, groups: tuple[str, ...]) -> bool:
    return any(module == g or module.startswith(g + ".") for g in groups)


def _is_stage(module: str) -> bool:
    return _in(module, STAGES)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_walker_sees_lazy_and_relative_imports():
    graph = _graph()
    assert "compress.cli" in graph["compress.__main__"]
    assert "compress.runtime.formats.pruned" in graph["compress.runtime.modeling"]  # imported inside load_classifier
    assert "compress.stages.transfer.augment" in graph["compress.stages.transfer"]


def test_every_import_goes_to_the_same_layer_or_below():
    graph = _graph()
    upward = sorted(f"{a} ({layer_of(a)}) imports {b} ({layer_of(b)})" for a, edges in graph.items() for b in edges
                    if LAYERS.index(layer_of(b)) > LAYERS.index(layer_of(a)))
    assert upward == [], "imports reaching up a layer:\n" + "\n".join(upward)


def test_the_top_level_holds_only_the_drivers():
    flat = sorted(p.name for p in (ROOT / "compress").glob("*.py"))
    assert flat == ["__init__.py", "__main__.py", "cli.py", "pipeline.py", "run_stage.py", "summary.py"]


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_runtime_and_student_factory_import_no_stage():
    graph = _graph()
    for start in [m for m in graph if _in(m, RUNTIME + FACTORY)]:
        reached = sorted(m for m in _closure(graph, start) if _is_stage(m))
        assert reached == [], f"{start} reaches the stage modules {reached}"


def test_only_the_entry_point_imports_the_cli():
    graph = _graph()
    importers = sorted(m for m, edges in graph.items() if "compress.cli" in edges)
    assert importers == ["compress.__main__"]


def test_pipeline_has_no_argparse():
    source = (ROOT / "compress" / "pipeline.py").read_text(encoding="utf-8")
    assert "argparse" not in source
    assert "compress.cli" not in _graph()["compress.pipeline"]
