"""The ``decoding`` aspect of a span reader (extractive question answering; :mod:`compress.tasks.protocol.decoding`):
what ``Predictor.predict``, ``bert-compress predict`` and ``bert-compress serve`` return.

Each input is a ``(question, passage)`` pair. The passage is read in the windows the reader was
trained with (``stride`` from its ``compress.json``; only the passage is windowed, every window
repeats the question), every window gives a start and an end logit per token, and the answer is the
best span over all windows (:func:`compress.tasks.question_answering.features.decode_spans`: n-best starts and ends
per window, at most 30 tokens by default, mapped back to the passage's characters; the null answer competes
when the reader was trained on SQuAD 2.0 data, ``allow_null`` in its ``compress.json``, and wins when it beats the
best span by more than the ``null_threshold`` chosen on validation and recorded there). numpy and
the tokenizer only, so an ONNX reader is served without torch like the other tasks.

The server's request is the question-answering pipeline's: ``inputs`` ``{"question", "context"}`` or a list of
them, each answer ``{"answer", "score", "start", "end"}``; ``parameters.max_answer_len`` bounds an answer in tokens.
``bert-compress predict`` takes ``--question`` (repeatable) and ``--context-file``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from compress.core.errors import CompressError
from compress.serving.schemas import BadInput, Parsed, input_list, json_type, text_field
from compress.core.windows import merge_token_outputs
from compress.tasks.question_answering.features import DEFAULT_MAX_ANSWER_LENGTH, DEFAULT_N_BEST, DEFAULT_NULL_THRESHOLD, decode_spans


def _pairs(inputs: Any) -> tuple[list[str], list[str]]:
    """``(questions, passages)`` of one ``(question, passage)`` tuple or a list of them; one clear line
    for anything else."""
    if isinstance(inputs, tuple) and len(inputs) == 2 and all(isinstance(x, str) for x in inputs):
        inputs = [inputs]
    if isinstance(inputs, (str, bytes, dict)) or not hasattr(inputs, "__iter__"):
        raise CompressError(f"predict: a question-answering model takes (question, passage) tuples, got a "
                            f"{type(inputs).__name__}. Give [(question, passage), ...].")
    questions, passages = [], []
    for i, item in enumerate(inputs):
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(x, str) for x in item)):
            raise CompressError(f"input {i} is {item!r}; a question-answering model takes (question, passage) "
                                "tuples of two strings.")
        if not item[0].strip() or not item[1].strip():
            raise CompressError(f"input {i}: the question and the passage must both hold text.")
        questions.append(item[0].lstrip())  # SQuAD's questions may start with spaces; run_qa strips them too
        passages.append(item[1])
    return questions, passages


def answer_questions(predictor, inputs: Sequence[tuple[str, str]], batch_size: int = 32, *,
                     n_best: int = DEFAULT_N_BEST, max_answer_length: int = DEFAULT_MAX_ANSWER_LENGTH,
                     null_threshold: float | None = None) -> list[dict[str, Any]]:
    """One dict per question: ``question``, ``answer`` (a span of the passage, ``""`` for no answer),
    ``start`` / ``end`` (characters in the passage: ``passage[start:end] == answer``) and ``score``.

    ``n_best`` starts and ends are paired in each window and a span holds at most ``max_answer_length``
    tokens (``run_qa.py``'s 20 and 30): a longer limit finds long answers (addresses, lists) at the cost
    of more spurious long spans. A SQuAD 2.0 reader answers nothing when the null score beats the best span by
    more than ``null_threshold`` (default: the one its stage chose on validation, ``null_threshold`` in
    ``compress.json``; 0.0, ``run_qa.py``'s, for a reader that has none)."""
    questions, passages = _pairs(inputs)
    if not questions:
        return []
    windows = predictor.windows(list(zip(questions, passages)))
    rows = predictor.run_windows(windows, batch_size)
    meta = predictor.meta or {}
    allow_null = bool(meta.get("allow_null", False))
    if null_threshold is None:
        null_threshold = float(meta.get("null_threshold", DEFAULT_NULL_THRESHOLD))
    elif not allow_null:
        raise CompressError("--null-threshold: this reader was trained on SQuAD 1.1 data (every question has an "
                            "answer), so it never answers nothing; the setting is for SQuAD 2.0 readers.")
    decoded = decode_spans(windows, [r[:, 0] for r in rows], [r[:, 1] for r in rows], passages, n_best=n_best,
                           max_answer_length=max_answer_length, allow_null=allow_null, null_threshold=null_threshold)
    return [{"question": q, "answer": d["answer"], "start": d["start"], "end": d["end"], "score": d["score"]}
            for q, d in zip(questions, decoded)]


def read_passage(model: str, questions: Sequence[str] | None, context_file: str | None, texts: Sequence[str]) -> str:
    """``bert-compress predict`` on a reader: the passage of ``--context-file``, after refusing in one line
    what a reader cannot take (no question, no passage, positional texts, an unreadable or empty file)."""
    if texts:
        raise CompressError(f"{model} is a question-answering model: give --question Q (repeatable) and "
                            "--context-file PASSAGE.txt instead of positional texts.")
    if not questions or not context_file:
        raise CompressError(f"{model} is a question-answering model: give --question Q (repeatable) and "
                            "--context-file PASSAGE.txt (the passage the questions are about).")
    path = Path(context_file).expanduser()
    try:
        passage = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CompressError(f"--context-file {path}: no such file. Give the text file holding the passage.") from None
    except UnicodeDecodeError as exc:
        raise CompressError(f"--context-file {path}: not UTF-8 text (byte {exc.start}). Save the passage as UTF-8.") from None
    except IsADirectoryError:
        raise CompressError(f"--context-file {path} is a folder. Give the text file holding the passage.") from None
    if not passage.strip():
        raise CompressError(f"--context-file {path} is empty. Give the text file holding the passage.")
    return passage


def refuse_reader_flags(predictor: Any, args: argparse.Namespace) -> None:
    """One line when ``bert-compress predict`` was given a reader's ``--question`` or ``--context-file`` for a
    model of another task (which reads positional texts)."""
    if args.question or args.context_file:
        raise CompressError(f"--question and --context-file are for a question-answering model; {args.model} is a "
                            f"{predictor.task} model. Give the texts to label instead.")


# ----------------------------------------------------------------------------- the decoding protocol


def batch_output(named: Mapping[str, np.ndarray], arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """The start and end logits stacked as ``(batch, sequence, 2)``."""
    return np.stack([named["start_logits"], named["end_logits"]], -1).astype(np.float32)


def combine_windows(windows: Any, rows: list[np.ndarray], pooling: str) -> list[np.ndarray]:
    """Each question's ``(passage tokens, 2)`` start and end logits, its windows merged (each token from the
    window where it has most context); ``pooling`` is for whole-text rows and does not apply."""
    return merge_token_outputs(windows, rows) if len(windows) else []


def predict(predictor: Any, inputs: Any, batch_size: int = 32, *, n_best: int = DEFAULT_N_BEST,
            max_answer_length: int = DEFAULT_MAX_ANSWER_LENGTH, null_threshold: float | None = None,
            aggregation: Any = None, word_tags: Any = None) -> list[dict[str, Any]]:
    """One dict per question (:func:`answer_questions`); a tagger's ``aggregation`` and ``word_tags`` have no
    words to act on in a reader and change nothing."""
    return answer_questions(predictor, inputs, batch_size, n_best=n_best, max_answer_length=max_answer_length,
                            null_threshold=null_threshold)


def encode(predictor: Any, texts: Any, batch_size: int = 32) -> np.ndarray:
    """A reader gives answer spans, not one vector per text: refused."""
    raise CompressError(f"{predictor.path} is a question-answering model: it finds answer spans and gives no "
                        "sentence vector; Predictor.encode is for a sentence encoder. Use predict.")


def probe_inputs(texts: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[Any]:
    """The pairs (a reader reads only pairs)."""
    return list(pairs)


def predict_command(predictor: Any, args: argparse.Namespace,
                    read_texts: Callable[[Sequence[str]], list[str]]) -> list[str]:
    """``bert-compress predict``: one line per ``--question`` about the ``--context-file`` passage: the answer,
    its score, its characters in the passage and the question."""
    passage = read_passage(args.model, args.question, args.context_file, args.texts)
    results = predict(predictor, [(q, passage) for q in args.question], batch_size=args.batch_size,
                      n_best=args.n_best, max_answer_length=args.max_answer_length, null_threshold=args.null_threshold)
    return [f"{r['answer'] or '(no answer)'}\tscore={r['score']:.4f}\tchars {r['start']}-{r['end']}\t{r['question']}"
            for r in results]


def request_parameters() -> tuple[str, ...]:
    """``max_answer_len`` only."""
    return ("max_answer_len",)


def parse_request(inputs: Any, parameters: dict[str, Any], defaults: Mapping[str, Any]) -> Parsed:
    """``{"question", "context"}`` or a list of them, both holding text, and ``max_answer_len`` in tokens."""
    items, single = input_list(inputs)
    out: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        where = "inputs" if single else f"inputs[{i}]"
        if not isinstance(item, dict):
            raise BadInput(where, f"must be an object {{\"question\": ..., \"context\": ...}}, got {json_type(item)}")
        for key in ("question", "context"):
            if key not in item:
                raise BadInput(f"{where}.{key}", "is missing; a question is {\"question\": ..., \"context\": ...}")
        extra = sorted(set(item) - {"question", "context"})
        if extra:
            raise BadInput(f"{where}.{extra[0]}", "is not a key of a question; give question and context")
        pair = (text_field(item["question"], f"{where}.question"), text_field(item["context"], f"{where}.context"))
        for key, value in zip(("question", "context"), pair):
            if not value.strip():  # a span needs a question and a passage to read (_pairs refuses it too)
                raise BadInput(f"{where}.{key}", "is empty; a question and its context must both hold text")
        out.append(pair)
    max_len = parameters.get("max_answer_len", DEFAULT_MAX_ANSWER_LENGTH)
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
        raise BadInput("parameters.max_answer_len", f"must be a whole number of tokens, at least 1, got {max_len!r}")
    return Parsed(out, single, ("answer", max_len), length=max(len(q) + len(c) for q, c in out))


def predict_batch(predictor: Any, key: tuple[Any, ...], inputs: list[Any], batch_size: int) -> list[Any]:
    """Each question's answer, at most ``key``'s tokens long."""
    return predictor.predict(inputs, batch_size=batch_size, max_answer_length=key[1])


def format_results(parsed: Parsed, raw: Sequence[Any], label_names: Sequence[str]) -> Any:
    """The pipeline's ``{"answer", "score", "start", "end"}`` per question."""
    out = [{"answer": r["answer"], "score": float(r["score"]), "start": int(r["start"]), "end": int(r["end"])}
           for r in raw]
    return out[0] if parsed.single else out


def warm_request() -> Any:
    """One question about a passage."""
    return {"question": "what is warmed up?", "context": "the server warms up its model before it is ready."}


def openapi_schemas(label_names: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A question and its context in; an answer (a list of them, for a list) out."""
    text = {"type": "string"}
    one = {"type": "object", "required": ["question", "context"], "additionalProperties": False,
           "properties": {"question": text, "context": text}}
    params = {"max_answer_len": {"type": "integer", "minimum": 1, "default": DEFAULT_MAX_ANSWER_LENGTH}}
    answer = {"type": "object", "properties": {"answer": text, "score": {"type": "number"},
                                               "start": {"type": "integer"}, "end": {"type": "integer"}}}
    return one, params, {"oneOf": [answer, {"type": "array", "items": answer}]}


def torch_model(folder: Any, allow_pickle: bool = False, eager_attention: bool = False) -> tuple[Any, Any, bool]:
    """The transformers head of this task (``Task.auto_model``) from ``folder``, as every stage loads it."""
    from compress.runtime.modeling import load_classifier
    from compress.tasks.question_answering import NAME

    return load_classifier(folder, allow_pickle=allow_pickle, eager_attention=eager_attention, task=NAME)


def model_files(folder: Any) -> tuple[str, ...]:
    """None: ``config.json`` describes the model."""
    return ()
