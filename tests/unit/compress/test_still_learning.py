"""The end-of-training warning when the last epoch still lifted the validation metric a lot."""

from __future__ import annotations

from types import SimpleNamespace

from compress.stages.training import STILL_LEARNING, epoch_validation_callback, still_learning


def _history(values):
    return [{"epoch": i + 1, "step": 85 * (i + 1), "validation_entity_f1": v, "validation_token_accuracy": 0.9}
            for i, v in enumerate(values)]


def test_a_last_epoch_gain_above_the_line_warns_with_the_numbers():
    message = still_learning(_history([0.0, 0.1361, 0.4482, 0.5462]), steps=340)  # WikiGold at 4 epochs
    assert message.startswith("validation entity F1 rose 9.8 points in the last epoch (44.8 -> 54.6)")
    assert "after 340 optimiser steps" in message and "More --epochs" in message


def test_small_gains_noise_and_falls_do_not_warn():
    assert still_learning(_history([0.0, 0.55, 0.633, 0.6596])) is None           # +2.7: WNUT-17's teacher
    assert still_learning(_history([0.80, 0.80 + STILL_LEARNING / 2])) is None   # under the line
    assert still_learning(_history([0.84, 0.82])) is None
    assert still_learning(_history([0.5])) is None and still_learning([{"epoch": 1, "step": 3}] * 2) is None


def test_the_callback_warns_at_the_end_of_training(capsys):
    values = iter([0.2, 0.5])
    callback = epoch_validation_callback(lambda model, batch: {"validation_f1": next(values)},
                                         lambda v: f"validation F1 {v['validation_f1']:.4f}")
    model = SimpleNamespace(training=False, train=lambda: None)
    args = SimpleNamespace(per_device_eval_batch_size=8)
    for epoch in (1, 2):
        state = SimpleNamespace(is_world_process_zero=True, epoch=epoch, global_step=10 * epoch, log_history=[],
                                max_steps=20)
        callback.on_epoch_end(args, state, None, model=model)
    callback.on_train_end(args, state, None)
    captured = capsys.readouterr()
    assert "epoch 2: validation F1 0.5000" in captured.out
    assert "warning: validation F1 rose 30.0 points in the last epoch (20.0 -> 50.0)" in captured.err
    assert "after 20 optimiser steps" in captured.err


def _run_epochs(values, keep_best: bool, kept_model=None):
    """One epoch per value, on a real module whose weight is set to the epoch's number before it is scored; the
    callback's choice is then visible in the weight the module ends with."""
    import torch

    model = torch.nn.Linear(2, 1)
    scores = iter(values)
    callback = epoch_validation_callback(lambda m, batch: {"validation_entity_f1": next(scores), "other": 0.0},
                                         lambda v: f"F1 {v['validation_entity_f1']:.2f}", keep_best,
                                         kept_model)
    args = SimpleNamespace(per_device_eval_batch_size=8)
    state = None
    for epoch in range(1, len(values) + 1):
        with torch.no_grad():
            (kept_model or model).weight.fill_(float(epoch))
        state = SimpleNamespace(is_world_process_zero=True, epoch=epoch, global_step=10 * epoch, log_history=[],
                                max_steps=10 * len(values))
        callback.on_epoch_end(args, state, None, model=model)
    callback.on_train_end(args, state, None, model=model)
    return model, callback


def test_keep_best_ends_with_the_best_epochs_weights_and_records_them(capsys):
    model, callback = _run_epochs([0.58, 0.63, 0.61], keep_best=True)
    assert model.weight[0, 0].item() == 2.0  # epoch 2's weights, not the last epoch's 3.0
    assert callback.kept == {"metric": "validation_entity_f1", "epoch": 2, "step": 20, "value": 0.63,
                             "last_epoch": 3, "last_value": 0.61, "epochs_compared": [1, 2, 3]}
    assert "--keep-best: keeping epoch 2's weights (validation entity F1 63.00, the best), not the last epoch's " \
           "(3: 61.00)" in capsys.readouterr().out


def test_keep_best_keeps_the_earliest_of_equal_epochs_and_the_last_when_it_is_best(capsys):
    model, callback = _run_epochs([0.6, 0.6, 0.5], keep_best=True)
    assert model.weight[0, 0].item() == 1.0 and callback.kept["epoch"] == 1
    model, callback = _run_epochs([0.5, 0.6, 0.7], keep_best=True)
    assert model.weight[0, 0].item() == 3.0 and callback.kept["epoch"] == callback.kept["last_epoch"] == 3
    assert "the last epoch (3) scored best" in capsys.readouterr().out


def test_without_keep_best_the_last_epoch_stays_and_nothing_is_recorded():
    model, callback = _run_epochs([0.58, 0.63, 0.61], keep_best=False)
    assert model.weight[0, 0].item() == 3.0 and callback.kept is None


def test_keep_best_keeps_the_model_it_is_given_when_the_trainer_trains_a_wrapper():
    import torch

    tagger = torch.nn.Linear(2, 1)
    wrapper, callback = _run_epochs([0.7, 0.6], keep_best=True, kept_model=tagger)
    assert tagger.weight[0, 0].item() == 1.0 and callback.kept["epoch"] == 1


def test_keep_best_after_a_resume_says_when_an_earlier_epoch_read_more(capsys):
    """The best weights live in memory: after a resume, an epoch from before it (in the checkpoint's log history)
    that read more than every epoch since cannot be kept; the run says so and records it."""
    import torch

    model = torch.nn.Linear(2, 1)
    scores = iter([0.60, 0.62])
    callback = epoch_validation_callback(lambda m, batch: {"validation_entity_f1": next(scores)}, lambda v: "",
                                         keep_best=True)
    before = [{"epoch": 1, "step": 10, "validation_entity_f1": 0.65}]  # restored from the checkpoint
    args = SimpleNamespace(per_device_eval_batch_size=8)
    for epoch in (2, 3):
        state = SimpleNamespace(is_world_process_zero=True, epoch=epoch, global_step=10 * epoch, log_history=before,
                                max_steps=30)
        callback.on_epoch_end(args, state, None, model=model)
    callback.on_train_end(args, state, None, model=model)
    assert callback.kept["epoch"] == 3 and callback.kept["better_before_resume"] == {"epoch": 1, "value": 0.65}
    assert "epoch 1, before the resume, read 65.00, more than the kept epoch's 62.00" in capsys.readouterr().err


def test_keep_best_without_a_validation_split_is_one_line_naming_the_data():
    import pytest

    from compress.config import TrainSettings
    from compress.core.errors import CompressError
    from compress.stages.training import refuse_keep_best

    refuse_keep_best(TrainSettings(keep_best=True), {"train": 1, "validation": 1}, "my.csv")
    refuse_keep_best(TrainSettings(), {"train": 1}, "my.csv")  # not asked for: nothing to refuse
    with pytest.raises(CompressError) as exc:
        refuse_keep_best(TrainSettings(keep_best=True), {"train": 1, "test": 1}, "my-folder")
    message = str(exc.value)
    assert message.startswith("--keep-best: --data my-folder has no validation split") and "\n" not in message
