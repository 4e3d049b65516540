"""Sentence similarity's ``training`` aspect (:mod:`compress.tasks.protocol.training`): a cross-encoder teacher
fine-tuned with MSE on the gold scores, and a student distilled with MSE to the teacher's score beside MSE to the
gold one.

Both sentences of a pair go through the model together (``[CLS] a [SEP] b [SEP]``) and the one-output head's logit
is the score, on the data's own scale (0..5 for STS). The teacher, the student and the pruned model are scored the
same way, Spearman and Pearson x100 on validation and test (:func:`compress.tasks.sentence_similarity.score`). The
shared machinery is the classifier's: :func:`compress.tasks.tables.tokenize_split` (pairs, dynamic padding),
:func:`compress.stages.training.guarded_trainer` and its schedule, checkpoints and resume, the soft-label cache of
:func:`compress.stages.teacher.teacher_logits`, :func:`students.factory.build_student`.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from compress.core.artifact import read_meta, weights_sha256, write_model_artifact
from compress.core.assets import resolve_model
from compress.tasks.tables import DynamicPaddingCollator, tokenize_split
from compress.core.device import device_name, resolve_precision, training_device
from compress.stages.distill.soft_labels import save_logits
from compress.core.errors import CompressError
from compress.runtime.modeling import count_parameters, fit_max_length, load_classifier, predict_logits
from compress.tasks.protocol.training import PruningScorer
from compress.tasks.sentence_similarity import NAME, TASK
from compress.tasks.sentence_similarity.data import SimilarityTaskData, load as load_data
from compress.tasks.task_choice import check_model_task
from compress.stages.teacher import LoadedTeacher, soft_label_cache_path, teacher_logits
from compress.stages.training import (checkpoint_dir, checkpoint_fingerprint, epoch_validation_callback, freeze_bottom_layers,
                               guarded_trainer, interrupt_callback, is_main_process, refuse_keep_best,
                               resume_point, run_trainer, training_arguments)

#: A head that came with the model is kept (not fine-tuned) when its validation Spearman reaches this (x100), and a
#: teacher under it is refused by distill: a random one-output head reads near 0; a trained cross-encoder far above.
KEEP_HEAD_SPEARMAN = 20.0


def print_metrics(name: str, metrics: dict[str, dict[str, float]], timings: dict[str, float]) -> None:
    """One line of results per finished stage: Spearman and Pearson per split (against the teacher too), seconds."""
    parts = [f"{split} Spearman {m['spearman']:.2f} Pearson {m['pearson']:.2f}"
             + (f" (to the teacher: Spearman {m['reference_spearman']:.2f})" if "reference_spearman" in m else "")
             for split, m in metrics.items()]
    print(f"{name}: " + "; ".join(parts) + f" ({timings.get('total_s', 0):.0f} s)")


def load_scorer(folder: str | os.PathLike, allow_pickle: bool = False) -> tuple[Any, Any, bool]:
    """``(model, tokenizer, has_head)``: the model at ``folder`` with a one-output regression head (created when it
    has none, to be trained); ``problem_type`` says ``regression``, so transformers trains it with MSE and a later
    stage tells it from a classifier (:func:`compress.tasks.task_choice.head_task`)."""
    model, tokenizer, has_head = load_classifier(folder, 1, ["score"], allow_pickle, task=NAME)
    model.config.problem_type = "regression"
    return model, tokenizer, has_head


def _scores(model: Any, rows: Any, precision: str, pad_id: int, prefix: str = "", desc: str = "scoring") -> np.ndarray:
    return predict_logits(model, rows, precision=precision, prefix=prefix, pad_id=pad_id, desc=desc)[:, 0]


def _tokenize(data: SimilarityTaskData, tokenizer: Any, max_length: int, prefix: str = "", what: str = "model"):
    return {name: tokenize_split(split, tokenizer, max_length, True, prefix=prefix, with_length=(name == "train"),
                                 what=what) for name, split in data.splits.items()}


def _spearman_callback(rows: Any, gold: np.ndarray, pad_id: int, precision: str, prefix: str = "",
                       keep_best: bool = False, kept_model: Any = None):
    """Validation Spearman (then Pearson) after every epoch, for ``--keep-best``
    (:func:`compress.stages.training.epoch_validation_callback`)."""

    def evaluate(model, batch_size: int) -> dict[str, float]:
        scores = predict_logits(kept_model if kept_model is not None else model, rows, batch_size, precision, prefix,
                                pad_id, progress=False)[:, 0]
        out = TASK.score(scores, gold)
        return {"validation_spearman": out["spearman"], "validation_pearson": out["pearson"]}

    return epoch_validation_callback(evaluate, lambda v: f"validation Spearman {v['validation_spearman']:.2f} "
                                                         f"(Pearson {v['validation_pearson']:.2f})",
                                     keep_best, kept_model)


#: The columns a training row keeps: the model's inputs (``s_``-prefixed: a student's), the gold score, the teacher's
#: score (distillation) and the length the batches are grouped by.
TRAIN_COLUMNS = tuple(f"{prefix}{name}" for prefix in ("", "s_") for name in
                      ("input_ids", "attention_mask", "token_type_ids")) + ("label", "teacher_score", "length")


def _train(model: Any, train_ds: Any, cfg: Any, out: str | os.PathLike, device: Any, precision: str, pad_id: int,
           scorer: Any = None) -> dict[str, Any]:
    """Train ``model`` (the scorer, or a distillation wrapper around it) on ``train_ds`` with the shared Trainer set-up
    (schedule, checkpoints beside ``out``, resume, interrupt); returns the training log."""
    train_ds = train_ds.select_columns([c for c in TRAIN_COLUMNS if c in train_ds.column_names])
    args = training_arguments(cfg.train, checkpoint_dir(out), len(train_ds), device=device, precision=precision)
    resume = resume_point(out, cfg.resume, checkpoint_fingerprint(cfg))
    stop = interrupt_callback()
    prefixes = {"": pad_id} if "input_ids" in train_ds.column_names else {"s_": pad_id}
    trainer = guarded_trainer(out, model=model, args=args, train_dataset=train_ds,
                              data_collator=DynamicPaddingCollator(prefixes),
                              callbacks=[stop] + ([scorer] if scorer is not None else []))
    result = run_trainer(trainer, resume, Path(out), stop)
    log = {"global_steps": result.global_step, "train_loss": round(float(result.training_loss), 5),
           "effective_batch_size": cfg.train.batch_size * cfg.train.grad_accum * args.world_size}
    if scorer is not None:
        log.update(scorer.record())
    return log


def _evaluate(model: Any, tokenized: dict[str, Any], data: SimilarityTaskData, precision: str, pad_id: int,
              prefix: str = "", who: str = "model", reference: dict[str, np.ndarray] | None = None
              ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Spearman/Pearson x100 of ``model`` on validation and test (against ``reference`` scores too), and the scores."""
    metrics, scores = {}, {}
    for name in ("validation", "test"):
        if name in tokenized and len(tokenized[name]):
            scores[name] = _scores(model, tokenized[name], precision, pad_id, prefix, f"evaluating {who} ({name})")
            metrics[name] = TASK.score(scores[name], data.scores(name),
                                       reference[name] if reference is not None else None)
    return metrics, scores


def train_teacher(cfg: Any, out: str | os.PathLike) -> Path:
    """Fine-tune a cross-encoder on the gold scores (MSE) and score it; a model whose regression head already reads
    the validation pairs (Spearman >= :data:`KEEP_HEAD_SPEARMAN`) is kept as it is unless ``--finetune yes``."""
    cfg.validate()
    device = training_device(cfg.device)
    precision = resolve_precision(cfg.precision, device)
    started = time.perf_counter()
    source = resolve_model(cfg.model, revision=cfg.revision, allow_pickle=cfg.allow_pickle)
    check_model_task(source, NAME, cfg.data.data, cfg.model)
    data = load_data(cfg.data)
    refuse_keep_best(cfg.train, data.splits, cfg.data.data)
    model, tokenizer, has_head = load_scorer(source, cfg.allow_pickle)
    cfg = dataclasses.replace(cfg, max_length=fit_max_length(cfg.max_length, model.config, who=f"--model {cfg.model}"))
    model.to(device)
    pad_id = tokenizer.pad_token_id
    tokenized = _tokenize(data, tokenizer, cfg.max_length, what="teacher")
    timings: dict[str, float] = {}

    head_check = None
    if has_head and cfg.finetune is not True and "validation" in tokenized:
        found = TASK.score(_scores(model, tokenized["validation"], precision.precision, pad_id,
                                   desc="checking the existing head (validation)"), data.scores("validation"))
        head_check = {"validation_spearman": round(found["spearman"], 3), "keep_at": KEEP_HEAD_SPEARMAN}
        if cfg.finetune is False and found["spearman"] < KEEP_HEAD_SPEARMAN:
            print(f"warning: the existing head reads validation Spearman {found['spearman']:.1f} and --finetune no "
                  "keeps it", file=sys.stderr)
    finetune = cfg.finetune if cfg.finetune is not None else (
        head_check is None or head_check["validation_spearman"] < KEEP_HEAD_SPEARMAN)
    train_log: dict[str, Any] = {}
    if finetune and cfg.train.epochs > 0:
        t0 = time.perf_counter()
        frozen = freeze_bottom_layers(model, cfg.freeze_layers)
        scorer = _spearman_callback(tokenized["validation"], data.scores("validation"), pad_id, precision.precision,
                                    keep_best=True) if cfg.train.keep_best else None
        train_log = {**frozen, **_train(model, tokenized["train"], cfg, out, device, precision.precision, pad_id,
                                        scorer)}
        timings["fine_tune_s"] = round(time.perf_counter() - t0, 1)
    elif not has_head:
        print("warning: the teacher has no trained regression head and --epochs is 0: its scores are random",
              file=sys.stderr)
    if head_check is not None:
        head_check["decision"] = "fine-tuned" if finetune and cfg.train.epochs > 0 else "kept"

    t0 = time.perf_counter()
    metrics, scores = _evaluate(model, tokenized, data, precision.precision, pad_id, who="teacher")
    timings["evaluate_s"] = round(time.perf_counter() - t0, 1)
    timings["total_s"] = round(time.perf_counter() - started, 1)
    validation = metrics.get("validation", {}).get("spearman")
    if validation is not None and validation < KEEP_HEAD_SPEARMAN:
        print(f"warning: the teacher reads validation Spearman {validation:.1f} (under {KEEP_HEAD_SPEARMAN:g}); "
              "distill will refuse it. Train longer or with another --lr.", file=sys.stderr)
    meta = {
        "stage": "teacher", "kind": "pytorch", "task": NAME,
        "model_type": model.config.model_type, "parameters": count_parameters(model),
        "parent": {"model": cfg.model, "path": str(source)},
        "fine_tuned": bool(finetune and cfg.train.epochs > 0), "head_check": head_check,
        "config": cfg.to_dict(), "device": device_name(device), "precision": precision.to_dict(),
        "data": data.describe(), "max_length": cfg.max_length,
        "metrics": metrics, "training": train_log, "timings": timings,
    }
    if not is_main_process():
        return Path(out)
    path = write_model_artifact(out, model, tokenizer, meta)
    shutil.rmtree(checkpoint_dir(out), ignore_errors=True)
    # the validation and test scores just measured, where distill looks for this teacher's soft labels
    sha = (read_meta(path) or {}).get("weights_sha256") or weights_sha256(path)
    for name, values in scores.items():
        save_logits(soft_label_cache_path(LoadedTeacher(Path(path), None, None, sha, {}), tokenized[name], prefix="",
                                          precision=precision.precision), values[:, None])
    print_metrics("teacher", metrics, timings)
    return path


def load_similarity_teacher(folder: str, data: SimilarityTaskData, allow_pickle: bool = False,
                            revision: str | None = None) -> LoadedTeacher:
    """A cross-encoder teacher (an artifact, a folder or a hub id), frozen; one without a trained regression head,
    or a model of another task, is refused in one line."""
    path = Path(resolve_model(str(folder), revision=revision, allow_pickle=allow_pickle))
    check_model_task(path, NAME, data.source, str(folder))
    model, tokenizer, has_head = load_scorer(path, allow_pickle)
    if not has_head:
        raise CompressError(f"{path}: this model has no trained regression head, so it cannot teach. Fine-tune it "
                            f"first: bert-compress teacher --model {folder} --data DATA --out TEACHER_DIR")
    meta = read_meta(path) or {}
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return LoadedTeacher(path, model, tokenizer, meta.get("weights_sha256") or weights_sha256(path), meta)


def _distillation_module(student: Any, alpha_kd: float, alpha_hard: float) -> Any:
    """The student inside a module whose loss is ``alpha_kd * MSE(score, teacher's) + alpha_hard * MSE(score, gold)``
    (the Trainer reads ``loss``); the student's own inputs carry the ``s_`` prefix."""
    from torch import nn

    from compress.runtime.modeling import accepts_token_types

    class ScoreDistillation(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.student = student
            self._types = accepts_token_types(student)

        def forward(self, s_input_ids, s_attention_mask, s_token_type_ids=None, labels=None, teacher_score=None,
                    **_: Any) -> dict[str, Any]:
            inputs = {"input_ids": s_input_ids, "attention_mask": s_attention_mask}
            if self._types and s_token_type_ids is not None:
                inputs["token_type_ids"] = s_token_type_ids
            score = self.student(**inputs).logits[:, 0].float()
            loss = score.sum() * 0.0
            if teacher_score is not None and alpha_kd > 0:
                loss = loss + alpha_kd * nn.functional.mse_loss(score, teacher_score.reshape(-1).float())
            if labels is not None and alpha_hard > 0:
                loss = loss + alpha_hard * nn.functional.mse_loss(score, labels.reshape(-1).float())
            return {"loss": loss, "logits": score[:, None]}

    return ScoreDistillation()


def distill(cfg: Any, out: str | os.PathLike) -> Path:
    """Distil the cross-encoder ``cfg.teacher`` into ``cfg.student``: the teacher scores every training pair once
    (cached like every soft label), the student learns those scores (MSE, weight ``--alpha-kd``) beside the gold
    ones (MSE, weight ``--alpha-hard``). Transfer data, ensembles and gold probabilities are the classifier
    distiller's: refused here in one line rather than ignored; ``--intermediate`` (on in prune's recovery) is said
    in a note and recorded, and the scores alone are distilled."""
    from students.factory import build_student

    cfg.validate()
    cfg.refuse_encoder_only("sentence similarity (a cross-encoder)")
    unsupported = [flag for flag, on in (("--unlabeled", cfg.unlabeled),
                                         ("--augment", cfg.augment), ("--ensemble", cfg.ensemble),
                                         ("--gold-labels", cfg.gold_labels), ("--alpha-pooled", cfg.alpha_pooled))
                   if on]
    if unsupported:
        raise CompressError(f"{', '.join(unsupported)}: not available for sentence similarity yet; the student learns "
                            "the teacher's and the gold scores (--alpha-kd, --alpha-hard). Leave it out.")
    notes = []
    if cfg.intermediate:  # prune's recovery asks for it by default: said, recorded, and the scores distilled
        notes.append("intermediate losses are not available for sentence similarity yet: the scores alone are "
                     "distilled")
        print(f"note: {notes[-1]}", file=sys.stderr)
    device = training_device(cfg.device)
    precision = resolve_precision(cfg.precision, device)
    started = time.perf_counter()
    data = load_data(cfg.data)
    refuse_keep_best(cfg.train, data.splits, cfg.data.data)
    teacher = load_similarity_teacher(cfg.teacher, data, cfg.allow_pickle, cfg.revision)
    student, s_tok, student_info = build_student(cfg.student, teacher.model, teacher.tokenizer, ["score"],
                                                 cfg.layer_map, cfg.train.seed, task=NAME)
    student.config.problem_type = "regression"
    cfg = dataclasses.replace(cfg, max_length=fit_max_length(cfg.max_length, teacher.model.config, student.config,
                                                             who="the teacher or the student"))
    teacher.model.to(device)
    tokenized = _tokenize(data, s_tok, cfg.max_length, prefix="s_", what="student")
    t_rows = _tokenize(data, teacher.tokenizer, cfg.max_length, prefix="t_", what="teacher")
    # the teacher's scores per split, cached by its weights and the token ids (validation and test are found in the
    # teacher stage's cache when the settings match)
    t0 = time.perf_counter()
    soft, reused = {}, {}
    for name, rows in t_rows.items():
        logits, reused[name] = teacher_logits(teacher, rows, prefix="t_", precision=precision.precision, what=name)
        soft[name] = logits[:, 0]
    timings = {"soft_labels_s": round(time.perf_counter() - t0, 1)}
    taught = TASK.score(soft["validation"], data.scores("validation"))["spearman"] if "validation" in soft else None
    if taught is not None and taught < KEEP_HEAD_SPEARMAN and not cfg.allow_untrained_teacher:
        raise CompressError(f"--teacher {cfg.teacher} reads validation Spearman {taught:.1f} on {data.source} (under "
                            f"{KEEP_HEAD_SPEARMAN:g}): it has not learnt these scores, and a student would learn its "
                            "noise. Train the teacher longer, or pass --allow-untrained-teacher.")
    train_ds = tokenized["train"].add_column("teacher_score", soft["train"].astype(float).tolist())
    module = _distillation_module(student, cfg.alpha_kd, cfg.alpha_hard)
    scorer = _spearman_callback(tokenized["validation"], data.scores("validation"), s_tok.pad_token_id,
                                precision.precision, prefix="s_", keep_best=True,
                                kept_model=student) if cfg.train.keep_best else None
    t0 = time.perf_counter()
    train_log = _train(module, train_ds, cfg, out, device, precision.precision, s_tok.pad_token_id, scorer)
    train_log["rows"] = len(train_ds)
    timings["train_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    metrics, _ = _evaluate(student, tokenized, data, precision.precision, s_tok.pad_token_id, prefix="s_",
                           who="student", reference=soft)
    for name in metrics:
        metrics[name]["teacher_spearman"] = TASK.score(soft[name], data.scores(name))["spearman"]
    timings["evaluate_s"] = round(time.perf_counter() - t0, 1)
    timings["total_s"] = round(time.perf_counter() - started, 1)
    meta = {
        "stage": "distill", "kind": "pytorch", "task": NAME,
        "model_type": student.config.model_type, "parameters": count_parameters(student),
        "parent": {"teacher": str(teacher.path), "teacher_weights_sha256": teacher.weights_sha256,
                   "teacher_parameters": count_parameters(teacher.model)},
        "student": student_info,
        "distillation": {"losses": {"teacher_score_mse": cfg.alpha_kd, "gold_score_mse": cfg.alpha_hard},
                         "soft_labels": "the teacher's score of each training pair", "soft_labels_reused": reused},
        "config": cfg.to_dict(), "device": device_name(device), "precision": precision.to_dict(),
        "data": data.describe(), "max_length": cfg.max_length,
        "metrics": metrics, "training": train_log, "timings": timings, "notes": notes,
    }
    if not is_main_process():
        return Path(out)
    path = write_model_artifact(out, student, s_tok, meta)
    if not cfg.keep_checkpoints:
        shutil.rmtree(checkpoint_dir(out), ignore_errors=True)
    print_metrics("student", metrics, timings)
    return path


def load_for_pruning(cfg: Any, source: Path, data: Any) -> tuple[Any, Any, bool]:
    """The cross-encoder at ``source`` with its regression head (a model of another task refused in one line)."""
    check_model_task(source, NAME, data.source)
    return load_scorer(source, cfg.allow_pickle)


def pruning_scorer(cfg: Any, data: Any, tokenizer: Any, pad_id: int) -> PruningScorer:
    """Spearman/Pearson x100 per split; against the unpruned model's scores, how closely the pruned one follows
    (``reference_spearman``) and their mean squared difference (``mse_to_unpruned``)."""
    tokenized = _tokenize(data, tokenizer, cfg.max_length, what="model")

    def evaluate(m, reference: dict[str, np.ndarray] | None, desc: str) -> tuple[dict[str, Any], dict[str, Any]]:
        metrics, scores = _evaluate(m, tokenized, data, "fp32", pad_id, who=desc, reference=reference)
        if reference:
            for name in metrics:
                metrics[name]["mse_to_unpruned"] = float(np.mean((scores[name] - reference[name]) ** 2))
        return metrics, scores

    return PruningScorer(tokenized["train"], DynamicPaddingCollator({"": pad_id}), evaluate,
                         lambda final: {"max_length": cfg.max_length})


def pretrain_data(data: Any) -> Any:
    """Refused: a scored pair is two texts read as one example, not running text."""
    raise CompressError("pretrain reads single texts; sentence-similarity data holds pairs. Give the pairs' sentences "
                        "as an unlabelled corpus, or pre-train on other text.")
