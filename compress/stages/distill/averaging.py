"""Tail averaging of the student's weights (``distill --average-tail SHARE``): the student written is the mean
of its weights at evenly spaced steps over the last ``SHARE`` of training, instead of the last step's weights.

A distilled student's last steps are taken at a learning rate decaying toward zero, so its final weights
are one noisy point near a minimum; the mean of several points of that tail lands nearer the middle of
it (Polyak averaging; "checkpoint averaging" in machine translation). It costs one float copy of the
student in memory and no extra forward pass. The snapshots are taken in memory: a resumed run averages
only the snapshots taken after it resumed, and ``compress.json`` says how many there were.
"""

from __future__ import annotations

from typing import Any

#: Snapshots taken over the tail: enough for the mean to settle, few enough to cost nothing.
SNAPSHOTS = 10


def tail_schedule(total_steps: int, share: float, snapshots: int = SNAPSHOTS) -> tuple[int, int]:
    """``(first step, every)``: the steps ``first, first + every, ..., total_steps`` are averaged, up to
    ``snapshots`` of them spread over the last ``share`` of ``total_steps``; the last step is always one."""
    tail = max(1, int(round(total_steps * share)))
    count = min(snapshots, tail)
    every = max(1, tail // count)
    return total_steps - (count - 1) * every, every


def tail_average_callback(model: Any, share: float):
    """A ``TrainerCallback`` that averages ``model``'s floating-point parameters and buffers over the tail of
    :func:`tail_schedule` (of the run's optimiser steps) and, at the end of training, loads the mean into
    ``model``. Its ``record()`` is what ``compress.json`` keeps."""
    import torch
    from transformers import TrainerCallback

    class TailAverage(TrainerCallback):
        def __init__(self) -> None:
            self.sum: dict[str, torch.Tensor] = {}
            self.count = 0
            self.steps: list[int] = []
            self.first, self.every = 1, 1

        def on_train_begin(self, args, state, control, **kwargs):
            self.first, self.every = tail_schedule(state.max_steps, share)

        def on_step_end(self, args, state, control, **kwargs):
            step = state.global_step
            if step < self.first or (step - self.first) % self.every:
                return
            with torch.no_grad():
                for name, value in model.state_dict().items():
                    if value.is_floating_point():
                        if name in self.sum:
                            self.sum[name] += value.detach().float()
                        else:
                            self.sum[name] = value.detach().float().clone()
            self.count += 1
            self.steps.append(step)

        def on_train_end(self, args, state, control, **kwargs):
            if not self.count:
                return
            state_dict = model.state_dict()
            with torch.no_grad():
                for name, total in self.sum.items():
                    state_dict[name].copy_((total / self.count).to(state_dict[name].dtype))

        def record(self) -> dict[str, Any]:
            return {"share": share, "snapshots": self.count, "steps": self.steps}

    return TailAverage()
