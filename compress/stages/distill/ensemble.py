"""Teacher ensembles (``distill --ensemble DIR,DIR``): the soft labels are the mean of several teachers' logits.

Why: teachers fine-tuned with different seeds, pooling or schedules disagree on the hard cases, and their mean
is a better-calibrated target than any one of them; averaging is paid once, at labelling time (each member's
logits are cached like the teacher's, keyed by its weights and its own token ids), and costs the training loop
nothing. The student is still measured against the single teacher a user would otherwise deploy (``--teacher``,
the ensemble's first member), and against the ensemble: ``compress.json`` reports both.

Every member must predict the task's labels (checked as for ``--teacher``); members may tokenize differently
(each reads the text its own way). Intermediate losses, when on, compare with ``--teacher``'s states only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from compress.tasks.tables import tokenize_split
from compress.core.errors import CompressError
from compress.stages.teacher import LoadedTeacher, load_teacher, teacher_logits
from compress.stages.transfer.assemble import with_mask_token


def member_specs(ensemble: str | None) -> list[str]:
    """The extra members of ``--ensemble`` (a comma list of teacher folders or hub ids), in order."""
    return [part.strip() for part in (ensemble or "").split(",") if part.strip()]


def load_members(ensemble: str | None, primary: LoadedTeacher, task: Any, allow_pickle: bool = False,
                 revision: str | None = None) -> list[LoadedTeacher]:
    """The teachers averaged with ``primary``; refuses one that is ``primary`` again or repeats another."""
    members: list[LoadedTeacher] = []
    seen = {primary.weights_sha256: str(primary.path)}
    for spec in member_specs(ensemble):
        member = load_teacher(spec, task, allow_pickle, revision=revision)
        if member.weights_sha256 in seen:
            raise CompressError(f"--ensemble {spec}: the same weights as {seen[member.weights_sha256]}; an ensemble "
                                "averages different teachers (other seeds, pooling or schedules)")
        seen[member.weights_sha256] = str(member.path)
        members.append(member)
    return members


def member_logits(member: LoadedTeacher, rows: Any, max_length: int, is_pair: bool, precision: str,
                  what: str) -> np.ndarray:
    """``member``'s logits for the texts of ``rows`` (a split, or a tokenized transfer part with its text columns),
    tokenized the member's own way; cached by :func:`compress.stages.teacher.teacher_logits`."""
    texts = rows.select_columns([c for c in ("text", "text_pair") if c in rows.column_names])
    tokenized = tokenize_split(with_mask_token(texts, member.tokenizer, is_pair), member.tokenizer, max_length,
                               is_pair, prefix="t_", what=f"ensemble member {Path(member.path).name}")
    logits, _ = teacher_logits(member, tokenized, prefix="t_", precision=precision, what=what)
    return logits


def averaged(primary_logits: np.ndarray, members: Sequence[LoadedTeacher], rows: Any, max_length: int,
             is_pair: bool, precision: str, what: str) -> np.ndarray:
    """The mean of ``primary_logits`` and every member's logits on the same rows."""
    stack = [np.asarray(primary_logits, dtype=np.float32)]
    for member in members:
        stack.append(member_logits(member, rows, max_length, is_pair, precision, what).astype(np.float32))
    return np.mean(stack, axis=0)


def describe(primary: LoadedTeacher, members: Sequence[LoadedTeacher]) -> dict[str, Any]:
    """What ``compress.json`` records under ``distillation.ensemble``: every member, ``--teacher`` first (the
    metrics give the ensemble's and the single teacher's accuracy side by side)."""
    return {"members": [str(primary.path)] + [str(m.path) for m in members],
            "weights_sha256": [primary.weights_sha256] + [m.weights_sha256 for m in members]}
