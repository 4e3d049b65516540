"""One request and response shape per task, in the transformers pipeline's conventions.

A request is ``{"inputs": ..., "parameters": {...}}`` (what hosted inference endpoints take); the answer is what
``transformers.pipeline(task)`` returns for the same inputs, so a client written against a pipeline or an
inference endpoint reads it unchanged. This module checks the envelope (the request's keys, ``parameters`` an
object naming only the task's parameters, at most ``--max-batch`` inputs) and writes the OpenAPI document; the
task's ``decoding`` aspect (:mod:`compress.tasks.protocol.decoding`) reads ``inputs`` and the parameters' values,
runs a batch, shapes the answer and names its warm-up input:

- sequence classification (:mod:`compress.tasks.sequence_classification.decoding`): a text, a ``{"text",
  "text_pair"}`` pair or a list of either; ``{"label", "score"}``, or the ``top_k`` labels;
- token classification (:mod:`compress.tasks.token_classification.decoding`): a text or a list; the entity groups
  ``{"entity_group", "score", "word", "start", "end"}``, by ``parameters.aggregation_strategy``;
- question answering (:mod:`compress.tasks.question_answering.decoding`): ``{"question", "context"}`` or a list;
  ``{"answer", "score", "start", "end"}``, ``parameters.max_answer_len`` tokens at most.

Every problem is a :class:`BadInput` naming the field (``inputs[2].context``), answered 422 (413 for too many
inputs) by :mod:`compress.serving.app`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from compress.core.errors import CompressError

#: Top-level keys a request may hold; ``options`` is what hosted endpoints' clients send (``wait_for_model``),
#: accepted and ignored so that those clients work.
REQUEST_KEYS = ("inputs", "parameters", "options")


def _decoding(task: str) -> Any:
    """The ``decoding`` aspect of the task called ``task``: it reads the inputs and writes the answers."""
    from compress.tasks import get_task

    return get_task(task).aspect("decoding")


def _serves(task: str) -> bool:
    """Whether the task called ``task`` has a request shape here: its ``decoding`` aspect has every member of
    :class:`compress.tasks.protocol.decoding.PROTOCOL` (an unknown task, or one whose aspect cannot be imported in
    this install, has none)."""
    from compress.tasks import get_task
    from compress.tasks.protocol import missing_members

    try:
        spec = get_task(task)
        return bool(spec.package) and not missing_members(spec, "decoding")
    except (CompressError, ImportError):
        return False


def servable_tasks() -> tuple[str, ...]:
    """The registered tasks with a request shape here, in registration order."""
    from compress.tasks import task_names

    return tuple(name for name in task_names() if _serves(name))


def check_task(task: str, model: str) -> str:
    """``task`` when this server has a request shape for it, else a one-line refusal naming the model."""
    if not _serves(task):
        raise CompressError(f"serve {model}: a {task} model has no request shape in bert-compress serve yet (it "
                            f"serves {', '.join(servable_tasks())}); use Predictor.load(...).predict in Python.")
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
    """A checked request: what :meth:`compress.runtime.predictor.Predictor.predict` takes, and how to answer."""

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


def text_field(value: Any, where: str) -> str:
    """``value`` when it is a string of characters, else :class:`BadInput` naming the field ``where``."""
    if not isinstance(value, str):
        raise BadInput(where, f"must be a string, got {json_type(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(where, "holds a lone surrogate (\\ud800-\\udfff), which is not a character; send UTF-8 "
                              "text") from None
    return value


def json_type(value: Any) -> str:
    """How JSON names the type of a decoded ``value`` (``an object``, ``a string``, ...), for messages."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def input_list(inputs: Any) -> tuple[list[Any], bool]:
    """``inputs`` as a list, and whether it was one input rather than a list of them (each is checked by the
    task's reader, which names its field)."""
    if isinstance(inputs, list):
        if not inputs:
            raise BadInput("inputs", "is an empty list; give at least one input")
        return inputs, False
    return [inputs], True


def parse_request(task: str, body: Any, max_inputs: int, default_aggregation: str | None = None) -> Parsed:
    """Check a decoded JSON body for ``task``; raise :class:`BadInput` naming the first bad field.

    The envelope (``inputs``, ``parameters``, ``options``) and the parameter names are checked here, the inputs and
    the parameters' values by the task (:meth:`compress.tasks.protocol.decoding.PROTOCOL.parse_request`);
    ``default_aggregation`` is ``serve --aggregation`` (a tagger's default ``aggregation_strategy``)."""
    if not isinstance(body, dict):
        raise BadInput("body", f"must be a JSON object such as {{\"inputs\": ...}}, got {json_type(body)}")
    unknown = sorted(set(body) - set(REQUEST_KEYS))
    if unknown:
        raise BadInput(unknown[0], f"is not a request key; a request holds {', '.join(REQUEST_KEYS[:2])}")
    if "inputs" not in body:
        raise BadInput("inputs", "is missing; send {\"inputs\": ...}")
    parameters = body.get("parameters")
    parameters = {} if parameters is None else parameters
    if not isinstance(parameters, dict):
        raise BadInput("parameters", f"must be an object, got {json_type(parameters)}")
    decoding = _decoding(task)
    allowed = decoding.request_parameters()
    for name in parameters:
        if name not in allowed:
            raise BadInput(f"parameters.{name}", f"is not a parameter of a {task} model; it takes "
                                                 f"{', '.join(allowed)}")
    inputs = body["inputs"]
    if isinstance(inputs, list) and len(inputs) > max_inputs:  # before reading each of them
        raise BadInput("inputs", f"holds {len(inputs)} inputs, over this server's --max-batch of {max_inputs}; "
                                 "split the request", status=413)
    defaults = {} if default_aggregation is None else {"aggregation": default_aggregation}
    return decoding.parse_request(inputs, parameters, defaults)


def predict_batch(predictor: Any, key: tuple[Any, ...], inputs: list[Any], batch_size: int) -> list[Any]:
    """The predictor's raw result for each input of one batch (all of one ``key``), in order."""
    return _decoding(predictor.task).predict_batch(predictor, key, inputs, batch_size)


def format_results(task: str, parsed: Parsed, raw: Sequence[Any], label_names: Sequence[str]) -> Any:
    """The answer to one request from its inputs' raw results, in the pipeline's shape."""
    return _decoding(task).format_results(parsed, raw, label_names)


def warm_up_request(task: str, default_aggregation: str | None = None) -> Parsed:
    """The request of one input of ``task``'s kind that warms the model up before ``/ready`` says yes."""
    return parse_request(task, {"inputs": _decoding(task).warm_request()}, 1, default_aggregation)


def openapi(task: str, label_names: Sequence[str], max_inputs: int) -> dict[str, Any]:
    """The OpenAPI 3.1 document of this server for a ``task`` model: served at ``/openapi.json``."""
    text = {"type": "string"}
    one, params, result = _decoding(task).openapi_schemas(label_names)
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
