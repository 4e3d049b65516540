"""Each artifact's predictions on a split, kept on disk so that ``tools.studies.compare`` rebuilds a table cheaply.

A decision table is read many times: another row is added, the baseline changes, ``--trend`` is asked for. The
models behind it do not change, so their predictions are computed once: a classifier's label ids or
probabilities (``.npy``), a tagger's word tags (``.json``); ``tools.studies.origins`` keys them by the texts it samples. The key is the artifact's weights, its ``compress.json`` (which holds the windows
and stride ``Predictor`` reads with) and the data's fingerprint, so a retrained model, a changed record or other
data never reads another's predictions. :data:`VERSION` is part of the key too: raise it when the serving path
changes what a model predicts. A file is written whole or not at all (a temporary file, then ``os.replace``).

A study script, not a feature: it lives in ``tools/studies`` (not installed) and runs from a checkout.
Produced: docs/protocol.md, no table of its own: the cache under the tables of ``tools.studies.compare`` and
``tools.studies.origins``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from compress.core.artifact import META_FILE, read_meta, weights_sha256
from compress.core.assets import cache_dir

#: Part of every key: raising it retires every cached prediction at once.
VERSION = 2


class LazyPredictor:
    """``Predictor.load(path)``, done the first time it is called: a model whose predictions are all cached is
    never loaded."""

    def __init__(self, path: Path):
        self.path, self._predictor = Path(path), None

    def __call__(self) -> Any:
        if self._predictor is None:
            from compress.runtime.predictor import Predictor

            self._predictor = Predictor.load(self.path)
        return self._predictor


def cache_key(path: Path, fingerprint: str) -> str:
    """The key of ``path``'s predictions on the data whose fingerprint is ``fingerprint``."""
    meta_file = Path(path) / META_FILE
    weights = (read_meta(path) or {}).get("weights_sha256") or weights_sha256(path)
    record = hashlib.sha256(meta_file.read_bytes()).hexdigest() if meta_file.exists() else "-"
    return hashlib.sha256(f"{VERSION}|{weights}|{record}|{fingerprint}".encode()).hexdigest()[:32]


def _save_array(file: Path, value: np.ndarray) -> None:
    with open(file, "wb") as handle:
        np.save(handle, np.asarray(value), allow_pickle=False)


def _load_array(file: Path) -> np.ndarray:
    return np.load(file, allow_pickle=False)


def _save_tags(file: Path, value: list[list[str]]) -> None:
    file.write_text(json.dumps(value), encoding="utf-8")


def _load_tags(file: Path) -> list[list[str]]:
    return json.loads(file.read_text(encoding="utf-8"))


#: kind -> (file suffix, save, load)
_CODECS: dict[str, tuple[str, Callable[[Path, Any], None], Callable[[Path], Any]]] = {
    "labels": (".npy", _save_array, _load_array),
    "probabilities": (".npy", _save_array, _load_array),
    "tags": (".json", _save_tags, _load_tags),
}


def cached(key: str, split: str, kind: str, compute: Callable[[], Any]) -> Any:
    """The ``kind`` (``labels``, ``probabilities`` or ``tags``) predictions stored under ``key`` for ``split``, from ``compute()``
    the first time."""
    suffix, save, load = _CODECS[kind]
    folder = cache_dir() / "predictions"
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / f"{key}-{split}-{kind}{suffix}"
    if file.exists():
        return load(file)
    value = compute()
    tmp = file.with_name(f"{file.name}.{os.getpid()}.tmp")
    save(tmp, value)
    os.replace(tmp, file)  # whole or absent
    return value
