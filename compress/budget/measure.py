"""This machine's speed at a recipe's real shapes and precision, measured in seconds before anything trains.

:func:`measure_recipe` times a few optimiser steps of the teacher and of the student at their batch sizes and at
the padded length their length-grouped batches will have on the recipe's data, the teacher labelling rows
(what distillation's soft-label pass and every evaluation cost), one export of the student, and one bench round
of each measured shape (the fp32 PyTorch teacher, the student's ONNX graph). The result is a
:class:`SpeedMeasurement`, which the planner (:mod:`compress.budget.plan`) reads and tests construct by hand.
"""

from __future__ import annotations

import contextlib
import gc
import io
import math
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

from compress.core.errors import CompressError

#: Timed steps after one untimed warm-up step. The fastest of them is kept: on a shared machine another
#: process only ever adds time, so the minimum is the closest to what the step costs with the cores to itself.
TIMED_STEPS = 3
#: Rows tokenized to learn the data's lengths (and a reader's windows per question).
LENGTH_SAMPLE = 1000
#: The batch size the stages label and evaluate with (compress.runtime.modeling.predict_logits).
LABEL_BATCH = 64


def round_key(who: str, batch: int, seq: int) -> str:
    """The key of one bench round in :attr:`SpeedMeasurement.round_s`: ``teacher@32x128``."""
    return f"{who}@{batch}x{seq}"


@dataclass
class SpeedMeasurement:
    """What the planner knows about this machine and this recipe's data (every time in seconds)."""

    #: The CPU (``lscpu``'s model name) and the training precision the measurement ran in.
    cpu: str
    precision: str
    #: Model rows each split holds (a reader's windows), ``transfer``: transfer rows the corpus has (0: unknown).
    rows: dict[str, int]
    #: Frozen teacher layers -> one teacher optimiser step at the teacher's batch size and padded length.
    teacher_step_s: dict[int, float]
    #: The teacher labelling (or evaluating) one row, no gradients, in the training precision.
    teacher_row_s: float
    #: One student optimiser step at distillation's batch size and padded length.
    student_step_s: float
    #: The student evaluating one row.
    student_row_s: float
    #: The fp32 PyTorch teacher scoring one row (bench's accuracy pass runs it in fp32).
    teacher_fp32_row_s: float
    #: One ONNX export of the student.
    export_s: float
    #: :func:`round_key` -> one bench round: ``teacher`` the fp32 PyTorch teacher, ``student`` the student's ONNX graph.
    round_s: dict[str, float]
    #: Loading the data, and loading the teacher's weights: what a stage that reads them pays before its work.
    data_s: float
    model_s: float
    #: How long this measurement took, counted in the budget.
    seconds: float
    #: Model rows per transfer row (a reader's windows per question; 1 for a classifier).
    windows_per_row: float = 1.0
    #: Notes for the printed plan (what was not measured and why).
    notes: list[str] = field(default_factory=list)

    def teacher_step(self, frozen: int) -> float:
        """A teacher step with ``frozen`` bottom layers fixed: measured, or interpolated between measured counts."""
        points = sorted((int(k), v) for k, v in self.teacher_step_s.items())
        if not points:
            raise ValueError("the measurement has no teacher step")
        if frozen <= points[0][0]:
            return points[0][1]
        for (a, ta), (b, tb) in zip(points, points[1:]):
            if a <= frozen <= b:
                return ta + (tb - ta) * (frozen - a) / (b - a)
        return points[-1][1]  # past the last measured count: no cheaper than it (a conservative estimate)

    def round(self, who: str, batch: int, seq: int) -> float:
        """One round of ``who`` at ``batch`` x ``seq``: measured, else scaled by tokens from the largest measured."""
        exact = self.round_s.get(round_key(who, batch, seq))
        if exact is not None:
            return exact
        measured = []
        for key, seconds in self.round_s.items():
            name, _, shape = key.partition("@")
            if name == who:
                b, _, s = shape.partition("x")
                measured.append((int(b) * int(s), seconds))
        if not measured:
            return 0.0
        tokens, seconds = max(measured)
        return seconds * batch * seq / tokens

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["teacher_step_s"] = {str(k): v for k, v in self.teacher_step_s.items()}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SpeedMeasurement":
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["teacher_step_s"] = {int(k): float(v) for k, v in (values.get("teacher_step_s") or {}).items()}
        return cls(**values)


# ----------------------------------------------------------------------------- the real measurement


def cpu_name() -> str:
    """``lscpu``'s model name (what every number in the docs is written beside)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def padded_length(lengths: Sequence[int], batch: int) -> int:
    """The mean padded length of length-grouped batches: sorted rows cut into batches, each padded to its longest."""
    if not lengths:
        return 2
    ordered = sorted(lengths)
    longest = [ordered[min(i + batch, len(ordered)) - 1] for i in range(0, len(ordered), batch)]
    return max(2, math.ceil(statistics.fmean(longest)))


def _fastest_time(fn, steps: int = TIMED_STEPS) -> float:
    fn()  # warm-up: first-call allocations and kernel choices
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _texts(task: Any, split: str, limit: int) -> tuple[list[Any], str]:
    """Up to ``limit`` rows of a split as the tokenizer reads them, and their kind (text, words, question)."""
    data = task.splits[split]
    n = min(limit, len(data))
    rows = data.select(range(n))
    columns = set(rows.column_names)
    if "tokens" in columns:
        return list(rows["tokens"]), "words"
    if "question" in columns and "context" in columns:
        return list(zip(rows["question"], rows["context"])), "question"
    if "text_pair" in columns and getattr(task, "is_pair", False):
        return list(zip(rows["text"], rows["text_pair"])), "pair"
    return list(rows["text"]), "text"


def _lengths(tokenizer: Any, rows: list[Any], kind: str) -> list[int]:
    """Untruncated token counts of the rows (special tokens included)."""
    if not rows:
        return []
    if kind == "words":
        enc = tokenizer(rows, is_split_into_words=True, truncation=False, verbose=False)
    elif kind in ("question", "pair"):
        enc = tokenizer([a for a, _ in rows], [b for _, b in rows], truncation=False, verbose=False)
    else:
        enc = tokenizer(rows, truncation=False, verbose=False)
    return [len(ids) for ids in enc["input_ids"]]


def _windows(length: int, max_length: int, stride: int) -> int:
    """Windows of ``max_length`` tokens a row of ``length`` tokens becomes when neighbours share ``stride``."""
    if length <= max_length:
        return 1
    step = max(1, max_length - stride)
    return 1 + math.ceil((length - max_length) / step)


def _batch(vocab: int, batch: int, length: int, num_labels: int, seed: int = 0) -> dict[str, Any]:
    """A batch of the real shape; the token values do not change what a step costs."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(5, max(vocab, 6), (batch, length), generator=g),
            "attention_mask": torch.ones(batch, length, dtype=torch.long),
            "labels": torch.randint(0, max(num_labels, 1), (batch,), generator=g)}


def _train_step_time(model: Any, batch: dict[str, Any], precision: str, device: Any) -> float:
    import torch

    from compress.runtime.modeling import autocast

    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    batch = {k: v.to(device) for k, v in batch.items()}

    def step() -> None:
        with autocast(precision, device):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    seconds = _fastest_time(step)
    del optimizer
    return seconds


def _forward_time(model: Any, batch: dict[str, Any], precision: str, device: Any, steps: int = TIMED_STEPS) -> float:
    import torch

    from compress.runtime.modeling import autocast

    model.eval()
    inputs = {k: v.to(device) for k, v in batch.items() if k != "labels"}

    def forward() -> None:
        with torch.inference_mode(), autocast(precision, device):
            model(**inputs)

    return _fastest_time(forward, steps)


def _stage(calls: Sequence[Any], name: str) -> Any:
    return next((c.config for c in calls if c.stage == name), None)


def measure_recipe(recipe: Any, frozen: Sequence[int] = ()) -> SpeedMeasurement:
    """Measure this machine for ``recipe`` (a :class:`compress.pipeline.Recipe`); ``frozen``: the frozen-layer
    counts of the teacher to time besides the recipe's own (the bound of an elastic ``teacher_frozen_layers``)."""
    from compress.core.assets import resolve_model
    from compress.core.device import resolve_precision, training_device
    from compress.runtime.modeling import load_classifier
    from compress.stages.training import freeze_bottom_layers
    from students.factory import build_student

    started = time.perf_counter()
    busy = _other_work()
    calls = list(recipe.calls)
    teacher_cfg, distill_cfg = _stage(calls, "teacher"), _stage(calls, "distill")
    pruned = _stage(calls, "prune")
    bench_cfg, optimize_cfg = _stage(calls, "bench"), _stage(calls, "optimize")
    notes: list[str] = []

    task = recipe.data.load_any()
    data_s = time.perf_counter() - started
    # The teacher's model: the one the teacher stage fine-tunes, else the trained teacher distill reads.
    if teacher_cfg is not None:
        source = resolve_model(teacher_cfg.model, revision=teacher_cfg.revision, allow_pickle=teacher_cfg.allow_pickle)
    elif distill_cfg is not None:
        source = resolve_model(distill_cfg.teacher, revision=distill_cfg.revision)
    else:
        raise CompressError(f"recipe {recipe.path}: a budget is planned from the teacher's and the student's speed; "
                            "the recipe needs a teacher or distill stage")
    settings = teacher_cfg or distill_cfg
    device = training_device(settings.device)
    precision = resolve_precision(settings.precision, device).precision
    label_names = list(task.label_names) if hasattr(task, "label_names") else ["start", "end"]
    # The encoder is what costs; a sequence-classification head on it is timed for every task.
    loading = time.perf_counter()  # after resolve_model: a first download is paid once, not by every stage
    teacher, tokenizer, _ = load_classifier(source, len(label_names), label_names)
    teacher.to(device)
    model_s = time.perf_counter() - loading

    t_max = (teacher_cfg or distill_cfg).max_length
    t_batch = teacher_cfg.train.batch_size if teacher_cfg is not None else distill_cfg.train.batch_size
    stride = getattr(settings, "stride", None)
    rows_text, kind = _texts(task, "train", LENGTH_SAMPLE)
    lengths = _lengths(tokenizer, rows_text, kind)
    stride = stride if stride is not None else (t_max // 3 if kind == "question" else t_max // 4)
    windows = [_windows(n, t_max, stride) for n in lengths]
    per_row = statistics.fmean(windows) if windows else 1.0
    capped = [min(n, t_max) for n in lengths]
    sizes = {name: len(split) for name, split in task.splits.items()}
    rows = {name: int(round(n * per_row)) for name, n in sizes.items()}
    rows["transfer"] = _transfer_rows(distill_cfg, notes)
    vocab = int(getattr(teacher.config, "vocab_size", 30000))

    # The teacher: its optimiser step at its batch and padded length, frozen or not.
    teacher_len = padded_length(capped, t_batch)
    step_s: dict[int, float] = {}
    counts = sorted({int(teacher_cfg.freeze_layers) if teacher_cfg is not None else 0, *(int(f) for f in frozen)})
    if teacher_cfg is not None and teacher_cfg.train.epochs > 0:
        batch = _batch(vocab, t_batch, teacher_len, len(label_names))
        for count in counts:  # ascending: freezing only ever adds fixed layers
            if count:
                try:
                    with contextlib.redirect_stdout(io.StringIO()):  # the teacher stage says what it froze, not this
                        freeze_bottom_layers(teacher, count)
                except CompressError as exc:  # a bound past the model's layers: say which setting asked for it
                    raise CompressError(f"recipe {recipe.path}: elastic.teacher_frozen_layers or "
                                        f"teacher.freeze_layers: {exc}") from exc
            step_s[count] = round(_train_step_time(teacher, batch, precision, device), 4)
        for p in teacher.parameters():
            p.requires_grad_(True)
    else:
        step_s[0] = 0.0
    label_len = padded_length(capped, LABEL_BATCH)
    label = _batch(vocab, LABEL_BATCH, label_len, len(label_names))
    teacher_row_s = _forward_time(teacher, label, precision, device) / LABEL_BATCH
    teacher_fp32_row_s = (_forward_time(teacher, label, "fp32", device, steps=1) / LABEL_BATCH
                          if precision != "fp32" else teacher_row_s)

    # One bench round of the fp32 PyTorch teacher at each measured shape (the benchmark's reference).
    shapes = _bench_shapes(bench_cfg, optimize_cfg)
    round_s: dict[str, float] = {}
    for b, s in shapes:
        round_s[round_key("teacher", b, s)] = round(
            _forward_time(teacher, _batch(vocab, b, s, len(label_names)), "fp32", device, steps=1), 4)

    # The student, built as distill builds it, at distillation's batch and the student's padded length.
    student_step_s = student_row_s = export_s = 0.0
    if distill_cfg is not None:
        student, s_tok, _ = build_student(distill_cfg.student, teacher, tokenizer, label_names, distill_cfg.layer_map,
                                          distill_cfg.train.seed)
        del teacher
        gc.collect()
        student.to(device)
        s_batch, s_max = distill_cfg.train.batch_size, distill_cfg.max_length
        s_lengths = [min(n, s_max) for n in lengths]  # the student's word pieces: the teacher's for these pairs
        s_vocab = int(getattr(student.config, "vocab_size", vocab))
        student_step_s = _train_step_time(student, _batch(s_vocab, s_batch, padded_length(s_lengths, s_batch),
                                                          len(label_names)), precision, device)
        student_row_s = _forward_time(student, _batch(s_vocab, LABEL_BATCH, padded_length(s_lengths, LABEL_BATCH),
                                                      len(label_names)), precision, device) / LABEL_BATCH
        export_s, student_rounds = _export_and_rounds(student, s_tok, shapes, s_vocab, notes)
        round_s.update(student_rounds)
        del student
    else:
        del teacher
        if pruned is not None or bench_cfg is not None:
            notes.append("no distill stage: the student's steps, export and rounds were not measured")
    gc.collect()
    if busy >= 0.75:
        notes.append(f"other work was running while this machine was measured (about {busy:.1f} cores busy besides "
                     "this run): the estimates are that slow; on a quiet machine --replan measures again")
    return SpeedMeasurement(
        cpu=cpu_name(), precision=precision, rows=rows, teacher_step_s=step_s, teacher_row_s=round(teacher_row_s, 6),
        student_step_s=round(student_step_s, 4), student_row_s=round(student_row_s, 6),
        teacher_fp32_row_s=round(teacher_fp32_row_s, 6), export_s=round(export_s, 2), round_s=round_s,
        data_s=round(data_s, 2), model_s=round(model_s, 2), seconds=round(time.perf_counter() - started, 1),
        windows_per_row=round(per_row, 3), notes=notes)


def _other_work() -> float:
    """Cores other processes kept busy over the last minute, read before this run computes anything (the 1-minute
    load average; 0 where the system does not say). Two cores shared with one other job make a step about twice
    as slow, and the plan would shrink for it."""
    import os

    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def _transfer_rows(distill_cfg: Any, notes: list[str]) -> int:
    """Transfer rows distillation would read: its ``unlabeled_limit``, else every row of the corpus (read now)."""
    if distill_cfg is None or not distill_cfg.unlabeled:
        return 0
    limit = distill_cfg.unlabeled_limit
    if limit is not None:
        return int(limit)
    from compress.corpora.corpus import load_unlabeled

    try:
        return len(load_unlabeled(distill_cfg.unlabeled, distill_cfg.unlabeled_text_column,
                                  distill_cfg.unlabeled_text_pair_column).texts)
    except CompressError as exc:  # distill reports the corpus's problem itself; the plan goes on without its rows
        notes.append(f"transfer rows not counted ({type(exc).__name__}: {exc})")
        return 0


def _bench_shapes(bench_cfg: Any, optimize_cfg: Any) -> list[tuple[int, int]]:
    """The (batch, sequence) shapes the timing stages measure."""
    shapes: set[tuple[int, int]] = set()
    if bench_cfg is not None:
        from compress.config import FULL, QUICK

        preset = QUICK if bench_cfg.quick else FULL
        for b in bench_cfg.batch_sizes or preset["batch_sizes"]:
            for s in bench_cfg.seq_lens or preset["seq_lens"]:
                shapes.add((int(b), int(s)))
    if optimize_cfg is not None:
        for b in optimize_cfg.batch_sizes:
            shapes.add((int(b), int(optimize_cfg.seq_len)))
    return sorted(shapes)


def _export_and_rounds(student: Any, tokenizer: Any, shapes: Sequence[tuple[int, int]], vocab: int,
                       notes: list[str]) -> tuple[float, dict[str, float]]:
    """One ONNX export of the student (the export stage's own path) and one ONNX Runtime round per shape."""
    import numpy as np

    from compress.stages.export import export_model

    rounds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bert-compress-measure-") as tmp:
        t0 = time.perf_counter()
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # its report names a temporary folder
                export_model(student.float().eval(), tokenizer, Path(tmp) / "onnx")
        except Exception as exc:  # noqa: BLE001 - the plan still runs; the export stage reports its own failure
            notes.append(f"student export not measured ({type(exc).__name__}: {exc})")
            return 0.0, rounds
        export_s = time.perf_counter() - t0
        import onnxruntime as ort

        folder = Path(tmp) / "onnx"
        from compress.runtime.predictor import ONNX_FILE

        graph = folder / ONNX_FILE
        session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
        names = {i.name for i in session.get_inputs()}
        rng = np.random.default_rng(0)
        for b, s in shapes:
            feed = {"input_ids": rng.integers(5, max(vocab, 6), (b, s), dtype=np.int64),
                    "attention_mask": np.ones((b, s), dtype=np.int64)}
            if "token_type_ids" in names:
                feed["token_type_ids"] = np.zeros((b, s), dtype=np.int64)
            feed = {k: v for k, v in feed.items() if k in names}
            session.run(None, feed)
            t0 = time.perf_counter()
            session.run(None, feed)
            rounds[round_key("student", b, s)] = round(time.perf_counter() - t0, 5)
    return export_s, rounds
