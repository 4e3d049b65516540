"""What teacher fine-tuning and distillation share: Trainer settings, checkpoints, loss guards.

Both stages run on transformers' ``Trainer`` so that DDP under ``torchrun``/``accelerate``,
checkpoint resume, mixed precision, gradient accumulation and logging come from the ecosystem. This module
holds the few settings we fix for them and the guard that stops on a NaN loss with a useful message.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from compress.config import TrainSettings
from compress.core.device import PrecisionChoice, resolve_precision, training_device
from compress.core.errors import CompressError, NonFiniteLossError
from compress.core.artifact import write_model_artifact
from compress.stages.fingerprint import identity_sha256
from compress.core.progress import bars_enabled
from compress.core.signal_stack import ensure_signal_stack


@dataclass
class StageStart:
    """What a training stage decides before its work, the same for every task: the device, the precision (decided
    and announced once) and the clock its ``timings`` are measured from."""

    device: Any
    precision: PrecisionChoice
    started: float = field(default_factory=time.perf_counter)
    timings: dict[str, float] = field(default_factory=dict)

    def total(self) -> dict[str, float]:
        """``timings`` with ``total_s``: the seconds since the stage started."""
        self.timings["total_s"] = round(time.perf_counter() - self.started, 1)
        return self.timings


def start_stage(cfg: Any) -> StageStart:
    """Check ``cfg`` (a stage config with ``device`` and ``precision``), then decide where and how precisely the
    stage trains; the clock starts here."""
    cfg.validate()
    device = training_device(cfg.device)
    return StageStart(device, resolve_precision(cfg.precision, device))


def checkpoint_dir(out: str | os.PathLike) -> Path:
    """Where the Trainer keeps resumable checkpoints for an artifact: a sibling of ``out``."""
    out = Path(out).expanduser().resolve()
    return out.parent / f"{out.name}.checkpoints"


def write_trained_artifact(out: str | os.PathLike, model: Any, tokenizer: Any, meta: dict[str, Any]) -> Path:
    """The trained model's artifact, written atomically, then its Trainer checkpoints removed: they exist only
    to resume a run that did not finish, and a finished one must not leave a second copy that looks current."""

    path = write_model_artifact(out, model, tokenizer, meta)
    if checkpoint_dir(out).exists():
        shutil.rmtree(checkpoint_dir(out), ignore_errors=True)
    return path


def last_checkpoint(folder: Path) -> str | None:
    """The newest *complete* ``checkpoint-N`` folder, or ``None``.

    The Trainer writes ``trainer_state.json`` last, so a checkpoint without it was cut short (a
    kill or a full disk during the save) and is skipped: resuming from it would fail.
    """
    if not folder.is_dir():
        return None
    found = []
    for child in folder.iterdir():
        if child.is_dir() and child.name.startswith("checkpoint-") and child.name[11:].isdigit():
            found.append((int(child.name[11:]), child))
    for _, child in sorted(found, reverse=True):
        if (child / "trainer_state.json").exists():
            return str(child)
    return None


def drop_incomplete_checkpoints(folder: Path) -> list[str]:
    """Remove checkpoint folders whose save was cut short; return their names."""
    removed = []
    if folder.is_dir():
        for child in folder.iterdir():
            if child.is_dir() and child.name.startswith("checkpoint-") and not (child / "trainer_state.json").exists():
                shutil.rmtree(child, ignore_errors=True)
                removed.append(child.name)
    return removed


#: Beside the checkpoints: the fingerprint of the settings and inputs they were trained under.
FINGERPRINT_FILE = "fingerprint.json"
#: A last epoch that lifts the validation metric by more than this (on its 0-1 scale) means the model was still
#: learning when training stopped. WikiGold's 1,356 sentences at 4 epochs: validation entity F1 44.8 -> 54.6 in
#: the last epoch, 83.3 at 10 (docs/lab/ner.md); epoch-to-epoch noise near the end of a schedule is ~1.5 points.
STILL_LEARNING = 0.03


def checkpoint_fingerprint(cfg: Any) -> str:
    """What a Trainer checkpoint of a stage depends on: its config (minus ``resume`` and the like) and
    the content of what it reads (data file, teacher and initial weights, unlabelled corpus)."""

    return identity_sha256(cfg)


def _stored_fingerprint(folder: Path) -> str | None:
    import json

    try:
        return json.loads((folder / FINGERPRINT_FILE).read_text(encoding="utf-8")).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        return None


def _set_aside(folder: Path, fingerprint: str) -> None:
    """Move checkpoints made under other settings out of the way (renamed, never deleted)."""
    has_checkpoints = folder.is_dir() and any(c.name.startswith("checkpoint-") for c in folder.iterdir())
    if not has_checkpoints or _stored_fingerprint(folder) == fingerprint:
        return
    n = 1
    while (aside := folder.parent / f"{folder.name[:-len('.checkpoints')]}.set-aside-{n}.checkpoints").exists():
        n += 1
    os.replace(folder, aside)
    why = ("were made under other settings or inputs (data, teacher, initial weights)"
           if _stored_fingerprint(aside) else "carry no record of the settings they were made under")
    print(f"--resume: the checkpoints in {folder} {why} than this run's, so they are not resumed; set aside as "
          f"{aside} (delete it when it is no longer needed). Starting from the beginning.")


def resume_point(out: str | os.PathLike, resume: bool, fingerprint: str | None = None) -> str | None:
    """The checkpoint to resume from when ``resume`` is set; a fresh run clears stale checkpoints.

    With ``fingerprint`` (see :func:`checkpoint_fingerprint`), checkpoints are resumed only when
    they were made under the same one; others are set aside with a message. The fingerprint is
    written beside the checkpoints this run makes.
    """
    folder = checkpoint_dir(out)
    if fingerprint is not None and is_main_process():
        if resume:
            _set_aside(folder, fingerprint)
        elif folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True, exist_ok=True)
        import json

        (folder / FINGERPRINT_FILE).write_text(json.dumps({"fingerprint": fingerprint}) + "\n", encoding="utf-8")
    if resume:
        if is_main_process():
            for name in drop_incomplete_checkpoints(folder):
                print(f"removed {folder / name}: its save was interrupted")
        found = last_checkpoint(folder)
        if found:
            print(f"resuming from {found}")
        else:
            print(f"--resume: no checkpoint in {folder}; starting from the beginning")
        return found
    if fingerprint is None and folder.exists() and is_main_process():
        shutil.rmtree(folder)
    return None


def print_metrics(name: str, metrics: dict[str, dict[str, float]], timings: dict[str, float]) -> None:
    """One line of evaluation results per finished stage: accuracy, macro-F1, agreement, seconds."""
    parts = [f"{split} accuracy {m['accuracy']:.4f} macro-F1 {m['macro_f1']:.4f}"
             + (f" agreement {m['agreement']:.4f}" if "agreement" in m else "") for split, m in metrics.items()]
    print(f"{name}: " + "; ".join(parts) + f" ({timings.get('total_s', 0):.0f} s)")


def is_main_process() -> bool:
    """Rank 0 (or a single process): the only one that writes artifacts and prints summaries."""
    return int(os.environ.get("RANK", "0")) == 0


def world() -> tuple[int, int]:
    """``(rank, world_size)``; under torchrun/accelerate the process group is started here (gloo on
    the CPU, nccl on GPUs) so work before the Trainer (soft labels) can already be shared."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return 0, 1
    import torch.distributed as dist
    from accelerate import PartialState

    PartialState()  # initialises the default process group once, with the backend accelerate picks
    return dist.get_rank(), dist.get_world_size()


def gather_rows(local: "Any", indices: "Any", total: int) -> "Any":
    """Reassemble a ``[total, ...]`` array from every rank's rows (``indices`` are each rank's own)."""
    import numpy as np
    import torch.distributed as dist

    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, (np.asarray(indices), np.asarray(local)))
    out = np.zeros((total,) + parts[0][1].shape[1:], dtype=parts[0][1].dtype)
    for idx, rows in parts:
        out[idx] = rows
    return out


def schedule_epochs(settings: TrainSettings, steps_per_epoch: int) -> float:
    """The epochs to train: ``settings.epochs``, raised to the whole epochs that reach ``settings.min_steps``
    optimiser steps where an epoch has too few (said on stdout); ``--max-steps`` still overrides both."""
    epochs = settings.epochs
    if settings.min_steps > 0 and settings.max_steps <= 0 and epochs > 0 and steps_per_epoch > 0 \
            and steps_per_epoch * epochs < settings.min_steps:
        epochs = float(math.ceil(settings.min_steps / steps_per_epoch))
        if is_main_process():
            print(f"--min-steps {settings.min_steps}: {epochs:g} epochs instead of {settings.epochs:g} "
                  f"({steps_per_epoch} optimiser steps an epoch on this training set)")
    return epochs


def training_arguments(settings: TrainSettings, output_dir: Path, num_examples: int, device: Any = None,
                       precision: str = "fp32", **extra: Any):
    """``TrainingArguments`` for a CPU-or-GPU run with our defaults (no hub, no external loggers).

    Warm-up is a share of the optimiser steps, which depend on the effective batch (per-device
    batch x processes x accumulation), so a torchrun job follows the same schedule as one process.
    ``device`` (from :func:`compress.core.device.training_device`; ``None``: a GPU when there is one) is
    where the Trainer puts the model: the CPU sets ``use_cpu``. ``precision`` is the one the stage
    decided (:func:`compress.core.device.resolve_precision`: fp32, bf16, or fp16 with the Trainer's grad
    scaler on a GPU without bf16).
    """
    import torch
    from transformers import TrainingArguments

    effective = settings.batch_size * settings.grad_accum * int(os.environ.get("WORLD_SIZE", "1"))
    per_epoch = -(-num_examples // effective)
    epochs = schedule_epochs(settings, per_epoch)
    total = int(per_epoch * max(epochs, 0))
    if settings.max_steps > 0:
        total = settings.max_steps
    warmup = int(settings.warmup_ratio * total)
    if device is None:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if precision not in ("fp32", "bf16", "fp16"):
        raise ValueError(f"training_arguments: precision must be a decided one (fp32, bf16 or fp16), got {precision!r}")
    if is_main_process():
        processes = effective // (settings.batch_size * settings.grad_accum)
        print(f"effective batch size {effective} ({settings.batch_size} per device x {processes} process(es) x "
              f"{settings.grad_accum} accumulation); {total} optimiser steps, {warmup} warm-up")
    return TrainingArguments(
        output_dir=str(output_dir),
        num_train_epochs=epochs,
        max_steps=settings.max_steps,
        learning_rate=settings.lr,
        per_device_train_batch_size=settings.batch_size,
        per_device_eval_batch_size=settings.batch_size * 2,
        gradient_accumulation_steps=settings.grad_accum,
        warmup_steps=warmup,
        weight_decay=settings.weight_decay,
        seed=settings.seed,
        data_seed=settings.seed,
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        use_cpu=torch.device(device).type == "cpu",
        save_strategy="steps",
        save_steps=settings.save_steps,
        save_total_limit=1,
        logging_steps=settings.logging_steps,
        eval_strategy="no",
        report_to="none",
        train_sampling_strategy=settings.sampling,
        length_column_name="length",
        remove_unused_columns=False,
        dataloader_num_workers=0,
        # Without a bar (not a terminal, or not rank 0) the Trainer prints its log line every logging_steps.
        disable_tqdm=not is_main_process() or not bars_enabled(),
        **extra,
    )


def check_finite(loss_terms: dict[str, Any], step: int, out: Path) -> None:
    """Stop on a NaN or infinite loss, naming the step, every loss term and the last good checkpoint."""
    total = loss_terms.get("loss")
    value = float(total.detach()) if hasattr(total, "detach") else float(total)
    if math.isfinite(value):
        return
    terms = ", ".join(f"{k}={float(v.detach()) if hasattr(v, 'detach') else float(v):.4g}" for k, v in loss_terms.items())
    ckpt = last_checkpoint(checkpoint_dir(out)) or "none yet"
    raise NonFiniteLossError(
        f"training loss became non-finite at step {step} ({terms}). Last good checkpoint: {ckpt}. "
        "Lower --lr, check the data for broken rows, or use --precision fp32; then rerun (add --resume to continue "
        "from the checkpoint)."
    )


def interrupt_callback():
    """A Trainer callback that turns the first Ctrl-C into "save a checkpoint and stop".

    The second Ctrl-C interrupts at once, as usual. After ``train()`` returns, ``.interrupted``
    tells the caller not to write an artifact but to say how to resume.
    """
    import signal

    from transformers import TrainerCallback

    class StopOnInterrupt(TrainerCallback):
        def __init__(self) -> None:
            self.interrupted = False
            self._previous = None

        def _handle(self, signum, frame):  # noqa: ARG002 - signal handler signature
            if self.interrupted:
                raise KeyboardInterrupt
            self.interrupted = True
            print("\ninterrupt: finishing this step, saving a checkpoint and stopping (Ctrl-C again to abort)",
                  file=sys.stderr)

        def on_train_begin(self, args, state, control, **kwargs):
            import threading

            if threading.current_thread() is threading.main_thread():
                ensure_signal_stack()  # a dangling alternate stack (OpenVINO) would turn Ctrl-C into a segfault
                self._previous = signal.signal(signal.SIGINT, self._handle)

        def on_step_end(self, args, state, control, **kwargs):
            if self.interrupted:
                control.should_save = True
                control.should_training_stop = True
            return control

        def on_train_end(self, args, state, control, **kwargs):
            if self._previous is not None:
                signal.signal(signal.SIGINT, self._previous)
                self._previous = None

    return StopOnInterrupt()


def epoch_validation_callback(evaluate: Callable[[Any, int], dict[str, float]], describe: Callable[[dict], str],
                              keep_best: bool = False, kept_model: Any = None):
    """A Trainer callback: after every epoch, ``evaluate(model, eval batch size)`` (its values named as they go
    into the log, e.g. ``validation_entity_f1``), rounded, in ``.history`` and the Trainer's log history, and
    ``describe(values)`` on stdout; so a task's training log shows its own metric, not only the loss.
    The model is put back in training mode afterwards.

    ``keep_best`` (``--keep-best``): the model ends training with the weights of the epoch whose first value
    scored highest (the earliest of equals), not the last epoch's; what was kept is in ``.kept``. Why: on a small,
    noisy validation set the last epoch of a decaying schedule is often not the best one (WNUT-17 students: 4 of
    12 runs, by 0.1 to 1.3 points of entity F1; their test F1 did not follow, docs/lab/ner.md). ``kept_model`` is
    the model whose weights are kept when the Trainer trains a wrapper around it (default: the Trainer's model).
    The best epoch's weights are held in memory (one copy of the model), like tail averaging's: a resumed run
    chooses among the epochs it ran after resuming, ``.kept`` says which it compared, and a warning names an
    earlier epoch that read more."""
    from transformers import TrainerCallback

    class EpochValidation(TrainerCallback):
        def __init__(self) -> None:
            self.history: list[dict[str, float]] = []
            self.kept: dict[str, Any] | None = None
            self._best: tuple[dict[str, float], dict[str, Any]] | None = None  # (epoch's entry, its weights)

        def on_epoch_end(self, args, state, control, model=None, **kwargs):
            if model is None or not state.is_world_process_zero:
                return control
            was_training = model.training
            values = evaluate(model, args.per_device_eval_batch_size)
            if was_training:
                model.train()
            entry = {"epoch": round(float(state.epoch or 0), 3), "step": int(state.global_step),
                     **{k: round(float(v), 5) for k, v in values.items()}}
            self.history.append(entry)
            state.log_history.append(dict(entry))
            print(f"epoch {entry['epoch']:g}: {describe(values)}")
            if keep_best:
                self._remember(kept_model if kept_model is not None else model, entry)
            return control

        def record(self) -> dict[str, Any]:
            """What ``compress.json`` keeps under ``training``: every epoch's scores, and the epoch kept."""
            return {"validation_by_epoch": self.history, **({"kept_epoch": self.kept} if self.kept else {})}

        @staticmethod
        def _metric(entry: dict[str, float]) -> str:
            """The name of an entry's first value, the one epochs are compared on."""
            return next(k for k in entry if k not in ("epoch", "step"))

        def _remember(self, model: Any, entry: dict[str, float]) -> None:
            """Copy the weights when this epoch beats every earlier one on the first value."""
            name = self._metric(entry)
            if self._best is None or entry[name] > self._best[0][name]:
                self._best = (entry, {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})

        def on_train_end(self, args, state, control, model=None, **kwargs):
            warning = still_learning(self.history, int(state.max_steps or 0))
            if warning:
                print(f"warning: {warning}", file=sys.stderr)
            if keep_best and self._best is not None:
                self._restore(kept_model if kept_model is not None else model)
                self._warn_if_lost_to_resume(state.log_history)
            return control

        def _warn_if_lost_to_resume(self, log_history: Sequence[dict[str, Any]]) -> None:
            """After a resume, an epoch scored before it (in the checkpoint's log history) may have read more than
            every epoch since; its weights are gone, so say so rather than let the kept epoch pass for the best."""
            name, ran = self.kept["metric"], {h["step"] for h in self.history}
            earlier = [h for h in log_history if name in h and "step" in h and h["step"] not in ran]
            better = max(earlier, key=lambda h: h[name], default=None)
            if better is not None and better[name] > self.kept["value"]:
                print(f"warning: --keep-best: epoch {better['epoch']:g}, before the resume, read {100 * better[name]:.2f}, "
                      f"more than the kept epoch's {100 * self.kept['value']:.2f}; its weights were not kept across "
                      "the resume (rerun without --resume to have it)", file=sys.stderr)
                self.kept["better_before_resume"] = {"epoch": better["epoch"], "value": better[name]}

        def _restore(self, model: Any) -> None:
            """Load the best epoch's weights into ``model`` (unless the last epoch was the best) and record it."""
            import torch

            entry, weights = self._best
            last = self.history[-1]
            name = self._metric(entry)
            score = entry[name]
            self.kept = {"metric": name, "epoch": entry["epoch"], "step": entry["step"], "value": entry[name],
                         "last_epoch": last["epoch"], "last_value": last[name],
                         "epochs_compared": [h["epoch"] for h in self.history]}
            if entry is not last:
                with torch.no_grad():
                    model.load_state_dict(weights)
            metric = name.replace("_", " ").replace(" f1", " F1")
            if entry is last:
                print(f"--keep-best: the last epoch ({last['epoch']:g}) scored best ({metric} {100 * score:.2f}); "
                      "its weights are kept")
            else:
                print(f"--keep-best: keeping epoch {entry['epoch']:g}'s weights ({metric} {100 * score:.2f}, the best), "
                      f"not the last epoch's ({last['epoch']:g}: {100 * last[name]:.2f})")
            self._best = None  # the copy is not needed any more

    return EpochValidation()


def refuse_keep_best(settings: TrainSettings, splits: Any, data: str) -> None:
    """Stop before any work when ``--keep-best`` is set and the data (``splits``, read from ``--data data``) has
    no validation split to score the epochs on: a flag silently ignored would write the last epoch's weights
    under its name."""
    if settings.keep_best and "validation" not in splits:
        raise CompressError(f"--keep-best: --data {data} has no validation split to score the epochs on, so there is "
                            "no epoch to pick. Add a validation split, or leave --keep-best out (the last epoch's "
                            "weights are written).")


def still_learning(history: Sequence[dict[str, float]], steps: int = 0) -> str | None:
    """A warning when the last epoch lifted the first validation metric of ``history`` (the
    :func:`epoch_validation_callback` entries) by more than :data:`STILL_LEARNING`, else None. Why: a schedule
    given in epochs is few steps on a small training set, and the metric then stops mid-climb without a sign."""
    if len(history) < 2:
        return None
    name = next((k for k in history[-1] if k not in ("epoch", "step")), None)
    if name is None:
        return None
    before, last = float(history[-2][name]), float(history[-1][name])
    if last - before <= STILL_LEARNING:
        return None
    metric = name.replace("_", " ").replace(" f1", " F1")
    return (f"{metric} rose {100 * (last - before):.1f} points in the last epoch ({100 * before:.1f} -> "
            f"{100 * last:.1f}): the model was still learning when training stopped"
            + (f" after {steps} optimiser steps" if steps else "") + ". More --epochs will likely help; a small "
            "training set gives few steps an epoch.")


def _disk_full(exc: BaseException, folder: Path) -> bool:
    """Whether a failed save was a full disk: ENOSPC, or (since torch.save only says "iostream error")
    a filesystem with almost nothing left where the checkpoint was being written."""
    if isinstance(exc, OSError) and exc.errno == 28:
        return True
    if "No space left" in str(exc) or "StorageFull" in str(exc):
        return True
    try:
        usage = shutil.disk_usage(folder if folder.exists() else folder.parent)
    except OSError:
        return False
    return usage.free < max(64 * 2**20, usage.total // 100) if usage.total > 256 * 2**20 else usage.free < 2**20


def run_trainer(trainer, resume: str | None, out: Path, stop) -> Any:
    """``trainer.train()`` with the two ways a long run ends early made explicit.

    Ctrl-C (via ``stop``, an :func:`interrupt_callback`) leaves a checkpoint and raises a
    :class:`CompressError` saying how to resume; a full disk while saving reports it, removes the
    partial checkpoint and keeps the previous one.
    """
    try:
        result = trainer.train(resume_from_checkpoint=resume)
    except Exception as exc:  # torch.save reports a full disk as a RuntimeError, safetensors as its own error
        if not _disk_full(exc, checkpoint_dir(out)):
            raise
        step = trainer.state.global_step
        partial = checkpoint_dir(out) / f"checkpoint-{step}"
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)
        kept = last_checkpoint(checkpoint_dir(out)) or "none"
        raise CompressError(f"disk full while saving the checkpoint of step {step} ({checkpoint_dir(out)}). "
                            f"The partial checkpoint was removed; the previous one is kept: {kept}. Free disk space, "
                            "then run the same command with --resume.") from exc
    if stop.interrupted:
        found = last_checkpoint(checkpoint_dir(out))
        raise CompressError(f"interrupted at step {trainer.state.global_step}; checkpoint saved at {found}. "
                            "Run the same command with --resume to continue from it.")
    return result


def epoch_seeded_sampler(sampler: Any, seed: int) -> Any:
    """Make the Trainer's length-grouped sampler reproducible across a resume.

    transformers draws each epoch's length-grouped order from the global RNG when the epoch
    starts; after a resume the global RNG is restored to the checkpoint's (mid-epoch) state, so the
    rest of the interrupted epoch came in another order. Seeding the order with ``seed + epoch``
    makes a resumed run see exactly the batches an uninterrupted one sees.
    """
    import torch
    from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices

    if not isinstance(sampler, LengthGroupedSampler):
        return sampler

    class EpochSeededLengthGroupedSampler(LengthGroupedSampler):
        def __init__(self, batch_size: int, lengths: list[int]):
            super().__init__(batch_size, lengths=lengths)
            self.epoch = 0

        def set_epoch(self, epoch: int) -> None:
            self.epoch = int(epoch)

        def __iter__(self):
            generator = torch.Generator()
            generator.manual_seed(seed * 1_000_003 + self.epoch)
            return iter(get_length_grouped_indices(self.lengths, self.batch_size, generator=generator))

    return EpochSeededLengthGroupedSampler(sampler.batch_size, list(sampler.lengths))


def guarded_trainer(out: str | os.PathLike, **trainer_kwargs: Any) -> Any:
    """A transformers ``Trainer`` for the single-model training stages (teacher, pretrain): its batch
    order is seeded per epoch (:func:`epoch_seeded_sampler`, so a resumed run sees the batches the
    uninterrupted one would) and every step's loss is checked (:func:`check_finite`: a NaN or inf
    stops the run naming the step and the last checkpoint in ``out``)."""
    from transformers import Trainer

    class GuardedTrainer(Trainer):
        def _get_train_sampler(self, train_dataset=None):
            return epoch_seeded_sampler(super()._get_train_sampler(train_dataset), self.args.data_seed or 0)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            loss = result[0] if return_outputs else result
            check_finite({"loss": loss}, self.state.global_step, Path(out))
            return result

    return GuardedTrainer(**trainer_kwargs)


def _encoder_layers(model: Any) -> tuple[Any, Any]:
    """``(encoder, layers)``: the module holding the transformer blocks and their ``ModuleList``.

    BERT, RoBERTa and MPNet keep them in ``encoder.layer``, DistilBERT in ``transformer.layer``.
    """
    base = model.base_model
    for name in ("encoder", "transformer"):
        encoder = getattr(base, name, None)
        layers = getattr(encoder, "layer", None)
        if layers is not None:
            return encoder, layers
    raise CompressError(f"--freeze-layers: no encoder layers found in this {model.config.model_type} model "
                        "(looked for encoder.layer and transformer.layer); fine-tune it with --freeze-layers 0.")


def freeze_bottom_layers(model: Any, count: int) -> dict[str, int]:
    """Keep the embeddings and the bottom ``count`` encoder layers fixed while fine-tuning (``--freeze-layers``).

    Why: with nothing below layer ``count`` trainable, autograd stops there, so the backward pass (about
    two thirds of a training step) and the optimiser skip those layers. Encoder weights shared by every
    layer (MPNet's relative position bias) are frozen too: a trainable tensor feeding the bottom layers
    would send the backward pass through all of them again. The pooler and the task head stay trainable.
    Returns what the stage records in its training log (nothing when ``count`` is 0).
    """
    from compress.runtime.modeling import count_parameters  # here: compress.runtime.modeling's imports reach back to this module

    if count <= 0:
        return {}
    encoder, layers = _encoder_layers(model)
    if count > len(layers):
        raise CompressError(f"--freeze-layers {count}: the model has {len(layers)} encoder layers; give at most "
                            f"{len(layers)} (0 trains every layer).")
    frozen = [p for module in (model.base_model.embeddings, *layers[:count]) for p in module.parameters()]
    frozen += [p for name, p in encoder.named_parameters() if not name.startswith("layer.")]
    for param in frozen:
        param.requires_grad_(False)
    trainable = int(sum(p.numel() for p in model.parameters() if p.requires_grad))
    if is_main_process():
        print(f"--freeze-layers {count}: the embeddings and encoder layers 1-{count} of {len(layers)} stay fixed; "
              f"{trainable / 1e6:.1f}M of {count_parameters(model) / 1e6:.1f}M parameters train")
    return {"freeze_layers": count, "trainable_parameters": trainable}
