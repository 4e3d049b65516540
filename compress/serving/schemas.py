"""One request and response shape per task, in the transformers pipeline's conventions.

A request is ``{"inputs": ..., "parameters": {...}}`` (what hosted inference endpoints take); the answer is what
``transformers.pipeline(task)`` returns for the same inputs, so a client written against a pipeline or an
inference endpoint reads it unchanged:

- sequence classification: ``inputs`` a text, a ``{"text", "text_pair"}`` pair, or a list of either; each answer
  ``{"label", "score"}``, or every label's (sorted, highest first) with ``parameters.top_k`` (``null``: all) or
  the older ``return_all_scores: true``. As the pipeline does, one text without ``top_k`` answers a list of one.
- token classification: ``inputs`` a text or a list; each answer the list of entity groups
  ``{"entity_group", "score", "word", "start", "end"}`` (character offsets); ``parameters.aggregation_strategy``
  is how a word's sub-tokens give its tag (``first``, ``average``, ``max``).
- question answering: ``inputs`` ``{"question", "context"}`` or a list; each answer ``{"answer", "score",
  "start", "end"}``; ``parameters.max_answer_len`` bounds an answer in tokens.

Every problem is a :class:`BadInput` naming the field (``inputs[2].context``), answered 422 (413 for too many
inputs) by :mod:`compress.serving.app`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from compress.tasks.token_classification.decode import AGGREGATIONS, DEFAULT_AGGREGATION
from compress.tasks.question_answering.features import DEFAULT_MAX_ANSWER_LENGTH
from compress.errors import CompressError
from compress.tasks.question_answering import NAME as QA
from compress.tasks.sequence_classification import NAME as CLASSIFICATION
from compress.tasks.token_classification import NAME as TAGGING

#: Top-level keys a request may hold; ``options`` is what hosted endpoints' clients send (``wait_for_model``),
#: accepted and ignored so that those clients work.
REQUEST_KEYS = ("inputs", "parameters", "options")
PARAMETERS = {QA: ("max_answer_len",), TAGGING: ("aggregation_strategy",)}
CLASSIFICATION_PARAMETERS = ("top_k", "return_all_scores")


#: The tasks with a request shape here; a task added to compress.tasks needs its own before it serves.
TASKS = (CLASSIFICATION, TAGGING, QA)


def check_task(task: str, model: str) -> str:
    """``task`` when this server has a request shape for it, else a one-line refusal naming the model."""
    if task not in TASKS:
        raise CompressError(f"serve {model}: a {task} model has no request shape in bert-compress serve yet (it "
                            f"serves {', '.join(TASKS)}); use Predictor.load(...).predict in Python.")
    return task


class BadInput(Exception):
    """A request the server answers with ``status`` and ``{"error": message, "field": field}``."""

    def __init__(self, field: str, message: str, status: int = 422):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status


@dataclass
class Parsed:
    """A checked request: what :meth:`compress.runtime.Predictor.predict` takes, and how to answer."""

    inputs: list[Any]
    #: The request gave one input, not a list: the answer is one result, not a list of them.
    single: bool
    #: Settings of the model call itself (a tagger's aggregation, a reader's answer length): requests run in one
    #: batch only when theirs are equal.
    key: tuple[Any, ...]
    #: Settings applied to the outputs afterwards (a classifier's top_k), which do not split batches.
    options: dict[str, Any] = field(default_factory=dict)
    #: Characters in the longest input: the batcher groups requests of similar length by it (a token count would
    #: tokenize twice; characters follow tokens closely enough to keep a long text out of a batch of short ones).
    length: int = 0


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise BadInput(where, f"must be a string, got {_json_type(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(where, "holds a lone surrogate (\\ud800-\\udfff), which is not a character; send UTF-8 "
                              "text") from None
    return value


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _items(inputs: Any) -> tuple[list[Any], bool]:
    """``inputs`` as a list, and whether it was one input rather than a list of them (each is checked by the
    task's reader, which names its field)."""
    if isinstance(inputs, list):
        if not inputs:
            raise BadInput("inputs", "is an empty list; give at least one input")
        return inputs, False
    return [inputs], True


def parse_request(task: str, body: Any, max_inputs: int, default_aggregation: str = DEFAULT_AGGREGATION) -> Parsed:
    """Check a decoded JSON body for ``task``; raise :class:`BadInput` naming the first bad field."""
    if not isinstance(body, dict):
        raise BadInput("body", f"must be a JSON object such as {{\"inputs\": ...}}, got {_json_type(body)}")
    unknown = sorted(set(body) - set(REQUEST_KEYS))
    if unknown:
        raise BadInput(unknown[0], f"is not a request key; a request holds {', '.join(REQUEST_KEYS[:2])}")
    if "inputs" not in body:
        raise BadInput("inputs", "is missing; send {\"inputs\": ...}")
    parameters = body.get("parameters")
    parameters = {} if parameters is None else parameters
    if not isinstance(parameters, dict):
        raise BadInput("parameters", f"must be an object, got {_json_type(parameters)}")
    allowed = PARAMETERS.get(task, CLASSIFICATION_PARAMETERS)
    for name in parameters:
        if name not in allowed:
            raise BadInput(f"parameters.{name}", f"is not a parameter of a {task} model; it takes "
                                                 f"{', '.join(allowed)}")
    inputs = body["inputs"]
    if isinstance(inputs, list) and len(inputs) > max_inputs:  # before reading each of them
        raise BadInput("inputs", f"holds {len(inputs)} inputs, over this server's --max-batch of {max_inputs}; "
                                 "split the request", status=413)
    if task == QA:
        return _question_answering(inputs, parameters)
    if task == TAGGING:
        return _tagging(inputs, parameters, default_aggregation)
    return _classification(inputs, parameters)


def _classification(inputs: Any, parameters: dict[str, Any]) -> Parsed:
    items, single = _items(inputs)
    out: list[Any] = []
    for i, item in enumerate(items):
        where = "inputs" if single else f"inputs[{i}]"
        if isinstance(item, dict):
            extra = sorted(set(item) - {"text", "text_pair"})
            if extra or "text" not in item or "text_pair" not in item:
                raise BadInput(where, "a sentence pair is {\"text\": ..., \"text_pair\": ...}"
                                      + (f"; {extra[0]!r} is not a key of it" if extra else ""))
            out.append((_text(item["text"], f"{where}.text"), _text(item["text_pair"], f"{where}.text_pair")))
        else:
            out.append(_text(item, where))
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
            raise BadInput("parameters.return_all_scores", f"must be true or false, got {_json_type(value)}")
        if value and "top_k" not in options:
            options["top_k"] = None
            options["legacy_all"] = True
    length = max(sum(map(len, x)) if isinstance(x, tuple) else len(x) for x in out)
    return Parsed(out, single, ("classify",), options, length)


def _tagging(inputs: Any, parameters: dict[str, Any], default_aggregation: str) -> Parsed:
    items, single = _items(inputs)
    out = [_text(item, "inputs" if single else f"inputs[{i}]") for i, item in enumerate(items)]
    aggregation = parameters.get("aggregation_strategy", default_aggregation)
    if aggregation not in AGGREGATIONS:
        raise BadInput("parameters.aggregation_strategy", f"is {aggregation!r}; this server aggregates a word's "
                                                           f"sub-tokens by {', '.join(AGGREGATIONS)}")
    return Parsed(out, single, ("tag", aggregation), length=max(map(len, out)))


def _question_answering(inputs: Any, parameters: dict[str, Any]) -> Parsed:
    items, single = _items(inputs)
    out: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        where = "inputs" if single else f"inputs[{i}]"
        if not isinstance(item, dict):
            raise BadInput(where, f"must be an object {{\"question\": ..., \"context\": ...}}, got {_json_type(item)}")
        for key in ("question", "context"):
            if key not in item:
                raise BadInput(f"{where}.{key}", "is missing; a question is {\"question\": ..., \"context\": ...}")
        extra = sorted(set(item) - {"question", "context"})
        if extra:
            raise BadInput(f"{where}.{extra[0]}", "is not a key of a question; give question and context")
        pair = (_text(item["question"], f"{where}.question"), _text(item["context"], f"{where}.context"))
        for key, value in zip(("question", "context"), pair):
            if not value.strip():  # a span needs a question and a passage to read (compress.tasks.question_answering.decode refuses it too)
                raise BadInput(f"{where}.{key}", "is empty; a question and its context must both hold text")
        out.append(pair)
    max_len = parameters.get("max_answer_len", DEFAULT_MAX_ANSWER_LENGTH)
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
        raise BadInput("parameters.max_answer_len", f"must be a whole number of tokens, at least 1, got {max_len!r}")
    return Parsed(out, single, ("answer", max_len), length=max(len(q) + len(c) for q, c in out))


def predict_batch(predictor: Any, key: tuple[Any, ...], inputs: list[Any], batch_size: int) -> list[Any]:
    """The predictor's raw result for each input of one batch (all of one ``key``), in order."""
    if key[0] == "tag":
        return [r["entities"] for r in predictor.predict(inputs, batch_size=batch_size, aggregation=key[1])]
    if key[0] == "answer":
        return predictor.predict(inputs, batch_size=batch_size, max_answer_length=key[1])
    _, probs = predictor.predict(inputs, batch_size=batch_size)
    return list(probs)


def format_results(task: str, parsed: Parsed, raw: Sequence[Any], label_names: Sequence[str]) -> Any:
    """The answer to one request from its inputs' raw results, in the pipeline's shape."""
    if task == QA:
        out: list[Any] = [{"answer": r["answer"], "score": float(r["score"]), "start": int(r["start"]),
                           "end": int(r["end"])} for r in raw]
    elif task == TAGGING:
        out = [[{"entity_group": e["type"], "score": float(e["score"]), "word": e["text"], "start": int(e["start"]),
                 "end": int(e["end"])} for e in entities] for entities in raw]
    else:
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


def warm_inputs(task: str) -> list[Any]:
    """One input of ``task``'s kind, for the warm-up batches run before ``/ready`` says yes."""
    if task == QA:
        return [("what is warmed up?", "the server warms up its model before it is ready.")]
    return ["the server warms up its model before it is ready."]


def openapi(task: str, label_names: Sequence[str], max_inputs: int) -> dict[str, Any]:
    """The OpenAPI 3.1 document of this server for a ``task`` model: served at ``/openapi.json``."""
    text = {"type": "string"}
    if task == QA:
        one = {"type": "object", "required": ["question", "context"], "additionalProperties": False,
               "properties": {"question": text, "context": text}}
        params = {"max_answer_len": {"type": "integer", "minimum": 1, "default": DEFAULT_MAX_ANSWER_LENGTH}}
        answer = {"type": "object", "properties": {"answer": text, "score": {"type": "number"},
                                                   "start": {"type": "integer"}, "end": {"type": "integer"}}}
        result = {"oneOf": [answer, {"type": "array", "items": answer}]}
    elif task == TAGGING:
        one = text
        params = {"aggregation_strategy": {"enum": list(AGGREGATIONS), "default": DEFAULT_AGGREGATION}}
        group = {"type": "object", "properties": {"entity_group": text, "score": {"type": "number"}, "word": text,
                                                  "start": {"type": "integer"}, "end": {"type": "integer"}}}
        result = {"oneOf": [{"type": "array", "items": group},
                            {"type": "array", "items": {"type": "array", "items": group}}]}
    else:
        one = {"oneOf": [text, {"type": "object", "required": ["text", "text_pair"], "additionalProperties": False,
                                "properties": {"text": text, "text_pair": text}}]}
        params = {"top_k": {"type": ["integer", "null"], "minimum": 1},
                  "return_all_scores": {"type": "boolean", "default": False}}
        score = {"type": "object", "properties": {"label": {"enum": list(label_names)}, "score": {"type": "number"}}}
        result = {"oneOf": [{"type": "array", "items": score},
                            {"type": "array", "items": {"type": "array", "items": score}}, score]}
    request = {"type": "object", "required": ["inputs"],
               "properties": {"inputs": {"oneOf": [one, {"type": "array", "items": one, "minItems": 1,
                                                         "maxItems": max_inputs}]},
                              "parameters": {"type": "object", "additionalProperties": False, "properties": params},
                              "options": {"type": "object", "description": "accepted and ignored"}}}
    error = {"type": "object", "properties": {"error": text, "field": text}}
    errors = {str(code): {"description": why, "content": {"application/json": {"schema": error}}}
              for code, why in ((400, "the body is not UTF-8 JSON"), (413, "the body or its inputs are over the limit"),
                                (422, "a field is missing or of the wrong type"),
                                (503, "the queue is full or the model is not ready; see Retry-After"),
                                (504, "not answered within the request timeout"))}
    plain = {"content": {"text/plain": {"schema": text}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": f"bert-compress serve ({task})", "version": "1"},
        "paths": {
            "/predict": {"post": {
                "summary": f"{task} of the inputs, batched with other requests",
                "requestBody": {"required": True, "content": {"application/json": {"schema": request}}},
                "responses": {"200": {"description": "one result per input (one result for a single input); the "
                                                     "X-Batch-Size header says how many inputs shared the model batch",
                                      "content": {"application/json": {"schema": result}}}, **errors}}},
            "/health": {"get": {"summary": "the process is alive", "responses": {"200": plain}}},
            "/ready": {"get": {"summary": "the model is loaded and warmed up",
                               "responses": {"200": plain, "503": plain}}},
            "/metrics": {"get": {"summary": "Prometheus text format", "responses": {"200": plain}}},
        },
    }
