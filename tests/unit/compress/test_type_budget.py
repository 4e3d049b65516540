"""A tagger's per-type F1 budget: a candidate is out when a type loses more than ``max_type_f1_drop`` by a
loss the split tells from noise (the paired bootstrap interval over sentences lies above zero)."""

from __future__ import annotations

import numpy as np
import pytest

from compress.core.stats import f1_drop_interval, type_f1_drop_intervals
from compress.config import MAX_TYPE_F1_DROP, OptimizeConfig, QuantizeConfig
from compress.stages.quality import SplitScorer
from compress.tasks.token_classification.scoring import types_over_budget
from compress.tasks.token_classification.metrics import sentence_counts
from compress.tasks.token_classification.data import load_token_data

from tests.support.toy_ner import write_conll


def _scorer(tmp_path, per: int, loc: int = 100) -> SplitScorer:
    """Validation of ``loc`` one-word LOC and ``per`` PER entities, one entity a sentence."""
    rows = [(["we", "saw", "Paris"], ["O", "O", "B-LOC"])] * loc + [(["we", "saw", "Alice"], ["O", "O", "B-PER"])] * per
    tmp_path.mkdir(parents=True, exist_ok=True)
    for split in ("train", "validation", "test"):
        write_conll(tmp_path / f"{split}.conll", rows)
    return SplitScorer(load_token_data(str(tmp_path)), "validation")


def _losing(gold, first: int, k: int):
    """``gold`` with the sentences ``first .. first + k - 1`` tagged all O (their entity lost)."""
    return [["O"] * len(t) if first <= i < first + k else list(t) for i, t in enumerate(gold)]


def test_per_type_intervals_are_the_micro_interval_when_one_type_changes():
    """With only PER changing and LOC identical, PER's interval is the overall paired interval of the PER
    counts alone: the same bootstrap draws (same seed) give the same bounds."""
    gold = [["B-LOC"]] * 50 + [["B-PER"]] * 30
    pred = [["B-LOC"]] * 50 + [["O"]] * 6 + [["B-PER"]] * 24
    types, ref = sentence_counts(gold, gold, types=["LOC", "PER"])
    _, art = sentence_counts(gold, pred, types=types)
    got = type_f1_drop_intervals(types, ref, art)
    assert got["LOC"].estimate == 0 and (got["LOC"].low, got["LOC"].high) == (0, 0)
    alone = f1_drop_interval(ref[:, 1:2], art[:, 1:2])
    assert got["PER"].estimate == pytest.approx(1 - 2 * 24 / 54) == alone.estimate
    assert (got["PER"].low, got["PER"].high) == pytest.approx((alone.low, alone.high))
    assert 0 < got["PER"].low < got["PER"].estimate < got["PER"].high


def test_per_type_intervals_refuse_counts_that_do_not_pair():
    with pytest.raises(ValueError, match="per-type counts"):
        type_f1_drop_intervals(["LOC"], np.zeros((3, 1, 3)), np.zeros((4, 1, 3)))


def test_a_real_loss_over_the_budget_fails_and_one_entity_does_not(tmp_path):
    """40 PER entities: 8 lost is a drop of 11 points whose interval is above zero, so the candidate is out
    (and says why); 1 lost (1.3 points) is within 3 points. On a 12-entity type one lost entity is 4.3 points,
    over the budget, but a resample without that sentence shows no loss: noise, not judged a loss."""
    scorer = _scorer(tmp_path / "a", per=40)
    gold = scorer.gold
    record = scorer.compare(_losing(gold, 100, 8), gold)
    drop = record["per_type_f1_drop"]["PER"]
    assert drop == round(1 - 2 * 32 / 72, 6) and record["per_type_support"] == {"LOC": 100, "PER": 40}
    low, high = record["per_type_f1_drop_interval"]["PER"]
    assert 0 < low < drop < high and record["per_type_f1_drop_interval"]["LOC"] == [0.0, 0.0]
    assert record["collapsed_types"] == {}  # 0.8 of its F1 kept: no collapse, yet a loss
    assert types_over_budget(record, MAX_TYPE_F1_DROP) == {"PER": (drop, low, high)}
    assert scorer.failures(record, 0.1) == [f"type PER lost F1 {drop:.3f} [{low:.3f}, {high:.3f}] > budget 0.03"]
    assert scorer.failures(record, 0.1, max_type_drop=0.15) == []  # a budget over the drop
    assert scorer.failures(record, 0.1, max_type_drop=None) == []  # the rule off: collapse only

    one = scorer.compare(_losing(gold, 100, 1), gold)
    assert one["per_type_f1_drop"]["PER"] < MAX_TYPE_F1_DROP and scorer.failures(one, 0.1) == []

    small = _scorer(tmp_path / "b", per=12)
    single = small.compare(_losing(small.gold, 100, 1), small.gold)
    assert single["per_type_f1_drop"]["PER"] == round(1 - 22 / 23, 6) > MAX_TYPE_F1_DROP
    assert single["per_type_f1_drop_interval"]["PER"][0] == 0.0
    assert small.failures(single, 0.1) == []


def test_a_collapsed_type_is_reported_once(tmp_path):
    """A type that collapses is also far over the per-type budget: one reason, the collapse."""
    scorer = _scorer(tmp_path, per=40)
    record = scorer.compare(_losing(scorer.gold, 100, 30), scorer.gold)
    assert list(record["collapsed_types"]) == ["PER"]
    assert [r for r in scorer.failures(record, 0.5) if "PER" in r] == [
        f"type PER collapsed: F1 1.000 -> {record['per_type_f1']['PER']:.3f}"]


def test_types_with_few_gold_entities_are_not_judged(tmp_path):
    """Under 10 gold entities a type's change is reported, never judged, whatever it is; at 10 it is."""
    scorer = _scorer(tmp_path / "nine", per=9)
    record = scorer.compare(_losing(scorer.gold, 100, 4), scorer.gold)
    assert record["per_type_f1_drop_interval"]["PER"][0] > 0 and record["per_type_f1_drop"]["PER"] > 0.25
    assert types_over_budget(record, MAX_TYPE_F1_DROP) == {} and scorer.failures(record, 0.1) == []
    ten = _scorer(tmp_path / "ten", per=10)
    record = ten.compare(_losing(ten.gold, 100, 4), ten.gold)
    assert list(types_over_budget(record, MAX_TYPE_F1_DROP)) == ["PER"] and len(ten.failures(record, 0.1)) == 1


@pytest.mark.parametrize("cls", [QuantizeConfig, OptimizeConfig])
@pytest.mark.parametrize("bad", [-0.01, 1.5, float("nan"), True])
def test_the_budget_is_an_f1_share(cls, bad, tmp_path):
    problems = cls(model="m", max_type_f1_drop=bad).problems()
    assert [p for p in problems if "max_type_f1_drop" in p.keys], problems
    assert not [p for p in cls(model="m", max_type_f1_drop=1).problems() if "max_type_f1_drop" in p.keys]


def test_a_type_the_reference_barely_finds_does_not_collapse_on_noise(tmp_path):
    """40 PER entities of which the reference finds 3 (F1 0.140): a candidate that finds 1 keeps under half
    (0.049), but that is two entities, inside the split's noise: no collapse. Losing all 8 of 8 found is one."""
    scorer = _scorer(tmp_path, per=40)
    gold = scorer.gold
    barely = _losing(gold, 103, 37)  # PER found in sentences 100 to 102 only
    record = scorer.compare(_losing(gold, 101, 39), barely)
    assert record["per_type_f1"]["PER"] < 0.5 * scorer.metrics(barely)["per_type_f1"]["PER"]
    assert record["per_type_f1_drop_interval"]["PER"][0] == 0.0
    assert record["collapsed_types"] == {} and scorer.failures(record, 0.5) == []
    eight = _losing(gold, 108, 32)
    lost = scorer.compare(_losing(gold, 100, 40), eight)
    assert list(lost["collapsed_types"]) == ["PER"] and len(scorer.failures(lost, 0.5)) == 1


def test_the_budget_rule_on_constructed_records():
    """A drop exactly at the budget passes, just over fails; a type without a recorded drop or support is not
    judged (a drop read as 0, a support as 0), whatever ``min_support``."""
    record = {"per_type_f1_drop": {"PER": 0.03}, "per_type_f1_drop_interval": {"PER": [0.01, 0.05]},
              "per_type_support": {"PER": 40}}
    assert types_over_budget(record, 0.03) == {}
    record["per_type_f1_drop"]["PER"] = 0.0301
    assert types_over_budget(record, 0.03) == {"PER": (0.0301, 0.01, 0.05)}
    no_drop = {"per_type_f1_drop": {}, "per_type_f1_drop_interval": {"PER": [0.01, 0.05]}, "per_type_support": {"PER": 40}}
    assert types_over_budget(no_drop, 0.03) == {}
    no_support = {**record, "per_type_support": {}}
    assert types_over_budget(no_support, 0.03, min_support=1) == {}


def test_intervals_cover_every_gold_type_even_one_the_reference_never_predicts(tmp_path):
    """The reference tags no PER at all (the candidate, gold, finds them: a gain, a negative drop); a type with
    a single gold entity gets its interval; a type of the label set with no gold entity gets none."""
    folder = tmp_path / "d"
    folder.mkdir()
    rows = ([(["we", "saw", "Paris"], ["O", "O", "B-LOC"])] * 50 + [(["we", "saw", "Alice"], ["O", "O", "B-PER"])] * 20
            + [(["the", "Euro", "cup"], ["O", "B-MISC", "I-MISC"])])
    write_conll(folder / "train.conll", rows + [(["a", "Cup", "b"], ["O", "B-EVT", "O"])])
    for split in ("validation", "test"):
        write_conll(folder / f"{split}.conll", rows)
    scorer = SplitScorer(load_token_data(str(folder)), "validation")
    gold = scorer.gold
    record = scorer.compare(gold, _losing(gold, 50, 20))
    assert set(record["per_type_f1_drop_interval"]) == {"LOC", "MISC", "PER"}
    assert record["per_type_f1_drop"]["PER"] == -1.0 and record["per_type_f1_drop_interval"]["PER"] == [-1.0, -1.0]
    assert record["per_type_f1_drop_interval"]["MISC"] == [0.0, 0.0] and record["per_type_support"]["MISC"] == 1
