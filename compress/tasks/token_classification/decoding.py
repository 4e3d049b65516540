"""The ``decoding`` aspect of a tagger (:mod:`compress.tasks.protocol.decoding`): what ``Predictor.predict``,
``bert-compress predict`` and ``bert-compress serve`` return, entities with character offsets and word tags.

A token-classification artifact (PyTorch or ONNX) gives one logit row per sub-word token. Users
want entities: ``{"type": "LOC", "start": 12, "end": 20, "text": "New York", "score": 0.97}``.
The steps, the same for every artifact kind (numpy only, so the torch-free ONNX path runs it):

1. **Tokens**: the text is tokenized as the Predictor tokenizes any text, windowed when longer
   than the model's window (:mod:`compress.core.windows`: each token's row comes from the window where
   it has most context), with each token's character span (the tokenizer's offset mapping).
2. **Words**: the text is split into words **by whitespace** (``\\S+``), and each token belongs to
   the whitespace word its span starts in. So ``"Paris,"`` is one word, tokens ``paris`` and
   ``,``, as transformers' pipeline (``is_subword`` when no space precedes the token) treats it;
   a tagger trained on CoNLL tokens (punctuation split off) tags ``paris`` and the entity's span
   then covers ``Paris,``. Split punctuation off with spaces to keep it out of entities.
3. **Word scores**, as transformers' token-classification pipeline aggregates sub-tokens: the
   softmax of each token's logits, then per word ``first`` (the first sub-token's scores, the
   default: the sub-token the tagger was trained on, :mod:`compress.tasks.token_classification.alignment`), ``max``
   (the scores of the sub-token whose top probability is highest) or ``average`` (the mean of
   the sub-tokens' scores); the word's tag is the argmax, its score that tag's probability.
4. **Entities** from the word tags with the rules the metric uses (:func:`compress.tasks.
   ner_metrics.extract_entities`, seqeval's: BIO/IOB2 and BIOES; for IOB2 this is the pipeline's
   grouping too), each spanning its first word's start to its last word's end, scored by the mean
   of its words' scores (the pipeline's ``group_sub_entities``).

The server's request is the token-classification pipeline's: ``inputs`` a text or a list of texts, each answer
the list of entity groups ``{"entity_group", "score", "word", "start", "end"}``; ``parameters.aggregation_strategy``
is how a word's sub-tokens give its tag (``serve --aggregation`` its default).
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from compress.core.errors import CompressError
from compress.core.numerics import softmax
from compress.serving.schemas import BadInput, Parsed, input_list, text_field
from compress.tasks.token_classification.metrics import extract_entities, split_tag
from compress.core.windows import merge_token_outputs

AGGREGATIONS = ("first", "average", "max")
DEFAULT_AGGREGATION = "first"
_WORD = re.compile(r"\S+")


def check_aggregation(aggregation: str) -> str:
    """``aggregation`` if it is one of :data:`AGGREGATIONS`, else one clear error naming them."""
    if aggregation not in AGGREGATIONS:
        raise CompressError(f"--aggregation {aggregation!r} is not one of {', '.join(AGGREGATIONS)}: first takes a "
                            "word's first sub-token, average the mean of its sub-tokens' scores, max the most "
                            "confident sub-token.")
    return aggregation


def whitespace_words(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` character span of each whitespace-separated word of ``text``."""
    return [m.span() for m in _WORD.finditer(text)]


def token_words(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[int]:
    """The whitespace word (index into ``spans``) each token starts in; ``-1`` for a token with no
    characters (special tokens)."""
    starts = np.asarray([s for s, _ in spans], dtype=np.int64)
    out = []
    for a, b in offsets:
        if b <= a or not len(starts):
            out.append(-1)
            continue
        k = int(np.searchsorted(starts, a, side="right")) - 1
        out.append(k if k >= 0 and a < spans[k][1] else -1)
    return out


def aggregate_words(probs: np.ndarray, words: Sequence[int], n_words: int,
                    aggregation: str = DEFAULT_AGGREGATION) -> tuple[np.ndarray, np.ndarray]:
    """``(label index, score)`` per word from its tokens' probabilities ``probs`` (tokens, labels).

    A word no token starts in (one the tokenizer drops, such as a control character) gets label ``-1``
    (read as ``O``) with score 0."""
    check_aggregation(aggregation)
    labels = np.full(n_words, -1, dtype=np.int64)
    scores = np.zeros(n_words, dtype=np.float64)
    groups: dict[int, list[int]] = {}
    for t, w in enumerate(words):
        if w >= 0:
            groups.setdefault(w, []).append(t)
    for w, tokens in groups.items():
        rows = probs[tokens]
        if aggregation == "first":
            chosen = rows[0]
        elif aggregation == "max":
            chosen = rows[int(rows.max(axis=-1).argmax())]
        else:
            chosen = rows.mean(axis=0)
        labels[w] = int(chosen.argmax())
        scores[w] = float(chosen[labels[w]])
    return labels, scores


def tag_text(text: str, logits: np.ndarray, offsets: Sequence[tuple[int, int]], label_names: Sequence[str],
             aggregation: str = DEFAULT_AGGREGATION, word_tags: bool = False) -> dict[str, Any]:
    """One text's result from its tokens' logits and character spans (see the module docstring)."""
    spans = whitespace_words(text)
    words = token_words(offsets, spans)
    probs = softmax(np.asarray(logits, dtype=np.float64)) if len(logits) else np.zeros((0, len(label_names)))
    labels, scores = aggregate_words(probs, words, len(spans), aggregation)
    tags = [label_names[i] if i >= 0 else "O" for i in labels]
    entities = []
    for e in extract_entities(tags):  # label names checked by check_tag_names
        start, end = spans[e.start][0], spans[e.end - 1][1]
        entities.append({"type": e.type, "start": int(start), "end": int(end), "text": text[start:end],
                         "score": float(np.mean(scores[e.start:e.end]))})
    out: dict[str, Any] = {"text": text, "entities": entities}
    if word_tags:
        out["words"] = [text[a:b] for a, b in spans]
        out["word_tags"] = tags
        out["word_scores"] = [float(s) for s in scores]
    return out


def check_tag_names(label_names: Sequence[str]) -> None:
    """One error line when a tagger's label names are not ``O`` / ``B-X`` ... (``LABEL_0`` and the like)."""
    for name in label_names:
        try:
            split_tag(name)
        except ValueError:
            raise CompressError(f"the tagger's label {name!r} is not a BIO/BIOES tag (O, B-TYPE, I-TYPE, ...), so no "
                                "entities can be read from its output. Its config.json id2label must hold the tag "
                                "names; train it with bert-compress teacher on tagging data.") from None


def tag_texts(predictor: Any, texts: str | Sequence[str], batch_size: int = 32,
              aggregation: str = DEFAULT_AGGREGATION, word_tags: bool = False) -> list[dict[str, Any]]:
    """:meth:`compress.runtime.predictor.Predictor.predict` for a tagger: one result per text (see :func:`tag_text`)."""

    check_aggregation(aggregation)
    check_tag_names(predictor.label_names)
    items = [texts] if isinstance(texts, str) else list(texts)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise CompressError(f"predict: input {i} is a {type(item).__name__}; a tagger takes single texts (no "
                                "sentence pairs).")
    if not items:
        return []
    windows = predictor.windows(items)
    merged = merge_token_outputs(windows, predictor.run_windows(windows, batch_size))
    return [tag_text(text, merged[i], windows.document_offsets(i), predictor.label_names, aggregation, word_tags)
            for i, text in enumerate(items)]


def format_tagged(result: dict[str, Any]) -> str:
    """``bert-compress predict``'s lines for one tagged text: the text, then one line per entity
    (``TYPE  start-end  "text"  score``), then the word tags when they were asked for."""
    lines = [result["text"]]
    if not result["entities"]:
        lines.append("  (no entities)")
    width = max((len(e["type"]) for e in result["entities"]), default=0)
    for e in result["entities"]:
        lines.append(f"  {e['type']:<{width}}  {e['start']}-{e['end']}  {e['text']!r}  {e['score']:.4f}")
    if "word_tags" in result:
        lines.append("  words: " + " ".join(f"{w}/{t}" for w, t in zip(result["words"], result["word_tags"])))
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the decoding protocol


def batch_output(named: Mapping[str, np.ndarray], arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """The tagger's ``logits``, ``(batch, sequence, labels)``."""
    return named["logits"]


def combine_windows(windows: Any, rows: list[np.ndarray], pooling: str) -> list[np.ndarray]:
    """Each text's ``(tokens, labels)`` logits, its windows merged (each token from the window where it has most
    context); ``pooling`` is for whole-text rows and does not apply."""
    return merge_token_outputs(windows, rows) if len(windows) else []


def predict(predictor: Any, inputs: Any, batch_size: int = 32, aggregation: str = DEFAULT_AGGREGATION,
            word_tags: bool = False, **_span_settings: Any) -> list[dict[str, Any]]:
    """One dict per text, ``{"text", "entities": [{"type", "start", "end", "text", "score"}, ...]}`` (and with
    ``word_tags`` its ``words``, ``word_tags`` and ``word_scores``): :func:`tag_texts`. A reader's span settings
    (``n_best``, ...) have nothing to act on in a tagger and change nothing."""
    return tag_texts(predictor, inputs, batch_size, aggregation, word_tags)


def encode(predictor: Any, texts: Any, batch_size: int = 32) -> np.ndarray:
    """A tagger gives tags, not one vector per text: refused."""
    raise CompressError(f"{predictor.path} is a token-classification model: it tags words and gives no sentence "
                        "vector; Predictor.encode is for a sentence encoder. Use predict.")


def probe_inputs(texts: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[Any]:
    """The single texts (a tagger reads no pairs)."""
    return list(texts)


def predict_command(predictor: Any, args: argparse.Namespace,
                    read_texts: Callable[[Sequence[str]], list[str]]) -> list[str]:
    """``bert-compress predict``: each text's entities (:func:`format_tagged`), ``--aggregation`` and
    ``--word-tags`` as asked."""
    from compress.tasks.question_answering.decoding import refuse_reader_flags

    refuse_reader_flags(predictor, args)
    texts = read_texts(args.texts)
    return [format_tagged(r) for r in predict(predictor, texts, batch_size=args.batch_size,
                                                aggregation=args.aggregation, word_tags=args.word_tags)]


def request_parameters() -> tuple[str, ...]:
    """``aggregation_strategy`` only."""
    return ("aggregation_strategy",)


def parse_request(inputs: Any, parameters: dict[str, Any], defaults: Mapping[str, Any]) -> Parsed:
    """A text or a list of texts, with the request's (else the server's) ``aggregation_strategy``."""
    items, single = input_list(inputs)
    out = [text_field(item, "inputs" if single else f"inputs[{i}]") for i, item in enumerate(items)]
    aggregation = parameters.get("aggregation_strategy", defaults.get("aggregation", DEFAULT_AGGREGATION))
    if aggregation not in AGGREGATIONS:
        raise BadInput("parameters.aggregation_strategy", f"is {aggregation!r}; this server aggregates a word's "
                                                           f"sub-tokens by {', '.join(AGGREGATIONS)}")
    return Parsed(out, single, ("tag", aggregation), length=max(map(len, out)))


def predict_batch(predictor: Any, key: tuple[Any, ...], inputs: list[Any], batch_size: int) -> list[Any]:
    """Each text's entities, aggregated as ``key`` says."""
    return [r["entities"] for r in predictor.predict(inputs, batch_size=batch_size, aggregation=key[1])]


def format_results(parsed: Parsed, raw: Sequence[Any], label_names: Sequence[str]) -> Any:
    """The pipeline's entity groups per text."""
    out = [[{"entity_group": e["type"], "score": float(e["score"]), "word": e["text"], "start": int(e["start"]),
             "end": int(e["end"])} for e in entities] for entities in raw]
    return out[0] if parsed.single else out


def warm_request() -> Any:
    """One text."""
    return "the server warms up its model before it is ready."


def openapi_schemas(label_names: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A text in; the entity groups of a text (of each text, for a list) out."""
    text = {"type": "string"}
    params = {"aggregation_strategy": {"enum": list(AGGREGATIONS), "default": DEFAULT_AGGREGATION}}
    group = {"type": "object", "properties": {"entity_group": text, "score": {"type": "number"}, "word": text,
                                              "start": {"type": "integer"}, "end": {"type": "integer"}}}
    result = {"oneOf": [{"type": "array", "items": group},
                        {"type": "array", "items": {"type": "array", "items": group}}]}
    return text, params, result


def torch_model(folder: Any, allow_pickle: bool = False, eager_attention: bool = False) -> tuple[Any, Any, bool]:
    """The transformers head of this task (``Task.auto_model``) from ``folder``, as every stage loads it."""
    from compress.runtime.modeling import load_classifier
    from compress.tasks.token_classification import NAME

    return load_classifier(folder, allow_pickle=allow_pickle, eager_attention=eager_attention, task=NAME)


def model_files(folder: Any) -> tuple[str, ...]:
    """None: ``config.json`` describes the model."""
    return ()
