"""The config engine: :class:`ConfigBase` (``from_dict`` / ``to_dict`` / ``problems``), type conversion, problems.

Every stage's config is a dataclass built on it (:mod:`compress.config.stage_configs`); see the package's
docstring for what it guarantees.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Collection, Mapping, Sequence, Union, get_args, get_origin, get_type_hints

from compress.config.choices import PRECISION_HELP
from compress.core.device import PRECISIONS, device_problem, precision_problem
from compress.core.errors import CompressError


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


def _helped(default: Any, help: str, **metadata: Any) -> Any:
    """A field whose ``--flag`` help is declared with it (``help`` in the field's metadata): for the settings
    several commands share (the optimiser, the data, distillation), so each help string lives in one place and
    every command that offers the flag, a generated one included, shows the same words."""
    return field(default=default, metadata={**metadata, "help": help})


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
    and ``--precision`` (where the stage has it) one of :data:`compress.core.device.PRECISIONS`."""
    problem = device_problem(cfg.device)
    problems = [_problem("device", problem)] if problem else []
    wrong = precision_problem(cfg.precision) if hasattr(cfg, "precision") else None
    return problems + ([_problem("precision", wrong)] if wrong else [])


def _precision() -> Any:
    """The ``precision`` field: declared here once (default ``auto``, the choices of
    :data:`compress.core.device.PRECISIONS`, the help :data:`PRECISION_HELP`) for every stage config that
    trains or runs a model; ``--precision`` is made from it (:func:`flag_options`). The stage decides
    what ``auto`` means on its device with :func:`compress.core.device.resolve_precision`."""
    return field(default="auto", metadata={**_choices(*PRECISIONS), "help": PRECISION_HELP})


def setting(cls: type, key: str) -> tuple[Any, Any, Any]:
    """``(field, default, type hint)`` of config ``cls``'s flat key ``key`` (a nested one through ``FLAT``: ``epochs``
    is ``train.epochs``). The default is the one ``cls()`` holds, so a nested setting gets the stage's own
    (the teacher's 2 epochs, distill's 3): what a flag made from it (``compress.cli``) offers."""
    parent, sub = cls.FLAT.get(key, (None, key))
    owner, value = cls, cls()
    if parent is not None:
        owner, value = cls._nested_class(get_type_hints(cls)[parent]), getattr(value, parent)
    f = next(f for f in dataclasses.fields(owner) if f.name == sub)
    return f, getattr(value, sub), get_type_hints(owner)[sub]


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


__all__ = ['setting', 'Problem', 'ConfigError', 'ConfigBase', 'canonical_sha256', 'flag_options']
