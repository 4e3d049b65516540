"""``tools.studies.compare`` on tagging data: entity F1 per split and the protocol, through Predictor."""

from __future__ import annotations

import json

import pytest

from tests.support.toy_ner import toy_tagger


@pytest.fixture(scope="module")
def taggers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare-tagging")
    data, good = toy_tagger(tmp, name="good")
    _, weak = toy_tagger(tmp, epochs=0.25, data=data, name="weak")
    return data, good, weak


def test_compare_reports_entity_f1_and_decides_a_tagger_lever(taggers, tmp_path, capsys):
    from tools.studies.compare import main
    from compress.tasks.token_classification.metrics import entity_scores
    from compress.tasks.token_classification.data import load_token_data
    from compress.runtime.predictor import Predictor

    data, good, weak = taggers
    out = tmp_path / "compare.json"
    base = "base=" + ",".join([str(weak)] * 3)
    assert main(["--data", str(data), "--teacher", str(good), "--baseline", base, "--protocol", "--json", str(out),
                 base, "lever=" + ",".join([str(good)] * 3)]) == 0
    printed = capsys.readouterr().out
    assert "validation F1" in printed and "| lever vs base |" in printed
    assert "recall, name seen in training (" in printed and "| teacher | 1 |" in printed
    result = json.loads(out.read_text())
    # the table's F1 is seqeval-style entity F1 of the tags Predictor gives, split by split
    task = load_token_data(str(data))
    words = [" ".join(w) for w in task.splits["test"]["tokens"]]
    tags = [r["word_tags"] for r in Predictor.load(good).predict(words, word_tags=True)]
    assert result["lever"]["test"][0] == pytest.approx(entity_scores(task.tags("test"), tags)["f1"])
    protocol = result["lever"]["protocol"]
    assert protocol["baseline"] == "base" and protocol["pooled"]["difference"] > 0
    assert protocol["verdict"] in ("better", "seeds disagree")  # the same model thrice: no seed spread to weigh
    assert protocol["pooled"]["sentences"] == len(task.splits["validation"]["tokens"]) + len(words)
    # the share of the teacher's F1 (the teacher is the good tagger): all of it for the lever, F1 over F1 for the base
    assert result["lever"]["teacher_share"]["test"] == {"estimate": 1.0, "low": 1.0, "high": 1.0}
    share = result["base"]["teacher_share"]["test"]
    assert share["estimate"] == pytest.approx(result["base"]["test"][0] / result["lever"]["test"][0])
    assert share["low"] <= share["estimate"] <= share["high"]
    assert "| base | 3 | " in printed and "test: share of the teacher's " in printed


def test_a_second_table_reads_the_cached_tags_without_loading_a_model(taggers, monkeypatch, capsys):
    from tools.studies.compare import main
    from compress.runtime.predictor import Predictor

    data, good, weak = taggers
    args = ["--data", str(data), "--teacher", str(good), f"base={weak}", f"lever={good}"]
    assert main(args) == 0
    first = capsys.readouterr().out

    def refuse(*_a, **_k):
        raise AssertionError("a model was loaded although its tags were cached")

    monkeypatch.setattr(Predictor, "load", refuse)
    assert main(args) == 0
    assert capsys.readouterr().out == first


def test_compare_refuses_a_model_it_cannot_score_in_one_line(taggers, tmp_path, capsys):
    from tools.studies.compare import main
    from tests.conftest import make_bert as _make

    data, good, _ = taggers
    encoder = _make(tmp_path / "plain", layers=1, hidden=32, heads=4, ffn=64)
    assert main(["--data", str(data), str(good), str(encoder)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(f"{tmp_path / 'plain'}: ")


def test_compare_fits_entity_f1_against_a_recorded_number(taggers, tmp_path, capsys):
    from tools.studies.compare import main
    from compress.core.artifact import read_meta

    data, good, weak = taggers
    out = tmp_path / "compare.json"
    steps = {p: read_meta(p)["training"]["global_steps"] for p in (good, weak)}
    assert steps[good] > steps[weak]  # a quarter of an epoch against one: two x on the log scale
    assert main(["--data", str(data), "--teacher", str(good), "--trend", "training.global_steps", "--trend-target", "1",
                 "--json", str(out), f"weak={weak},{weak}", f"good={good},{good}"]) == 0
    printed = capsys.readouterr().out
    assert "validation + test entity F1" in printed and "the line reaches 100% of the teacher's" in printed
    fit = json.loads(out.read_text())["trend"]
    assert fit["points"] == 4 and fit["key"] == "training.global_steps"
    assert fit["x_reaching"] == pytest.approx(steps[good])  # the teacher is the good run: the line meets it there


def test_one_recipe_on_several_teachers_pools_the_shares(taggers, tmp_path, capsys):
    """``--teacher T1,T2``: each group against its own teacher, then the shares pooled over the teachers."""
    from tools.studies.compare import main

    data, good, weak = taggers
    _, mid = toy_tagger(tmp_path, epochs=1, data=data, name="mid")  # finds entities, unlike the weak one
    out = tmp_path / "compare.json"
    assert main(["--data", str(data), "--teacher", f"{good},{mid}", "--json", str(out),
                 f"on-good={mid},{mid}", f"on-mid={good},{good}"]) == 0
    printed = capsys.readouterr().out
    assert "| teacher of on-good | 1 |" in printed and "| teacher of on-mid | 1 |" in printed
    assert "| pooled over teachers | 2 teachers x 2 |" in printed
    result = json.loads(out.read_text())
    a, b = (result[g]["teacher_share"]["test"]["estimate"] for g in ("on-good", "on-mid"))
    assert a == pytest.approx(result["on-good"]["test"][0] / result["on-mid"]["test"][0])  # mid over good
    pooled = result["pooled over teachers"]["teacher_share"]["test"]
    assert pooled["estimate"] == pytest.approx((a + b) / 2) and pooled["teachers"] == 2
    assert pooled["low"] <= pooled["estimate"] <= pooled["high"]
    # a teacher list that does not match the groups one to one is refused before any tagging
    assert main(["--data", str(data), "--teacher", f"{good},{weak}", f"a={weak}", f"b={good}", f"c={good}"]) == 2
    assert "one different teacher per group" in capsys.readouterr().err
