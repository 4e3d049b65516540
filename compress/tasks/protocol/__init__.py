"""The task protocol: everything a stage asks of a task, so that no stage asks which task it serves.

A task is one package (``compress/tasks/<name>/``, or any importable module, a test's toy task too). Its
``__init__`` registers a :class:`compress.tasks.registry.Task` whose ``package`` names it; the package answers
the stages through *aspects*, one module (or object) each, named in :data:`ASPECTS`:

- ``data``: recognise the task's data (files, built-ins, hub datasets) and load it (:mod:`.data`);
- ``training``: the teacher and distillation stages, and pruning's scoring and recovery (:mod:`.training`);
- ``scoring``: one split's quality for quantize and optimize, bench's quality section, the gate's rules
  (:mod:`.scoring`);
- ``decoding``: what ``Predictor.predict`` and the server return (numpy only: the torch-free runtime imports it)
  (:mod:`.decoding`).

A stage calls :func:`aspect` (``aspect(task, "scoring").split_scorer(data, split)``); each aspect's submodule here
states, as a :class:`typing.Protocol`, the functions a task's aspect module provides. Aspects are imported when a
stage first asks, so the runtime never imports a task's training code. The layout and how to add a task:
docs/development.md ("Add a task").
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from compress.core.errors import CompressError

#: The aspects of a task, in the order the pipeline meets them.
ASPECTS = ("data", "training", "scoring", "decoding")


def aspect(task: Any, name: str) -> Any:
    """The ``name`` aspect of ``task`` (a :class:`~compress.tasks.registry.Task`; by name: ``get_task(n).aspect``).

    Looked up as an attribute of the task's package first (a single-module task may define its aspects as
    objects), then as its submodule ``<package>.<name>``.
    """
    if name not in ASPECTS:
        raise CompressError(f"{name!r} is not a task aspect; the aspects are {', '.join(ASPECTS)}.")
    if not task.package:
        raise CompressError(f"task {task.name!r} names no package, so it has no {name} aspect. Register it with "
                            "Task(..., package=__name__) from the module that holds its aspects.")
    package = importlib.import_module(task.package)
    found = getattr(package, name, None)
    if found is None or isinstance(found, ModuleType) and found.__name__ != f"{task.package}.{name}":
        try:
            found = importlib.import_module(f"{task.package}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{task.package}.{name}":
                raise
            raise CompressError(f"task {task.name!r} has no {name} aspect: {task.package} defines no {name!r} and "
                                f"has no module {task.package}.{name}. See compress.tasks.protocol.") from exc
    return found


def missing_members(task: Any, name: str) -> list[str]:
    """The members the protocol of aspect ``name`` asks for that ``task``'s aspect lacks (for the conformance test)."""
    protocol = getattr(importlib.import_module(f"compress.tasks.protocol.{name}"), "PROTOCOL")
    found = aspect(task, name)
    wanted = [m for m in vars(protocol) if not m.startswith("_")]
    return [m for m in wanted if not hasattr(found, m)]
