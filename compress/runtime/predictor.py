"""One way to run every artifact kind: ``Predictor.load(folder).predict(texts)``.

The benchmark, the quantization accuracy check and ``bert-compress predict`` all need to run a
model without caring whether it is a PyTorch fp32 folder, a PyTorch dynamic-INT8 folder or an ONNX
graph (fp32 or INT8). Putting tokenization, batching and dynamic padding in one place means the
kinds are compared on identical inputs: same tokenizer, same windows for long texts
(:mod:`compress.core.windows`), same padding, so any difference in the outputs comes from the model, not
from how it was fed.

Artifact kinds (``compress.json`` ``"kind"``, or detected from the files when there is none):

- ``pytorch``    ``model.safetensors`` loaded with ``from_pretrained`` (a plain HF folder is this too)
- ``torch-int8`` ``model_int8.safetensors`` written by :mod:`compress.stages.quantize` (rebuilt, no pickle)
- ``onnx-fp32``  ``model.onnx`` written by :mod:`compress.stages.export`
- ``onnx-int8``  ``model.onnx`` with integer operators, written by :mod:`compress.stages.quantize`
- ``torch-bf16`` ``model.safetensors`` in bfloat16 (:mod:`compress.runtime.formats.bf16`), run in bf16
- ``openvino-fp32`` / ``openvino-int8``  ``openvino_model.xml`` + ``.bin``, an OpenVINO IR (NNCF INT8 for the
  second), written by :mod:`compress.stages.quantize` (:mod:`compress.runtime.formats.openvino`); optional dependency
- ``choice``     a folder pointing at the fastest artifact per batch size (:mod:`compress.runtime.formats.choice`),
  written by ``bert-compress optimize``
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence, Union

import numpy as np

from compress.core.artifact import folder_size_bytes, read_meta
from compress.core.errors import CompressError
from compress.runtime.formats.onnx import ONNX_FILE, is_int8_graph
from compress.runtime.formats.openvino import OPENVINO_KINDS, OPENVINO_XML
from compress.runtime.formats.torch_int8 import TORCH_INT8_FILE
from compress.core.windows import (DEFAULT_POOLING, POOLINGS, Windows, check_pooling, check_stride, default_stride,
                              encode_windows, length_sorted_batches, pad_rows, pool_windows)
from compress.core.machine import machine_info
from compress.core.device import check_device_spec, device_name, resolve_device, resolve_precision
from compress.runtime.formats.bf16 import is_bf16_weights, load_bf16
from compress.runtime.formats.choice import pick, read_choice
from compress.runtime.formats.openvino import compile_ir, is_int8_ir
from compress.runtime.formats.torch_int8 import load_torch_int8
from compress.runtime.modeling import (accepts_token_types, autocast, count_parameters, load_tokenizer, model_device,
                                       named_outputs, position_limit)
from compress.core.signal_stack import ensure_signal_stack
from compress.tasks import get_task
from compress.tasks.task_choice import head_task
from compress.runtime.tokenization import ArtifactConfig, ArtifactTokenizer

KINDS = ("pytorch", "torch-int8", "onnx-fp32", "onnx-int8", "torch-bf16", "choice") + OPENVINO_KINDS

Text = Union[str, tuple[str, str]]


def artifact_kind(folder: str | os.PathLike) -> str:
    """The kind of model a folder holds: ``compress.json`` says so, else the files do."""
    path = Path(folder)
    meta = read_meta(path)
    if meta and meta.get("kind") in KINDS:
        return meta["kind"]
    if (path / ONNX_FILE).exists():
        return "onnx-int8" if is_int8_graph(path / ONNX_FILE) else "onnx-fp32"
    if (path / TORCH_INT8_FILE).exists():
        return "torch-int8"
    if (path / OPENVINO_XML).exists():
        return "openvino-int8" if is_int8_ir(path / OPENVINO_XML) else "openvino-fp32"

    if is_bf16_weights(path):
        return "torch-bf16"
    return "pytorch"


def default_max_length(tokenizer, config: Any, meta: dict[str, Any] | None) -> int:
    """The truncation length an artifact was made for.

    The stage that trained the model recorded ``max_length`` in its config; later stages copy it.
    Without it, the tokenizer's limit, capped by the position table (a bigger value would index
    past the position embeddings and crash or, worse, read garbage in an ONNX graph).
    """
    value = recorded_setting(meta, "max_length", lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0)
    limit = getattr(tokenizer, "model_max_length", None)
    limit = limit if isinstance(limit, int) and 0 < limit < 100_000 else 512
    positions = position_limit(config)
    cap = min(limit, positions) if positions else limit
    return min(value, cap) if value else cap


def recorded_setting(meta: dict[str, Any] | None, key: str, valid: Callable[[Any], bool] = lambda v: v is not None) -> Any:
    """``key`` as the artifact recorded it: in ``compress.json`` itself, its stage config, or its parent's
    config (later stages copy what the training stage used), the first ``valid`` value; else ``None``."""
    meta = meta or {}
    for source in (meta, meta.get("config") or {}, (meta.get("parent_meta") or {}).get("config") or {}):
        value = source.get(key) if isinstance(source, dict) else None
        if valid(value):
            return value
    return None


#: How an artifact reads its inputs (the windows of inputs longer than its window; a SQuAD 2.0 reader's null
#: threshold), recorded by the stage that trained it (top level of ``compress.json``) and carried by every artifact
#: made from it (export, quantize, optimize).
READING_KEYS = ("stride", "pooling", "allow_null", "null_threshold")


def reading_settings(parent_meta: dict[str, Any] | None) -> dict[str, Any]:
    """The :data:`READING_KEYS` a parent artifact recorded, for its derived artifact's ``compress.json``."""
    return {k: parent_meta[k] for k in READING_KEYS if k in (parent_meta or {})}


def normalize_texts(texts: Text | Sequence[Text]) -> tuple[list[str], list[str] | None]:
    """Split inputs into first and (for sentence pairs) second texts, refusing mixed or empty input."""
    if isinstance(texts, str) or (isinstance(texts, tuple) and len(texts) == 2 and all(isinstance(t, str) for t in texts)):
        texts = [texts]  # one text, or one pair
    if isinstance(texts, (bytes, bytearray, dict)) or not hasattr(texts, "__iter__"):
        hint = " (decode bytes first: data.decode('utf-8'))" if isinstance(texts, (bytes, bytearray)) else ""
        raise CompressError(f"predict: got a {type(texts).__name__}, not a text or a list of texts{hint}; give a "
                            "string, a (text, pair) tuple, or a list of either.")
    items = list(texts)
    firsts: list[str] = []
    seconds: list[str] = []
    pairs = [isinstance(t, (tuple, list)) for t in items]
    if any(pairs) and not all(pairs):
        raise CompressError("predict: the inputs mix single texts and (text, pair) tuples; give one kind throughout.")
    for i, item in enumerate(items):
        if isinstance(item, (tuple, list)):
            if len(item) != 2 or not all(isinstance(t, str) for t in item):
                raise CompressError(f"predict: input {i} is {item!r}; a sentence pair is a (text, pair) tuple of two strings.")
            firsts.append(item[0])
            seconds.append(item[1])
        elif isinstance(item, str):
            firsts.append(item)
        else:
            raise CompressError(f"predict: input {i} is a {type(item).__name__}, not a string; give texts or (text, pair) tuples.")
    return firsts, (seconds if pairs and all(pairs) else None)


def encode_batches(tokenizer, texts: Text | Sequence[Text], max_length: int, batch_size: int,
                   need_token_types: bool) -> tuple[int, list[tuple[np.ndarray, dict[str, np.ndarray]]]]:
    """Tokenize, sort by length and pad each batch to its own longest row, one row per text: a text
    longer than ``max_length`` is cut there (:meth:`Predictor.logits` windows it instead).

    Returns ``(n, batches)`` where each batch is ``(row_indices, arrays)``; writing a batch's
    outputs at ``row_indices`` restores the caller's order. For inputs of a fixed shape per text: export's
    parity check, whose texts fit the window (calibration batches and the traffic benchmark's requests read
    long texts in windows through :meth:`Predictor.window_batches` instead).
    """
    if not _is_count(batch_size):
        raise CompressError(f"--batch-size must be a whole number of at least 1, got {batch_size!r}.")
    firsts, seconds = normalize_texts(texts)
    if not firsts:
        return 0, []
    args = (firsts, seconds) if seconds is not None else (firsts,)
    enc = tokenizer(*args, truncation=True, max_length=max_length)
    ids = enc["input_ids"]
    types = enc.get("token_type_ids")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    batches = [(idx, pad_rows([ids[i] for i in idx], [types[i] for i in idx] if types is not None else None, pad_id,
                              need_token_types))
               for idx in length_sorted_batches([len(x) for x in ids], batch_size)]
    return len(firsts), batches


def artifact_task(meta: dict[str, Any] | None, config: Any) -> str:
    """The task an artifact's model is for: ``compress.json``'s ``task`` (or its parent's; an alias such as ``ner``
    is read as the registered name), else the head its config's ``architectures`` name, else sequence
    classification (what artifacts were before tasks)."""

    meta = meta or {}
    recorded = meta.get("task") or (meta.get("parent_meta") or {}).get("task")
    if isinstance(recorded, str) and recorded:
        try:
            return get_task(recorded).name
        except CompressError:  # a task this install does not know: said where it is served or decoded
            return recorded
    # a classifier and a regression head share their class: head_task tells them apart by the config
    values = config if isinstance(config, dict) else (config.to_dict() if hasattr(config, "to_dict") else vars(config))
    head = head_task(values)
    return head.name if head else "sequence-classification"


def _config_json(path: Path) -> dict[str, Any]:
    """A folder's ``config.json`` as a dict (empty when unreadable: the loader reports that)."""
    import json

    try:
        value = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _is_count(value: Any) -> bool:
    """A whole number of at least 1 (``True`` and ``2.0`` are not: they hide a caller's mix-up)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value >= 1


class Predictor:
    """A loaded artifact of any kind, predicting labels for texts.

    Use :meth:`load`; subclasses implement only ``_run`` (one padded batch in, logits out).
    """

    kind: str = ""
    #: Where the model runs: ``cpu`` or ``cuda:N``.
    device: str = "cpu"
    #: ONNX Runtime's execution provider actually used (``CPUExecutionProvider``, ``CUDAExecutionProvider``);
    #: ``None`` for PyTorch kinds.
    provider: str | None = None
    #: The autocast precision a PyTorch fp32 (``pytorch``) artifact runs in (fp32, bf16 or fp16), as
    #: ``--precision`` decided it (:class:`compress.core.device.PrecisionChoice`); ``None`` for the kinds whose
    #: precision the artifact fixes (INT8, bf16 weights, ONNX).
    precision: str | None = None

    def __init__(self, path: Path, tokenizer, config: Any, meta: dict[str, Any] | None, max_length: int | None,
                 need_token_types: bool, num_parameters: int | None):
        self.path = path
        self.tokenizer = tokenizer
        self.config = config
        self.meta = meta or {}
        if max_length is not None:
            positions = position_limit(config)
            if not _is_count(max_length) or (positions and max_length > positions):
                raise CompressError(f"--max-length {max_length!r}: {path} runs sequences of 1 to "
                                    f"{positions or 'any number of'} tokens (its position table); give a whole "
                                    "number in that range, or leave it out to use the artifact's own.")
        self.max_length = max_length or default_max_length(tokenizer, config, meta)
        self.need_token_types = need_token_types
        self.num_parameters = num_parameters
        self.size_bytes = folder_size_bytes(path)
        id2label = getattr(config, "id2label", None) or {}
        self.num_labels = int(getattr(config, "num_labels", len(id2label) or 2))
        self.label_names = [str(id2label.get(i, id2label.get(str(i), i))) for i in range(self.num_labels)]
        #: The compress.tasks name of what the model predicts: compress.json says, else config.json's architectures.
        self.task = artifact_task(self.meta, config)
        self._decoding: Any = None
        self.set_windows()

    @property
    def decoding(self) -> Any:
        """The ``decoding`` aspect of the model's task (:mod:`compress.tasks.protocol.decoding`): what its outputs
        mean, and what :meth:`predict` and the server return."""
        if self._decoding is None:
            self._decoding = get_task(self.task).aspect("decoding")
        return self._decoding

    @property
    def output_names(self) -> list[str]:
        """The model outputs a backend reads, in the task's order (:attr:`compress.tasks.registry.Task.outputs`)."""
        return list(get_task(self.task).outputs)

    def _batch_output(self, named: dict[str, np.ndarray], arrays: dict[str, np.ndarray]) -> np.ndarray:
        """A backend's named outputs of one batch as the one array :meth:`run_windows` cuts (the task's rule)."""
        return self.decoding.batch_output(named, arrays)

    def set_windows(self, stride: int | None = None, pooling: str | None = None) -> "Predictor":
        """How a text longer than ``max_length`` is read: windows overlapping by ``stride`` tokens, whose logits
        are pooled by ``pooling`` (:mod:`compress.core.windows`); returns ``self``.

        Unset, each is what the artifact recorded (``stride``/``pooling`` in ``compress.json`` or its
        config, as for ``max_length``; a recorded stride that does not fit this ``max_length`` is not
        used), else ``max_length // 4`` (:func:`compress.core.windows.default_stride` says why) and ``mean``.
        ``.stride`` and ``.pooling`` say what is used; the benchmark records them.
        """
        if stride is None:
            recorded = recorded_setting(self.meta, "stride")
            fits = isinstance(recorded, int) and not isinstance(recorded, bool) and 0 <= recorded < self.max_length - 2
            stride = recorded if fits else default_stride(self.max_length)
        self.stride = check_stride(stride, self.max_length)
        self.pooling = check_pooling(pooling or recorded_setting(self.meta, "pooling", lambda v: v in POOLINGS)
                                     or DEFAULT_POOLING)
        return self

    @classmethod
    def load(cls, folder: str | os.PathLike, threads: int | None = None, max_length: int | None = None,
             allow_pickle: bool = False, spinning: bool = True, device: str | None = None,
             precision: str = "fp32", announce: bool = False, stride: int | None = None,
             pooling: str | None = None) -> "Predictor":
        """Open any artifact folder; ``threads`` fixes the intra-op thread count (benchmarks need it fixed).

        Texts longer than ``max_length`` are split into windows overlapping by ``stride`` tokens and
        their logits pooled by ``pooling`` (``mean`` or ``max``); see :meth:`set_windows` for the defaults.

        ``device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``; ``None``: the CPU): PyTorch kinds are moved
        there (PyTorch dynamic INT8 has CPU kernels only and stays on the CPU, with a warning); ONNX
        kinds ask ONNX Runtime for ``CUDAExecutionProvider`` on a cuda device (or ``auto``) when it is
        available, else run on ``CPUExecutionProvider`` (a warning names onnxruntime-gpu). ``.device``
        and ``.provider`` say what was actually used.

        ``precision`` (``--precision auto|fp32|bf16|fp16``) is the autocast a ``pytorch`` artifact runs
        under, decided for its device (:func:`compress.core.device.resolve_precision`; ``announce`` prints the
        decision to stderr); other kinds ignore it. The default, fp32, runs the model as saved.

        ``spinning=False`` makes ONNX Runtime's idle threads sleep instead of busy-waiting for the
        next call: slightly slower for a lone model on a dedicated machine, but it stops one
        runtime from stealing the cores of another that runs next (the benchmark interleaves them).
        """
        path = Path(folder)
        if not path.is_dir():
            raise CompressError(f"--model {path} does not exist or is not a folder. Give an artifact folder "
                                "(from teacher, distill, export or quantize) or a save_pretrained folder.")
        if threads is not None and not _is_count(threads):
            raise CompressError(f"--threads must be a whole number of at least 1, got {threads!r}.")
        if device is not None:
            check_device_spec(device)
        if pooling is not None:
            check_pooling(pooling)  # before the model is opened: a typo should not cost a load
        kind = artifact_kind(path)
        if kind == "choice":
            opened: Predictor = ChoicePredictor._open(path, threads, max_length, allow_pickle, spinning, device, precision)
        elif kind in ("onnx-fp32", "onnx-int8"):
            opened = OnnxPredictor._open(path, kind, threads, max_length, spinning, device)
        elif kind in OPENVINO_KINDS:
            opened = OpenVinoPredictor._open(path, kind, threads, max_length, spinning, device)
        else:
            opened = TorchPredictor._open(path, kind, threads, max_length, allow_pickle, device, precision, announce)
        return opened.set_windows(stride, pooling)

    def logits(self, texts: Text | Sequence[Text], batch_size: int = 32) -> np.ndarray:
        """Raw logits, one row per input, in the input order.

        A text longer than ``max_length`` is not cut: its windows run in the same length-sorted batches
        as the other inputs and their logits are pooled (``.pooling``); a text that fits is one window,
        fed exactly as a truncating tokenizer call would feed it.
        """
        windows = self.windows(texts)
        if not len(windows):
            return np.zeros((0, self.num_labels), dtype=np.float32)
        return pool_windows(np.stack(self.run_windows(windows, batch_size)), windows.sample, windows.n_samples,
                            self.pooling)

    def outputs(self, texts: Text | Sequence[Text], batch_size: int = 32) -> list[np.ndarray]:
        """The model's output per input, for any task, its windows combined as the task says
        (:meth:`compress.tasks.protocol.decoding.PROTOCOL.combine_windows`): a classifier's logit row (as
        :meth:`logits`), a tagger's ``(tokens, labels)`` logits with its windows merged (each token from the window
        where it has most context), a span reader's ``(passage tokens, 2)`` start and end logits merged the same
        way. For comparing two artifacts of one model, whatever its head."""
        windows = self.windows(texts)
        return self.decoding.combine_windows(windows, self.run_windows(windows, batch_size) if len(windows) else [],
                                             self.pooling)

    def encode(self, texts: Text | Sequence[Text], batch_size: int = 32) -> np.ndarray:
        """One float32 vector per input, ``(n, dim)``, for a model whose task gives one (a sentence encoder:
        :meth:`compress.tasks.protocol.decoding.PROTOCOL.encode`); a classifier, tagger or reader refuses."""
        return self.decoding.encode(self, texts, batch_size)

    def windows(self, texts: Text | Sequence[Text]) -> Windows:
        """``texts`` (or ``(text, pair)`` tuples: the second is windowed) cut into this model's windows."""
        firsts, seconds = normalize_texts(texts)
        return encode_windows(self.tokenizer, firsts, seconds, max_length=self.max_length, stride=self.stride)

    def run_windows(self, windows: Windows, batch_size: int = 32) -> list[np.ndarray]:
        """The model's output for every window, in window order, ``batch_size`` windows to a batch: a logit
        row for a classifier on the whole text, a ``(window tokens, labels)`` array trimmed of padding for a
        head on every token (merge those with :func:`compress.core.windows.merge_token_outputs`)."""
        rows: list[np.ndarray] = [np.zeros(0)] * len(windows)
        for idx, arrays in self.window_batches(windows, batch_size):
            out = self._run(arrays)
            for row, w in enumerate(idx):
                rows[w] = out[row, :len(windows.input_ids[w])] if out.ndim > 2 else out[row]
        return rows

    def window_batches(self, windows: Windows, batch_size: int) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """``(window indices, arrays)`` batches this model takes: length-sorted, padded with its pad token."""
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        return windows.batches(batch_size, pad_id, self.need_token_types)

    def predict(self, texts: Any, batch_size: int = 32, **options: Any) -> Any:
        """What the model's task answers for ``texts``, with the settings it takes as ``options``
        (:meth:`compress.tasks.protocol.decoding.PROTOCOL.predict`).

        A classifier: ``(labels, probabilities)``, the label name and the softmax over labels for each input.

        A span reader (``question-answering``): ``texts`` are ``(question, passage)`` tuples, and the
        result one dict per question, ``{"question", "answer", "start", "end", "score"}`` with character
        offsets into the passage (:mod:`compress.tasks.question_answering.decoding`); ``n_best=`` and
        ``max_answer_length=`` set its span search and ``null_threshold=`` when a SQuAD 2.0 reader answers nothing
        (default: the one recorded in its ``compress.json``;
        :func:`compress.tasks.question_answering.decoding.answer_questions`), and the windows' overlap (the doc
        stride) is ``stride`` (:meth:`set_windows`).

        A tagger (``token-classification``): a list with one dict per text,
        ``{"text", "entities": [{"type", "start", "end", "text", "score"}, ...]}``, character offsets
        into the text; ``aggregation=`` (``first``, ``average``, ``max``) is how a word's sub-tokens
        become its tag, and ``word_tags=True`` adds ``words``, ``word_tags`` and ``word_scores`` (words are
        split by whitespace; :mod:`compress.tasks.token_classification.decoding` gives the rules).
        """
        return self.decoding.predict(self, texts, batch_size, **options)

    def forward(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """Logits for one already tokenized and padded batch (``input_ids``, ``attention_mask``, ...).

        The benchmark times this, so every artifact kind is measured on identical arrays with
        tokenization left out.
        """
        return self._run(arrays)

    def _run(self, arrays: dict[str, np.ndarray]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(kind={self.kind!r}, path={str(self.path)!r}, max_length={self.max_length}, "
                f"stride={self.stride}, pooling={self.pooling!r})")


class TorchPredictor(Predictor):
    """PyTorch fp32 (``from_pretrained``) or dynamic INT8 (rebuilt from ``model_int8.safetensors``)."""

    @classmethod
    def _open(cls, path: Path, kind: str, threads: int | None, max_length: int | None,
              allow_pickle: bool, device: str | None = None, precision: str = "fp32",
              announce: bool = False) -> "TorchPredictor":
        try:
            import torch
            import transformers  # noqa: F401  (the loaders below need it; say so before they fail)
        except ImportError as exc:
            raise CompressError(f"{path} is a {kind} artifact, which needs torch and transformers ({exc}). The "
                                "serving install (requirements-serve.txt) runs ONNX artifacts only: export this one "
                                "with bert-compress export (and quantize), or install the full toolkit.") from exc

        if threads is not None:
            torch.set_num_threads(threads)  # process-wide in PyTorch: there is no per-model setting
        meta = read_meta(path)
        if kind == "torch-int8":
            model = load_torch_int8(path)
            tokenizer = load_tokenizer(path, model.config.vocab_size)
            params = (meta or {}).get("parameters")
        elif kind == "torch-bf16":
            model, tokenizer = load_bf16(path, allow_pickle=allow_pickle)
            params = count_parameters(model)
        else:
            task = get_task(artifact_task(meta, _config_json(path)))
            model, tokenizer, has_head = task.aspect("decoding").torch_model(path, allow_pickle=allow_pickle)
            if not has_head:
                raise CompressError(f"{path}: the model has no trained classification head, so its predictions would be "
                                    "random. Fine-tune it first: bert-compress teacher --model DIR --data DATA --out DIR")
            params = count_parameters(model)
        model.eval()
        self = cls(path, tokenizer, model.config, meta, max_length, accepts_token_types(model), params)
        self.kind = kind
        self.model = model
        if device is not None:
            target = resolve_device(device)
            if kind == "torch-int8" and target.type != "cpu":
                print(f"warning: {path} is PyTorch dynamic INT8, which has CPU kernels only; it runs on the CPU, not "
                      f"{target}. Use an onnx-int8 or torch-bf16 artifact on the GPU.", file=sys.stderr)
            else:
                model.to(target)
                self.device = device_name(target)
        if kind == "pytorch":
            choice = resolve_precision(precision, self.device, announce=False)
            self.precision = choice.precision
            if announce:  # to stderr: predict's stdout is its answers
                print(choice.line(), file=sys.stderr)
                if choice.warning:
                    print(f"warning: {choice.warning}", file=sys.stderr)
        return self

    def _run(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        import torch

        device = model_device(self.model)
        with torch.inference_mode(), autocast(self.precision or "fp32", device):
            inputs = {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}
            out = self.model(**inputs)
            named = {name: value.float().cpu().numpy()
                     for name, value in named_outputs(out, list(self.output_names)).items()}
        return self._batch_output(named, arrays)


class OnnxPredictor(Predictor):
    """An ONNX graph (fp32 or INT8) in an ONNX Runtime CPU session.

    Needs onnxruntime, tokenizers and numpy only: ``config.json`` and ``compress.json`` are read with
    ``json`` and the tokenizer with ``tokenizers`` (:mod:`compress.runtime.tokenization`).
    """

    @classmethod
    def _open(cls, path: Path, kind: str, threads: int | None, max_length: int | None,
              spinning: bool = True, device: str | None = None) -> "OnnxPredictor":
        import onnxruntime as ort

        if not (path / "config.json").exists():
            raise CompressError(f"{path} has {ONNX_FILE} but no config.json, which holds the label names. Export the "
                                "model again with bert-compress export.")
        # json and tokenizers only: an ONNX artifact serves without torch or transformers installed.
        config = ArtifactConfig.from_folder(path)
        tokenizer = ArtifactTokenizer.from_folder(path)
        vocab = getattr(config, "vocab_size", None)
        if isinstance(vocab, int) and len(tokenizer) > vocab:
            raise CompressError(
                f"{path}: the tokenizer has {len(tokenizer)} tokens but the model's embedding has {vocab}: they do "
                "not belong together. Put the tokenizer the model was trained with in the folder.")
        options = ort.SessionOptions()
        options.log_severity_level = 3
        if threads is not None:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        if not spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        providers = onnx_providers(device, path)
        try:
            session = ort.InferenceSession(str(path / ONNX_FILE), options, providers=providers)
        except Exception as exc:
            raise CompressError(f"{path / ONNX_FILE}: ONNX Runtime could not open it ({exc}). Export it again.") from exc
        used = session.get_providers()[0]
        if providers[0] != "CPUExecutionProvider" and used == "CPUExecutionProvider" and device != "auto":
            print(f"warning: {path}: ONNX Runtime could not start CUDAExecutionProvider (no usable GPU or CUDA "
                  "libraries); running on CPUExecutionProvider", file=sys.stderr)
        inputs = [i.name for i in session.get_inputs()]
        meta = read_meta(path)
        self = cls(path, tokenizer, config, meta, max_length, "token_type_ids" in inputs, (meta or {}).get("parameters"))
        self.kind = kind
        self.session = session
        self.input_names = inputs
        self.provider = used
        if used == "CUDAExecutionProvider":
            self.device = f"cuda:{providers[0][1]['device_id']}"
        return self

    def _run(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        feed = {name: arrays[name] for name in self.input_names}
        names = self.output_names
        named = {n: np.asarray(v, dtype=np.float32) for n, v in zip(names, self.session.run(names, feed))}
        return self._batch_output(named, arrays)


class OpenVinoPredictor(Predictor):
    """An OpenVINO IR (fp32 or NNCF INT8, :mod:`compress.runtime.formats.openvino`) compiled for the CPU.

    Like :class:`OnnxPredictor` it needs no torch: openvino, tokenizers and numpy. A compiled model
    serves concurrent callers through one infer request per thread (a request is not thread-safe;
    the load benchmark calls one Predictor from several threads).
    """

    @classmethod
    def _open(cls, path: Path, kind: str, threads: int | None, max_length: int | None,
              spinning: bool = True, device: str | None = None) -> "OpenVinoPredictor":
        import threading

        if not (path / "config.json").exists():
            raise CompressError(f"{path} has {OPENVINO_XML} but no config.json, which holds the label names. Build the "
                                "artifact again with bert-compress quantize --method openvino-int8.")
        config = ArtifactConfig.from_folder(path)
        tokenizer = ArtifactTokenizer.from_folder(path)
        compiled, inputs = compile_ir(path, threads, spinning, max_tokens=position_limit(config))
        if device not in (None, "cpu", "auto"):
            print(f"warning: {path} is an OpenVINO artifact, which bert-compress runs on the CPU only; it runs on the "
                  f"CPU, not {device}. Use an onnx-int8 or torch-bf16 artifact on the GPU.", file=sys.stderr)
        meta = read_meta(path)
        self = cls(path, tokenizer, config, meta, max_length, "token_type_ids" in inputs, (meta or {}).get("parameters"))
        self.kind = kind
        self.compiled = compiled
        self.input_names = inputs
        self.provider = "OpenVINO CPU"
        self._requests = threading.local()
        return self

    def _run(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        if self.compiled is None:
            raise CompressError(f"{self.path}: this Predictor was closed; open the artifact again with Predictor.load.")
        request = getattr(self._requests, "request", None)
        if request is None:
            request = self._requests.request = self.compiled.create_infer_request()
        result = request.infer({name: arrays[name] for name in self.input_names})
        # copies: the request reuses its output buffers
        named = {n: np.array(result[self.compiled.output(n)], dtype=np.float32) for n in self.output_names}
        return self._batch_output(named, arrays)

    def close(self) -> None:
        """Free the infer requests and the compiled model now, then repair the thread's alternate signal stack.

        OpenVINO's CPU plugin (2026.4) swaps the calling thread's ``sigaltstack`` when an infer request
        is destroyed and can leave it in freed memory; the next signal (Ctrl-C) would then crash the
        process (:mod:`compress.core.signal_stack`). Called by ``__del__`` too, so dropping the Predictor is safe.
        """

        self._requests = None  # the thread-local requests are destroyed here, in this thread
        self.compiled = None
        ensure_signal_stack()

    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        if getattr(self, "compiled", None) is None:
            return
        if _finalizing():  # interpreter exit: builtins (open) may be gone, and no Python signal handler runs after it
            self._requests = None
            self.compiled = None
            return
        self.close()


class ChoicePredictor(Predictor):
    """A ``choice`` folder (:mod:`compress.runtime.formats.choice`): each batch goes to the artifact chosen for its size.

    The sub-artifacts are opened once each (a runtime chosen for several batch sizes is shared).
    Tokenization and the window length are the first sub-artifact's: every candidate of one model carries
    the same tokenizer and ``max_length``, which :func:`compress.stages.optimize` checks before it writes.
    """

    @classmethod
    def _open(cls, path: Path, threads: int | None, max_length: int | None, allow_pickle: bool,
              spinning: bool, device: str | None = None, precision: str = "fp32") -> "ChoicePredictor":
        meta = read_meta(path) or {}
        table = read_choice(path, meta)
        opened: dict[Path, Predictor] = {}
        for sub in table.values():
            if sub not in opened:
                if artifact_kind(sub) == "choice":
                    raise CompressError(f"{sub}: a choice may not point at another choice; point at the artifact.")
                opened[sub] = Predictor.load(sub, threads=threads, max_length=max_length, allow_pickle=allow_pickle,
                                             spinning=spinning, device=device, precision=precision)
        first = opened[next(iter(table.values()))]
        self = cls(path, first.tokenizer, first.config, meta, first.max_length, first.need_token_types,
                   first.num_parameters)
        self.kind = "choice"
        self.device = first.device
        self.provider = first.provider
        self.by_batch_size = {b: opened[sub] for b, sub in table.items()}
        self.size_bytes = sum(p.size_bytes for p in opened.values())
        self.cpu_mismatch = _cpu_mismatch((meta.get("optimize") or {}).get("decided_on") or {})
        if self.cpu_mismatch:
            print(f"warning: {path} was chosen on another CPU ({self.cpu_mismatch}); the fastest runtime here may "
                  "differ. Run bert-compress optimize on this machine.", file=sys.stderr)
        return self

    def set_windows(self, stride: int | None = None, pooling: str | None = None) -> "ChoicePredictor":
        """:meth:`Predictor.set_windows`, and the same stride and pooling for every runtime the choice serves
        from: ``bench`` scores each served runtime on its own, and it must read a long text as the choice does
        (a ``stride`` given to :meth:`Predictor.load` or ``bench --stride`` included)."""
        super().set_windows(stride, pooling)
        for sub in getattr(self, "by_batch_size", {}).values():  # not yet there while __init__ sets the defaults
            sub.set_windows(self.stride, self.pooling)
        return self

    def for_batch_size(self, batch_size: int) -> Predictor:
        """The artifact that serves batches of ``batch_size`` rows."""

        return self.by_batch_size[pick(list(self.by_batch_size), batch_size)]

    def _run(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        # By the rows actually in the batch: the last batch of a call, or a call with few texts, is smaller.
        chosen = self.for_batch_size(len(arrays["input_ids"]))
        if not chosen.need_token_types:
            arrays = {k: v for k, v in arrays.items() if k != "token_type_ids"}
        return chosen._run(arrays)


def onnx_providers(device: str | None, path: Path | None = None) -> list:
    """The execution providers an ONNX session asks for on ``device`` (``None``/``cpu``: the CPU only).

    ``cuda``/``cuda:N``/``auto``: ``CUDAExecutionProvider`` (GPU N) then the CPU (for operators CUDA
    lacks, such as some INT8 ones) when onnxruntime offers it; else the CPU, with a warning for an
    explicit cuda request (the plain onnxruntime package has no CUDA provider). Needs no torch.
    """
    import onnxruntime as ort

    if device is None or device == "cpu":
        return ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" in ort.get_available_providers():
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        return [("CUDAExecutionProvider", {"device_id": index}), "CPUExecutionProvider"]
    if device != "auto":
        print(f"warning: {path or 'ONNX'}: --device {device} asked for a GPU, but this onnxruntime "
              f"({ort.__version__}) has no CUDAExecutionProvider (available: {', '.join(ort.get_available_providers())}); "
              "running on CPUExecutionProvider. Install onnxruntime-gpu in place of onnxruntime to run ONNX "
              "artifacts on the GPU.", file=sys.stderr)
    return ["CPUExecutionProvider"]


def _cpu_mismatch(decided_on: dict[str, Any]) -> str | None:
    """How this CPU differs from the one a choice was measured on (model name, decisive flags), or None."""

    if not decided_on:
        return None
    here = machine_info()
    flags_then = decided_on.get("cpu_flags") or {}
    flags_now = here.get("cpu_flags") or {}
    changed = [f"{f} {'now on' if flags_now.get(f) else 'now off'}" for f, on in flags_then.items()
               if f in flags_now and bool(flags_now.get(f)) != bool(on)]
    if decided_on.get("cpu_model") and here.get("cpu_model") and decided_on["cpu_model"] != here["cpu_model"]:
        changed.insert(0, f"measured on {decided_on['cpu_model']}, running on {here['cpu_model']}")
    return "; ".join(changed) or None
