"""The teacher stage, and the soft labels every distillation reads from a teacher.

``train_teacher`` hands the stage to the task the data is for (its ``training`` aspect,
:mod:`compress.tasks.protocol.training`): a classifier, a tagger or a reader is fine-tuned and scored there.

``teacher_logits`` computes the teacher's logits for a split once and caches them on disk, keyed
by the teacher's weights and the exact token ids, so a second distillation run (or a run with
other student settings) reuses them.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from compress.core.artifact import read_meta, weights_sha256
from compress.core.assets import cache_dir, resolve_model
from compress.config import TeacherConfig
from compress.tasks.tables import TaskData, align_labels
from compress.stages.distill.soft_labels import save_logits
from compress.core.errors import CompressError
from compress.runtime.modeling import load_classifier, predict_logits
from compress.tasks import get_task
from compress.tasks.task_choice import SEQUENCE, check_model_task
from compress.stages.training import gather_rows, world


def train_teacher(cfg: TeacherConfig, out: str | os.PathLike) -> Path:
    """Fine-tune (if needed) and evaluate a teacher of the data's task (or the model's own: a sentence-transformers
    folder, :func:`compress.tasks.task_choice.stage_task`; ``--finetune no``: the model as it is, which for a bare
    sentence encoder is a two-tower one); write it as an artifact at ``out``."""
    task = cfg.data.task(cfg.model, as_is=cfg.finetune is False)
    return get_task(task).aspect("training").train_teacher(cfg, out)


# ----------------------------------------------------------------------------- soft labels


@dataclass
class LoadedTeacher:
    """A teacher artifact in memory, with the identity used to key its cached logits."""

    path: Path
    model: Any
    tokenizer: Any
    weights_sha256: str
    meta: dict[str, Any]
    #: The task data it was loaded for, its classes in the teacher's order (:func:`compress.tasks.tables.align_labels`).
    task: TaskData | None = None


def load_teacher(folder: str | os.PathLike, task: TaskData | None = None, allow_pickle: bool = False,
                 eager_attention: bool = False, revision: str | None = None) -> LoadedTeacher:
    """Load a teacher classifier (an artifact, a folder or a hub id); it must already predict the task's labels."""
    path = Path(resolve_model(str(folder), revision=revision, allow_pickle=allow_pickle))
    if task is not None:  # a tagger or reader given classification data: one line, before transformers loads it
        _, names = check_model_task(path, SEQUENCE, task.source, str(folder))
        task = align_labels(task, names, f"--teacher {folder}")
    num_labels = task.num_labels if task is not None else None
    model, tokenizer, has_head = load_classifier(path, num_labels, task.label_names if task else None, allow_pickle,
                                                 eager_attention=eager_attention)
    if not has_head:
        raise CompressError(
            f"{path}: this model has no trained classification head, so it cannot teach. Fine-tune it first: "
            f"bert-compress teacher --model {folder} --data DATA --out TEACHER_DIR"
        )
    meta = read_meta(path) or {}
    sha = meta.get("weights_sha256") or weights_sha256(path)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return LoadedTeacher(path, model, tokenizer, sha, meta, task)


def _ids_digest(tokenized, prefix: str) -> str:
    digest = hashlib.sha256()
    for ids in tokenized[f"{prefix}input_ids"]:
        digest.update(np.asarray(ids, dtype=np.int32).tobytes())
        digest.update(b"|")
    return digest.hexdigest()


def soft_label_cache_path(teacher: LoadedTeacher, tokenized, prefix: str = "t_", precision: str = "fp32") -> Path:
    """Where the teacher's logits for exactly these token ids (at this decided precision) are cached.

    fp32 and bf16 keep the keys they had as ``bf16=False``/``bf16=True``, so caches made before
    ``--precision`` existed are still found."""
    tag = {"fp32": "bf16=False", "bf16": "bf16=True"}.get(precision, f"precision={precision}")
    key = hashlib.sha256(f"{teacher.weights_sha256}|{_ids_digest(tokenized, prefix)}|{tag}".encode()).hexdigest()
    return cache_dir() / "soft-labels" / f"{key}.npy"


def teacher_logits(teacher: LoadedTeacher, tokenized, prefix: str = "t_", precision: str = "fp32",
                   batch_size: int = 64, what: str = "train") -> tuple[np.ndarray, bool]:
    """The teacher's logits for every row of ``tokenized``, cached on disk.

    Returns ``(logits, reused)``. The cache key is the teacher's weights hash, the exact token ids
    and the precision, so any change to the teacher, the data or the tokenization recomputes.
    """
    path = soft_label_cache_path(teacher, tokenized, prefix, precision)
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    if path.exists():
        logits = np.load(path, allow_pickle=False)
        if logits.shape[0] == len(tokenized):
            print(f"soft labels ({what}, {len(tokenized)} examples): reusing the cache {path}")
            return logits, True
    t0 = time.perf_counter()
    rank, size = world()
    if size > 1:
        # Each rank labels every size-th example; the gathered array is what one process computes.
        mine = np.arange(rank, len(tokenized), size)
        local = predict_logits(teacher.model, tokenized.select(mine), batch_size=batch_size, precision=precision,
                               prefix=prefix, pad_id=teacher.tokenizer.pad_token_id,
                               desc=f"teacher soft labels ({what})", progress=rank == 0)
        logits = gather_rows(local, mine, len(tokenized))
    else:
        logits = predict_logits(teacher.model, tokenized, batch_size=batch_size, precision=precision, prefix=prefix,
                                pad_id=teacher.tokenizer.pad_token_id, desc=f"teacher soft labels ({what})")
    if rank == 0:
        save_logits(path, logits)
    print(f"soft labels ({what}, {len(tokenized)} examples): computed in {time.perf_counter() - t0:.1f} s, cached at {path}")
    return logits, False
