"""The decision protocol on constructed predictions whose answer is known by hand.

Known answers: a lever right on exactly m more sentences per seed (difference m / n, its normal
interval, the exact sign-flip p-value 2 * 2^-m when the seeds flip the same sentences and
2 * 2^-(k m) when they flip different ones), identical and balanced runs (p = 1), p-values under
a true null (no more small ones than their level), the power formulas (the pooled one by hand and
against ``compress.core.stats.detectable_drop`` for one seed; the seed-level one by simulation), and
the table ``tools.studies.compare --protocol`` prints.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.accuracy import mcnemar_p
from tools.studies.compare import Row, Run, main, protocol_decisions, protocol_table
from tools.studies.protocol import decide, pooled_test, require_seeds, seed_power, seed_test, sign_flip_null
from compress.core.stats import detectable_drop
from compress.core.errors import CompressError

Z = 1.959963984540054  # z_0.975
Z80 = 0.8416212335729143  # z_0.8


def _baseline(seeds: int, n: int, accuracy: float = 0.85, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.random((seeds, n)) < accuracy


def _lever_right_on_more(base: np.ndarray, m: int, same_sentences: bool) -> np.ndarray:
    """The baseline's correctness, plus m sentences each seed got wrong now right (and nothing lost)."""
    lever = base.copy()
    wrong_everywhere = np.flatnonzero(~base.any(axis=0))
    for i in range(base.shape[0]):
        if same_sentences:
            chosen = wrong_everywhere[:m]
        else:
            chosen = wrong_everywhere[i * m:(i + 1) * m]
        assert len(chosen) == m
        lever[i, chosen] = True
    return lever


def test_m_more_sentences_on_the_same_sentences_in_every_seed():
    k, n, m = 3, 400, 5
    base = _baseline(k, n, accuracy=0.7)
    lever = _lever_right_on_more(base, m, same_sentences=True)
    test = pooled_test(lever, base)
    assert test.difference == pytest.approx(m / n)
    # D_j / k is 1 on m sentences, 0 elsewhere: sample variance m (n - m) / (n (n - 1)).
    se = math.sqrt(m * (n - m) / (n * (n - 1)) / n)
    assert test.low == pytest.approx(m / n - Z * se) and test.high == pytest.approx(m / n + Z * se)
    # T = 3 * 5 = 15; the null flips 5 sentences of |D| = 3: |T| >= 15 only when all signs agree.
    assert test.p_value == pytest.approx(2 * 0.5 ** m)
    assert (test.only_lever, test.only_baseline) == (k * m, 0)
    # sum D_j^2 = 9 m: (z + z_0.8) * sqrt(9 m) / (3 n)
    assert test.detectable == pytest.approx((Z + Z80) * math.sqrt(9 * m) / (k * n))
    seeds = seed_test(lever, base)
    assert seeds.differences == pytest.approx((m / n,) * k) and seeds.mean == pytest.approx(m / n)
    assert seeds.p_value == 0.0 and seeds.low == seeds.high == pytest.approx(m / n)


def test_m_more_sentences_on_different_sentences_is_stronger_evidence():
    k, n, m = 3, 400, 5
    base = _baseline(k, n, accuracy=0.5)
    lever = _lever_right_on_more(base, m, same_sentences=False)
    test = pooled_test(lever, base)
    assert test.difference == pytest.approx(m / n)
    # 15 sentences with D = 1: the stratified McNemar's answer, which is right here (no sentence repeats).
    assert test.p_value == pytest.approx(2 * 0.5 ** (k * m))
    assert test.p_value == pytest.approx(mcnemar_p(lever.ravel(), base.ravel()))
    se = math.sqrt(k * m * (n - k * m) / (n * (n - 1)) / n) / k
    assert test.high - test.difference == pytest.approx(Z * se)
    decision = decide(lever, base)
    assert decision.verdict == "better" and "+1.25 points" in decision.summary


def test_one_seed_is_exact_mcnemar_and_the_stats_power_formula():
    rng = np.random.default_rng(3)
    base = rng.random(1000) < 0.85
    lever = base.copy()
    flip = rng.choice(1000, 60, replace=False)
    lever[flip] = ~lever[flip]
    test = pooled_test(lever, base)
    assert test.p_value == pytest.approx(mcnemar_p(lever, base), rel=1e-9)
    assert test.detectable == pytest.approx(detectable_drop(base, lever))
    b, c = int((lever & ~base).sum()), int((~lever & base).sum())
    assert test.detectable == pytest.approx((Z + Z80) * math.sqrt(b + c) / 1000)


@pytest.mark.parametrize("case", ["identical", "balanced"])
def test_null_cases_give_p_one(case):
    base = _baseline(3, 300)
    lever = base.copy()
    if case == "balanced":  # seed by seed, one sentence gained and one lost, on different sentences
        for i in range(3):
            gained = np.flatnonzero(~base[i])[i]
            lost = np.flatnonzero(base[i])[i]
            lever[i, gained], lever[i, lost] = True, False
    test = pooled_test(lever, base)
    assert test.p_value == 1.0 and test.difference == 0.0
    assert test.low <= 0 <= test.high
    decision = decide(lever, base)
    assert decision.verdict == "no detectable difference"
    assert f"{100 * test.detectable:.2f} points with 80% power" in decision.summary


def test_p_values_under_a_true_null_are_not_too_small():
    """Lever and baseline drawn alike, sentences of varied difficulty shared by the seeds: P(p <= a) <= a."""
    rng = np.random.default_rng(11)
    ps = []
    for _ in range(400):
        difficulty = rng.random(300)
        base = rng.random((3, 300)) < difficulty
        lever = rng.random((3, 300)) < difficulty
        ps.append(pooled_test(lever, base).p_value)
    ps = np.asarray(ps)
    for level in (0.05, 0.1, 0.25, 0.5):
        assert np.mean(ps <= level) <= level + 0.04  # binomial noise over 400 draws is about 0.01-0.025
    assert np.mean(ps <= 0.5) >= 0.4  # and not all near 1: the test is not dead


def test_sign_flip_null_by_hand():
    support, pmf = sign_flip_null([1, 2])  # +-1 +-2: -3, -1, 1, 3 each 1/4
    assert support.tolist() == [-3, -2, -1, 0, 1, 2, 3]
    assert pmf == pytest.approx([0.25, 0, 0.25, 0, 0.25, 0, 0.25], abs=1e-15)
    support, pmf = sign_flip_null([3, 3, 0])
    assert support[pmf > 1e-15].tolist() == [-6, 0, 6] and pmf[pmf > 1e-15] == pytest.approx([0.25, 0.5, 0.25])


def test_seed_level_t_test_by_hand():
    base = np.zeros((3, 100), dtype=bool)
    lever = np.zeros((3, 100), dtype=bool)
    for i, gain in enumerate((1, 2, 3)):  # per-seed differences 0.01, 0.02, 0.03: mean 0.02, sd 0.01
        lever[i, :gain] = True
    t = seed_test(lever, base)
    se = 0.01 / math.sqrt(3)
    assert t.mean == pytest.approx(0.02) and t.df == 2
    assert t.high - t.mean == pytest.approx(4.302652729749464 * se)
    # t = 0.02 / se = 2 sqrt(3); with 2 df the two-sided p is 1 - t / sqrt(t^2 + 2) = 1 - sqrt(12 / 14) = 0.0742
    assert t.p_value == pytest.approx(1 - math.sqrt(12 / 14), rel=1e-9)
    assert seed_power(t.detectable, 0.01, 3) == pytest.approx(0.8, abs=1e-6)


def test_seed_level_power_against_simulation():
    """At the reported detectable effect, simulated 3-seed t-tests reject 80% of the time."""
    from scipy.stats import t as student_t

    sd, k = 0.004, 3
    base = np.zeros((k, 1000), dtype=bool)
    lever = base.copy()
    for i, gain in enumerate((4, 8, 12)):
        lever[i, :gain] = True  # differences 0.004, 0.008, 0.012: sd 0.004
    effect = seed_test(lever, base).detectable
    rng = np.random.default_rng(5)
    draws = effect + sd * rng.standard_normal((40000, k))
    tstat = draws.mean(axis=1) / (draws.std(axis=1, ddof=1) / math.sqrt(k))
    rejected = np.mean(np.abs(tstat) > student_t.ppf(0.975, k - 1))
    assert rejected == pytest.approx(0.8, abs=0.01)
    assert effect > 3 * sd  # at 2 degrees of freedom the seed-level test needs a large effect


def test_decision_flags_seeds_that_disagree():
    base = _baseline(3, 2000, accuracy=0.6, seed=4)
    lever = base.copy()
    wrong = [np.flatnonzero(~base[i]) for i in range(3)]
    right = np.flatnonzero(base[2])
    lever[0, wrong[0][:60]] = True  # seeds 0 and 1 gain 3 points, seed 2 loses 0.2
    lever[1, wrong[1][:60]] = True
    lever[2, right[:4]] = False
    decision = decide(lever, base)
    assert decision.pooled.low > 0
    assert decision.verdict == "seeds disagree" and "seed pair(s) 2" in decision.summary


def _run(name: str, val, test) -> Run:
    return Run(Path(name), {"validation": np.asarray(val), "test": np.asarray(test)}, {})


def test_compare_protocol_table_on_known_predictions():
    labels = {"validation": np.array([1, 0] * 50), "test": np.array([0, 1] * 50)}
    pooled = np.concatenate([labels["validation"], labels["test"]])
    base_runs, lever_runs = [], []
    for i in range(3):
        pred = pooled.copy()
        pred[10 * i: 10 * i + 20] = 1 - pred[10 * i: 10 * i + 20]  # baseline wrong on 20 of 200
        base_runs.append(_run(f"b{i}", pred[:100], pred[100:]))
        better = pred.copy()
        better[10 * i: 10 * i + 4] = pooled[10 * i: 10 * i + 4]  # the lever fixes 4 of them: +2 points
        lever_runs.append(_run(f"l{i}", better[:100], better[100:]))
    base, lever = Row("base", base_runs), Row("lever", lever_runs)
    decisions = protocol_decisions([base, lever], labels, base)
    assert [name for name, _ in decisions] == ["lever"]
    d = decisions[0][1]
    assert d.pooled.sentences == 200 and d.pooled.seeds == 3 and d.pooled.difference == pytest.approx(0.02)
    text = protocol_table(decisions, "base").splitlines()
    assert text[0].startswith("| lever vs base | seeds x sentences | difference (pooled) |")
    assert text[2].startswith("| lever | 3 x 200 | +2.00 | [")
    assert text[2].endswith("| better |")
    assert text[-1].startswith("- lever: the lever is better: +2.00 points")


def test_protocol_refuses_unpaired_or_too_few_seeds(capsys):
    with pytest.raises(CompressError, match="pairs seed i with seed i"):
        require_seeds("lever", 3, "base", 2)
    with pytest.raises(CompressError, match="at least 3 seeds"):
        require_seeds("lever", 2, "base", 2)
    # the command refuses before loading any data or model (the folders do not exist)
    code = main(["--protocol", "--baseline", "b=x0,x1,x2", "b=x0,x1,x2", "l=y0,y1"])
    assert code == 2 and "l has 2 seed(s) and the baseline b has 3" in capsys.readouterr().err
    code = main(["--protocol", "b=x0,x1,x2", "l=y0,y1,y2"])
    assert code == 2 and "--protocol needs --baseline" in capsys.readouterr().err


def test_compare_protocol_command_on_tiny_models(tmp_path, capsys):
    """The command end to end: predictions of real (tiny) artifacts on validation + test, decided as by hand."""
    import json

    from compress.runtime.predictor import Predictor
    from tests.conftest import make_bert, sentiment_rows, write_csv
    from tests.support.models import shifted_copy

    data = write_csv(tmp_path / "sentiment.csv", sentiment_rows(80, seed=3))
    from compress.config import DataOptions

    task = DataOptions(data=str(data)).load()
    texts = list(task.texts("validation")) + list(task.texts("test"))
    labels = np.concatenate([np.asarray(task.splits[s]["label"]) for s in ("validation", "test")])
    base = [make_bert(tmp_path / f"b{i}", layers=1, hidden=32, heads=2, ffn=64, head=True, seed=i) for i in range(3)]
    lever = [shifted_copy(b, tmp_path / f"l{i}", texts) for i, b in enumerate(base)]
    out = tmp_path / "table.json"
    code = main(["--data", str(data), "--protocol", "--baseline", "base=" + ",".join(map(str, base)),
                 "base=" + ",".join(map(str, base)), "lever=" + ",".join(map(str, lever)), "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    correct = {name: np.stack([Predictor.load(p).logits(texts).argmax(-1) == labels for p in paths])
               for name, paths in (("base", base), ("lever", lever))}
    expected = decide(correct["lever"], correct["base"])
    got = json.loads(out.read_text())["lever"]["protocol"]
    assert got["baseline"] == "base" and got["verdict"] == expected.verdict
    assert got["pooled"]["difference"] == pytest.approx(expected.pooled.difference)
    assert got["pooled"]["p_value"] == pytest.approx(expected.pooled.p_value)
    assert got["seeds"]["differences"] == pytest.approx(list(expected.seeds.differences))
    assert f"| lever | 3 x {len(texts)} | {100 * expected.pooled.difference:+.2f} |" in printed


# ----------------------------------------------------------------------------- entity F1 (taggers)


def _counts(seeds: int, n: int, seed: int = 0, hit: float = 0.6) -> np.ndarray:
    """``(seeds, sentences, 3)`` entity counts of one model per seed on the same sentences (0-3 gold entities
    each, the same for every model), each entity found with ``hit``; ``seed`` draws the model's answers."""
    gold = np.broadcast_to(np.random.default_rng(12345).integers(0, 4, size=n), (seeds, n))
    rng = np.random.default_rng(seed)
    correct = rng.binomial(gold, hit)
    spurious = rng.binomial(1, 0.2, size=(seeds, n))
    return np.stack([correct, correct + spurious, gold], axis=-1)


def _f1(c: np.ndarray) -> float:
    t = c.sum(axis=0)
    return 2 * t[0] / (t[1] + t[2])


def test_f1_protocol_difference_is_the_mean_of_the_per_seed_f1_differences():
    from tools.studies.protocol import f1_pooled_test, f1_seed_test

    base, lever = _counts(3, 400, seed=1), _counts(3, 400, seed=2, hit=0.7)
    by_hand = [_f1(lever[i]) - _f1(base[i]) for i in range(3)]
    pooled = f1_pooled_test(lever, base, resamples=2000)
    assert pooled.difference == pytest.approx(np.mean(by_hand))
    assert pooled.low < pooled.difference < pooled.high and pooled.seeds == 3 and pooled.sentences == 400
    seeds = f1_seed_test(lever, base)
    assert seeds.differences == pytest.approx(by_hand) and seeds.mean == pytest.approx(np.mean(by_hand))
    # counts kept per type give the same answer (micro F1 sums the types)
    per_type = np.stack([lever - lever // 2, lever // 2], axis=2)
    assert f1_pooled_test(per_type, np.stack([base, 0 * base], axis=2), resamples=2000).difference \
        == pytest.approx(pooled.difference)


def test_f1_protocol_identical_runs_and_a_clear_gain():
    from tools.studies.protocol import decide_f1, f1_pooled_test

    base = _counts(3, 300, seed=3)
    same = f1_pooled_test(base, base, resamples=1000)
    assert same.difference == 0 and same.p_value == 1.0 and same.only_lever == same.only_baseline == 0
    # the lever finds every gold entity the baseline missed on the first 60 sentences, in every seed
    lever = base.copy()
    lever[:, :60, 0] = lever[:, :60, 2]
    lever[:, :60, 1] = lever[:, :60, 0] + (base[:, :60, 1] - base[:, :60, 0])
    d = decide_f1(lever, base)
    assert d.verdict == "better" and d.pooled.p_value < 0.01 and d.pooled.low > 0
    assert d.pooled.only_baseline == 0 and d.pooled.only_lever > 0
    assert decide_f1(base, lever).verdict == "worse"
    with pytest.raises(ValueError, match="not paired"):
        f1_pooled_test(lever[:, :10], base)


def test_f1_protocol_p_values_under_a_true_null_are_not_too_small():
    from tools.studies.protocol import f1_pooled_test

    ps = [f1_pooled_test(_counts(3, 200, seed=2 * r), _counts(3, 200, seed=2 * r + 1), resamples=500).p_value
          for r in range(40)]
    assert sum(p < 0.05 for p in ps) <= 6  # 2 expected; a test that over-rejects would give many more
    assert sum(p > 0.5 for p in ps) >= 12
