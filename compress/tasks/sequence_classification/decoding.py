"""The ``decoding`` aspect of a sentence classifier (:mod:`compress.tasks.protocol.decoding`): what
``Predictor.predict``, ``bert-compress predict`` and ``bert-compress serve`` return.

``Predictor.predict`` gives ``(labels, probabilities)``: each input's label name and the softmax over its logits,
pooled over the windows of a long text (:meth:`compress.runtime.predictor.Predictor.logits`). The server answers as the
text-classification pipeline does: ``inputs`` a text, a ``{"text", "text_pair"}`` pair, or a list of either; each
answer ``{"label", "score"}``, or every label's (sorted, highest first) with ``parameters.top_k`` (``null``: all)
or the older ``return_all_scores: true``. As the pipeline does, one text without ``top_k`` answers a list of one.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from compress.core.errors import CompressError
from compress.core.numerics import softmax
from compress.serving.schemas import BadInput, Parsed, input_list, json_type, text_field
from compress.core.windows import pool_windows


def batch_output(named: Mapping[str, np.ndarray], arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """The classifier's ``logits``, ``(batch, labels)``."""
    return named["logits"]


def combine_windows(windows: Any, rows: list[np.ndarray], pooling: str) -> list[np.ndarray]:
    """Each input's logit row, its windows' rows pooled by ``pooling`` (:func:`compress.core.windows.pool_windows`)."""
    if not len(windows):
        return []
    return list(pool_windows(np.stack(rows), windows.sample, windows.n_samples, pooling))


def predict(predictor: Any, inputs: Any, batch_size: int = 32, aggregation: Any = None, word_tags: Any = None,
            **span_settings: Any) -> tuple[list[str], np.ndarray]:
    """``(labels, probabilities)``: the label name and the softmax over labels for each input. A tagger's
    ``aggregation`` and ``word_tags`` have no words to act on here and change nothing; a reader's span settings
    are refused."""
    if span_settings:
        raise CompressError(f"{', '.join(sorted(span_settings))}: span-search settings of a question-answering "
                            f"model; this is a {predictor.task} model.")
    probs = softmax(predictor.logits(inputs, batch_size))
    return [predictor.label_names[i] for i in probs.argmax(-1)], probs


def encode(predictor: Any, texts: Any, batch_size: int = 32) -> np.ndarray:
    """A classifier gives labels, not one sentence vector per text: refused."""
    raise CompressError(f"{predictor.path} is a sequence-classification model: it gives labels and no sentence "
                        "vector; Predictor.encode is for a sentence encoder. Use predict (or logits).")


def probe_inputs(texts: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[Any]:
    """The single texts."""
    return list(texts)


def predict_command(predictor: Any, args: argparse.Namespace,
                    read_texts: Callable[[Sequence[str]], list[str]]) -> list[str]:
    """``bert-compress predict``: per text its label, every label's probability and the text, tab-separated."""
    from compress.tasks.question_answering.decoding import refuse_reader_flags

    refuse_reader_flags(predictor, args)
    texts = read_texts(args.texts)
    if args.word_tags:
        raise CompressError(f"--word-tags is for a tagger; {args.model} is a {predictor.task} model. Leave it out.")
    labels, probs = predict(predictor, texts, batch_size=args.batch_size)
    lines = []
    for text, label, row in zip(texts, labels, probs):
        scores = " ".join(f"{name}={p:.4f}" for name, p in zip(predictor.label_names, row))
        lines.append(f"{label}\t{scores}\t{text}")
    return lines


def request_parameters() -> tuple[str, ...]:
    """``top_k`` and the older ``return_all_scores``."""
    return ("top_k", "return_all_scores")


def parse_request(inputs: Any, parameters: dict[str, Any], defaults: Mapping[str, Any]) -> Parsed:
    """Texts or ``{"text", "text_pair"}`` pairs (one kind per request); ``top_k`` and ``return_all_scores``
    shape the answer and do not split batches."""
    items, single = input_list(inputs)
    out: list[Any] = []
    for i, item in enumerate(items):
        where = "inputs" if single else f"inputs[{i}]"
        if isinstance(item, dict):
            extra = sorted(set(item) - {"text", "text_pair"})
            if extra or "text" not in item or "text_pair" not in item:
                raise BadInput(where, "a sentence pair is {\"text\": ..., \"text_pair\": ...}"
                                      + (f"; {extra[0]!r} is not a key of it" if extra else ""))
            out.append((text_field(item["text"], f"{where}.text"), text_field(item["text_pair"], f"{where}.text_pair")))
        else:
            out.append(text_field(item, where))
    if len({isinstance(x, tuple) for x in out}) > 1:
        raise BadInput("inputs", "mixes texts and {\"text\", \"text_pair\"} pairs; send one kind per request")
    options: dict[str, Any] = {}
    if "top_k" in parameters:
        top_k = parameters["top_k"]
        if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
            raise BadInput("parameters.top_k", f"must be a whole number of at least 1 or null (every label), got "
                                               f"{top_k!r}")
        options["top_k"] = top_k
    if "return_all_scores" in parameters:
        value = parameters["return_all_scores"]
        if not isinstance(value, bool):
            raise BadInput("parameters.return_all_scores", f"must be true or false, got {json_type(value)}")
        if value and "top_k" not in options:
            options["top_k"] = None
            options["legacy_all"] = True
    length = max(sum(map(len, x)) if isinstance(x, tuple) else len(x) for x in out)
    return Parsed(out, single, ("classify",), options, length)


def predict_batch(predictor: Any, key: tuple[Any, ...], inputs: list[Any], batch_size: int) -> list[Any]:
    """Each input's probabilities over the labels."""
    _, probs = predictor.predict(inputs, batch_size=batch_size)
    return list(probs)


def format_results(parsed: Parsed, raw: Sequence[Any], label_names: Sequence[str]) -> Any:
    """The best label and its score per input, or the ``top_k`` labels (all: ``null``) sorted by score."""
    out = [_scores(row, label_names, parsed.options) for row in raw]
    if parsed.single and ("top_k" not in parsed.options or parsed.options.get("legacy_all")):
        return out  # the pipeline's legacy shapes: one text answers a list of one (of all scores, for
        # return_all_scores)
    return out[0] if parsed.single else out


def _scores(row: np.ndarray, label_names: Sequence[str], options: dict[str, Any]) -> Any:
    order = np.argsort(-row, kind="stable")
    if "top_k" not in options:
        best = int(order[0])
        return {"label": label_names[best], "score": float(row[best])}
    k = options["top_k"] or len(order)
    return [{"label": label_names[int(i)], "score": float(row[int(i)])} for i in order[:k]]


def warm_request() -> Any:
    """One text."""
    return "the server warms up its model before it is ready."


def openapi_schemas(label_names: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A text or a text pair in; a label and its score, or the ``top_k`` of them, out."""
    text = {"type": "string"}
    one = {"oneOf": [text, {"type": "object", "required": ["text", "text_pair"], "additionalProperties": False,
                            "properties": {"text": text, "text_pair": text}}]}
    params = {"top_k": {"type": ["integer", "null"], "minimum": 1},
              "return_all_scores": {"type": "boolean", "default": False}}
    score = {"type": "object", "properties": {"label": {"enum": list(label_names)}, "score": {"type": "number"}}}
    result = {"oneOf": [{"type": "array", "items": score},
                        {"type": "array", "items": {"type": "array", "items": score}}, score]}
    return one, params, result


def torch_model(folder: Any, allow_pickle: bool = False, eager_attention: bool = False) -> tuple[Any, Any, bool]:
    """The transformers head of this task (``Task.auto_model``) from ``folder``, as every stage loads it."""
    from compress.runtime.modeling import load_classifier
    from compress.tasks.sequence_classification import NAME

    return load_classifier(folder, allow_pickle=allow_pickle, eager_attention=eager_attention, task=NAME)


def model_files(folder: Any) -> tuple[str, ...]:
    """None: ``config.json`` describes the model."""
    return ()
