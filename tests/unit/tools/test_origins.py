"""Where the gap is: agreement split by row origin on constructed predictions, the diagnosis by hand, the rows
rebuilt from a distill artifact's compress.json, and ``python -m tools.studies.origins`` on tiny BERTs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks.agreement import (agreement_by_band, agreement_by_origin, band_of, gap_diagnosis, matched_agreement,
                                  wilson_interval)
from tools.studies.origins import entity_agreement_rows, main, origin_texts, sample
from compress.config import DataOptions
from tests.conftest import make_bert, sentiment_rows, write_csv
from tests.support.models import shifted_copy


def test_agreement_split_by_origin():
    origins = ["train"] * 10 + ["unlabeled"] * 20 + ["test"] * 10
    ref = np.zeros(40, dtype=int)
    pred = ref.copy()
    pred[[3]] = 1  # one train row disagrees
    pred[30:34] = 1  # four test rows
    report = agreement_by_origin(pred, ref, origins)
    assert list(report) == ["train", "unlabeled", "test"]
    assert [(r["n"], r["agreeing"]) for r in report.values()] == [(10, 9), (20, 20), (10, 6)]
    assert report["test"]["agreement"] == 0.6
    w = wilson_interval(6, 10)
    assert (report["test"]["low"], report["test"]["high"]) == (w.low, w.high)
    assert report["unlabeled"]["high"] == 1.0 and report["unlabeled"]["low"] == pytest.approx(0.8389, abs=1e-4)
    with pytest.raises(ValueError, match="differ in length"):
        agreement_by_origin(pred, ref, origins[:-1])


def _rows(**counts: tuple[int, int]) -> dict:
    return {o: {"n": n, "agreeing": k, "agreement": k / n} for o, (n, k) in counts.items()}


def test_gap_diagnosis_by_hand():
    # trained rows 99% of 2000, test 90% of 1000: fit 1 point, generalisation 9 points (se 0.009744);
    # generalisation - fit = 8 points, se = sqrt(4 * .99 * .01 / 2000 + .9 * .1 / 1000) = 0.010479: [5.95, 10.05]
    d = gap_diagnosis(_rows(augmented=(2000, 1980), test=(1000, 900)), ["augmented"], ["test"])
    assert d["verdict"] == "data" and d["fit"] == pytest.approx(0.01) and d["generalisation"] == pytest.approx(0.09)
    se = math.sqrt(0.99 * 0.01 / 2000 + 0.9 * 0.1 / 1000)
    assert d["generalisation_interval"] == pytest.approx([0.09 - 1.959964 * se, 0.09 + 1.959964 * se])
    lead = math.sqrt(4 * 0.99 * 0.01 / 2000 + 0.9 * 0.1 / 1000)
    assert d["lead_interval"] == pytest.approx([0.08 - 1.959964 * lead, 0.08 + 1.959964 * lead])
    # a generalisation part larger than the fit, but not by more than the noise: undecided
    assert gap_diagnosis(_rows(train=(300, 297), test=(300, 291)), ["train"], ["test"])["verdict"] == "undecided"
    # trained rows pooled (train + unlabeled): 90% of 3000 against 89% of 1000: fit 10 points, generalisation 1
    d = gap_diagnosis(_rows(train=(1000, 900), unlabeled=(2000, 1800), test=(1000, 890)), ["train", "unlabeled"],
                      ["test"])
    assert d["verdict"] == "optimisation" and d["trained_agreement"] == pytest.approx(0.9)
    # 100 rows each: fit 5, generalisation 5 +- 7 points: cannot tell
    assert gap_diagnosis(_rows(train=(100, 95), test=(100, 90)), ["train"], ["test"])["verdict"] == "undecided"


def test_agreement_within_bands_of_the_teachers_confidence():
    assert [band_of(c) for c in (0.5, 0.69, 0.7, 0.89, 0.9, 1.0)] == ["<0.7", "<0.7", "0.7-0.9", "0.7-0.9", ">=0.9",
                                                                     ">=0.9"]
    origins = ["unlabeled"] * 6 + ["test"] * 4
    sure = [0.55, 0.6, 0.95, 0.99, 0.97, 0.8, 0.99, 0.99, 0.99, 0.6]
    ref = [0] * 10
    pred = [1, 0, 0, 0, 0, 0, 0, 0, 1, 1]
    bands = agreement_by_band(pred, ref, sure, origins)
    assert list(bands["unlabeled"]) == ["<0.7", "0.7-0.9", ">=0.9"] and list(bands["test"]) == ["<0.7", ">=0.9"]
    assert bands["unlabeled"]["<0.7"] == {"n": 2, "agreeing": 1, "agreement": 0.5, "share": 2 / 6}
    assert bands["test"][">=0.9"]["agreement"] == pytest.approx(2 / 3) and bands["test"]["<0.7"]["share"] == 0.25
    with pytest.raises(ValueError, match="differ in length"):
        agreement_by_band(pred, ref, sure[:-1], origins)


def _bands(**cells: dict[str, tuple[int, int]]) -> dict:
    return {o: {b: {"n": n, "agreeing": k, "agreement": k / n} for b, (n, k) in bands.items()}
            for o, bands in cells.items()}


def test_matched_agreement_reweights_the_trained_rows_to_the_held_out_mix_by_hand():
    by_band = _bands(unlabeled={"<0.7": (100, 60), ">=0.9": (100, 100)}, test={"<0.7": (20, 10), ">=0.9": (80, 70)})
    estimate, variance, missing = matched_agreement(by_band, ["unlabeled"], ["test"])
    assert estimate == pytest.approx(0.2 * 0.6 + 0.8 * 1.0) and missing == []
    assert variance == pytest.approx(0.2 ** 2 * 0.6 * 0.4 / 100)
    # a held-out band the trained rows lack is left out and the rest renormalised
    by_band["test"]["0.7-0.9"] = {"n": 100, "agreeing": 50, "agreement": 0.5}
    assert matched_agreement(by_band, ["unlabeled"], ["test"])[::2] == (pytest.approx(0.92), ["0.7-0.9"])


def test_a_transfer_set_of_borderline_rows_is_not_read_as_a_failure_to_fit():
    # Trained rows: half borderline for the teacher (60% agreement), half sure (99%): 79.5% pooled. Test: 5% borderline
    # (55%), 95% sure (90%): 88.25%. Pooled, the student "fits" worse than it generalises (optimisation); at the
    # test split's confidence mix it reproduces its teacher on 97.05% of its trained rows against 88.25% on test: data.
    by_band = _bands(unlabeled={"<0.7": (2000, 1200), ">=0.9": (2000, 1980)}, test={"<0.7": (100, 55), ">=0.9": (1900, 1710)})
    by_origin = _rows(unlabeled=(4000, 3180), test=(2000, 1765))
    assert gap_diagnosis(by_origin, ["unlabeled"], ["test"])["verdict"] == "optimisation"
    d = gap_diagnosis(by_origin, ["unlabeled"], ["test"], by_band=by_band)
    assert d["verdict"] == "data" and d["trained_agreement"] == pytest.approx(0.05 * 0.6 + 0.95 * 0.99)
    assert d["matched"]["unmatched_trained_agreement"] == pytest.approx(0.795)
    assert d["fit"] + d["generalisation"] == pytest.approx(1 - 0.8825)


@pytest.fixture
def task_and_meta(tmp_path):
    data = write_csv(tmp_path / "sentiment.csv", sentiment_rows(60, seed=3))
    task = DataOptions(data=str(data)).load()
    test_text = task.texts("test")[0]
    cache = tmp_path / "augment.jsonl"
    variants = ["the movie was [MASK] good", "plot quite dull a"]
    cache.write_text("".join(json.dumps({"source": i, "op": "replace", "text": t}) + "\n"
                             for i, t in enumerate(variants)), encoding="utf-8")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["an unseen line", "another unseen line", "an unseen line", test_text, ""]) + "\n",
                      encoding="utf-8")
    meta = {"stage": "distill", "kind": "pytorch", "complete": True,
            "config": {"data": {"data": str(data)}, "unlabeled": str(corpus), "unlabeled_limit": None,
                       "train": {"seed": 0}},
            "data": task.describe(),
            "transfer": {"labelled": len(task.splits["train"]), "augmented": 2, "unlabeled": 2,
                         "augment": {"cache": str(cache)}}}
    return task, meta, variants


def test_origin_texts_rebuild_the_transfer_rows(task_and_meta):
    task, meta, variants = task_and_meta
    texts, notes = origin_texts(meta, task)
    assert texts["train"] == task.texts("train") and texts["test"] == task.texts("test")
    assert texts["augmented"] == variants
    assert texts["unlabeled"] == ["an unseen line", "another unseen line"]  # duplicate and test text dropped
    assert notes == []
    meta["transfer"]["augment"]["cache"] = "/nonexistent/augment.jsonl"
    meta["transfer"]["unlabeled"] = 3
    texts, notes = origin_texts(meta, task)
    assert "augmented" not in texts and "augmentation cache was cleared" in notes[0]
    assert "now gives 2 rows, the student trained on 3" in notes[1]


def test_entity_agreement_counts_the_union_of_both_models_entities_by_hand():
    ours = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "O"], ["B-ORG", "O"]]
    theirs = [["B-PER", "I-PER", "O", "B-ORG"], ["O", "O"], ["B-ORG", "B-LOC"]]
    # sentence 1: PER 0-2 in both; LOC 3 ours only; ORG 3 theirs only. Sentence 2: nothing (O/O words are no rows).
    # sentence 3: ORG 0 in both, LOC 1 theirs only.
    found, reference = entity_agreement_rows(ours, theirs)
    assert (found, reference) == ([1, 1, 0, 1, 0], [1, 0, 1, 1, 1])
    agreement = agreement_by_origin(found, reference, ["x"] * 5)["x"]
    assert (agreement["agreeing"], agreement["n"]) == (2, 5)  # 2 of the 5 entities either finds
    with pytest.raises(ValueError):
        entity_agreement_rows(ours, theirs[:2])


def test_sample_is_seeded_and_keeps_order():
    items = list(range(100))
    a = sample(items, 10, seed=1)
    assert a == sample(items, 10, seed=1) and a == sorted(a) and len(set(a)) == 10
    assert sample(items, 0) == items and sample(items[:5], 10) == items[:5]


def test_origins_command_on_tiny_models(task_and_meta, tmp_path, capsys):
    from compress.runtime.predictor import Predictor

    task, meta, variants = task_and_meta
    teacher = make_bert(tmp_path / "teacher", layers=2, hidden=32, heads=2, ffn=64, head=True, seed=1)
    student = shifted_copy(teacher, tmp_path / "student", list(task.texts("test")), quantile=0.5)
    (student / "compress.json").write_text(json.dumps(meta), encoding="utf-8")
    out = tmp_path / "origins.json"
    assert main(["--teacher", str(teacher), str(student), "--per-origin", "20", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())[0]
    assert list(report["by_origin"]) == ["train", "augmented", "unlabeled", "validation", "test"]
    n_train = len(task.splits["train"])
    assert report["by_origin"]["train"]["n"] == min(20, n_train) and report["by_origin"]["train"]["of"] == n_train
    teach, stud = Predictor.load(teacher), Predictor.load(student)
    test = task.texts("test")
    agree = float((teach.logits(test).argmax(-1) == stud.logits(test).argmax(-1)).mean())
    assert 0 < agree < 1, "the two models should disagree on some test rows for this test to mean something"
    assert report["by_origin"]["test"]["agreement"] == pytest.approx(agree)
    assert report["diagnosis"]["trained"] == ["train", "augmented", "unlabeled"]
    assert report["diagnosis"]["verdict"] in ("data", "optimisation", "undecided")
    row = report["by_origin"]["test"]
    assert (f"| student | test | {row['n']} ({row['of']}) | {100 * row['agreement']:.2f}% | "
            f"[{100 * row['low']:.2f}, {100 * row['high']:.2f}] |") in printed
    assert f"- student: **{report['diagnosis']['verdict']}**. Disagreement on test:" in printed
    bands = report["by_band"]["test"]
    assert sum(b["n"] for b in bands.values()) == row["n"] and sum(b["share"] for b in bands.values()) == pytest.approx(1)
    assert report["diagnosis"]["matched"]["to"] == "the held-out rows' mix of teacher confidence"
    assert "| student | origin | teacher's confidence |" in printed
    assert "| student | test | " in printed and "the trained rows' agreement is taken at" in printed


def test_origins_refuses_a_folder_that_is_not_a_distill_artifact(tmp_path, capsys):
    teacher = make_bert(tmp_path / "teacher", layers=1, hidden=32, heads=2, ffn=64, head=True, seed=1)
    assert main(["--teacher", str(teacher), str(teacher)]) == 2
    assert "not a distill artifact" in capsys.readouterr().err
