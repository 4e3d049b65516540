"""Artifact folders: what every stage writes and reads, written atomically.

An artifact is a folder with the model (``save_pretrained`` layout, or ``model.onnx``), the
tokenizer, and ``compress.json`` recording what made it: stage, config, parent artifact, data,
metrics, timings and package versions. A folder is written under a temporary name and renamed into
place only when complete, and ``compress.json`` carries ``"complete": true`` as the marker: a
half-written folder can never be mistaken for a model.

This module also checks model folders given by users (missing, empty, no weights, pickle weights,
not a BERT-family encoder) before anything heavier touches them.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

from compress.core.errors import CompressError
from compress.core.assets import sha256_file

META_FILE = "compress.json"
FORMAT = "bert-compress-artifact"
FORMAT_VERSION = 1
#: ``config.model_type`` values this toolkit distils, prunes and exports.
SUPPORTED_MODEL_TYPES = ("bert", "mpnet", "roberta", "xlm-roberta", "distilbert", "electra", "camembert")
SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")


def package_versions() -> dict[str, str]:
    """Versions of the packages whose behaviour shapes an artifact."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("bert-compress", "torch", "transformers", "datasets", "onnx", "onnxruntime", "torch-pruning"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out


def git_commit() -> str | None:
    """The commit of the bert-compress checkout in use, when it is one."""
    try:
        here = Path(__file__).resolve().parent
        result = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        return result.stdout.strip() or None if result.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def check_out_folder(out: str | os.PathLike, flag: str = "--out") -> Path:
    """Refuse, before any work, a path that cannot become a folder: under a regular file, where nothing may be
    created (``/proc``, a read-only disk, no permission), or an existing file. The check creates and removes an
    empty folder beside where ``out`` will be, the way :func:`write_folder_atomically` will write it."""
    path = Path(out).expanduser().absolute()
    if path.exists() and not path.is_dir():
        raise CompressError(f"{flag} {out} exists and is a file; give a folder path.")
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise CompressError(f"{flag} {out}: {parent} is a file, so no folder can be made under it. Give another path.")
    try:
        probe = Path(tempfile.mkdtemp(prefix=".bert-compress-probe-", dir=parent))
        probe.rmdir()
    except OSError as exc:
        raise CompressError(f"{flag} {out}: no folder can be made in {parent} ({exc.strerror or exc}). Give a path "
                            "you can write.") from exc
    return path


def write_folder_atomically(out: str | os.PathLike, fill: Callable[[Path], None]) -> Path:
    """Create a folder under a temporary sibling name and rename it to ``out`` once ``fill`` is done.

    An older folder at ``out`` is replaced only at that moment; on any failure the temporary folder
    is removed and ``out`` is left as it was. A full disk (ENOSPC) becomes a clear error.
    """
    out = Path(out).expanduser().resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and not out.is_dir():
        raise CompressError(f"--out {out} exists and is a file; give a folder path.")
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        fill(tmp)
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.replace(out, old)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno == 28:
            raise CompressError(f"disk full while writing {out}; nothing was replaced. Free space and run again.") from exc
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def write_artifact(out: str | os.PathLike, fill: Callable[[Path], None], meta: dict[str, Any]) -> Path:
    """Write an artifact folder atomically.

    ``fill(tmp)`` writes the model and tokenizer into a temporary sibling folder; ``meta`` is
    completed (format, versions, time, complete marker) and written as ``compress.json``; then the
    folder is renamed to ``out``, replacing an older artifact only at that moment.
    """

    def fill_and_describe(tmp: Path) -> None:
        fill(tmp)
        record = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "created": now_iso(),
            **meta,
            "versions": package_versions(),
            "git_commit": git_commit(),
            "complete": True,
        }
        with open(tmp / META_FILE, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=2, default=_json_default)
            handle.flush()
            os.fsync(handle.fileno())

    return write_folder_atomically(out, fill_and_describe)


def write_model_artifact(out: str | os.PathLike, model: Any, tokenizer: Any, meta: dict[str, Any]) -> Path:
    """:func:`write_artifact` for the usual case: a ``save_pretrained`` model (safetensors) and its
    tokenizer, with the weights' sha256 added to ``meta`` (later stages record it as their parent's)."""

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        meta["weights_sha256"] = weights_sha256(tmp)

    return write_artifact(out, fill, meta)


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def read_meta(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The ``compress.json`` of an artifact, or ``None`` for a plain model folder.

    Raises when the file exists but lacks the complete marker: an interrupted write.
    """
    path = Path(folder) / META_FILE
    if not path.exists():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CompressError(f"{path}: unreadable ({exc}). The artifact is damaged; produce it again.") from exc
    if not meta.get("complete"):
        raise CompressError(f"{path}: the artifact is incomplete (its write was interrupted). Produce it again.")
    return meta


def check_model_folder(folder: str | os.PathLike, allow_pickle: bool = False) -> dict[str, Any]:
    """Validate a Hugging Face model folder and return its ``config.json`` as a dict.

    Checks, in order: the folder exists and is not empty; it has ``config.json``; it has weights,
    in safetensors (pickle ``.bin`` files only with ``allow_pickle``); the model is BERT-family.
    """
    path = Path(folder)
    if not path.is_dir():
        raise CompressError(f"model folder {path} does not exist or is not a folder. Give the folder that "
                            "save_pretrained wrote (config.json + model.safetensors).")
    if not any(path.iterdir()):
        raise CompressError(f"model folder {path} is empty. Give the folder that save_pretrained wrote.")
    read_meta(path)  # refuses an interrupted artifact
    config_file = path / "config.json"
    if not config_file.exists():
        raise CompressError(f"{path} has no config.json: it is not a Hugging Face model folder. "
                            "Save the model with save_pretrained(), which writes config.json beside the weights.")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise CompressError(f"{config_file}: not valid JSON ({exc}). Re-save the model with save_pretrained().") from exc
    has_safe = any((path / name).exists() for name in SAFE_WEIGHTS)
    has_pickle = any((path / name).exists() for name in PICKLE_WEIGHTS)
    if not has_safe and not has_pickle:
        raise CompressError(f"{path} has a config.json but no weights (model.safetensors). Copy the weights into the "
                            "folder, or re-save the model with save_pretrained().")
    if not has_safe and has_pickle and not allow_pickle:
        raise CompressError(
            f"{path} holds only pickle weights (pytorch_model.bin), which can run code when loaded. Convert them "
            "to safetensors (model.save_pretrained(dir, safe_serialization=True)), or pass --allow-pickle to load "
            "them with torch.load(weights_only=True)."
        )
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise CompressError(
            f"{config_file}: model_type {model_type!r} is not a BERT-family encoder. bert-compress handles "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}; give a folder of one of those."
        )
    return config


def weights_sha256(folder: str | os.PathLike) -> str:
    """sha256 of a model folder's weight files: the identity of a model for caches and lineage."""
    import hashlib

    path = Path(folder)
    files = sorted(p for p in path.iterdir() if p.name.endswith((".safetensors", ".bin", ".onnx", ".pt")))
    if len(files) == 1:
        return sha256_file(files[0])
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode())
        digest.update(sha256_file(file).encode())
    return digest.hexdigest()


def folder_size_bytes(folder: str | os.PathLike, suffixes: tuple[str, ...] = (".safetensors", ".onnx", ".bin", ".pt")) -> int:
    """Bytes of the weight files in a folder (what a deployment ships, tokenizer aside)."""
    return sum(p.stat().st_size for p in Path(folder).iterdir() if p.name.endswith(suffixes))
