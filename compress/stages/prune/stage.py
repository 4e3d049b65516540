"""The prune stage: artifact + :class:`PruneConfig` -> a pruned (and optionally recovered) artifact."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from compress.core.artifact import folder_size_bytes, read_meta, weights_sha256, write_artifact
from compress.core.assets import resolve_model
from compress.config import DistillConfig, PruneConfig, StudentSpec
from compress.core.device import device_name, training_device
from compress.core.errors import CompressError
from compress.stages.export import check_out_is_not_input
from compress.runtime.formats.layouts import encoder_parameters, layer_parts, structure
from compress.runtime.formats.pruned import LOADER_COMPRESS, loader_of
from compress.runtime.modeling import count_parameters, load_classifier, model_device
from compress.core.numerics import log_softmax
from compress.stages.prune.removal import prune_model
from compress.runtime.predictor import artifact_kind
from compress.tasks import get_task
from compress.stages.training import checkpoint_dir, is_main_process


def prune(cfg: PruneConfig, out: str | os.PathLike) -> Path:
    """Prune a classifier (or tagger) artifact, optionally recover it by distillation, and write the artifact.

    ``compress.json`` records the heads and FFN neurons per layer before and after, parameters and
    file size before and after, and the task's primary metric (accuracy; a tagger's entity F1) before
    pruning, right after, and after recovery. Recovery is the distill stage for every task (:func:`_recover`),
    on the same data options (``--limit``, ``--split-seed``) as the scoring and the importance batches.
    """

    cfg.validate()
    device = training_device(cfg.device)
    started = time.perf_counter()
    timings: dict[str, float] = {}
    notes: list[str] = []
    source = Path(resolve_model(cfg.model))
    check_out_is_not_input(source, out)
    kind = artifact_kind(source)
    if kind != "pytorch":
        raise CompressError(f"--model {source} is a {kind} artifact; pruning needs the PyTorch fp32 folder it was made "
                            "from (the teacher, distill or prune artifact).")
    data = cfg.data.load_any()
    task = get_task(cfg.data.task())
    metric = task.primary_metric  #: the quality kept while pruning, per split (validation, test)
    model, tokenizer, scorer = _model_and_scorer(cfg, source, data, task, device)
    eval_splits = [name for name in ("validation", "test") if name in data.splits]
    evaluate = scorer.evaluate

    t0 = time.perf_counter()
    before_metrics, before_logits = evaluate(model, None, "evaluating the unpruned model")
    timings["evaluate_before_s"] = round(time.perf_counter() - t0, 2)
    params_before = count_parameters(model)
    encoder_before = encoder_parameters(model)
    size_before = folder_size_bytes(source)

    t0 = time.perf_counter()
    taylor = cfg.importance == "taylor"
    batches = _batches(scorer.train_rows, scorer.collate, cfg.train.batch_size,
                       cfg.importance_batches if taylor else 1, cfg.train.seed)
    batches = [{k: v.to(device) for k, v in b.items()} for b in batches]
    example = {k: v[:2] for k, v in batches[0].items() if k not in ("labels", "start_positions", "end_positions")}
    plan = prune_model(model, cfg.heads, cfg.ffn, cfg.importance, cfg.scope, example_inputs=example,
                       gradient_batches=batches if taylor else None)
    loader = loader_of(model)
    timings["prune_s"] = round(time.perf_counter() - t0, 2)
    params_after = count_parameters(model)
    after_metrics, _ = evaluate(model, before_logits, "evaluating the pruned model")
    print(f"prune: {plan.before['heads_per_layer']} -> {plan.after['heads_per_layer']} heads, "
          f"{plan.before['intermediate_per_layer']} -> {plan.after['intermediate_per_layer']} FFN neurons; "
          f"parameters {params_before:,} -> {params_after:,}")

    out_path = Path(out).expanduser().resolve()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    # Beside the output, like distill's checkpoints: the pruned starting point and the recovery's own
    # checkpoints stay there until the artifact is written, so an interrupted recovery can resume.
    work = checkpoint_dir(out_path)
    if not cfg.resume and work.exists() and is_main_process():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    written = False
    recovery: dict[str, Any] | None = None
    recovered_metrics: dict[str, Any] | None = None
    final_metrics = {name: dict(m) for name, m in after_metrics.items()}
    try:
        if cfg.recover_epochs > 0:
            t0 = time.perf_counter()
            model, recovery = _recover(cfg, source, model, tokenizer, work, task.name)
            timings["recover_s"] = round(time.perf_counter() - t0, 2)
            if loader_of(model) != loader or structure(model) != plan.after:
                raise CompressError("internal: recovery changed the pruned shapes; nothing was written.")
            recovered_metrics, _ = evaluate(model, before_logits, "evaluating the recovered model")
            final_metrics = {name: dict(m) for name, m in recovered_metrics.items()}
        for name in eval_splits:
            final_metrics[name][f"unpruned_{metric}"] = before_metrics[name][metric]
        timings["total_s"] = round(time.perf_counter() - started, 2)

        parent_meta = read_meta(source) or {}
        pruning = {
            **_structure_record(cfg, plan, loader, batches if taylor else None, model, params_before, encoder_before),
            "file_size_bytes": {"before": size_before, "after": None},
            # The task's primary metric per split: "accuracy" for a classifier, "entity_f1" for a tagger.
            "metric": metric,
            metric: {"before": _accuracies(before_metrics, metric), "after_prune": _accuracies(after_metrics, metric),
                     "after_recovery": _accuracies(recovered_metrics, metric) if recovered_metrics else None},
            "metrics": {"before": before_metrics, "after_prune": after_metrics, "after_recovery": recovered_metrics},
            "recovery": recovery,
        }
        meta: dict[str, Any] = {
            "stage": "prune",
            "kind": "pytorch",
            "loader": loader,
            "model_type": model.config.model_type,
            "parameters": params_after,
            "max_length": cfg.max_length,
            "parent": {"path": str(source.resolve()), "stage": parent_meta.get("stage"),
                       "weights_sha256": parent_meta.get("weights_sha256") or weights_sha256(source),
                       "parameters": params_before},
            "pruning": pruning,
            "config": cfg.to_dict(),
            "device": device_name(device),
            # --precision applies to recovery (a distillation run, which decides and records it); the
            # scoring and the accuracies before and after pruning are measured in fp32
            "precision": (recovery or {}).get("precision"),
            "data": data.describe(),
            "task": task.name,
            **scorer.record(final_metrics),
            "metrics": final_metrics,
            "timings": timings,
            "notes": notes,
        }
        if loader == LOADER_COMPRESS:
            notes.append("config.json cannot express fewer heads per layer (transformers 5 derives the head size from "
                         "num_attention_heads and dropped pruned_heads); load with compress.runtime.modeling.load_classifier "
                         "or compress.runtime.formats.pruned.load_pruned, not plain from_pretrained")

        def fill(tmp: Path) -> None:
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            pruning["file_size_bytes"]["after"] = folder_size_bytes(tmp)
            meta["weights_sha256"] = weights_sha256(tmp)

        path = write_artifact(out, fill, meta)
        written = True
    finally:
        if written or not any((work / "recovered.checkpoints").glob("checkpoint-*")):
            shutil.rmtree(work, ignore_errors=True)
    _print_summary(path, pruning)
    return path


def _model_and_scorer(cfg: PruneConfig, source: Path, data: Any, task: Any, device: Any) -> tuple[Any, Any, Any]:
    """The model to prune (on ``device``, where it is scored and its importance measured), its tokenizer, and the
    task's :class:`~compress.tasks.protocol.training.PruningScorer` for it; a model without a trained head, or of a
    family the pruner does not know, is refused before any work."""
    training = task.aspect("training")
    model, tokenizer, has_head = training.load_for_pruning(cfg, source, data)
    if not has_head:
        raise CompressError(f"--model {source}: the model has no trained classification head, so there is nothing to "
                            "keep accurate while pruning. Fine-tune it first: bert-compress teacher --model DIR "
                            "--data DATA --out DIR")
    layer_parts(model)  # refuses unsupported families before any work
    model.to(device)  # evaluation and importance scoring run there; recovery's Trainer uses the same device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return model, tokenizer, training.pruning_scorer(cfg, data, tokenizer, pad_id)


def _structure_record(cfg: PruneConfig, plan: Any, loader: str, gradient_batches: list[dict[str, Any]] | None,
                      model: Any, params_before: int, encoder_before: int) -> dict[str, Any]:
    """What ``compress.json``'s ``pruning`` says of the model's shape: how it was pruned and what it removed (heads
    and FFN neurons per layer, parameters); ``gradient_batches``: the batches the ``taylor`` importance read."""
    params_after = count_parameters(model)
    return {
        "method": "torch-pruning dependency graph; whole heads (query/key/value rows + attention output columns) "
                  "and FFN neurons (intermediate rows + output columns) removed; hidden width, embeddings and "
                  "LayerNorms unchanged",
        "importance": cfg.importance,
        "importance_examples": (sum(int(b["input_ids"].shape[0]) for b in gradient_batches)
                                if gradient_batches is not None else None),
        "scope": cfg.scope,
        "loader": loader,
        "heads": {"ratio": cfg.heads, "before": plan.before["heads_per_layer"],
                  "after": plan.after["heads_per_layer"], "total_before": sum(plan.before["heads_per_layer"]),
                  "total_after": sum(plan.after["heads_per_layer"]),
                  "removed": {str(i): r for i, r in enumerate(plan.heads) if r},
                  "head_size": plan.after["attention_head_size"]},
        "ffn": {"ratio": cfg.ffn, "before": plan.before["intermediate_per_layer"],
                "after": plan.after["intermediate_per_layer"],
                "total_before": sum(plan.before["intermediate_per_layer"]),
                "total_after": sum(plan.after["intermediate_per_layer"])},
        "parameters": {"before": params_before, "after": params_after, "removed": params_before - params_after,
                       "reduction": round(1 - params_after / params_before, 6),
                       "encoder_before": encoder_before, "encoder_after": encoder_parameters(model),
                       "encoder_reduction": round(1 - encoder_parameters(model) / encoder_before, 6)},
    }


def kl_divergence(reference_logits: np.ndarray, logits: np.ndarray) -> float:
    """Mean KL(reference || model) of the softmax outputs, in nats.

    Accuracy on an easy task can stay flat while pruning wrecks the model's confidence; this says
    how far the pruned (and the recovered) model's predictions moved from the unpruned model's.
    """
    ref, mod = log_softmax(reference_logits), log_softmax(logits)
    return float(np.mean(np.sum(np.exp(ref) * (ref - mod), axis=-1)))


def _accuracies(metrics: dict[str, Any] | None, metric: str = "accuracy") -> dict[str, float]:
    return {name: m[metric] for name, m in (metrics or {}).items()}


def _batches(train_ds, collate, batch_size: int, count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` batches of training rows padded by the task's ``collate`` (a seeded sample, so both labels appear
    early), with the labels the task trains on (a tagger's per token, a reader's gold start and end positions)."""
    cols = [c for c in ("input_ids", "attention_mask", "token_type_ids", "label", "labels", "start_positions",
                        "end_positions") if c in train_ds.column_names]
    rows = train_ds.select_columns(cols)
    size = max(2, batch_size)  # the traced example takes two rows, one padded
    order = np.random.default_rng(seed).permutation(len(rows))[:size * count]
    if len(order) < 2:
        raise CompressError("the training split has fewer than 2 rows; pruning needs data to trace and score the model.")
    return [collate([rows[int(i)] for i in order[start:start + size]])
            for start in range(0, len(order), size) if len(order[start:start + size]) >= 2]


def _recover(cfg: PruneConfig, source: Path, model, tokenizer, work: Path, task_name: str):
    """Distil from the unpruned model (or ``--teacher``) into the pruned one with the distill stage (a tagger's
    per word, a reader's on its windows; ``--intermediate`` for every task: pruned and unpruned share a tokenizer).

    The pruned model is saved into ``work`` (the stage's checkpoint folder) and handed to the
    distillation trainer as ``--init pretrained:FOLDER``; the trainer loads it through the same
    pruning-aware loader and keeps its checkpoints beside ``work/recovered``, so ``--resume``
    continues an interrupted recovery (pruning is deterministic, so the same settings give the same
    starting point; the distill stage refuses checkpoints made from another one). Hidden widths
    match, so the intermediate losses need no projections; attention maps of different head counts
    are compared head-averaged (see ``compress.stages.losses``).
    """
    from compress.stages.distill.trainer import distill

    pruned_dir = _save_pruned_init(model, tokenizer, work)
    teacher = cfg.teacher or str(source)
    config = model.config
    dcfg = DistillConfig(
        teacher=teacher, data=cfg.data,
        student=StudentSpec(f"{config.num_hidden_layers}x{config.hidden_size}", f"pretrained:{pruned_dir}"),
        train=replace(cfg.train, epochs=float(cfg.recover_epochs)), intermediate=cfg.intermediate,
        allow_untrained_teacher=True,  # recovery follows the model being pruned, whatever its accuracy
        **cfg.kd_values())
    recovered_dir = distill(dcfg, work / "recovered")

    recovered, _, _ = load_classifier(recovered_dir, task=task_name)
    recovered.to(model_device(model))  # evaluated where the pruned model was
    return recovered, _recovery_record(cfg, teacher, recovered_dir)


def _save_pruned_init(model, tokenizer, work: Path) -> Path:
    """The pruned model and its tokenizer in ``work/pruned-init``: recovery's student (``--init pretrained:``)."""
    pruned_dir = work / "pruned-init"
    shutil.rmtree(pruned_dir, ignore_errors=True)
    model.save_pretrained(pruned_dir, safe_serialization=True)
    tokenizer.save_pretrained(pruned_dir)
    return pruned_dir


def _recovery_record(cfg: PruneConfig, teacher: str, recovered_dir: Path) -> dict[str, Any]:
    """What ``compress.json``'s ``pruning.recovery`` says of a recovery run, read from its artifact."""
    meta = read_meta(recovered_dir) or {}
    return {
        "epochs": cfg.recover_epochs,
        "teacher": str(Path(teacher).resolve()) if Path(teacher).exists() else teacher,
        "teacher_weights_sha256": (meta.get("parent") or {}).get("teacher_weights_sha256"),
        "distillation": meta.get("distillation"),
        "training": meta.get("training"),
        "precision": meta.get("precision"),
        "notes": meta.get("notes"),
    }


def _print_summary(path: Path, pruning: dict[str, Any]) -> None:
    metric = pruning.get("metric", "accuracy")
    acc = pruning[metric]
    split = "test" if "test" in acc["before"] else next(iter(acc["before"]), None)
    p = pruning["parameters"]
    line = (f"prune: {path} ({p['before']:,} -> {p['after']:,} parameters, -{100 * p['reduction']:.1f}%; "
            f"loader {pruning['loader']})")
    if split:
        line += (f"; {split} {metric.replace('_', ' ')} {acc['before'][split]:.4f} -> {acc['after_prune'][split]:.4f} "
                 "after pruning")
        if acc["after_recovery"]:
            line += f" -> {acc['after_recovery'][split]:.4f} after recovery"
    print(line)
