"""A toy task whose model gives one vector per text (a bare encoder's token states, mean-pooled in numpy): the
decoding protocol's check that a task with a pooled vector instead of logits plugs into the runtime unchanged.

It is registered only while a test holds :func:`registered` (its head suffix, ``BertModel``, would otherwise make
every bare BERT in the session a model of this task).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator, Mapping

import numpy as np

from compress.core.errors import CompressError
from compress.tasks.registry import BATCH, SEQUENCE, Task, register_task, unregister_task
from compress.core.windows import pool_windows

NAME = "toy-mean-vectors"


def _batch_output(named: Mapping[str, np.ndarray], arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    mask = arrays["attention_mask"].astype(np.float32)[..., None]
    return (named["last_hidden_state"] * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)


def _combine_windows(windows: Any, rows: list[np.ndarray], pooling: str) -> list[np.ndarray]:
    return list(pool_windows(np.stack(rows), windows.sample, windows.n_samples, pooling)) if len(windows) else []


def _encode(predictor: Any, texts: Any, batch_size: int = 32) -> np.ndarray:
    return np.stack(predictor.outputs(texts, batch_size)).astype(np.float32)


def _not_served(*args: Any, **kwargs: Any) -> Any:
    raise CompressError("the toy vector task has no command line or server shape")


def _torch_model(folder: Any, allow_pickle: bool = False, eager_attention: bool = False) -> tuple[Any, Any, bool]:
    from compress.runtime.modeling import load_classifier

    return load_classifier(folder, allow_pickle=allow_pickle, eager_attention=eager_attention, task=NAME)


#: The task's aspects as one object each (a single-module task; compress.tasks.protocol.aspect reads attributes).
decoding = SimpleNamespace(
    batch_output=_batch_output, combine_windows=_combine_windows, encode=_encode,
    predict=lambda predictor, inputs, batch_size=32: _encode(predictor, inputs, batch_size),
    probe_inputs=lambda texts, pairs: list(texts), predict_command=_not_served, request_parameters=lambda: (),
    parse_request=_not_served, predict_batch=_not_served, format_results=_not_served, warm_request=_not_served,
    openapi_schemas=_not_served, torch_model=_torch_model, model_files=lambda folder: ())

TASK = Task(name=NAME, package=__name__, description="one mean-pooled vector per text (a test's toy)",
            auto_model="AutoModel", head_suffix="BertModel",
            inputs={"input_ids": (BATCH, SEQUENCE), "attention_mask": (BATCH, SEQUENCE),
                    "token_type_ids": (BATCH, SEQUENCE)},
            outputs={"last_hidden_state": (BATCH, SEQUENCE, "hidden")}, label_unit="text", soft_labels=("texts", "hidden"),
            metrics=("cosine",), primary_metric="cosine", predictor_returns=("vector",))


@contextlib.contextmanager
def registered() -> Iterator[Task]:
    """The toy task, registered for the duration of the block."""
    register_task(TASK)
    try:
        yield TASK
    finally:
        unregister_task(NAME)


def mark_as_toy(folder: Path) -> Path:
    """Record the toy task in ``folder``'s ``compress.json`` (a saved bare BERT becomes a model of it)."""
    (folder / "compress.json").write_text(json.dumps({"task": NAME, "complete": True}), encoding="utf-8")
    return folder
