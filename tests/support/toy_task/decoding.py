"""The toy task's ``decoding`` aspect: ``Predictor.predict(pairs)`` gives each pair's order (``in-order`` or
``swapped``) and the softmax over the two; ``predict`` reads ``first<TAB>second`` lines; the server takes
``{"text", "text_pair"}`` and answers ``{"order", "score"}``. Numpy only (the torch-free runtime imports it)."""

from __future__ import annotations

import argparse
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from compress.core.errors import CompressError
from compress.core.numerics import softmax
from compress.core.windows import pool_windows
from compress.serving.schemas import BadInput, Parsed, input_list, text_field


def batch_output(named: Mapping[str, np.ndarray], arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    return named["logits"]


def combine_windows(windows: Any, rows: list[np.ndarray], pooling: str) -> list[np.ndarray]:
    return list(pool_windows(np.stack(rows), windows.sample, windows.n_samples, pooling)) if len(windows) else []


def torch_model(folder: Any, allow_pickle: bool = False, eager_attention: bool = False) -> tuple[Any, Any, bool]:
    """The next-sentence head (``Task.auto_model``) at ``folder``, as every stage loads it."""
    from compress.runtime.modeling import load_classifier
    from tests.support.toy_task import NAME

    return load_classifier(folder, allow_pickle=allow_pickle, eager_attention=eager_attention, task=NAME)


def model_files(folder: Any) -> tuple[str, ...]:
    return ()


def predict(predictor: Any, inputs: Any, batch_size: int = 32, **options: Any) -> tuple[list[str], np.ndarray]:
    """``(orders, probabilities)`` of sentence pairs; any setting is refused (this task has none)."""
    if options:
        raise CompressError(f"{', '.join(sorted(options))}: a sentence-order model takes no settings.")
    pairs = list(inputs)
    if not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
        raise CompressError("a sentence-order model reads sentence pairs: give (first, second) tuples.")
    probs = softmax(predictor.logits(pairs, batch_size))
    return [predictor.label_names[i] for i in probs.argmax(-1)], probs


def encode(predictor: Any, texts: Any, batch_size: int = 32) -> np.ndarray:
    raise CompressError(f"{predictor.path} is a sentence-order model: it gives an order, no sentence vector.")


def probe_inputs(texts: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[Any]:
    return list(pairs)


def predict_command(predictor: Any, args: argparse.Namespace,
                    read_texts: Callable[[Sequence[str]], list[str]]) -> list[str]:
    """Each text ``first<TAB>second``; per pair its order, both probabilities and the two sentences."""
    pairs = []
    for i, text in enumerate(read_texts(args.texts)):
        parts = text.split("\t")
        if len(parts) != 2:
            raise CompressError(f"text {i + 1}: give each pair as 'first<TAB>second'.")
        pairs.append((parts[0], parts[1]))
    orders, probs = predict(predictor, pairs, batch_size=args.batch_size)
    return [f"{order}\t{row[0]:.4f} {row[1]:.4f}\t{a}\t{b}" for order, row, (a, b) in zip(orders, probs, pairs)]


def request_parameters() -> tuple[str, ...]:
    return ()


def parse_request(inputs: Any, parameters: dict[str, Any], defaults: Mapping[str, Any]) -> Parsed:
    items, single = input_list(inputs)
    out = []
    for i, item in enumerate(items):
        where = "inputs" if single else f"inputs[{i}]"
        if not isinstance(item, dict) or set(item) != {"text", "text_pair"}:
            raise BadInput(where, "a sentence pair is {\"text\": ..., \"text_pair\": ...}")
        out.append((text_field(item["text"], f"{where}.text"), text_field(item["text_pair"], f"{where}.text_pair")))
    return Parsed(out, single, ("order",), {}, max(len(a) + len(b) for a, b in out))


def predict_batch(predictor: Any, key: tuple[Any, ...], inputs: list[Any], batch_size: int) -> list[Any]:
    return list(predictor.predict(inputs, batch_size=batch_size)[1])


def format_results(parsed: Parsed, raw: Sequence[Any], label_names: Sequence[str]) -> Any:
    out = [{"order": label_names[int(np.argmax(row))], "score": float(np.max(row))} for row in raw]
    return out[0] if parsed.single else out


def warm_request() -> Any:
    return {"text": "the server starts.", "text_pair": "then it warms up."}


def openapi_schemas(label_names: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    text = {"type": "string"}
    one = {"type": "object", "required": ["text", "text_pair"], "additionalProperties": False,
           "properties": {"text": text, "text_pair": text}}
    answer = {"type": "object", "properties": {"order": {"enum": list(label_names)}, "score": {"type": "number"}}}
    return one, {}, {"oneOf": [answer, {"type": "array", "items": answer}]}
