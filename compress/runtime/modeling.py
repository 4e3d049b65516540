"""Loading BERT-family classifiers safely, running them in batches, and scoring them.

Shared by the teacher, soft-label, distillation and evaluation code so every stage loads models
the same way: safetensors only (pickle weights need an explicit opt-in and then load with
``weights_only=True``), never ``trust_remote_code``, tokenizer checked against the model.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import numpy as np

from compress.core.artifact import check_model_folder
from compress.core.errors import CompressError
from compress.core.quiet import quiet_transformers
from compress.tasks.tables import DynamicPaddingCollator
from compress.runtime.formats.pruned import PRUNING_KEY, load_pruned
from compress.core.hub import describe_folder
from compress.core.progress import progress as show_progress
from compress.tasks import get_task


def named_outputs(result: Any, names: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """A model call's outputs by name: the fields of a transformers ``ModelOutput``, or, for a module that returns
    one tensor (a sentence encoder's vector), that tensor as the task's single output."""
    if not hasattr(result, "keys") and len(names) == 1:
        return {names[0]: result}
    return {name: getattr(result, name) for name in names}


def load_tokenizer(folder: str | Path, model_vocab_size: int | None = None, words: bool = False):
    """The folder's tokenizer, checked against the model's vocabulary size.

    ``words``: it will tokenize pre-split words (a tagger's). A byte-level BPE tokenizer (RoBERTa's)
    saved with ``add_prefix_space=False`` would then read every word as text-initial, without the
    leading space it has in running text ("went" instead of " went"), so a tagger trained on words
    would see other tokens than the same tagger serving raw text; it is loaded with
    ``add_prefix_space=True`` instead, and saved that way with the artifacts made from it.
    """
    from transformers import AutoTokenizer

    path = Path(folder)
    if not any((path / f).exists() for f in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "vocab.json")):
        raise CompressError(f"{path} has no tokenizer files (tokenizer.json or vocab.txt). Save the tokenizer beside "
                            "the model with tokenizer.save_pretrained(folder).")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
        if words and getattr(tokenizer, "add_prefix_space", None) is False:
            tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False, add_prefix_space=True)
    except Exception as exc:
        raise CompressError(f"{path}: the tokenizer could not be loaded ({exc}). Re-save it with save_pretrained().") from exc
    if model_vocab_size is not None and len(tokenizer) > model_vocab_size:
        raise CompressError(
            f"{path}: the tokenizer has {len(tokenizer)} tokens but the model's embedding has {model_vocab_size}: they do "
            "not belong together. Put the tokenizer the model was trained with in the folder."
        )
    return tokenizer


def load_classifier(folder: str | Path, num_labels: int | None = None, label_names: list[str] | None = None,
                    allow_pickle: bool = False, eager_attention: bool = False,
                    task: str = "sequence-classification"):
    """Load a classifier from a local folder; a missing head is created (to be trained).

    ``task`` (a :mod:`compress.tasks` name) decides the head (``Task.auto_model``): a sequence classifier by
    default, a tagger (``AutoModelForTokenClassification``) for ``token-classification``.
    Returns ``(model, tokenizer, has_trained_head)``.
    """
    from transformers import AutoConfig

    spec = get_task(task)

    path = Path(folder)
    try:
        raw = check_model_folder(path, allow_pickle=allow_pickle)
    except CompressError as exc:  # a hub snapshot: name the id the user typed, not only the cache path

        if describe_folder(path) is None:
            raise
        raise CompressError(f"{describe_folder(path)}: {exc}") from exc
    has_head = spec.has_head(raw.get("architectures"))
    # a task whose labels belong to words tokenizes pre-split words (a tagger's): see load_tokenizer
    words = spec.label_unit == "word"
    kwargs: dict[str, Any] = {"trust_remote_code": False}
    if num_labels is not None:
        head = len(raw["id2label"]) if raw.get("id2label") else int(raw.get("num_labels", 2))
        if has_head and head != num_labels:
            raise CompressError(
                f"{path}: the model's classifier predicts {head} labels but the data has {num_labels} classes "
                f"({', '.join(label_names) if label_names else f'labels 0..{num_labels - 1}'}). "
                "Use a teacher fine-tuned on this task, or a model without a classification head."
            )
        names = label_names or [str(i) for i in range(num_labels)]
        kwargs.update(num_labels=num_labels, id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)})
    if eager_attention:
        kwargs["attn_implementation"] = "eager"
    config = AutoConfig.from_pretrained(str(path), **kwargs)

    if raw.get(PRUNING_KEY):
        # Heads pruned per layer: no config field describes that shape, so from_pretrained cannot build it.
        model = load_pruned(path, config, eager_attention=eager_attention)
        tokenizer = load_tokenizer(path, model.config.vocab_size, words=words)
        return model, tokenizer, has_head
    use_safe = any((path / n).exists() for n in ("model.safetensors", "model.safetensors.index.json"))
    with quiet_transformers():
        model = spec.model_class().from_pretrained(str(path), config=config, use_safetensors=use_safe,
                                                   trust_remote_code=False)
    tokenizer = load_tokenizer(path, model.config.vocab_size, words=words)
    return model, tokenizer, has_head


#: Families whose position ids count from ``padding_idx + 1`` (= 2): their table of N rows holds N - 2 tokens.
#: MPNet is one (its embeddings copy RoBERTa's), so mpnet-base's 514 rows hold 512 tokens.
POSITION_OFFSET_TYPES = ("roberta", "xlm-roberta", "camembert", "mpnet")


def position_limit(config: Any) -> int | None:
    """The longest sequence the model's position table allows, or ``None`` when the config has none."""
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int) or isinstance(positions, bool) or positions <= 0:
        return None
    if getattr(config, "model_type", "") in POSITION_OFFSET_TYPES:
        positions -= 2
    return positions


def fit_max_length(max_length: int, *configs: Any, who: str = "the model") -> int:
    """``max_length`` capped at the shortest position table of ``configs`` (a teacher's and a student's), with a note.

    A longer window would index past the position embeddings and crash in the forward pass (or read garbage in
    an ONNX graph); ``Predictor`` caps its windows the same way, so training and serving read alike."""
    limits = [limit for limit in (position_limit(c) for c in configs) if limit]
    cap = min(limits) if limits else None
    if cap is None or max_length <= cap:
        return max_length
    print(f"note: --max-length {max_length} is longer than {who} reads ({cap} positions): windows of {cap} tokens")
    return cap


def autocast(precision: str, device=None):
    """Autocast in ``precision`` (``bf16`` or ``fp16``) on ``device``; a no-op for ``fp32``.

    ``precision`` is an already decided one (:func:`compress.core.device.resolve_precision` turns
    ``--precision auto`` into it, and a bf16 request on a GPU without bf16 into fp16).
    ``device`` (a ``torch.device`` or name) is where the computation runs; without it, the GPU
    when there is one. A device type without autocast support runs unchanged.
    """
    import torch

    if precision not in ("fp32", "bf16", "fp16"):
        raise ValueError(f"autocast: precision must be a decided one (fp32, bf16 or fp16), got {precision!r}")
    if precision == "fp32":
        return contextlib.nullcontext()
    if device is None:
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    else:
        kind = torch.device(device).type
    if not torch.amp.is_autocast_available(kind):
        return contextlib.nullcontext()
    return torch.autocast(device_type=kind, dtype=torch.float16 if precision == "fp16" else torch.bfloat16)


def model_device(model):
    """The device of a model's parameters (the CPU for a model without any)."""
    import torch

    for param in model.parameters():
        return param.device
    return torch.device("cpu")


def predict_logits(model, tokenized, batch_size: int = 64, precision: str = "fp32", prefix: str = "",
                   pad_id: int = 0, desc: str = "predicting", progress: bool = True) -> np.ndarray:
    """Logits for every row of a tokenized dataset, in the dataset's order.

    Rows are run longest first in batches padded to their own length (sorting by length roughly
    halves the padded compute on short-text tasks), then put back in order. Each batch goes to the
    model's device and each batch of logits comes back to the CPU, so a model on a GPU works.
    """
    import torch

    ids = tokenized[f"{prefix}input_ids"]
    order = np.argsort([-len(x) for x in ids], kind="stable")
    cols = [c for c in (f"{prefix}input_ids", f"{prefix}attention_mask", f"{prefix}token_type_ids") if c in tokenized.column_names]
    collate = DynamicPaddingCollator({prefix: pad_id})
    out = np.zeros((len(ids), model.config.num_labels), dtype=np.float32)
    model.eval()
    accepts_types = accepts_token_types(model)
    subset = tokenized.select_columns(cols)
    device = model_device(model)
    with torch.inference_mode(), autocast(precision, device):
        for start in show_progress(range(0, len(order), batch_size), desc, unit="batches", enabled=progress):
            idx = order[start:start + batch_size]
            batch = collate([subset[int(i)] for i in idx])
            inputs = {k[len(prefix):]: v.to(device) for k, v in batch.items()}
            if not accepts_types:
                inputs.pop("token_type_ids", None)
            logits = model(**inputs).logits
            out[idx] = logits.float().cpu().numpy()
    return out


def accepts_token_types(model) -> bool:
    """Whether the model's forward takes ``token_type_ids`` (BERT does, MPNet and DistilBERT do not)."""
    import inspect

    return "token_type_ids" in inspect.signature(model.forward).parameters


def classification_metrics(logits: np.ndarray, labels: np.ndarray, reference_logits: np.ndarray | None = None) -> dict[str, float]:
    """Accuracy, macro-F1 and, given a reference model's logits, agreement of the argmax predictions."""
    pred = np.asarray(logits).argmax(-1)
    labels = np.asarray(labels)
    out = {"accuracy": float((pred == labels).mean()), "macro_f1": macro_f1(pred, labels), "n": int(len(labels))}
    if reference_logits is not None:
        out["agreement"] = float((pred == np.asarray(reference_logits).argmax(-1)).mean())
    return out


def macro_f1(pred: np.ndarray, labels: np.ndarray) -> float:
    """Unweighted mean of per-class F1 over the classes present in labels or predictions."""
    classes = np.union1d(np.unique(labels), np.unique(pred))
    scores = []
    for c in classes:
        tp = float(np.sum((pred == c) & (labels == c)))
        fp = float(np.sum((pred == c) & (labels != c)))
        fn = float(np.sum((pred != c) & (labels == c)))
        denom = 2 * tp + fp + fn
        scores.append(2 * tp / denom if denom else 0.0)
    return float(np.mean(scores)) if scores else 0.0


def count_parameters(model) -> int:
    return int(sum(p.numel() for p in model.parameters()))
