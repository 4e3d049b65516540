"""Stage configs: types and unknown keys checked, every problem at once, flags = recipe keys, and the
``config`` of every artifact's ``compress.json`` reloading into the config that made it."""

from __future__ import annotations

import argparse
import json

import pytest

from compress.cli import build_parser, stage_config
from compress.stages.registry import stage_configs
from compress.config import (DATA_KEYS, BenchConfig, ConfigError, DataOptions, DistillConfig, ExportConfig,
                             GateConfig, PruneConfig, QuantizeConfig, StudentSpec, TeacherConfig, TrainSettings)
from tests.conftest import make_bert, sentiment_rows, write_csv

#: Flags of each command that are not settings of its config: where the artifact goes, and --debug.
NOT_SETTINGS = {"out", "debug", "command", "func", "help"}
DATA_FLAGS = set(DATA_KEYS)

from tests.support.paths import ROOT


def test_types_are_checked_with_the_key_named():
    with pytest.raises(ConfigError) as info:
        DataOptions.from_dict({"data": "x.csv", "limit": "ten", "split_seed": 1.5}, where="data")
    assert "data.limit must be an integer, got 'ten'" in str(info.value)
    assert "data.split_seed must be an integer, got 1.5" in str(info.value)
    assert {p.keys for p in info.value.problems} == {("limit",), ("split_seed",)}


def test_unknown_keys_are_rejected_with_the_known_ones_listed():
    with pytest.raises(ConfigError, match=r"unknown teacher setting 'colour'; known: allow_pickle, batch_size, device"):
        TeacherConfig.from_dict({"model": "minilm", "colour": "blue"}, where="teacher")
    with pytest.raises(ConfigError, match=r"unknown teacher.train setting 'warmup'"):
        TeacherConfig.from_dict({"train": {"warmup": 3}}, where="teacher")


def test_every_problem_at_once_types_choices_and_values():
    with pytest.raises(ConfigError) as info:
        DistillConfig.from_dict({"teacher": "t", "epochs": "two", "temperature": 0, "kd_loss": "mse", "alpha_hard": -1,
                                 "augment": -2, "student": "banana"}, where="distill")
    msg = str(info.value)
    for part in ("distill.epochs must be a float, got 'two'", "--temperature must be > 0, got 0.0",
                 "distill.kd_loss must be one of soft_ce, kl, logit_mse, teacher_ce, got 'mse'", "--alpha-hard must be >= 0, got -1.0",
                 "--augment must be >= 0, got -2", "banana"):
        assert part in msg
    keys = {p.keys for p in info.value.problems}
    assert {("epochs",), ("temperature",), ("kd_loss",), ("alpha_hard",), ("augment",), ("student",)} <= keys
    assert "--kd-loss must be soft_ce or kl" not in msg  # the choice is reported once, by its key


def test_flat_and_nested_forms_build_the_same_config():
    flat = DistillConfig.from_dict({"teacher": "t", "student": "3x384", "init": "random", "epochs": 2, "lr": "2e-5",
                                    "augment_ops": ["replace", "mask"]})
    nested = DistillConfig.from_dict({"teacher": "t", "student": {"shape": "3x384", "init": "random"},
                                      "train": {"epochs": 2.0, "lr": 2e-5}, "augment_ops": "replace,mask"})
    assert flat == nested
    assert flat.student == StudentSpec("3x384", "random") and flat.train == TrainSettings(epochs=2.0, lr=2e-5)
    # the teacher's training defaults are its own, not TrainSettings'
    assert TeacherConfig.from_dict({"model": "m", "seed": 3}).train == TrainSettings(epochs=2.0, lr=2e-5, seed=3)
    assert TeacherConfig.from_dict({"finetune": "no"}).finetune is False
    # prune trains recovery for --recover-epochs, as its command line did
    assert PruneConfig.from_dict({"model": "m", "recover_epochs": 2, "lr": 1e-4}).train.epochs == 2.0


def test_python_construction_is_validated_all_at_once():
    cfg = PruneConfig(model="", heads=1.0, ffn=-0.1, train=TrainSettings(lr=0))
    with pytest.raises(ConfigError) as info:
        cfg.validate()
    msg = str(info.value)
    assert "--model is required" in msg and "--heads must be a share in [0, 1)" in msg
    assert "--ffn must be a share in [0, 1)" in msg and "--lr must be > 0, got 0" in msg
    with pytest.raises(ConfigError, match="gate.rules must be a path to a TOML file or a mapping of rules"):
        GateConfig.from_dict({"results": "r.json", "rules": 3}, where="gate")
    with pytest.raises(ConfigError, match=r"bench.batch_sizes must be a list of whole numbers"):
        BenchConfig.from_dict({"artifacts": ["a"], "reference": "a", "batch_sizes": "one"}, where="bench")
    assert BenchConfig.from_dict({"artifacts": ["a"], "reference": "a", "batch_sizes": "1,32"}).batch_sizes == [1, 32]


def _config_dests(parser: argparse.ArgumentParser) -> set[str]:
    return {a.dest for a in parser._actions if a.dest not in NOT_SETTINGS}


def test_every_command_flag_is_a_config_key_and_back():
    """What a recipe section takes is exactly what the stage's command takes as flags."""
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for stage, cls in stage_configs().items():
        flags = _config_dests(subparsers[stage]) - DATA_FLAGS
        keys = set(cls.known_keys())
        not_flags = {"atol"} if stage == "export" else ({"progress"} if stage == "bench" else set())
        assert flags == keys - not_flags, stage


def test_a_command_with_only_its_required_flags_builds_the_dataclass_defaults():
    """Every optional flag's default is its field's default: a flag that re-declared a default and
    drifted (a temperature of 2.0 on the command line and 1.0 in Python) would show here as a field whose
    command-line config differs from the one built in Python from the same required values."""
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for stage, cls in stage_configs().items():
        argv, given = [stage], {}
        for action in subparsers[stage]._actions:
            if action.required:
                argv += [action.option_strings[0], "X"] if action.option_strings else ["X"]
                given[action.dest] = "X"
        from_flags = stage_config(stage, parser.parse_args(argv))
        keys = {k: v for k, v in given.items() if k in cls.known_keys()}
        if "data" in given:
            keys["data"] = DataOptions("X")
        assert from_flags == cls.from_dict(keys, where=stage), stage
        # and a flag's choice list is its field's
        for action in subparsers[stage]._actions:
            field = _field(cls, action.dest)
            if action.choices is not None and field is not None and "choices" in field.metadata:
                assert list(action.choices) == list(field.metadata["choices"]), f"{stage} --{action.dest}"


def _field(cls, key: str):
    """The dataclass field behind a config's flat key (a nested one through ``FLAT``), or ``None``."""
    import dataclasses
    from typing import get_type_hints

    parent, sub = cls.FLAT.get(key, (None, key))
    owner = cls if parent is None else cls._nested_class(get_type_hints(cls)[parent])
    if key in DATA_FLAGS:
        owner, sub = DataOptions, key
    return next((f for f in dataclasses.fields(owner) if f.name == sub), None) if owner else None


def test_the_command_line_builds_the_config_a_python_user_would():
    parser = build_parser()
    a = parser.parse_args(["prune", "--model", "M", "--out", "O", "--heads", "0.5", "--recover-epochs", "2", "--lr",
                           "1e-4", "--data", "d.csv", "--limit", "50", "--resume"])
    cfg = stage_config("prune", a)
    assert cfg == PruneConfig(model="M", data=DataOptions("d.csv", limit=50), heads=0.5, recover_epochs=2.0,
                              train=TrainSettings(epochs=2.0, lr=1e-4), resume=True)
    a = parser.parse_args(["quantize", "--model", "M", "--out", "O", "--method", "torch-dynamic"])
    assert stage_config("quantize", a) == QuantizeConfig(model="M", method="torch-dynamic")
    a = parser.parse_args(["export", "--model", "M", "--out", "O", "--no-optimize"])
    assert stage_config("export", a) == ExportConfig(model="M", optimize=False)


# ----------------------------------------------------------------------------- compress.json round trips


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """One tiny artifact of every stage that writes compress.json."""
    from compress.stages.distill.trainer import distill
    from compress.stages.export import export_stage
    from compress.stages.prune import prune
    from compress.stages.quantize import quantize_stage
    from compress.stages.teacher import train_teacher

    root = tmp_path_factory.mktemp("configs")
    data = DataOptions(str(write_csv(root / "data.csv", sentiment_rows(80))))
    encoder = make_bert(root / "encoder", layers=2)
    train = TrainSettings(epochs=1, lr=2e-3, batch_size=16, logging_steps=1000)
    configs = {"teacher": TeacherConfig(model=str(encoder), data=data, train=train)}
    teacher = train_teacher(configs["teacher"], root / "teacher")
    configs["distill"] = DistillConfig(teacher=str(teacher), data=data, student=StudentSpec("1x32", "teacher-layers"),
                                       train=TrainSettings(max_steps=2, batch_size=16, lr=1e-3), intermediate=False,
                                       allow_untrained_teacher=True)  # one epoch on 64 rows: still at chance
    student = distill(configs["distill"], root / "student")
    configs["prune"] = PruneConfig(model=str(teacher), data=data, heads=0.5, train=train)
    prune(configs["prune"], root / "pruned")
    configs["export"] = ExportConfig(model=str(student))
    onnx = export_stage(configs["export"], root / "onnx")
    configs["quantize"] = QuantizeConfig(model=str(onnx), data=data, max_accuracy_drop=0.5)
    quantize_stage(configs["quantize"], root / "int8")
    folders = {"teacher": "teacher", "distill": "student", "prune": "pruned", "export": "onnx", "quantize": "int8"}
    return {stage: (cfg, root / folders[stage]) for stage, cfg in configs.items()}


@pytest.mark.parametrize("stage", ["teacher", "distill", "prune", "export", "quantize"])
def test_compress_json_config_reloads_into_the_config_that_made_it(chain, stage):
    cfg, folder = chain[stage]
    saved = json.loads((folder / "compress.json").read_text())["config"]
    reloaded = stage_configs()[stage].from_dict(saved, where=f"{folder}/compress.json")
    assert reloaded == cfg
    assert reloaded.to_dict() == saved
    assert reloaded.fingerprint() == cfg.fingerprint()


def test_no_flag_of_a_stage_spells_out_a_default():
    """Each stage flag's default, type and choices come from its config field (``cli._option``); only the flags
    of commands that are not stages (``predict``, ``students``) may carry a literal default of their own."""
    import ast

    tree = ast.parse((ROOT / "compress" / "cli.py").read_text(encoding="utf-8"))
    literal = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            for kw in node.keywords:
                if kw.arg == "default" and isinstance(kw.value, (ast.Constant, ast.List, ast.Tuple)) \
                        and not (isinstance(kw.value, ast.Constant) and kw.value.value in (None, False)):
                    literal.append((node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else "?",
                                    node.lineno))
    assert {flag for flag, _ in literal} <= {"--num-labels", "--batch-size"}, literal


def test_prune_recovery_and_distill_share_one_declaration_of_their_common_settings():
    """KDSettings declares them once: neither stage config re-declares one, and recovery hands on every one."""
    import dataclasses

    from compress.config import DistillConfig, KDSettings, PretrainConfig, PruneConfig, RunSettings, TeacherConfig

    shared = {f.name for f in dataclasses.fields(KDSettings)}
    assert {"temperature", "alpha_kd", "alpha_hard", "device", "precision"} <= shared
    for cls in (DistillConfig, PruneConfig):
        assert not shared & set(cls.__annotations__), f"{cls.__name__} re-declares {shared & set(cls.__annotations__)}"
    run = {f.name for f in dataclasses.fields(RunSettings)}
    for cls in (TeacherConfig, PretrainConfig):  # every training stage inherits the run settings
        assert issubclass(cls, RunSettings) and not run & set(cls.__annotations__)
    prune = PruneConfig.from_dict({"model": "m", "recover_epochs": 1, "temperature": 3.5, "alpha_hard": 0.25,
                                   "max_length": 64, "precision": "fp32", "resume": True}, where="prune")
    handed = DistillConfig(teacher="t", **prune.kd_values())
    assert {k: getattr(handed, k) for k in shared} == {k: getattr(prune, k) for k in shared}
    assert (handed.temperature, handed.alpha_hard, handed.max_length) == (3.5, 0.25, 64)
