"""The stage registry: one :class:`Stage` per stage, the one place that says what a stage is.

A stage is a config dataclass (:class:`compress.config.ConfigBase`) and a function
``run(config, out) -> Path`` that writes one folder. Everything else the rest of the package needs
to know about it is a field of its :class:`Stage` here, read by

- :mod:`compress.pipeline` (recipes): the stage order, which recipe keys the pipeline fills in
  (:attr:`Stage.wire`: which earlier outputs become which settings), the output folder's name, how a
  finished output is recognised, resume for training stages, a fresh process for timing stages;
- :mod:`compress.run_stage`: the run function (an import path, resolved only when the stage runs,
  since most stages import torch) and the fresh-process environment;
- :mod:`compress.stages.fingerprint`: the settings that name what a stage reads (:attr:`Stage.reads`),
  whose content makes a finished stage current;
- :mod:`compress.cli`: the command's dispatch and what it prints; a registered stage without
  hand-written flags gets a command whose flags are its config's keys.

Adding a stage: write its config class (built-in ones live in :mod:`compress.config`) and its run
function, then add a :class:`Stage` to :data:`BUILTIN` below, or call :func:`register` from outside
the package (a plugin, a test). Its position in :data:`BUILTIN` (or ``after=``) is its place in a
recipe.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from compress.config import (BenchConfig, ConfigBase, DistillConfig, ExportConfig, GateConfig, OptimizeConfig,
                             PretrainConfig, PruneConfig, QuantizeConfig, TeacherConfig)
from compress.core.errors import CompressError
from compress.core.artifact import read_meta

if TYPE_CHECKING:
    from compress.config import DataOptions

#: How the content of a read input is fingerprinted (:mod:`compress.stages.fingerprint`): task data, a model
#: folder or built-in name (a list of them: one fingerprint each), an unlabelled corpus.
INPUT_KINDS = ("data", "model", "corpus")


@dataclass(frozen=True)
class Input:
    """One thing a stage reads: the config setting that names it and how its content is fingerprinted.

    ``field`` may be dotted (``student.init``). An unset value (``None``, ``""``) is not read. With a
    ``prefix``, the setting names an input only when it starts with it (``pretrained:PATH``), and
    the rest is the input.
    """

    field: str
    kind: str
    prefix: str = ""

    def value(self, config: ConfigBase) -> Any:
        """What ``config`` says this input is, or ``None`` when the stage does not read it this time."""
        value: Any = config
        for part in self.field.split("."):
            value = getattr(value, part, None)
        if not value:
            return None
        if self.prefix:
            if not isinstance(value, str) or not value.startswith(self.prefix):
                return None
            value = value[len(self.prefix):]
        return value


class Outputs:
    """What the stages before this one in a recipe wrote: the state :attr:`Stage.wire` reads.

    Each output is filed under the roles its stage :attr:`Stage.provides`: ``pytorch`` (a PyTorch
    fp32 classifier a later stage can start from), ``onnx`` (an fp32 ONNX graph), ``measured`` (an
    artifact the benchmark measures), ``encoder`` (an encoder a teacher is fine-tuned from).
    """

    def __init__(self, out: Path, data: "DataOptions"):
        self.out, self.data = out, data
        self._roles: dict[str, list[Path]] = {}

    def add(self, path: Path, roles: tuple[str, ...]) -> None:
        for role in roles:
            self._roles.setdefault(role, []).append(path)

    def latest(self, role: str) -> Path | None:
        found = self._roles.get(role)
        return found[-1] if found else None

    def all(self, role: str) -> list[Path]:
        return list(self._roles.get(role, ()))

    def folder(self, stage: str) -> Path:
        """Where ``stage`` writes in this recipe with its default settings (``OUT/teacher``), run or not:
        a recipe without a teacher stage uses the teacher an earlier run left there."""
        return self.out / get(stage).folder({})

    def teacher(self) -> Path:
        return self.folder("teacher")

    def model(self) -> Path:
        """The latest PyTorch fp32 model: the last distilled or pruned one, else the teacher."""
        return self.latest("pytorch") or self.teacher()


def artifact_complete(output: Path) -> bool:
    """An artifact folder is finished when its ``compress.json`` carries the complete marker."""

    try:
        return read_meta(output) is not None
    except CompressError:
        return False


def results_complete(output: Path) -> bool:
    """A benchmark is finished when its ``results.json`` exists (it is written last, atomically)."""
    return (output / "results.json").exists()


def never_complete(output: Path) -> bool:
    """A check (the gate) is never up to date: it always runs."""
    return False


def _no_wiring(outputs: Outputs, settings: Mapping[str, Any]) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Stage:
    """Everything the pipeline, ``run_stage``, the fingerprints and the CLI need to know about one stage."""

    name: str
    #: The stage's settings; its flat keys are the command's flags and the recipe section's keys.
    config: type[ConfigBase]
    #: ``"module:function"``; the function takes ``(config, out)`` and returns the folder it wrote, or,
    #: for a check such as the gate, an exit code (0 passed, 1 failed, 4 inconclusive).
    run: str
    #: The output's name under the recipe's ``out:``, or a function of the recipe section's settings.
    output: str | Callable[[Mapping[str, Any]], str]
    #: Input name -> the setting naming it: what a finished stage's identity fingerprints.
    reads: Mapping[str, Input] = field(default_factory=dict)
    #: Settings a recipe fills in from earlier outputs and the recipe's data (a recipe may not set them).
    wire: Callable[[Outputs, Mapping[str, Any]], dict[str, Any]] = _no_wiring
    #: The roles (see :class:`Outputs`) this stage's output fills for the stages after it.
    provides: tuple[str, ...] = ()
    #: Whether an output folder already there is finished (a re-run skips a finished, current stage).
    complete: Callable[[Path], bool] = artifact_complete
    #: Training stages resume from their last checkpoint when a recipe is run again after a kill.
    trains: bool = False
    #: Stages that time things: a recipe runs them in a fresh interpreter (the training stages' memory
    #: and thread pools do not colour the timings), and OpenMP's idle threads sleep
    #: (``OMP_WAIT_POLICY=PASSIVE`` before torch loads) so interleaved runtimes do not steal cores.
    timed: bool = False
    #: Stage -> why: other stages a recipe must have for this one.
    needs: Mapping[str, str] = field(default_factory=dict)
    #: Setting -> what to give: settings a recipe must set (unless the pipeline wires them).
    required: Mapping[str, str] = field(default_factory=dict)
    #: The command's line before the written path (``teacher artifact: runs/t``); ``None``: the stage prints its own.
    announce: str | None = None

    def folder(self, settings: Mapping[str, Any]) -> str:
        return self.output(settings) if callable(self.output) else self.output

    def runner(self) -> Callable[[Any, Path], Any]:
        """The run function, imported now (stages import torch; the registry must not)."""
        module, _, name = self.run.partition(":")
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
                raise  # the stage's module is there but needs a package that is not: that error is the news
            raise CompressError(f"stage {self.name!r}: cannot import its run function {self.run!r} ({exc}). Check "
                                "the Stage's run= (module:function).") from exc
        if not callable(getattr(found, name, None)):
            raise CompressError(f"stage {self.name!r}: {module} has no function {name!r} (run={self.run!r}). Check "
                                "the Stage's run= (module:function).")
        return getattr(found, name)


# ----------------------------------------------------------------------------- how the built-in stages are wired


def _data(o: Outputs, s: Mapping[str, Any]) -> dict[str, Any]:
    return {"data": o.data}


def _teacher_wire(o: Outputs, s: Mapping[str, Any]) -> dict[str, Any]:
    encoder = o.latest("encoder")  # a pretrain stage's masked LM is the encoder the teacher fine-tunes
    return {"data": o.data, **({"model": str(encoder)} if encoder else {})}


def _quantize_source(o: Outputs, s: Mapping[str, Any]) -> dict[str, Any]:
    onnx = o.latest("onnx")
    method = s.get("method", "ort-dynamic")  # ort-dynamic quantizes the exported graph; others start from PyTorch
    return {"model": str(onnx if method == "ort-dynamic" and onnx else o.model()), "data": o.data}


def _bench_wire(o: Outputs, s: Mapping[str, Any]) -> dict[str, Any]:
    artifacts = [str(p) for p in o.all("measured")] or [str(o.teacher())]
    return {"artifacts": artifacts, "reference": str(o.teacher()), "data": o.data}


def _gate_wire(o: Outputs, s: Mapping[str, Any]) -> dict[str, Any]:
    return {"results": str(o.folder("bench") / "results.json"), "junit": str(o.folder("gate"))}


_MODEL = {"model": Input("model", "model")}
_DATA = {"data": Input("data", "data")}

#: The built-in stages, in the order a recipe runs them.
BUILTIN: tuple[Stage, ...] = (
    # Continued masked-LM training: the teacher is fine-tuned from its output (compress.stages.pretrain).
    Stage("pretrain", PretrainConfig, "compress.stages.pretrain:pretrain", "pretrained",
          reads={**_DATA, **_MODEL, "unlabeled": Input("unlabeled", "corpus")},
          wire=_data, provides=("encoder",), trains=True, announce="masked-LM artifact",
          required={"model": "a model folder, or a built-in: minilm, mpnet-base"}),
    Stage("teacher", TeacherConfig, "compress.stages.teacher:train_teacher", "teacher", reads={**_DATA, **_MODEL},
          wire=_teacher_wire, trains=True, announce="teacher artifact",
          required={"model": "a model folder, or a built-in: minilm, mpnet-base"}),
    Stage("distill", DistillConfig, "compress.stages.distill.trainer:distill", "student",
          reads={**_DATA, "teacher": Input("teacher", "model"),
                 "init": Input("student.init", "model", prefix="pretrained:"),
                 "unlabeled": Input("unlabeled", "corpus")},
          wire=lambda o, s: {"teacher": str(o.teacher()), "data": o.data}, provides=("pytorch", "measured"),
          trains=True, announce="student artifact",
          needs={"teacher": "give teacher: {model: PATH} to load one"}),
    Stage("prune", PruneConfig, "compress.stages.prune:prune", "pruned",
          reads={**_DATA, **_MODEL, "teacher": Input("teacher", "model")},
          wire=lambda o, s: {"model": str(o.model()), "data": o.data}, provides=("pytorch", "measured"),
          trains=True, announce="pruned artifact"),
    Stage("export", ExportConfig, "compress.stages.export:export_stage", "onnx", reads=_MODEL,
          wire=lambda o, s: {"model": str(o.model())}, provides=("onnx", "measured")),
    Stage("quantize", QuantizeConfig, "compress.stages.quantize:quantize_stage",
          lambda s: "onnx-int8" if s.get("method", "ort-dynamic") == "ort-dynamic" else "torch-int8",
          reads={**_DATA, **_MODEL}, wire=_quantize_source, provides=("measured",)),
    # Every runtime of the latest PyTorch model measured here; a `choice` artifact the benchmark measures too.
    Stage("optimize", OptimizeConfig, "compress.stages.optimize:optimize", "optimized",
          reads={**_DATA, **_MODEL, "artifacts": Input("artifacts", "model")},
          wire=lambda o, s: {"model": str(o.model()), "data": o.data}, provides=("measured",), timed=True),
    Stage("bench", BenchConfig, "benchmarks.suite:bench", "bench",
          reads={**_DATA, "reference": Input("reference", "model"), "artifacts": Input("artifacts", "model")},
          wire=_bench_wire, complete=results_complete, timed=True),
    Stage("gate", GateConfig, "compress.pipeline:run_gate", "gate-junit.xml", wire=_gate_wire,
          complete=never_complete),
)

_REGISTRY: dict[str, Stage] = {s.name: s for s in BUILTIN}


def _check(stage: Stage) -> None:
    """A stage's declaration is consistent with its config: clear errors at registration, not mid-recipe."""
    if not isinstance(stage, Stage):
        raise CompressError(f"register() takes a compress.stages.registry.Stage, got {type(stage).__name__}")
    if not (isinstance(stage.config, type) and issubclass(stage.config, ConfigBase)
            and dataclasses.is_dataclass(stage.config)):
        raise CompressError(f"stage {stage.name!r}: config must be a ConfigBase dataclass (compress.config), got "
                            f"{stage.config!r}")
    if ":" not in stage.run:
        raise CompressError(f"stage {stage.name!r}: run={stage.run!r} must be 'module:function'")
    fields = {f.name for f in dataclasses.fields(stage.config)}
    if stage.trains and "resume" not in fields:
        raise CompressError(f"stage {stage.name!r} trains, so a recipe resumes it: {stage.config.__name__} needs a "
                            "resume: bool setting")
    for name, read in stage.reads.items():
        if read.kind not in INPUT_KINDS:
            raise CompressError(f"stage {stage.name!r}: input {name!r} has kind {read.kind!r}; use one of "
                                f"{', '.join(INPUT_KINDS)}")
        if read.field.split(".")[0] not in fields:
            raise CompressError(f"stage {stage.name!r}: input {name!r} reads {read.field!r}, which "
                                f"{stage.config.__name__} has no field for")


def register(stage: Stage, after: str | None = None) -> Stage:
    """Add a stage (from outside the package too); ``after``: the stage it follows in a recipe (default: last)."""
    global _REGISTRY
    _check(stage)
    if stage.name in _REGISTRY:
        raise CompressError(f"a stage called {stage.name!r} is registered already; unregister() it first")
    if after is not None and after not in _REGISTRY:
        raise CompressError(f"register({stage.name!r}, after={after!r}): no such stage; stages: {', '.join(_REGISTRY)}")
    items = list(_REGISTRY.values())
    at = len(items) if after is None else [s.name for s in items].index(after) + 1
    items.insert(at, stage)
    _REGISTRY = {s.name: s for s in items}
    return stage


def unregister(name: str) -> None:
    """Remove a registered stage (a test's toy stage after the test)."""
    get(name)
    del _REGISTRY[name]


def names() -> tuple[str, ...]:
    """The stage names in recipe order."""
    return tuple(_REGISTRY)


def all_stages() -> list[Stage]:
    return list(_REGISTRY.values())


def stage_configs() -> dict[str, type[ConfigBase]]:
    """Stage name -> its config class, in recipe order."""
    return {stage.name: stage.config for stage in _REGISTRY.values()}


def find(name: str) -> Stage | None:
    return _REGISTRY.get(name)


def get(name: str) -> Stage:
    stage = _REGISTRY.get(name)
    if stage is None:
        raise CompressError(f"no stage called {name!r}; stages: {', '.join(_REGISTRY)}")
    return stage


def for_config(config: ConfigBase) -> Stage | None:
    """The stage whose settings ``config`` is (``None`` for a config no stage owns, such as DataOptions)."""
    for stage in _REGISTRY.values():
        if type(config) is stage.config:
            return stage
    return None


__all__ = ["BUILTIN", "Input", "Outputs", "Stage", "all_stages", "artifact_complete", "find", "for_config", "get",
           "names", "never_complete", "register", "results_complete", "stage_configs", "unregister"]
