"""The ``decoding``-aspect protocol: what :class:`compress.runtime.predictor.Predictor`, ``bert-compress predict`` and
``bert-compress serve`` ask of a task (see :mod:`compress.tasks.protocol`).

The runtime holds what every task shares: tokenization, the windows of a long input (:mod:`compress.core.windows`),
length-sorted batches and the backends (PyTorch, ONNX Runtime, OpenVINO), each of which reads the outputs the task
names in :attr:`compress.tasks.registry.Task.outputs` and hands them to :meth:`PROTOCOL.batch_output`. What a row
means is the task's: how the rows of one input's windows combine (pooled, or merged token by token), what
``Predictor.predict`` returns and which settings it takes, how ``predict`` reads its inputs from the command line,
and the request and response shapes of the server (:mod:`compress.serving.schemas` checks the envelope and the
parameter names, the task reads ``inputs``).

A task's ``decoding`` module is imported by the torch-free ONNX runtime and by the server: numpy, the tokenizer
and :mod:`compress.serving.schemas` at most, no torch or transformers at its module level.

A new task plugs in with a ``decoding`` module defining every member below. A task whose model gives one vector per
input (a sentence encoder) names that output (or the ``last_hidden_state`` it pools) in ``Task.outputs``, pools it in
:meth:`~PROTOCOL.batch_output` (it is handed the batch's ``attention_mask``), combines windows by
:func:`compress.core.windows.pool_windows` in :meth:`~PROTOCOL.combine_windows` and returns the ``(n, dim)`` float32
vectors from :meth:`~PROTOCOL.encode`; the three tasks here give labels, tags and spans, and their ``encode``
refuses in one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np


class PROTOCOL(Protocol):
    """The members every task's ``decoding`` aspect provides."""

    # -- the runtime (compress.runtime.predictor.Predictor)

    def batch_output(self, named: Mapping[str, np.ndarray], arrays: Mapping[str, np.ndarray]) -> np.ndarray:
        """One model batch's outputs as the one float32 array whose rows the runtime hands out per window.

        ``named`` holds each output of ``Task.outputs`` by name (float32, batch first), ``arrays`` the batch's
        inputs (``input_ids``, ``attention_mask``, ...). A classifier returns its ``logits`` ``(batch, labels)``, a
        tagger its ``(batch, sequence, labels)``, a span reader its start and end logits stacked as ``(batch,
        sequence, 2)``. An array of more than two axes is per token: each window's row is cut to its own tokens."""

    def combine_windows(self, windows: Any, rows: list[np.ndarray], pooling: str) -> list[np.ndarray]:
        """Each input's output from the rows of its windows (:class:`compress.core.windows.Windows`, rows in window
        order): a per-input row pooled over its windows by ``pooling`` (``mean``/``max``), or per-token rows merged
        (each token from the window where it has most context). ``Predictor.outputs`` returns this; comparing two
        artifacts of one model uses it."""

    def torch_model(self, folder: Path, allow_pickle: bool = False, eager_attention: bool = False
                    ) -> tuple[Any, Any, bool]:
        """``(model, tokenizer, has_trained_head)`` of a PyTorch fp32 folder of this task, the module whose outputs
        ``Task.outputs`` names (a transformers head, or a sentence encoder with its pooling inside): what
        ``Predictor`` runs and ``export`` traces. ``eager_attention``: the attention ONNX Runtime fuses. Imports
        torch inside (the ONNX runtime never calls it)."""

    def model_files(self, folder: Path) -> tuple[str, ...]:
        """Paths (relative to ``folder``, files or folders) beside the weights that other tools read to use the model
        (a sentence-transformers pipeline: ``modules.json``, ``1_Pooling/``), carried into every artifact made from
        it; ``()`` for a task whose model is described by ``config.json`` alone."""

    def predict(self, predictor: Any, inputs: Any, batch_size: int = 32, **options: Any) -> Any:
        """``Predictor.predict``: this task's answer for ``inputs``, with the settings it takes as ``options``
        (a tagger's ``aggregation``/``word_tags``, a reader's ``n_best``/``max_answer_length``/``null_threshold``);
        one line naming a setting this task refuses."""

    def encode(self, predictor: Any, texts: Any, batch_size: int = 32) -> np.ndarray:
        """``Predictor.encode``: one float32 vector per input, ``(n, dim)``, for a task whose model gives one (a
        sentence encoder); a task whose model gives labels, tags or spans refuses in one line."""

    def probe_inputs(self, texts: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[Any]:
        """Inputs of this task's kind for a cheap output-level comparison of two artifacts (quantize without data),
        chosen from the export's parity ``texts`` and text ``pairs``."""

    # -- bert-compress predict

    def predict_command(self, predictor: Any, args: argparse.Namespace,
                        read_texts: Callable[[Sequence[str]], list[str]]) -> list[str]:
        """The lines ``bert-compress predict`` prints for ``predictor`` from its parsed flags ``args`` (``texts``,
        ``aggregation``, ``question``, ...); ``read_texts`` reads positional texts (``-``: standard input) and
        refuses an empty one. A flag of another task that would change nothing is refused in one line."""

    # -- bert-compress serve (compress.serving.schemas)

    def request_parameters(self) -> tuple[str, ...]:
        """The names ``parameters`` of a request may hold (another name is answered 422)."""

    def parse_request(self, inputs: Any, parameters: dict[str, Any], defaults: Mapping[str, Any]) -> Any:
        """A request's ``inputs`` and ``parameters`` (names already checked) as a
        :class:`compress.serving.schemas.Parsed`, or :class:`compress.serving.schemas.BadInput` naming the field.
        ``defaults`` holds the server's settings of the parameters (``aggregation``: a tagger's default). Its
        ``key`` holds the settings of the model call (requests share a batch only when theirs are equal) and is
        handed back to :meth:`predict_batch`."""

    def predict_batch(self, predictor: Any, key: tuple[Any, ...], inputs: list[Any], batch_size: int) -> list[Any]:
        """One raw result per input of one server batch (all of one ``key``), in order."""

    def format_results(self, parsed: Any, raw: Sequence[Any], label_names: Sequence[str]) -> Any:
        """The JSON answer to one request (:class:`~compress.serving.schemas.Parsed`) from its inputs' raw results,
        in the transformers pipeline's shape for this task (one result for a single input)."""

    def warm_request(self) -> Any:
        """The ``inputs`` of one request the server sends itself to warm the model up before ``/ready``."""

    def openapi_schemas(self, label_names: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """JSON schemas for ``/openapi.json``: one input, the ``parameters`` properties, and the answer."""
