"""The task registry: what a kind of model output means, declared once for every stage.

A *task* (sequence classification, token classification, ...) decides which transformers head a
model has, which tensors it takes and returns, what a soft label is, how predictions are scored
and what :class:`compress.runtime.predictor.Predictor` hands back. Those facts used to be spelled out in each
stage (``AutoModelForSequenceClassification`` in five modules, ``logits`` of shape
``(batch, labels)`` in the export's dynamic axes, accuracy in the teacher's evaluation). Here each
task is one :class:`Task` object, registered by name, in the spirit of Optimum's ``TasksManager``;
a stage asks ``get_task(name)`` instead of assuming, so a new task is one module plus one
:func:`register_task` call.

Nothing here imports torch or transformers: the model class is a *name*, resolved by
:meth:`Task.model_class` only when a model is built, so the torch-free runtime can read the
registry too.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from compress.core.errors import CompressError

#: Shape names used in ``Task.outputs`` and ``Task.soft_labels``.
BATCH, SEQUENCE, LABELS, WORDS = "batch", "sequence", "num_labels", "words"
#: A BERT-family encoder's inputs and their axes, the same for every task built on one (``token_type_ids`` is fed
#: only to models whose ``forward`` takes it).
ENCODER_INPUTS = {"input_ids": (BATCH, SEQUENCE), "attention_mask": (BATCH, SEQUENCE),
                  "token_type_ids": (BATCH, SEQUENCE)}


@dataclass(frozen=True)
class Task:
    """One kind of model output, as every stage needs to know it.

    ``inputs`` maps each model input to its axes (``token_type_ids`` is only fed to models whose
    ``forward`` takes it); ``outputs`` maps each output to its axes, the ONNX export's dynamic
    axes and the parity check follow from it. ``label_unit`` is what one gold label or soft label
    belongs to (``example`` or ``word``), ``soft_labels`` the axes of one cached soft-label entry.
    ``score`` turns predictions and references into the metrics named in ``metrics`` (numpy only,
    so the runtime and the benchmark can call it without torch); ``primary_metric`` is the one that
    accuracy budgets and gates are decided on. ``predictor_returns`` names the fields
    ``Predictor.predict`` gives per input. ``int8_per_channel`` makes ONNX Runtime's dynamic INT8 start its
    fallback ladder at per-channel weight scales instead of per-tensor ones (:func:`compress.stages.quantize.candidate_plan`),
    for a task whose logits were measured to lose more to one scale per weight matrix.
    """

    name: str
    description: str
    auto_model: str
    head_suffix: str
    inputs: Mapping[str, tuple[str, ...]]
    outputs: Mapping[str, tuple[str, ...]]
    label_unit: str
    soft_labels: tuple[str, ...]
    metrics: tuple[str, ...]
    primary_metric: str
    predictor_returns: tuple[str, ...]
    score: Callable[..., dict[str, Any]] | None = None
    aliases: tuple[str, ...] = field(default_factory=tuple)
    int8_per_channel: bool = False
    #: The module holding the task's aspects (:mod:`compress.tasks.protocol`); the registering module's ``__name__``.
    package: str | None = None
    #: How people read the primary metric in messages and tables ("entity F1"); the metric's own name when unset.
    metric_label: str | None = None

    def aspect(self, name: str) -> Any:
        """This task's ``name`` aspect (``data``, ``training``, ``scoring``, ``decoding``): :func:`compress.tasks.protocol.aspect`."""
        from compress.tasks.protocol import aspect

        return aspect(self, name)

    def model_class(self):
        """The transformers Auto class (``AutoModelForTokenClassification``, ...); imports transformers now."""
        module = importlib.import_module("transformers")
        try:
            return getattr(module, self.auto_model)
        except AttributeError as exc:
            raise CompressError(f"task {self.name!r}: transformers {getattr(module, '__version__', '?')} has no "
                                f"{self.auto_model}. Install the pinned transformers version.") from exc

    def primary_label(self) -> str:
        """The primary metric as messages and tables name it."""
        return self.metric_label or self.primary_metric

    @property
    def has_labels(self) -> bool:
        """Whether an output has a label axis (``num_labels``): a sentence encoder's vector or a reader's spans do
        not, so a model's ``num_labels`` says nothing about them."""
        return any(LABELS in axes for axes in self.outputs.values())

    def has_head(self, architectures: list[str] | None) -> bool:
        """Whether a model config's ``architectures`` name a trained head of this task."""
        return any(str(a).endswith(self.head_suffix) for a in architectures or [])

    def dynamic_axes(self, input_names: list[str]) -> dict[str, dict[int, str]]:
        """``torch.onnx.export``'s ``dynamic_axes`` for these inputs and the task's outputs.

        Every axis but the label axis varies (a batch of any size, a sequence of any length).
        """
        axes: dict[str, dict[int, str]] = {}
        for name in input_names:
            axes[name] = {i: axis for i, axis in enumerate(self.inputs[name]) if axis != LABELS}
        for name, shape in self.outputs.items():
            axes[name] = {i: axis for i, axis in enumerate(shape) if axis != LABELS}
        return axes


_TASKS: dict[str, Task] = {}
_ALIASES: dict[str, str] = {}


def register_task(task: Task, replace: bool = False) -> Task:
    """Add ``task`` to the registry (``replace`` to overwrite one of the same name, e.g. in a test)."""
    taken = [n for n in (task.name, *task.aliases) if n in _ALIASES and _ALIASES[n] != task.name]
    if taken or (task.name in _TASKS and not replace):
        raise CompressError(f"task {task.name!r}: the name {(taken or [task.name])[0]!r} is already registered. "
                            "Choose another name, or pass replace=True.")
    if task.primary_metric not in task.metrics:
        raise CompressError(f"task {task.name!r}: primary metric {task.primary_metric!r} is not among its metrics "
                            f"{list(task.metrics)}.")
    _TASKS[task.name] = task
    for name in (task.name, *task.aliases):
        _ALIASES[name] = task.name
    return task


def unregister_task(name: str) -> None:
    """Remove a task (for tests that register a toy one)."""
    task = _TASKS.pop(_ALIASES.get(name, name), None)
    if task is not None:
        for alias in (task.name, *task.aliases):
            _ALIASES.pop(alias, None)


def get_task(name: str) -> Task:
    """The registered task called ``name`` (or one of its aliases), or one line listing the tasks there are."""
    key = _ALIASES.get(name)
    if key is None:
        raise CompressError(f"unknown task {name!r}. Known tasks: {', '.join(task_names())}.")
    return _TASKS[key]


def task_names() -> list[str]:
    """Registered task names, in registration order."""
    return list(_TASKS)


def task_for_architectures(architectures: list[str] | None) -> Task | None:
    """The task whose head a model config's ``architectures`` names, or ``None`` for a bare encoder."""
    for task in _TASKS.values():
        if task.has_head(architectures):
            return task
    return None
