"""The ``decoding`` aspect of a cross-encoder (:mod:`compress.tasks.protocol.decoding`): what ``Predictor.predict``,
``bert-compress predict`` and ``bert-compress serve`` return for sentence pairs.

``Predictor.predict([(a, b), ...])`` gives each pair's score, a float32 array ``(n,)`` on the scale the model was
trained on (0..5 for STS): the one-output head's logit, pooled over the windows of a pair longer than the window
(:meth:`compress.runtime.predictor.Predictor.logits`). ``bert-compress predict`` reads each positional text as
``sentence1<TAB>sentence2`` and prints ``score<TAB>sentence1<TAB>sentence2``. The server takes ``inputs`` a
``{"text", "text_pair"}`` pair or a list of them and answers ``{"score": ...}`` per pair (one object for a single
pair). Numpy only: the torch-free runtime imports this module.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from compress.core.errors import CompressError
from compress.serving.schemas import BadInput, Parsed, input_list, text_field
from compress.core.windows import pool_windows


def _pairs(predictor: Any, inputs: Any) -> list[tuple[str, str]]:
    """``inputs`` as a list of ``(sentence1, sentence2)``; one line for anything else (a single text scores nothing)."""
    items = [inputs] if isinstance(inputs, tuple) else list(inputs)
    for i, item in enumerate(items):
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(s, str) for s in item)):
            raise CompressError(f"input {i}: {getattr(predictor, 'path', 'the model')} scores sentence pairs; give "
                                f"(sentence1, sentence2) tuples, got {type(item).__name__}.")
    return [tuple(item) for item in items]


def batch_output(named: Mapping[str, np.ndarray], arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """The head's ``logits``, ``(batch, 1)``: the score."""
    return named["logits"]


def combine_windows(windows: Any, rows: list[np.ndarray], pooling: str) -> list[np.ndarray]:
    """Each pair's score row, its windows' rows pooled by ``pooling`` (:func:`compress.core.windows.pool_windows`)."""
    if not len(windows):
        return []
    return list(pool_windows(np.stack(rows), windows.sample, windows.n_samples, pooling))


def predict(predictor: Any, inputs: Any, batch_size: int = 32, **options: Any) -> np.ndarray:
    """Each pair's score, float32 ``(n,)``. A tagger's or a reader's settings are refused: they change nothing here."""
    given = sorted(k for k, v in options.items() if v is not None)
    if given:
        raise CompressError(f"{', '.join(given)}: not a setting of a sentence-similarity model (it scores pairs and "
                            "takes none). Leave it out.")
    pairs = _pairs(predictor, inputs)
    return predictor.logits(pairs, batch_size).reshape(-1).astype(np.float32)


def encode(predictor: Any, texts: Any, batch_size: int = 32) -> np.ndarray:
    """A cross-encoder scores a pair read together and gives no vector per sentence: refused."""
    raise CompressError(f"{predictor.path} is a sentence-similarity model (a cross-encoder): it scores sentence pairs "
                        "and gives no sentence vector; Predictor.encode is for a sentence encoder. Use predict.")


def probe_inputs(texts: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[Any]:
    """The text pairs (the single texts paired with themselves where there are none)."""
    return list(pairs) or [(t, t) for t in texts]


def predict_command(predictor: Any, args: argparse.Namespace,
                    read_texts: Callable[[Sequence[str]], list[str]]) -> list[str]:
    """``bert-compress predict``: each text ``sentence1<TAB>sentence2``; per pair its score and the two sentences."""
    from compress.tasks.question_answering.decoding import refuse_reader_flags

    refuse_reader_flags(predictor, args)
    if getattr(args, "word_tags", False):
        raise CompressError(f"--word-tags is for a tagger; {args.model} is a {predictor.task} model. Leave it out.")
    pairs = []
    for i, text in enumerate(read_texts(args.texts)):
        parts = text.split("\t")
        if len(parts) != 2 or not all(p.strip() for p in parts):
            raise CompressError(f"text {i + 1}: a sentence-similarity model scores pairs; give each as "
                                "'sentence1<TAB>sentence2' (one pair per line on standard input).")
        pairs.append((parts[0], parts[1]))
    scores = predict(predictor, pairs, batch_size=args.batch_size)
    return [f"{score:.4f}\t{a}\t{b}" for score, (a, b) in zip(scores, pairs)]


def request_parameters() -> tuple[str, ...]:
    """None: a pair's score has no settings."""
    return ()


def parse_request(inputs: Any, parameters: dict[str, Any], defaults: Mapping[str, Any]) -> Parsed:
    """``{"text", "text_pair"}`` pairs (a bare text is refused: it has nothing to be compared with)."""
    items, single = input_list(inputs)
    out: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        where = "inputs" if single else f"inputs[{i}]"
        if not isinstance(item, dict):
            raise BadInput(where, "a sentence-similarity model scores pairs: send {\"text\": ..., \"text_pair\": ...}")
        extra = sorted(set(item) - {"text", "text_pair"})
        if extra or "text" not in item or "text_pair" not in item:
            raise BadInput(where, "a sentence pair is {\"text\": ..., \"text_pair\": ...}"
                                  + (f"; {extra[0]!r} is not a key of it" if extra else ""))
        out.append((text_field(item["text"], f"{where}.text"), text_field(item["text_pair"], f"{where}.text_pair")))
    return Parsed(out, single, ("score",), {}, max(len(a) + len(b) for a, b in out))


def predict_batch(predictor: Any, key: tuple[Any, ...], inputs: list[Any], batch_size: int) -> list[Any]:
    """Each pair's score."""
    return [float(s) for s in predictor.predict(inputs, batch_size=batch_size)]


def format_results(parsed: Parsed, raw: Sequence[Any], label_names: Sequence[str]) -> Any:
    """``{"score": ...}`` per pair; one object for a single pair."""
    out = [{"score": float(score)} for score in raw]
    return out[0] if parsed.single else out


def warm_request() -> Any:
    """One pair."""
    return {"text": "the server warms up its model.", "text_pair": "the model is warmed up before it is ready."}


def openapi_schemas(label_names: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A text pair in; its score out."""
    text = {"type": "string"}
    one = {"type": "object", "required": ["text", "text_pair"], "additionalProperties": False,
           "properties": {"text": text, "text_pair": text}}
    score = {"type": "object", "properties": {"score": {"type": "number"}}}
    return one, {}, {"oneOf": [score, {"type": "array", "items": score}]}


def torch_model(folder: Any, allow_pickle: bool = False, eager_attention: bool = False) -> tuple[Any, Any, bool]:
    """The transformers head of this task (``Task.auto_model``) from ``folder``, as every stage loads it."""
    from compress.runtime.modeling import load_classifier
    from compress.tasks.sentence_similarity import NAME

    return load_classifier(folder, allow_pickle=allow_pickle, eager_attention=eager_attention, task=NAME)


def model_files(folder: Any) -> tuple[str, ...]:
    """None: ``config.json`` describes the model."""
    return ()
