"""Distil a two-tower encoder: the student learns the teacher's vectors on unlabelled text of the user's domain.

The teacher (a sentence-transformers folder, used as it is) embeds every training text once; the student is then
trained on those vectors with :class:`~compress.tasks.sentence_embedding.losses.ProjectedMSE` (``mse``), the
batch's :func:`~compress.tasks.sentence_embedding.losses.cosine_matrix_loss` (``cosine``), or their sum
(``both``). With equal widths the MSE needs no projection and the student learns the teacher's own space (its
vectors can be compared with the teacher's: cosine agreement); with different widths a linear map trains beside
the student. What the artifact stores is said in its ``compress.json`` (``distillation.projection``): the
student encoder with its pooling and normalisation as a sentence-transformers folder always, and the projection
(``projection.safetensors``, the map student -> teacher width) only when ``keep_projection`` asks for it, since
the deployed student answers with its own vector.

The student pools and normalises as its folder says (``modules.json`` or a built-in's published pipeline); a
plain encoder folder takes the teacher's pooling and normalisation, the pipeline it is taught to reproduce.
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from compress.core.errors import CompressError
from compress.tasks.sentence_embedding.folder import SentenceConfig, write_sentence_config
from compress.tasks.sentence_embedding.losses import ProjectedMSE, cosine_matrix_loss
from compress.tasks.sentence_embedding.pooling import PooledEncoder, encode, load_pooled_encoder, tokenizer_limit

#: The losses a student can be trained with.
LOSSES = ("mse", "cosine", "both")
PROJECTION_FILE = "projection.safetensors"


@dataclass
class EmbeddingDistillConfig:
    """What one embedding distillation runs: models, loss, and the few optimiser settings it has."""

    teacher: str
    student: str
    loss: str = "both"
    steps: int = 1000
    batch_size: int = 32
    lr: float = 5e-5
    seed: int = 0
    max_length: int | None = None
    keep_projection: bool = False

    def checked(self) -> "EmbeddingDistillConfig":
        if self.loss not in LOSSES:
            raise CompressError(f"--loss {self.loss!r} is not one of {', '.join(LOSSES)}: mse learns the teacher's "
                                "vectors (through a projection when the widths differ), cosine the batch's cosine "
                                "matrix, both their sum.")
        for name in ("steps", "batch_size"):
            if getattr(self, name) < 1:
                raise CompressError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}.")
        if self.loss == "cosine" and self.batch_size < 2:
            raise CompressError("--loss cosine compares the texts of a batch with one another; give --batch-size 2 "
                                "or more.")
        return self


@dataclass
class Encoder:
    """A loaded two-tower encoder: the module, its tokenizer, its pipeline, and the length it reads."""

    model: PooledEncoder
    tokenizer: Any
    config: SentenceConfig
    max_length: int

    @classmethod
    def load(cls, folder: str | Path, max_length: int | None = None, builtin: str | None = None) -> "Encoder":
        model, tok, config = load_pooled_encoder(folder, builtin)
        return cls(model, tok, config, max_length or tokenizer_limit(tok, model, config))

    def vectors(self, texts: Sequence[str]) -> torch.Tensor:
        return torch.from_numpy(encode(self.model, self.tokenizer, list(texts), self.max_length))


def student_pipeline(encoder: torch.nn.Module, tokenizer: Any, config: SentenceConfig, teacher: SentenceConfig,
                     max_length: int) -> Encoder:
    """The student as an :class:`Encoder`: its own pipeline where its folder states one, else the teacher's."""
    if config.source == "plain encoder":
        config = dataclasses.replace(config, pooling=teacher.pooling, normalize=teacher.normalize,
                                     source=f"the teacher's pipeline ({teacher.source})")
    return Encoder(PooledEncoder(encoder, config.pooling, config.normalize), tokenizer, config, max_length)


def distill_embeddings(cfg: EmbeddingDistillConfig, texts: Sequence[str], out: str | Path,
                       held_out: Sequence[str] | None = None) -> dict[str, Any]:
    """Train ``cfg.student`` (a folder) on the teacher's vectors of ``texts`` for ``cfg.steps`` steps and write it
    to ``out``.

    Returns the record written as ``compress.json``'s ``distillation`` (losses per step, what is stored, and, for
    ``held_out`` texts, the student's neighbour recall@10 against the teacher there).
    """
    cfg.checked()
    torch.manual_seed(cfg.seed)
    teacher = Encoder.load(cfg.teacher, cfg.max_length)
    loaded, s_tok, s_config = load_pooled_encoder(cfg.student)
    student = student_pipeline(loaded.encoder, s_tok, s_config, teacher.config,
                               cfg.max_length or tokenizer_limit(s_tok, loaded, s_config))
    record, mse = distill_encoder(teacher, student, texts, cfg, held_out)
    write_student(out, student, record, mse)
    return record


def distill_encoder(teacher: Encoder, student: Encoder, texts: Sequence[str], cfg: EmbeddingDistillConfig,
                    held_out: Sequence[str] | None = None) -> tuple[dict[str, Any], ProjectedMSE | None]:
    """Train ``student`` in place on ``teacher``'s vectors of ``texts``; the record and the MSE term (with its
    projection, if any) for :func:`write_student`."""
    cfg.checked()
    if len(texts) < cfg.batch_size:
        raise CompressError(f"{len(texts)} training texts for batches of {cfg.batch_size}; give more text or a "
                            "smaller --batch-size.")
    torch.manual_seed(cfg.seed)
    targets = teacher.vectors(texts)
    mse = ProjectedMSE(student.model.dimension, teacher.model.dimension) if cfg.loss in ("mse", "both") else None
    if mse is not None:
        mse.to(next(student.model.parameters()).device)
    params = list(student.model.parameters()) + (list(mse.parameters()) if mse is not None else [])
    optimizer = torch.optim.AdamW(params, lr=cfg.lr)
    history = _train(student.model, student.tokenizer, student.max_length, list(texts), targets, mse, optimizer, cfg)
    record = _record(cfg, student.model, teacher.model, mse, history, student.config)
    if held_out:
        from compress.tasks.sentence_embedding.metrics import neighbour_recall

        record["held_out"] = {"texts": len(held_out), "neighbour_recall@10": neighbour_recall(
            student.vectors(held_out).numpy(), teacher.vectors(held_out).numpy())}
    return record, mse


def write_student(out: str | Path, student: Encoder, record: dict[str, Any], mse: ProjectedMSE | None,
                  meta: dict[str, Any] | None = None) -> Path:
    """The student artifact: encoder, tokenizer, its pipeline as a sentence-transformers folder, the projection when
    the record says it is stored, and ``compress.json`` (``meta`` added to it)."""
    from compress.core.artifact import write_artifact

    def fill(tmp: Path) -> None:
        student.model.encoder.save_pretrained(tmp, safe_serialization=True)
        student.tokenizer.save_pretrained(tmp)
        write_sentence_config(tmp, dataclasses.replace(student.config, max_seq_length=student.max_length),
                              student.model.dimension)
        if record["projection"]["stored"]:
            from safetensors.torch import save_file

            save_file({k: v.detach().contiguous() for k, v in mse.projection.state_dict().items()},
                      str(tmp / PROJECTION_FILE))

    return write_artifact(out, fill, {"task": "sentence-embedding", "stage": "distill", "max_length": student.max_length,
                                      **(meta or {}), "distillation": record})


def _train(student: PooledEncoder, tok: Any, max_length: int, texts: list[str], targets: torch.Tensor,
           mse: ProjectedMSE | None, optimizer: torch.optim.Optimizer, cfg: EmbeddingDistillConfig) -> list[float]:
    """``cfg.steps`` AdamW steps over seeded shuffles of ``texts``; the loss of each step."""
    rng = random.Random(cfg.seed)
    order: list[int] = []
    history = []
    device = next(student.parameters()).device
    student.train()
    for _ in range(cfg.steps):
        if len(order) < cfg.batch_size:
            fresh = list(range(len(texts)))
            rng.shuffle(fresh)
            order += fresh
        rows, order = order[:cfg.batch_size], order[cfg.batch_size:]
        enc = tok([texts[i] for i in rows], padding=True, truncation=True, max_length=max_length,
                  return_tensors="pt").to(device)
        vectors = student(enc["input_ids"], enc["attention_mask"], enc.get("token_type_ids"))
        target = targets[rows].to(device)
        loss = torch.zeros((), device=device)
        if mse is not None:
            loss = loss + mse(vectors, target)
        if cfg.loss in ("cosine", "both"):
            loss = loss + cosine_matrix_loss(vectors, target)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        history.append(float(loss.detach()))
    student.eval()
    return history


def _record(cfg: EmbeddingDistillConfig, student: PooledEncoder, teacher: PooledEncoder, mse: ProjectedMSE | None,
            history: list[float], s_config: SentenceConfig) -> dict[str, Any]:
    has_map = mse is not None and mse.projection is not None
    stored = bool(has_map and cfg.keep_projection)
    if has_map:
        said = (f"linear {student.dimension} -> {teacher.dimension}, trained beside the student; "
                + (f"stored as {PROJECTION_FILE}" if stored else "not stored (the student answers with its own vector)"))
    else:
        said = ("none: the widths match, the student learns the teacher's own vectors" if mse is not None
                else "none: the cosine-matrix loss compares each model's own vectors")
    return {
        "teacher": str(cfg.teacher), "student": str(cfg.student), "loss": cfg.loss, "steps": cfg.steps,
        "batch_size": cfg.batch_size, "lr": cfg.lr, "seed": cfg.seed,
        "widths": {"student": student.dimension, "teacher": teacher.dimension},
        "pooling": s_config.pooling, "normalize": s_config.normalize, "pipeline_from": s_config.source,
        "projection": {"stored": stored, "file": PROJECTION_FILE if stored else None, "what": said},
        "loss_first": history[0], "loss_last": history[-1], "losses": [round(x, 6) for x in history],
    }


def load_projection(folder: str | Path) -> torch.nn.Linear | None:
    """The stored student -> teacher projection of a distilled encoder, or ``None`` where none was stored."""
    path = Path(folder) / PROJECTION_FILE
    if not path.is_file():
        return None
    from safetensors.torch import load_file

    state = load_file(str(path))
    layer = torch.nn.Linear(state["weight"].shape[1], state["weight"].shape[0])
    layer.load_state_dict(state)
    return layer


def read_record(folder: str | Path) -> dict[str, Any]:
    """The ``distillation`` record of a distilled encoder's ``compress.json``."""
    return json.loads((Path(folder) / "compress.json").read_text(encoding="utf-8"))["distillation"]

