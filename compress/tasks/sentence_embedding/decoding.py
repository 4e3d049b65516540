"""The ``decoding`` aspect of a sentence encoder (:mod:`compress.tasks.protocol.decoding`): vectors out.

The model's one output is the sentence vector itself (``sentence_embedding``: pooling and normalisation are inside
the model, in PyTorch as :class:`~compress.tasks.sentence_embedding.pooling.PooledEncoder` and in the exported
graph), so a batch's output is that array as it is. A long text's windows are combined as
:func:`compress.tasks.sentence_embedding.vectors.pool_window_vectors` does: the token-weighted mean of the window
vectors, made unit length again when the model's vectors are (a model ending in ``Normalize`` gives only unit
vectors; no other model does). ``Predictor.encode`` and ``Predictor.predict`` both give the ``(n, dim)`` float32
array, as ``SentenceTransformer.encode`` does; ``bert-compress predict`` prints one JSON line per text, and the
server answers each input with its vector (a list of floats), as a feature-extraction endpoint does.

numpy and :mod:`compress.serving.schemas` only (the torch-free runtime imports this).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from compress.core.errors import CompressError
from compress.serving.schemas import Parsed, input_list, text_field
from compress.tasks.sentence_embedding.vectors import pool_window_vectors
from compress.core.windows import pool_windows

OUTPUT = "sentence_embedding"
#: How far from 1 a vector's norm may be for the model to count as normalising (float32 rounding, INT8 graphs).
UNIT_TOLERANCE = 1e-3


def batch_output(named: Mapping[str, np.ndarray], arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """The pooled vectors ``(batch, dim)``, float32."""
    return np.asarray(named[OUTPUT], dtype=np.float32)


def all_unit(rows: np.ndarray) -> bool:
    """Whether every row has unit length: the model normalises its vectors."""
    norms = np.linalg.norm(np.asarray(rows, dtype=np.float64), axis=-1)
    return bool(len(norms)) and bool(np.all(np.abs(norms - 1.0) < UNIT_TOLERANCE))


def combine_windows(windows: Any, rows: list[np.ndarray], pooling: str) -> list[np.ndarray]:
    """One vector per input from its windows' vectors: their token-weighted mean (``pooling`` ``mean``) or
    elementwise ``max``, unit length again when the model's vectors are."""
    if not len(windows):
        return []
    stacked = np.stack(rows)
    unit = all_unit(stacked)
    if pooling == "max":
        pooled = pool_windows(stacked, windows.sample, windows.n_samples, "max")
        if unit:
            pooled = pool_window_vectors(pooled, np.arange(len(pooled)), np.ones(len(pooled)), len(pooled), True)
        return list(pooled)
    tokens = np.array([len(ids) for ids in windows.input_ids])
    return list(pool_window_vectors(stacked, windows.sample, tokens, windows.n_samples, unit))


def encode(predictor: Any, texts: Any, batch_size: int = 32) -> np.ndarray:
    """``(n, dim)`` float32 vectors of ``texts`` (a long text read in windows), in the input order."""
    windows = predictor.windows(texts)
    if not len(windows):
        width = int(getattr(predictor.config, "hidden_size", 0) or 0)
        return np.zeros((0, width), dtype=np.float32)
    vectors = combine_windows(windows, predictor.run_windows(windows, batch_size), predictor.pooling)
    return np.stack(vectors).astype(np.float32)


def predict(predictor: Any, inputs: Any, batch_size: int = 32, **options: Any) -> np.ndarray:
    """The vectors, as :func:`encode`; another task's settings (a tagger's ``aggregation``, a reader's span search)
    are refused in one line."""
    given = sorted(k for k, v in options.items() if v is not None)
    if given:
        raise CompressError(f"{', '.join(given)}: settings of another task's predictions; {predictor.path} is a "
                            "sentence encoder, which gives one vector per text. Leave them out.")
    return encode(predictor, inputs, batch_size)


def probe_inputs(texts: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[Any]:
    """The single texts (an encoder reads each text alone; pairs are two texts)."""
    return list(texts) + [text for pair in pairs for text in pair]


def predict_command(predictor: Any, args: argparse.Namespace,
                    read_texts: Callable[[Sequence[str]], list[str]]) -> list[str]:
    """``bert-compress predict``: one JSON line per text, ``{"text": ..., "embedding": [...]}``."""
    from compress.tasks.question_answering.decoding import refuse_reader_flags

    refuse_reader_flags(predictor, args)
    if getattr(args, "word_tags", False):
        raise CompressError(f"--word-tags is for a tagger; {args.model} is a sentence encoder. Leave it out.")
    texts = read_texts(args.texts)
    vectors = encode(predictor, texts, batch_size=args.batch_size)
    return [json.dumps({"text": text, "embedding": [round(float(x), 7) for x in row]}, ensure_ascii=False)
            for text, row in zip(texts, vectors)]


def request_parameters() -> tuple[str, ...]:
    """None: the vector is what the model gives."""
    return ()


def parse_request(inputs: Any, parameters: dict[str, Any], defaults: Mapping[str, Any]) -> Parsed:
    """A text or a list of texts."""
    items, single = input_list(inputs)
    out = [text_field(item, "inputs" if single else f"inputs[{i}]") for i, item in enumerate(items)]
    return Parsed(out, single, ("embed",), {}, max(len(t) for t in out))


def predict_batch(predictor: Any, key: tuple[Any, ...], inputs: list[Any], batch_size: int) -> list[Any]:
    """Each input's vector."""
    return list(encode(predictor, inputs, batch_size))


def format_results(parsed: Parsed, raw: Sequence[Any], label_names: Sequence[str]) -> Any:
    """Each input's vector as a list of floats; one input answers one vector."""
    out = [[float(x) for x in row] for row in raw]
    return out[0] if parsed.single else out


def warm_request() -> Any:
    """One text."""
    return "the server warms up its model before it is ready."


def openapi_schemas(label_names: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A text in; its vector (or a list of them) out."""
    vector = {"type": "array", "items": {"type": "number"}}
    return {"type": "string"}, {}, {"oneOf": [vector, {"type": "array", "items": vector}]}


def torch_model(folder: Any, allow_pickle: bool = False, eager_attention: bool = False) -> tuple[Any, Any, bool]:
    """The encoder with its pooling and normalisation inside ``forward``
    (:class:`compress.tasks.sentence_embedding.pooling.PooledEncoder`), read from ``folder``'s ``modules.json`` (or a
    built-in's published pipeline); it answers the vector itself, so it always has its "head"."""
    from compress.core.artifact import check_model_folder
    from compress.tasks.sentence_embedding.folder import sentence_config
    from compress.tasks.sentence_embedding.pooling import load_pooled_encoder

    check_model_folder(Path(folder) / sentence_config(folder).encoder_path, allow_pickle=allow_pickle)
    model, tokenizer, _ = load_pooled_encoder(folder, eager=eager_attention)
    return model, tokenizer, True


def model_files(folder: Any) -> tuple[str, ...]:
    """The sentence-transformers files ``folder`` holds (``modules.json``, ``1_Pooling/``,
    ``sentence_bert_config.json``), which sentence-transformers and this task read the pipeline from."""
    from compress.tasks.sentence_embedding.folder import MODULES_FILE, POOLING_DIR, ST_CONFIG

    return tuple(name for name in (MODULES_FILE, POOLING_DIR, ST_CONFIG) if (Path(folder) / name).exists())
