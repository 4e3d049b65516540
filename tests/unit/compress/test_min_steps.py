"""``--min-steps``: a floor on the optimiser steps, reached by whole epochs on a small training set."""

from __future__ import annotations

import pytest

from compress.config import TrainSettings
from compress.stages.training import schedule_epochs, training_arguments


@pytest.mark.parametrize("settings, per_epoch, epochs", [
    (TrainSettings(epochs=4, min_steps=850), 85, 10.0),      # WikiGold's 1,356 sentences at batch 16
    (TrainSettings(epochs=4, min_steps=850), 213, 4),        # WNUT-17's 3,394: 852 steps already
    (TrainSettings(epochs=4, min_steps=852), 213, 4),        # exactly at the floor
    (TrainSettings(epochs=2.5, min_steps=100), 10, 10.0),
    (TrainSettings(epochs=4), 85, 4),                        # off by default
    (TrainSettings(epochs=4, min_steps=850, max_steps=50), 85, 4),   # --max-steps still decides
    (TrainSettings(epochs=0, min_steps=850), 85, 0),         # no training stays no training
])
def test_epochs_are_raised_to_reach_the_floor(settings, per_epoch, epochs):
    assert schedule_epochs(settings, per_epoch) == epochs


def test_training_arguments_train_the_raised_epochs_and_say_so(tmp_path, capsys):
    import torch

    args = training_arguments(TrainSettings(epochs=4, batch_size=16, min_steps=850), tmp_path, 1356,
                              device=torch.device("cpu"))
    assert args.num_train_epochs == 10 and args.warmup_steps == 85
    out = capsys.readouterr().out
    assert "--min-steps 850: 10 epochs instead of 4 (85 optimiser steps an epoch" in out and "850 optimiser steps" in out
    assert training_arguments(TrainSettings(epochs=4, batch_size=16, min_steps=850), tmp_path, 3394,
                              device=torch.device("cpu")).num_train_epochs == 4


def test_a_negative_floor_is_a_config_problem_and_the_flag_exists_on_training_commands():
    from compress.cli import build_parser
    from compress.config import ConfigError
    from compress.config.stage_configs import DistillConfig, TeacherConfig

    with pytest.raises(ConfigError, match="--min-steps must be >= 0, got -1"):
        TeacherConfig.from_dict({"model": "minilm", "min_steps": -1})
    assert TeacherConfig.from_dict({"model": "minilm", "min_steps": 850}).train.min_steps == 850
    parser = build_parser()
    for command in ("teacher", "distill"):
        extra = ["--model", "minilm"] if command == "teacher" else ["--teacher", "t"]
        args = parser.parse_args([command, *extra, "--data", "wnut17", "--out", "x", "--min-steps", "700"])
        assert args.min_steps == 700
    assert DistillConfig().train.min_steps == 0
