"""Smoke tests of the study scripts in ``tools/studies`` (not installed): each still runs on a tiny model.

They measured tables in ``docs/`` and are no part of the product, but a study that no longer runs
cannot be repeated on another CPU kind, so each one's entry point runs here on models of a few
thousand parameters. (``torch_int8_probe`` and ``error_rates`` have their own test files; so do the decision
tables' ``compare``, ``compare_tagging``, ``protocol``, ``trend``, ``origins``, ``prediction_cache`` and
``frozen_step``, in tests/unit/tools/ and tests/integration/test_compare_tagging.py.)
"""

from __future__ import annotations

import pytest

from tests.conftest import make_bert, sentiment_rows, write_csv


def test_layer_fit_prints_one_row_per_mapped_pair(tmp_path, capsys):
    from tools.studies.layer_fit import fit_table, main

    teacher = make_bert(tmp_path / "teacher", layers=4, seed=1)
    student = make_bert(tmp_path / "student", layers=2, seed=2)
    texts = [r["text"] for r in sentiment_rows(30)]
    rows = fit_table(teacher, student, texts)
    assert [(r["student"], r["teacher"]) for r in rows][0] == (0, 0) and len(rows) == 3  # embeddings + 2 layers
    assert all(r["mse"] >= 0 and r["variance"] > 0 and r["r2"] <= 1 for r in rows)
    # a student fitted to itself: the best affine map is (almost) the identity
    assert all(r["r2"] > 0.99 for r in fit_table(student, student, texts))

    data = write_csv(tmp_path / "data.csv", sentiment_rows(60))
    assert main(["--teacher", str(teacher), "--student", str(student), "--data", str(data), "--sentences", "20"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("\n| ") == 3 and "| embeddings | embeddings |" in printed  # the 3 pairs under the header


def test_spin_check_times_both_runtimes_alone_and_interleaved(tmp_path, capsys):
    from compress.stages.export import export_onnx
    from tools.studies.spin_check import main

    model = make_bert(tmp_path / "model", layers=1, head=True)
    onnx_dir = export_onnx(model, tmp_path / "onnx")
    assert main([str(model), str(onnx_dir), "nospin"]) == 0
    printed = capsys.readouterr().out
    assert "spinning=off" in printed and printed.count("pytorch p50") == 2 and printed.count("onnx p50") == 2


def test_pt2e_probe_reports_each_finding_or_says_torchao_is_missing(tmp_path, capsys):
    import importlib.util

    from tools.studies.pt2e_probe import main

    model = make_bert(tmp_path / "model", layers=1, head=True)
    rc = main([str(model)])
    printed = capsys.readouterr().out
    assert printed.startswith("torch ") and "\n1. torch.ao.quantization" in printed
    if importlib.util.find_spec("torchao") is None:
        assert rc == 1 and "torchao is not importable" in printed
    else:
        assert rc == 0


@pytest.mark.parametrize("module", ["pt2e_probe", "layer_fit", "spin_check", "torch_int8_probe", "error_rates",
                                    "compare", "compare_tagging", "origins", "frozen_step", "protocol",
                                    "prediction_cache", "trend"])
def test_study_scripts_are_not_installed_and_name_the_table_they_produced(module):
    import importlib
    import tomllib

    from tests.support.paths import ROOT as root
    doc = importlib.import_module(f"tools.studies.{module}").__doc__
    assert "Produced: docs/" in doc
    target = doc.split("Produced: ")[1].split(",")[0]
    assert (root / target).is_file(), target
    found = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not any(pattern.split("*")[0] and "tools".startswith(pattern.split("*")[0]) for pattern in found)
