"""The ``training`` aspect of a sentence encoder (:mod:`compress.tasks.protocol.training`).

**Teacher** (:func:`train_teacher`): a sentence-transformers folder (or a built-in ``minilm`` / ``mpnet-base``, with
its published pipeline) is the teacher *as it is* by default: it was trained for this. ``--finetune yes`` fine-tunes
it on scored pairs with sentence-transformers' ``CosineSimilarityLoss`` (the MSE between ``cos(u, v)`` and the
score scaled to 0..1 by the data's score range). Scored pairs also give its STS Spearman on validation and test.

**Distillation** (:func:`distill`): the student (``--student`` / ``--init`` as for every task,
:func:`students.factory.build_student`) learns the teacher's vectors of unlabelled text (``--unlabeled``, else the
data's own training texts, both sides of each pair for scored pairs) with the projection MSE and/or the batch's
cosine matrix (:mod:`compress.tasks.sentence_embedding.distill`); held-out texts give its neighbour recall@10.
The loss is ``cfg.embedding_loss`` (``--embedding-loss``; ``both`` when unset) and the projection is stored when
``cfg.keep_projection`` (``--keep-projection``).

Pruning and masked-LM pre-training are not offered for this task yet: those members refuse in one line.
"""

from __future__ import annotations

import math
import os
import random
import time
from pathlib import Path
from typing import Any

import torch

from compress.core.errors import CompressError
from compress.tasks.sentence_embedding import NAME
from compress.tasks.sentence_embedding.data import EmbeddingData, EmbeddingPairs, load as load_data
from compress.tasks.sentence_embedding.distill import (EmbeddingDistillConfig, Encoder, distill_encoder,
                                                       student_pipeline, write_student)
from compress.tasks.sentence_embedding.folder import BUILTIN, SentenceConfig, sentence_config
from compress.tasks.sentence_embedding.metrics import sts_scores


def _texts(data: EmbeddingData | EmbeddingPairs, split: str) -> list[str]:
    """The single texts of ``split``: the texts themselves, or both sentences of each pair (each once)."""
    if isinstance(data, EmbeddingPairs):
        return list(dict.fromkeys(t for pair in data.texts(split) for t in pair)) if split in data.splits else []
    return list(data.splits.get(split, []))


def evaluate(encoder: Encoder, data: EmbeddingData | EmbeddingPairs) -> dict[str, Any]:
    """STS Spearman and Pearson (x100) on the validation and test pairs there are; nothing for text alone."""
    if not isinstance(data, EmbeddingPairs):
        return {}
    out = {}
    for split in ("validation", "test"):
        if split in data.splits and len(data.splits[split]):
            pairs = data.texts(split)
            a, b = encoder.vectors([p[0] for p in pairs]).numpy(), encoder.vectors([p[1] for p in pairs]).numpy()
            out[split] = sts_scores(a, b, data.scores(split))
    return out


def _fine_tune(encoder: Encoder, data: EmbeddingPairs, train: Any) -> dict[str, Any]:
    """``CosineSimilarityLoss`` on the training pairs: AdamW, ``train.epochs`` epochs (or ``train.max_steps``)."""
    pairs, gold = data.texts("train"), data.scores("train")
    low, high = data.pairs.score_range
    target = torch.tensor((gold - low) / (high - low), dtype=torch.float32)
    steps = train.max_steps if train.max_steps > 0 else max(1, math.ceil(train.epochs * len(pairs) / train.batch_size))
    model, tok = encoder.model, encoder.tokenizer
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=train.lr, weight_decay=train.weight_decay)
    rng, order, losses = random.Random(train.seed), [], []
    model.train()
    for _ in range(steps):
        if len(order) < train.batch_size:
            fresh = list(range(len(pairs)))
            rng.shuffle(fresh)
            order += fresh
        rows, order = order[:train.batch_size], order[train.batch_size:]
        sides = [tok([pairs[i][side] for i in rows], padding=True, truncation=True, max_length=encoder.max_length,
                     return_tensors="pt").to(device) for side in (0, 1)]
        u, v = (model(s["input_ids"], s["attention_mask"], s.get("token_type_ids")) for s in sides)
        loss = torch.nn.functional.mse_loss(torch.nn.functional.cosine_similarity(u, v), target[rows].to(device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(round(float(loss.detach()), 6))
    model.eval()
    return {"loss": "cosine similarity (MSE of cos(u, v) to the score scaled to 0..1)", "steps": steps,
            "loss_first": losses[0], "loss_last": losses[-1]}


def train_teacher(cfg: Any, out: str | os.PathLike) -> Path:
    """The teacher as it is (default), or fine-tuned on scored pairs with ``--finetune yes``; scored and written."""
    from compress.core.assets import resolve_model

    cfg.validate()
    started = time.perf_counter()
    source = resolve_model(cfg.model, revision=cfg.revision, allow_pickle=cfg.allow_pickle)
    encoder = Encoder.load(source, builtin=cfg.model if cfg.model in BUILTIN else None)
    encoder.max_length = min(encoder.max_length, cfg.max_length)
    data = load_data(cfg.data)
    training: dict[str, Any] = {}
    if cfg.finetune is True:
        if not isinstance(data, EmbeddingPairs):
            raise CompressError(f"--finetune yes: a sentence encoder is fine-tuned on scored sentence pairs, and --data "
                                f"{cfg.data.data} is text without scores. Give pairs (sentence1, sentence2, score), or "
                                "leave --finetune out to use the model as it is.")
        torch.manual_seed(cfg.train.seed)
        training = _fine_tune(encoder, data, cfg.train)
    metrics = evaluate(encoder, data)
    record = {"fine_tuned": bool(training), "training": training, "pipeline_from": encoder.config.source,
              "projection": {"stored": False, "file": None, "what": "none: a teacher"}}
    meta = {"stage": "teacher", "kind": "pytorch", "task": NAME, "parent": {"model": cfg.model, "path": str(source)},
            "config": cfg.to_dict(), "data": data.describe(),
            "metrics": metrics, "timings": {"total_s": round(time.perf_counter() - started, 1)}}
    return write_student(out, encoder, record, None, meta)


def _student(cfg: Any, teacher: Encoder) -> Encoder:
    """The student ``cfg.student`` builds (the shared factory), with its own pipeline when it is a published sentence
    encoder (``--init minilm`` or ``pretrained:`` a sentence-transformers folder), else the teacher's."""
    from compress.core.assets import resolve_model
    from students.factory import build_student

    model, tokenizer, _ = build_student(cfg.student, teacher.model.encoder, teacher.tokenizer, [], cfg.layer_map,
                                        cfg.train.seed, task=NAME)
    init = cfg.student.init
    if init == "minilm" or init.startswith("pretrained:"):
        name = "minilm" if init == "minilm" else init.split(":", 1)[1]
        config = sentence_config(resolve_model(name), builtin=name if name in BUILTIN else None)
    else:
        config = SentenceConfig()  # a fresh encoder: a plain one, given the teacher's pipeline
    length = min(teacher.max_length, cfg.max_length, int(model.config.max_position_embeddings))
    return student_pipeline(model, tokenizer, config, teacher.config, length)


def distill(cfg: Any, out: str | os.PathLike) -> Path:
    """The student trained on the teacher's vectors of the data's (or ``--unlabeled``) texts, written at ``out``."""
    cfg.validate()
    teacher = Encoder.load(cfg.teacher)
    teacher.max_length = min(teacher.max_length, cfg.max_length)
    data = load_data(cfg.data)
    texts = _texts(data, "train")
    if cfg.unlabeled:
        from compress.corpora.corpus import load_unlabeled

        texts = load_unlabeled(cfg.unlabeled, cfg.unlabeled_text_column).texts[:cfg.unlabeled_limit]
    seen = set(texts)
    held_out = [t for t in _texts(data, "validation") if t not in seen]
    student = _student(cfg, teacher)
    settings = cfg.train
    steps = settings.max_steps if settings.max_steps > 0 else max(
        1, math.ceil(settings.epochs * len(texts) / settings.batch_size))
    run = EmbeddingDistillConfig(teacher=str(cfg.teacher), student=f"{cfg.student.shape} ({cfg.student.init})",
                                 loss=cfg.embedding_loss or "both", steps=steps,
                                 batch_size=settings.batch_size, lr=settings.lr, seed=settings.seed,
                                 max_length=student.max_length, keep_projection=cfg.keep_projection)
    record, mse = distill_encoder(teacher, student, texts, run, held_out if len(held_out) > 10 else None)
    meta = {"kind": "pytorch", "config": cfg.to_dict(), "metrics": evaluate(student, data),
            "teacher_metrics": evaluate(teacher, data) if isinstance(data, EmbeddingPairs) else {},
            "data": data.describe()}
    return write_student(out, student, record, mse, meta)


def load_for_pruning(cfg: Any, source: Path, data: Any) -> tuple[Any, Any, bool]:
    """Refused: pruning a sentence encoder (with recovery on the teacher's vectors) is not offered yet."""
    raise CompressError(f"--model {source}: pruning a sentence encoder is not supported yet. Distil a smaller student "
                        "instead (bert-compress distill --student LxH).")


def pruning_scorer(cfg: Any, data: Any, tokenizer: Any, pad_id: int) -> Any:
    """Refused, as :func:`load_for_pruning`."""
    raise CompressError("pruning a sentence encoder is not supported yet; distil a smaller student instead.")


def pretrain_data(data: Any) -> Any:
    """Refused: continued masked-LM pre-training reads a classifier's or tagger's texts; give the encoder's texts to
    ``distill --unlabeled`` instead, which is how this task uses unlabelled text."""
    raise CompressError("pretrain does not read sentence-embedding data; a sentence encoder learns from unlabelled "
                        "text by distillation: bert-compress distill --unlabeled FILE.")

