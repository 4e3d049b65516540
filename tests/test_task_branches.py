"""No module outside ``compress/tasks/`` asks which task it serves (docs/design.md, "Tasks").

A stage that needs something task-specific calls the task's protocol (:mod:`compress.tasks.protocol`); it never
compares a task's name, tests a task flag (``tagging``, ``reading``), probes a task's metric name (``"entity_f1" in
record``) or checks which task's data class it holds. Read from the source (AST) of every module of ``compress/``,
``benchmarks/`` and ``students/`` outside ``compress/tasks/``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from compress.tasks import get_task, task_names
from tests.support.paths import ROOT

#: Names that say which task a value is: registered names and aliases, and the task-name constants.
TASK_WORDS = {alias for name in task_names() for alias in (name, *get_task(name).aliases)}
#: Metric names that belong to one task only: probing for one is asking which task a record is of.
TASK_METRICS = ({m for name in task_names() for m in get_task(name).metrics} - {"accuracy", "agreement", "n"}
                | {"question_f1", "entity_counts"})  # the per-question and per-sentence units of the gate's records
#: Variables and attributes that hold "is this the tagger / the reader".
TASK_FLAGS = {"tagging", "reading", "is_tagging", "is_reading", "is_qa", "TOKEN", "QA", "SEQUENCE"}
#: The data classes of single tasks: ``isinstance(data, QATaskData)`` is a task branch.
TASK_DATA_CLASSES = {"TaskData", "TokenTaskData", "QATaskData", "SimilarityTaskData", "EmbeddingData", "EmbeddingPairs"}


def _constants(node: ast.AST) -> list[str]:
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def _flag(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id in TASK_FLAGS) or (
        isinstance(node, ast.Attribute) and node.attr in TASK_FLAGS)


def branches(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, what)`` for every place in ``tree`` that asks which task it serves."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            words = [c for o in operands for c in _constants(o)]
            if any(w in TASK_WORDS for w in words):
                found.append((node.lineno, "compares a task name"))
            elif any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(w in TASK_METRICS for w in words):
                found.append((node.lineno, "probes a task's metric name"))
            elif any(_flag(o) for o in operands):
                found.append((node.lineno, "compares a task flag"))
        elif isinstance(node, (ast.If, ast.IfExp, ast.While)) and any(_flag(n) for n in ast.walk(node.test)):
            found.append((node.lineno, "tests a task flag"))
        elif isinstance(node, ast.BoolOp) and any(_flag(v) for v in node.values):
            found.append((node.lineno, "tests a task flag"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
              and len(node.args) == 2 and any(isinstance(n, ast.Name) and n.id in TASK_DATA_CLASSES
                                               for n in ast.walk(node.args[1]))):
            found.append((node.lineno, "checks a task's data class"))
    return sorted(set(found))


def _modules() -> dict[str, Path]:
    out = {}
    for package in ("compress", "benchmarks", "students"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] != ("compress", "tasks"):
                out[str(rel)] = path
    return out


def test_no_module_outside_the_tasks_asks_which_task():
    offenders = []
    for rel, path in _modules().items():
        offenders += [f"{rel}:{line}: {what}" for line, what in branches(ast.parse(path.read_text(encoding="utf-8")))]
    assert not offenders, "task branches outside compress/tasks (make each a protocol method):\n" + "\n".join(offenders)


def test_the_checker_finds_each_kind_of_branch():
    source = '''
if task.name == "token-classification": pass
x = 1 if self.reading else 2
if "question_f1" in record: pass
ok = isinstance(data, QATaskData)
if kind in ("ner", "extractive-qa"): pass
'''
    assert [what for _, what in branches(ast.parse(source))] == [
        "compares a task name", "tests a task flag", "probes a task's metric name", "checks a task's data class",
        "compares a task name"]
