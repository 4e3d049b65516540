"""``--precision auto|fp32|bf16|fp16``: the rule decided from constructed CPU flag sets, the rule on
this very machine, the printed and recorded choice of a real (tiny) stage run, the ``--bf16`` alias,
and recipes and ``compress.json`` configs written with the old ``bf16`` key still loading.

Why it matters: on a CPU without ``avx512_bf16``/AMX, bf16 autocast is emulated (an Intel Xeon with
AVX-512 VNNI but no BF16 trained MPNet-base 3.3x slower in bf16 than in fp32), so ``auto`` must
choose fp32 there and say so.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch

from compress.cli import build_parser, main, stage_config
from compress.config import ConfigError, TeacherConfig
from compress.stages.registry import stage_configs
from compress.core.device import (PRECISIONS, PrecisionChoice, cap_blocks_bf16, cpu_flags, decide_precision,
                             mixed_precision, onednn_isa_cap, resolve_precision)
from compress.core.errors import CompressError
from tests.conftest import make_bert, sentiment_rows, write_csv

EMULATED = "precision auto -> fp32: this CPU has no avx512_bf16/AMX; bf16 autocast would be emulated"
#: The flags of the CPU kinds seen (shortened to what the rule reads, plus neighbours it must ignore).
ZEN3 = {"avx2", "fma", "sse4_2"}  # AMD EPYC Zen 3: AVX2 + FMA only
XEON_VNNI = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"}  # AVX-512 VNNI, no BF16, no AMX
EPYC_BF16 = XEON_VNNI | {"avx512_bf16"}  # AVX-512 BF16, no AMX
XEON_AMX = XEON_VNNI | {"amx_tile", "amx_int8", "amx_bf16"}  # AMX; the rule needs amx_bf16 alone
PRECISION_STAGES = ("teacher", "pretrain", "distill", "prune", "quantize", "bench")


# ----------------------------------------------------------------------------- the rule, from flag sets


@pytest.mark.parametrize("flags, expected, named", [
    (EPYC_BF16, "bf16", "avx512_bf16"),
    (XEON_AMX, "bf16", "amx_bf16"),
    ({"amx_bf16"}, "bf16", "amx_bf16"),
    (ZEN3, "fp32", None),
    (XEON_VNNI, "fp32", None),
    (XEON_VNNI | {"amx_tile", "amx_int8"}, "fp32", None),  # AMX tiles without its bf16 unit are not bf16
    (set(), "fp32", None),  # flags unreadable (not Linux): the safe choice
])
def test_auto_on_a_cpu_is_bf16_only_with_native_bf16_flags(flags, expected, named):
    choice = decide_precision("auto", "cpu", flags)
    assert choice.precision == expected and choice.warning is None
    if named:
        assert named in choice.reason and choice.line().startswith("precision auto -> bf16: this CPU has ")
    else:
        assert choice.line() == EMULATED


@pytest.mark.parametrize("cap, blocks", [
    ("AVX512_CORE_VNNI", True), ("AVX2", True), ("AVX512_CORE", True), ("AVX2_VNNI_2", True),
    ("AVX512_CORE_BF16", False), ("AVX512_CORE_AMX", False), ("AVX10_1_512_AMX_FP16", False), (None, False),
])
def test_a_onednn_isa_cap_below_bf16_makes_auto_fp32_whatever_the_flags(cap, blocks):
    assert cap_blocks_bf16(cap) is blocks
    for flags in (XEON_AMX, EPYC_BF16):
        choice = decide_precision("auto", "cpu", flags, isa_cap=cap)
        assert choice.precision == ("fp32" if blocks else "bf16")
        if blocks:
            assert choice.reason.startswith(f"ONEDNN_MAX_CPU_ISA={cap} keeps oneDNN below AVX512_CORE_BF16")
            assert "emulated" in choice.reason
            explicit = decide_precision("bf16", "cpu", flags, isa_cap=cap)
            assert explicit.precision == "bf16" and "emulated" in explicit.warning
    assert decide_precision("auto", "cpu", ZEN3, isa_cap="AVX512_CORE_BF16").line() == EMULATED  # a cap adds nothing


def test_the_cap_is_read_from_either_variable_and_unknown_names_do_not_cap():
    assert onednn_isa_cap({"ONEDNN_MAX_CPU_ISA": "avx512_core_vnni"}) == "AVX512_CORE_VNNI"
    assert onednn_isa_cap({"DNNL_MAX_CPU_ISA": "AVX2"}) == "AVX2"
    assert onednn_isa_cap({"ONEDNN_MAX_CPU_ISA": "DEFAULT"}) is None
    assert onednn_isa_cap({"ONEDNN_MAX_CPU_ISA": "AVX10_2_512"}) is None  # newer than this table: above bf16
    assert onednn_isa_cap({}) is None


def test_a_cap_in_the_environment_reaches_the_decision_on_this_machine(monkeypatch, capsys):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_VNNI")
    assert resolve_precision("auto", "cpu").precision == "fp32" and mixed_precision("cpu") is None
    assert "emulated" in capsys.readouterr().out


def test_explicit_bf16_on_a_cpu_without_it_is_kept_with_a_warning():
    for flags in (ZEN3, XEON_VNNI):
        choice = decide_precision("bf16", "cpu", flags)
        assert choice.precision == "bf16"
        assert choice.warning and "emulated" in choice.warning and "--precision auto" in choice.warning
    native = decide_precision("bf16", "cpu", XEON_AMX)
    assert native.precision == "bf16" and native.warning is None and "as asked" in native.reason


def test_explicit_fp32_is_kept_everywhere():
    assert decide_precision("fp32", "cpu", XEON_AMX).precision == "fp32"
    assert decide_precision("fp32", "cuda", cuda_bf16=True).precision == "fp32"


@pytest.mark.parametrize("setting, cuda_bf16, expected, warns", [
    ("auto", True, "bf16", False),
    ("auto", False, "fp16", False),
    ("bf16", True, "bf16", False),
    ("bf16", False, "fp16", True),  # the Trainer cannot run bf16 there: fp16 with a grad scaler
    ("fp16", True, "fp16", False),
])
def test_cuda_is_bf16_where_supported_and_fp16_where_not(setting, cuda_bf16, expected, warns):
    choice = decide_precision(setting, "cuda", cuda_bf16=cuda_bf16, device="cuda:0")
    assert choice.precision == expected and bool(choice.warning) == warns
    assert "cuda:0" in choice.reason or setting == "fp16"


def test_impossible_settings_are_one_clear_error():
    with pytest.raises(CompressError, match="--precision fp16 runs on CUDA GPUs only"):
        decide_precision("fp16", "cpu", XEON_AMX)
    with pytest.raises(CompressError, match=r"--precision 'half' is not a precision; use auto, fp32, bf16, fp16"):
        decide_precision("half", "cpu")
    with pytest.raises(ConfigError, match="teacher.precision must be one of auto, fp32, bf16, fp16, got 'half'"):
        TeacherConfig.from_dict({"precision": "half"}, where="teacher")
    with pytest.raises(ConfigError, match="--precision 'half' is not a precision"):
        TeacherConfig(precision="half").validate()


# ----------------------------------------------------------------------------- this machine


def _flags_in_proc_cpuinfo() -> set[str]:
    path = Path("/proc/cpuinfo")
    if not path.exists():
        pytest.skip("no /proc/cpuinfo (not Linux): the CPU flags cannot be read here")
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    pytest.skip("/proc/cpuinfo lists no flags")


def test_the_decision_on_this_machine_agrees_with_its_flags(capsys, monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    flags = _flags_in_proc_cpuinfo()
    native = bool(flags & {"avx512_bf16", "amx_bf16"})
    assert cpu_flags() == flags
    choice = resolve_precision("auto", "cpu")
    assert choice.precision == ("bf16" if native else "fp32")
    assert mixed_precision("cpu") == ("bf16" if native else None)
    out = capsys.readouterr()
    assert out.out.count("precision auto -> ") == 1 and choice.line() in out.out
    if not native:
        assert choice.line() == EMULATED
        resolve_precision("bf16", "cpu")  # what --bf16 means: kept, with a warning, since it is emulated here
        assert "warning: --precision bf16: this CPU has no avx512_bf16/AMX" in capsys.readouterr().err
    else:
        resolve_precision("bf16", "cpu")
        assert "warning" not in capsys.readouterr().err


# ----------------------------------------------------------------------------- it reaches the model


def test_the_decided_precision_is_what_the_model_computes_in(tmp_path):
    from compress.config import TrainSettings
    from compress.runtime.predictor import Predictor
    from compress.stages.training import training_arguments

    model = make_bert(tmp_path / "model", layers=1, head=True)
    seen = {}
    for precision in ("fp32", "bf16"):
        predictor = Predictor.load(model, precision=precision)
        assert predictor.precision == precision
        linear = predictor.model.bert.encoder.layer[0].attention.self.query
        handle = linear.register_forward_hook(lambda m, i, o, p=precision: seen.__setitem__(p, o.dtype))
        predictor.logits(["a fine film"])
        handle.remove()
    assert seen == {"fp32": torch.float32, "bf16": torch.bfloat16}
    auto = Predictor.load(model, precision="auto")
    assert auto.precision == resolve_precision("auto", "cpu", announce=False).precision
    args = training_arguments(TrainSettings(), tmp_path / "ckpt", 10, device=torch.device("cpu"), precision="bf16")
    assert args.bf16 and not args.fp16
    assert not training_arguments(TrainSettings(), tmp_path / "ckpt", 10, device=torch.device("cpu")).bf16
    with pytest.raises(ValueError, match="a decided one"):
        training_arguments(TrainSettings(), tmp_path / "ckpt", 10, device=torch.device("cpu"), precision="auto")


def test_soft_label_caches_made_before_precision_keep_their_key():
    import hashlib

    from datasets import Dataset

    from compress.stages.teacher import LoadedTeacher, _ids_digest, soft_label_cache_path

    ds = Dataset.from_dict({"t_input_ids": [[101, 7, 102], [101, 9, 9, 102]]})
    teacher = LoadedTeacher(Path("t"), None, None, "w" * 64, {})
    for precision, old in (("fp32", "bf16=False"), ("bf16", "bf16=True")):
        key = hashlib.sha256(f"{'w' * 64}|{_ids_digest(ds, 't_')}|{old}".encode()).hexdigest()
        assert soft_label_cache_path(teacher, ds, "t_", precision).name == f"{key}.npy"
    assert len({soft_label_cache_path(teacher, ds, "t_", p) for p in ("fp32", "bf16", "fp16")}) == 3


# ----------------------------------------------------------------------------- a stage records it


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("precision")
    return root, write_csv(root / "data.csv", sentiment_rows(80)), make_bert(root / "model", layers=1, head=True)


def test_a_stage_run_with_auto_prints_and_records_precision_and_reason(tiny, tmp_path, capsys):
    _, data, model = tiny
    expected = resolve_precision("auto", "cpu", announce=False)
    capsys.readouterr()
    out = tmp_path / "teacher"
    assert main(["teacher", "--model", str(model), "--data", str(data), "--out", str(out), "--finetune", "yes",
                 "--max-steps", "2", "--batch-size", "16", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("precision auto -> ") == 1 and expected.line() in printed
    meta = json.loads((out / "compress.json").read_text())
    assert meta["precision"] == {"setting": "auto", "precision": expected.precision, "reason": expected.reason}
    assert meta["config"]["precision"] == "auto" and "bf16" not in meta["config"]["train"]

    bench = tmp_path / "bench"
    assert main(["bench", str(out), "--reference", str(out), "--data", str(data), "--quick", "--no-memory", "--runs",
                 "2", "--warmup", "0", "--out", str(bench), "--device", "cpu", "--precision", "fp32"]) == 0
    results = json.loads((bench / "results.json").read_text())
    assert results["settings"]["precision"] == {"setting": "fp32", "precision": "fp32", "reason": "as asked"}
    assert [a["precision"] for a in results["artifacts"]] == ["fp32"]


# ----------------------------------------------------------------------------- the flag and the old key


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    return next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices


@pytest.mark.parametrize("command", [*PRECISION_STAGES, "predict"])
def test_every_model_command_has_the_precision_flag_of_the_one_field(command):
    from compress.config import PRECISION_HELP

    action = next(a for a in _subparsers()[command]._actions if "--precision" in a.option_strings)
    assert action.default == "auto" and tuple(action.choices) == PRECISIONS and PRECISION_HELP in action.help
    if command in stage_configs():
        assert stage_configs()[command]().precision == "auto" and "precision" in stage_configs()[command].known_keys()


@pytest.mark.parametrize("argv", [
    ["teacher", "--model", "m", "--data", "d.csv", "--out", "o"],
    ["pretrain", "--model", "m", "--unlabeled", "u.txt", "--out", "o"],
    ["distill", "--teacher", "t", "--data", "d.csv", "--out", "o"],
    ["prune", "--model", "m", "--data", "d.csv", "--out", "o", "--heads", "0.5"],
])
def test_bf16_is_an_alias_of_precision_bf16(argv):
    parser = build_parser()
    assert stage_config(argv[0], parser.parse_args(argv)).precision == "auto"
    assert stage_config(argv[0], parser.parse_args(argv + ["--bf16"])).precision == "bf16"
    assert stage_config(argv[0], parser.parse_args(argv + ["--precision", "fp32"])).precision == "fp32"


def test_prune_recovery_gets_the_precision(tiny, tmp_path):
    """Recovery is a distillation run: it decides and records the precision, and prune copies the record."""
    from compress.config import DataOptions, PruneConfig, TrainSettings
    from compress.stages.prune import prune

    _, data, model = tiny
    cfg = PruneConfig(model=str(model), data=DataOptions(str(data)), heads=0.5, recover_epochs=1.0,
                      train=TrainSettings(epochs=1.0, max_steps=1, batch_size=16), precision="fp32")
    meta = json.loads((prune(cfg, tmp_path / "pruned") / "compress.json").read_text())
    assert meta["precision"] == {"setting": "fp32", "precision": "fp32", "reason": "as asked"}
    assert meta["pruning"]["recovery"]["precision"] == meta["precision"]


def test_old_bf16_keys_still_load(tmp_path):
    from compress.pipeline import load_recipe

    assert TeacherConfig.from_dict({"bf16": True}).precision == "bf16"
    assert TeacherConfig.from_dict({"bf16": False}).precision == "fp32"
    # an older artifact's compress.json: train.bf16, no precision
    old = TeacherConfig().to_dict()
    del old["precision"]
    old["train"]["bf16"] = False
    assert TeacherConfig.from_dict(old, where="compress.json") == TeacherConfig(precision="fp32")
    recipe = tmp_path / "old.yaml"
    recipe.write_text("data: movie-reviews\nteacher:\n  model: minilm\n  bf16: true\ndistill:\n  bf16: false\n"
                      "prune:\n  heads: 0.5\n  bf16: true\n")
    stages = load_recipe(recipe, str(tmp_path / "out")).stages
    assert (stages["teacher"].precision, stages["distill"].precision, stages["prune"].precision) == ("bf16", "fp32",
                                                                                                     "bf16")
    recipe.write_text("data: movie-reviews\nteacher:\n  model: minilm\n  precision: fp32\n  bf16: true\n")
    with pytest.raises(CompressError) as info:
        load_recipe(recipe, str(tmp_path / "out"))
    assert f"{recipe}:5: teacher.bf16: true contradicts teacher.precision: fp32" in str(info.value)


def test_choice_is_recorded_as_setting_precision_reason():
    choice = PrecisionChoice("auto", "fp32", "why")
    assert choice.to_dict() == {"setting": "auto", "precision": "fp32", "reason": "why"}
    assert choice.line() == "precision auto -> fp32: why"
