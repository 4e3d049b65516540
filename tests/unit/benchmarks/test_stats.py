"""The intervals the gate decides on, against cases whose answer is known in advance.

Known answers: textbook Clopper-Pearson bounds, exact McNemar tails computed by hand, the Wald
interval of a paired difference (which the paired bootstrap must approach at large counts), the
asymptotic standard error of a sample median, and coverage on simulated series whose true speedup
is known (independent rounds, and rounds that drift).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.accuracy import mcnemar_p
from compress.core.stats import (Interval, accuracy_drop_interval, block_bootstrap_indices, block_length, detectable_drop,
                              history_flagged, history_score, mean_over_seeds_interval, proportion_interval,
                              speedup_interval)


def _series(n: int, speedup: float, sigma: float, rng, phi: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Reference and artifact times whose log-ratio is AR(1) noise around log(speedup) (phi=0: independent)."""
    noise = np.empty(n)
    noise[0] = rng.standard_normal() * sigma
    innovation = sigma * math.sqrt(1 - phi ** 2)
    for i in range(1, n):
        noise[i] = phi * noise[i - 1] + innovation * rng.standard_normal()
    reference = 100e6 * np.exp(0.3 * rng.standard_normal(n))  # the machine's speed wanders; ratios pair it away
    return reference, reference / (speedup * np.exp(noise))


def test_constant_ratios_give_a_zero_width_interval():
    reference = np.linspace(90e6, 130e6, 200)  # the machine slows down, the ratio does not
    interval = speedup_interval(reference, reference / 8.0)
    assert interval.estimate == pytest.approx(8.0) and interval.low == pytest.approx(8.0)
    assert interval.high == pytest.approx(8.0)
    assert interval.verdict(8.0, higher_is_better=True) == "pass"


def test_speedup_interval_width_matches_the_median_standard_error():
    """Independent log-normal ratios: the sample median's SE is sqrt(pi/2) * sigma / sqrt(n) in log space."""
    rng = np.random.default_rng(3)
    n, sigma = 400, 0.05
    reference, artifact = _series(n, 8.0, sigma, rng)
    interval = speedup_interval(reference, artifact)
    expected_half = 1.96 * math.sqrt(math.pi / 2) * sigma / math.sqrt(n)
    half = (math.log(interval.high) - math.log(interval.low)) / 2
    assert half == pytest.approx(expected_half, rel=0.3)
    assert interval.low < 8.0 < interval.high


def test_speedup_interval_coverage_on_independent_rounds():
    rng = np.random.default_rng(11)
    hits = 0
    trials = 80
    for _ in range(trials):
        reference, artifact = _series(150, 5.0, 0.08, rng)
        interval = speedup_interval(reference, artifact, resamples=800, seed=int(rng.integers(1 << 30)))
        hits += interval.low <= 5.0 <= interval.high
    assert 0.85 <= hits / trials <= 1.0  # nominal 95%; the percentile bootstrap of a median is close to it


def test_block_length_grows_with_autocorrelation_and_covers_drifting_rounds():
    """Rounds that drift (AR(1), phi 0.9): an i.i.d. bootstrap (block 1) under-covers badly; the chosen blocks do
    much better. This is why the gate resamples blocks of consecutive rounds."""
    rng = np.random.default_rng(5)
    iid = rng.standard_normal(300)
    assert block_length(iid) == math.ceil(300 ** (1 / 3))
    hits_block = hits_iid = 0
    trials = 60
    for t in range(trials):
        reference, artifact = _series(300, 4.0, 0.06, rng, phi=0.9)
        ratios = reference / artifact
        assert block_length(np.log(ratios)) > 12
        block = speedup_interval(reference, artifact, resamples=600, seed=t)
        idx = block_bootstrap_indices(len(ratios), 1, 600, seed=t)
        reps = np.median(ratios[idx], axis=1)
        low, high = np.quantile(reps, [0.025, 0.975])
        hits_block += block.low <= 4.0 <= block.high
        hits_iid += low <= 4.0 <= high
    assert hits_iid / trials < 0.7
    assert hits_block / trials > hits_iid / trials + 0.15


def test_block_bootstrap_indices_are_circular_runs():
    idx = block_bootstrap_indices(10, 4, resamples=3, seed=0)
    assert idx.shape == (3, 10)
    for row in idx:
        for start in range(0, 8, 4):
            run = row[start:start + 4]
            assert all((b - a) % 10 == 1 for a, b in zip(run, run[1:]))


def test_verdicts_are_pass_fail_or_inconclusive():
    i = Interval(8.2, 8.05, 8.4, 0.95, "test")
    assert i.verdict(8.0, higher_is_better=True) == "pass"
    assert i.verdict(8.5, higher_is_better=True) == "fail"
    assert i.verdict(8.1, higher_is_better=True) == "inconclusive"
    assert i.verdict(8.5, higher_is_better=False) == "pass"
    assert i.verdict(8.0, higher_is_better=False) == "fail"
    assert i.verdict(8.3, higher_is_better=False) == "inconclusive"


def _pairs(both: int, only_a: int, only_b: int, neither: int) -> tuple[np.ndarray, np.ndarray]:
    a = np.array([True] * both + [True] * only_a + [False] * only_b + [False] * neither)
    b = np.array([True] * both + [False] * only_a + [True] * only_b + [False] * neither)
    return a, b


def test_mcnemar_exact_values():
    # 20 discordant pairs, 15 against 5: p = 2 * sum_{k<=5} C(20, k) / 2^20 = 2 * 21700 / 1048576
    a, b = _pairs(700, 15, 5, 280)
    assert mcnemar_p(a, b) == pytest.approx(2 * 21700 / 2 ** 20, abs=1e-15)
    # 6 against 0: p = 2 / 64
    a, b = _pairs(50, 6, 0, 10)
    assert mcnemar_p(a, b) == pytest.approx(2 / 64, abs=1e-15)
    # balanced: p = 1 (capped)
    a, b = _pairs(50, 4, 4, 10)
    assert mcnemar_p(a, b) == 1.0


def test_paired_accuracy_drop_interval_approaches_the_wald_interval():
    """b = 100 only-reference-right, c = 60 only-artifact-right of n = 1000: drop 0.04, SE sqrt((b+c)/n - d^2)/sqrt(n)."""
    ref, art = _pairs(700, 100, 60, 140)
    interval = accuracy_drop_interval(ref, art, resamples=20000)
    se = math.sqrt(0.16 - 0.04 ** 2) / math.sqrt(1000)
    assert interval.estimate == pytest.approx(0.04)
    assert interval.low == pytest.approx(0.04 - 1.96 * se, abs=0.002)
    assert interval.high == pytest.approx(0.04 + 1.96 * se, abs=0.002)
    # Identical predictions: the drop is exactly zero on any resample of the examples.
    same = accuracy_drop_interval(ref, ref)
    assert (same.low, same.high) == (0.0, 0.0)
    # Relative: divided by the reference accuracy (0.8).
    rel = accuracy_drop_interval(ref, art, relative=True, resamples=20000)
    assert rel.estimate == pytest.approx(0.05)
    assert rel.low == pytest.approx((0.04 - 1.96 * se) / 0.8, abs=0.004)


def test_paired_interval_is_much_tighter_than_two_separate_intervals():
    ref, art = _pairs(850, 20, 0, 130)  # accuracy 0.87 vs 0.85 on the same 1000 sentences
    paired = accuracy_drop_interval(ref, art)
    separate = proportion_interval(870, 1000)
    assert paired.low > 0  # the 2-point drop is certain on these examples
    assert (paired.high - paired.low) < (separate.high - separate.low) / 2


def test_detectable_drop():
    ref, art = _pairs(800, 60, 40, 100)  # 10% discordant of 1000
    assert detectable_drop(ref, art) == pytest.approx((1.959964 + 0.841621) * math.sqrt(0.1 / 1000), rel=1e-5)
    assert detectable_drop(ref, ref) > 0  # one example's worth, not zero


def test_clopper_pearson_textbook_values():
    i = proportion_interval(9, 10)
    assert (i.low, i.high) == (pytest.approx(0.554984, abs=1e-6), pytest.approx(0.997471, abs=1e-6))
    i = proportion_interval(0, 10)
    assert (i.low, i.high) == (0.0, pytest.approx(0.308497, abs=1e-6))
    i = proportion_interval(10, 10)
    assert i.high == 1.0 and i.low == pytest.approx(0.691503, abs=1e-6)


def test_mean_over_seeds_reduces_to_a_t_interval_without_seed_spread():
    from scipy.stats import t

    rng = np.random.default_rng(0)
    per_example = rng.normal(0.02, 0.3, size=500)
    seeds = np.stack([per_example, per_example, per_example])  # three identical seeds
    interval = mean_over_seeds_interval(seeds)
    half = t.ppf(0.975, 499) * per_example.std(ddof=1) / math.sqrt(500)
    assert interval.estimate == pytest.approx(per_example.mean())
    assert interval.high - interval.estimate == pytest.approx(half, rel=1e-9)
    # Seeds that differ widen it.
    spread = seeds + np.array([[-0.02], [0.0], [0.02]])
    assert mean_over_seeds_interval(spread).high - mean_over_seeds_interval(spread).low > 2 * half
    with pytest.raises(ValueError):
        mean_over_seeds_interval(per_example[None, :])


def test_the_paired_bootstrap_is_reproducible_from_its_seed():
    """The same inputs give the same interval on every run (the gate's verdict must not flicker), and
    another seed draws other replicates."""
    rng = np.random.default_rng(3)
    ref, art = rng.random(400) < 0.9, rng.random(400) < 0.85
    first = accuracy_drop_interval(ref, art, resamples=500)
    assert accuracy_drop_interval(ref, art, resamples=500) == first
    assert accuracy_drop_interval(ref, art, resamples=500, seed=1) != first
    times = 100e6 * np.exp(0.2 * rng.standard_normal(60))
    other = times / (1.5 * np.exp(0.1 * rng.standard_normal(60)))
    speedup = speedup_interval(times, other, resamples=500)
    assert speedup_interval(times, other, resamples=500) == speedup  # the block bootstrap too
    assert speedup_interval(times, other, resamples=500, seed=1) != speedup


def test_mean_over_seeds_interval_adds_both_variances_with_welch_satterthwaite_df():
    """A 3-seed x 4-example table worked by hand: example means 2/3, 1/3, 1, 2/3 (variance 2/27, over 4:
    1/54); seed means 3/4, 1/2, 3/4 (variance 1/24, over 3: 1/144); se^2 = 1/54 + 1/144 = 11/432."""
    from scipy.stats import t as student_t

    per_seed = np.array([[1, 0, 1, 1], [0, 0, 1, 1], [1, 1, 1, 0]])
    var_examples, var_seeds = 1 / 54, 1 / 144
    se2 = var_examples + var_seeds
    df = se2 ** 2 / (var_examples ** 2 / 3 + var_seeds ** 2 / 2)
    half = student_t.ppf(0.95, df) * math.sqrt(se2)
    got = mean_over_seeds_interval(per_seed, confidence=0.9)
    assert got.estimate == pytest.approx(2 / 3) and got.confidence == 0.9
    assert (got.low, got.high) == (pytest.approx(2 / 3 - half), pytest.approx(2 / 3 + half))
    assert f"{df:.1f} df" in got.method


def test_history_z_and_t_scores():
    window = [10.0, 10.2, 9.8, 10.1, 9.9]
    sd = math.sqrt((0 + 0.04 + 0.04 + 0.01 + 0.01) / 4)
    score, mean, got_sd = history_score(9.0, window)
    assert (mean, got_sd) == (pytest.approx(10.0), pytest.approx(sd))
    assert score == pytest.approx(-1.0 / sd)  # -6.3 sd
    assert history_flagged(score, 5, 3.0, "z")
    assert history_flagged(history_score(8.5, window)[0], 5, 3.0, "t")  # -9.5 sd
    score, _, _ = history_score(9.8, window)
    assert not history_flagged(score, 5, 3.0, "z")
    # -3.5 sd: beyond a z threshold of 3, but a five-run window's t (4 df, prediction scale) is not that sure.
    assert history_flagged(-3.5, 5, 3.0, "z") and not history_flagged(-3.5, 5, 3.0, "t")
    assert history_flagged(-3.5, 200, 3.0, "t")  # a long window's t is nearly normal
    assert not history_flagged(+9.0, 5, 3.0, "z")  # better than usual is not flagged
    # A window with no spread: the floor (the run's own standard error) stands in for the sd.
    score, _, sd = history_score(0.87, [0.88] * 10, floor_se=0.01)
    assert sd == 0.01 and score == pytest.approx(-1.0)


def test_history_thresholds_sit_where_the_definitions_put_them():
    """The t test's cut-off is Student's t quantile (window - 1 df) of the normal tail that ``threshold`` sd
    leave, on the prediction scale ``sqrt(1 + 1/N)``; the z test flags strictly beyond ``threshold``."""
    from statistics import NormalDist

    from scipy.stats import t as student_t

    for n in (3, 5, 12):
        cut = student_t.ppf(NormalDist().cdf(-3.0), n - 1) * math.sqrt(1 + 1 / n)
        assert history_flagged(cut * 1.001, n, 3.0, "t") and not history_flagged(cut * 0.999, n, 3.0, "t"), n
    assert not history_flagged(-3.0, 5, 3.0, "z") and history_flagged(-3.0001, 5, 3.0, "z")
    with pytest.raises(ValueError, match="unknown history test"):
        history_flagged(-5.0, 5, 3.0, "normal")


def test_history_score_of_a_window_without_spread_and_no_floor():
    """With every past run equal and no floor: no change is 0, any change is infinitely unusual, its sign kept."""
    assert history_score(0.88, [0.88] * 3) == (0.0, 0.88, 0.0)
    assert history_score(0.87, [0.88] * 3)[0] == -math.inf and history_score(0.89, [0.88] * 3)[0] == math.inf
    assert history_score(11.0, [10.0, 12.0]) == (0.0, 11.0, pytest.approx(math.sqrt(2)))  # two runs suffice
    assert history_score(13.0, [10.0, 12.0], floor_se=1.0)[2] == pytest.approx(math.sqrt(2))  # sd above the floor
    with pytest.raises(ValueError, match="at least two"):
        history_score(1.0, [1.0])


# ----------------------------------------------------------------------------- verdict boundaries
#
# A bound within ``eps`` of the limit counts as on the limit, and on the limit counts as the good side: a
# gate must not fail a model whose interval touches the limit. Each case below sits exactly on a limit (or
# on the edge of its eps band), just inside, or just outside, for both directions, so flipping any of
# ``>=`` / ``<`` / ``<=`` / ``>`` or the sign of eps changes at least one outcome.

EPS = 1e-9
LIMIT = 2.0


def _interval(low: float, high: float) -> Interval:
    return Interval((low + high) / 2, low, high, 0.95, "test")


@pytest.mark.parametrize("low, high, expected", [
    (LIMIT, LIMIT + 1, "pass"),                        # lower bound exactly on the limit
    (LIMIT - EPS, LIMIT + 1, "pass"),                  # ... on the edge of the tolerance band
    (LIMIT - 3 * EPS, LIMIT + 1, "inconclusive"),      # ... just outside the band: straddles
    (LIMIT + 1e-6, LIMIT + 1, "pass"),                 # just inside
    (LIMIT - 1e-6, LIMIT + 1, "inconclusive"),         # just outside
    (LIMIT - 1, LIMIT, "inconclusive"),                # upper bound exactly on the limit: not a failure
    (LIMIT - 1, LIMIT - EPS, "inconclusive"),          # ... on the edge of the band
    (LIMIT - 1, LIMIT - 3 * EPS, "fail"),              # ... just past it
    (LIMIT - 1, LIMIT - 1e-6, "fail"),
    (LIMIT, LIMIT, "pass"),                            # a zero-width interval on the limit
    (LIMIT - 1e-6, LIMIT - 1e-6, "fail"),
    (LIMIT + 1e-6, LIMIT + 1e-6, "pass"),
])
def test_verdict_boundaries_when_higher_is_better(low, high, expected):
    assert _interval(low, high).verdict(LIMIT, higher_is_better=True) == expected


@pytest.mark.parametrize("low, high, expected", [
    (LIMIT - 1, LIMIT, "pass"),                        # upper bound exactly on the limit
    (LIMIT - 1, LIMIT + EPS, "pass"),                  # ... on the edge of the tolerance band
    (LIMIT - 1, LIMIT + 3 * EPS, "inconclusive"),      # ... just outside the band
    (LIMIT - 1, LIMIT - 1e-6, "pass"),
    (LIMIT - 1, LIMIT + 1e-6, "inconclusive"),
    (LIMIT, LIMIT + 1, "inconclusive"),                # lower bound exactly on the limit: not a failure
    (LIMIT + EPS, LIMIT + 1, "inconclusive"),          # ... on the edge of the band
    (LIMIT + 3 * EPS, LIMIT + 1, "fail"),              # ... just past it
    (LIMIT + 1e-6, LIMIT + 1, "fail"),
    (LIMIT, LIMIT, "pass"),
    (LIMIT + 1e-6, LIMIT + 1e-6, "fail"),
    (LIMIT - 1e-6, LIMIT - 1e-6, "pass"),
])
def test_verdict_boundaries_when_lower_is_better(low, high, expected):
    assert _interval(low, high).verdict(LIMIT, higher_is_better=False) == expected


def test_verdict_eps_is_the_width_of_the_band():
    """A wider eps moves the edges by exactly that much; eps 0 makes the comparisons exact."""
    i = _interval(LIMIT - 0.01, LIMIT + 1)
    assert i.verdict(LIMIT, True, eps=0.01) == "pass" and i.verdict(LIMIT, True, eps=0.0099) == "inconclusive"
    i = _interval(LIMIT - 1, LIMIT - 0.01)
    assert i.verdict(LIMIT, True, eps=0.01) == "inconclusive" and i.verdict(LIMIT, True, eps=0.0099) == "fail"
    i = _interval(LIMIT - 1, LIMIT + 0.01)
    assert i.verdict(LIMIT, False, eps=0.01) == "pass" and i.verdict(LIMIT, False, eps=0.0099) == "inconclusive"
    i = _interval(LIMIT + 0.01, LIMIT + 1)
    assert i.verdict(LIMIT, False, eps=0.01) == "inconclusive" and i.verdict(LIMIT, False, eps=0.0099) == "fail"
    exact = _interval(LIMIT - 1e-12, LIMIT + 1)
    assert exact.verdict(LIMIT, True) == "pass" and exact.verdict(LIMIT, True, eps=0.0) == "inconclusive"


@pytest.mark.parametrize("score, flagged", [(-3.0, False), (-3.0 - 1e-9, True), (-2.999, False), (-3.001, True)])
def test_history_z_flag_boundary(score, flagged):
    """A score exactly on the threshold is not unusual; only beyond it."""
    assert history_flagged(score, 10, 3.0, "z") is flagged


def test_history_t_flag_boundary():
    """The t test flags where Student's t cdf (prediction scale) falls below the normal tail of the threshold."""
    from statistics import NormalDist

    from scipy.stats import t

    window, threshold = 8, 2.0
    alpha = NormalDist().cdf(-threshold)
    edge = float(t.ppf(alpha, window - 1)) * math.sqrt(1 + 1 / window)  # the score whose cdf is exactly alpha
    assert history_flagged(edge - 1e-6, window, threshold, "t")
    assert not history_flagged(edge + 1e-6, window, threshold, "t")
    with pytest.raises(ValueError, match="unknown history test"):
        history_flagged(-5.0, window, threshold, "w")


# ----------------------------------------------------------------------------- edges of the estimators
# (found by mutation testing: each case below fails when one operator or constant of the estimator changes)


def test_history_score_edges():
    with pytest.raises(ValueError):
        history_score(1.0, [1.0])
    assert history_score(5.0, [1, 2, 3]) == (3.0, 2.0, 1.0)  # sd exactly 1: still the plain z-score
    assert history_score(1.5, [1.0, 2.0])[0] == pytest.approx(0.0)  # two runs are enough
    # No spread and no floor: equal is 0, any change is infinitely unusual, with its sign.
    assert history_score(0.88, [0.88, 0.88, 0.88]) == (0.0, 0.88, 0.0)
    assert history_score(0.87, [0.88] * 3)[0] == -math.inf and history_score(0.89, [0.88] * 3)[0] == math.inf


def test_mean_over_seeds_edges():
    from scipy.stats import t

    no_spread = mean_over_seeds_interval(np.full((3, 4), 0.5))
    assert (no_spread.estimate, no_spread.low, no_spread.high, no_spread.confidence) == (0.5, 0.5, 0.5, 0.95)
    # Two seeds of two examples is the least it takes; here the example term is exactly 1 and the seed term 0.
    i = mean_over_seeds_interval(np.array([[1.0, -1.0], [1.0, -1.0]]))
    assert (i.estimate, i.high) == (0.0, pytest.approx(t.ppf(0.975, 1)))
    for bad in (np.zeros((1, 5)), np.zeros((5, 1)), np.zeros(5)):
        with pytest.raises(ValueError):
            mean_over_seeds_interval(bad)


def test_mean_over_seeds_welch_satterthwaite_by_hand():
    """Three seeds of five examples: both variance terms non-zero, df from the textbook formula."""
    from scipy.stats import t

    x = np.array([[1, 0, 1, 1, 0], [1, 1, 1, 0, 0], [0, 0, 1, 1, 1]], dtype=float)
    col, row = x.mean(axis=0), x.mean(axis=1)
    v_e = sum((c - col.mean()) ** 2 for c in col) / 4 / 5
    v_s = sum((r - row.mean()) ** 2 for r in row) / 2 / 3
    df = (v_e + v_s) ** 2 / (v_e ** 2 / 4 + v_s ** 2 / 2)
    i = mean_over_seeds_interval(x)
    assert i.estimate == pytest.approx(x.mean())
    assert i.high - i.estimate == pytest.approx(t.ppf(0.975, df) * math.sqrt(v_e + v_s), rel=1e-12)
    assert f"{df:.1f} df" in i.method


def test_detectable_drop_of_identical_models_is_one_examples_worth():
    ref, _ = _pairs(800, 60, 40, 100)
    assert detectable_drop(ref, ref) == pytest.approx((1.959964 + 0.841621) * math.sqrt(1 / 1000 / 1000), rel=1e-5)


def test_speedup_interval_is_a_function_of_its_seed():
    rng = np.random.default_rng(2)
    reference, artifact = _series(120, 3.0, 0.05, rng)
    a, b = speedup_interval(reference, artifact), speedup_interval(reference, artifact)
    assert (a.low, a.high) == (b.low, b.high)  # the gate's verdict never changes on a rerun
    other = speedup_interval(reference, artifact, seed=1)
    assert (other.low, other.high) != (a.low, a.high)
    assert "120 paired rounds" in a.method and a.confidence == 0.95


def test_unpaired_accuracy_drop_approaches_the_two_sample_wald_interval():
    """900/1000 against 850/1000 on other examples: drop 0.05, SE sqrt(p1 q1 / n1 + p2 q2 / n2)."""
    from compress.core.stats import unpaired_accuracy_drop_interval

    old = np.array([True] * 900 + [False] * 100)
    new = np.array([True] * 850 + [False] * 150)
    se = math.sqrt(0.9 * 0.1 / 1000 + 0.85 * 0.15 / 1000)
    i = unpaired_accuracy_drop_interval(old, new, resamples=20000)
    assert i.estimate == pytest.approx(0.05)
    assert i.low == pytest.approx(0.05 - 1.96 * se, abs=0.002) and i.high == pytest.approx(0.05 + 1.96 * se, abs=0.002)
    assert "not paired" in i.method and i.confidence == 0.95
    rel = unpaired_accuracy_drop_interval(old, new, relative=True, resamples=20000)
    assert rel.estimate == pytest.approx(0.05 / 0.9)
    assert rel.low == pytest.approx((0.05 - 1.96 * se) / 0.9, abs=0.004)
    assert rel.high == pytest.approx((0.05 + 1.96 * se) / 0.9, abs=0.004)
    again = unpaired_accuracy_drop_interval(old, new, resamples=20000)
    assert (again.low, again.high) == (i.low, i.high)  # seeded
    # A baseline that got nothing right: the relative drop is defined as 0, never a division by zero.
    none_right = unpaired_accuracy_drop_interval(np.zeros(50, bool), np.ones(50, bool), relative=True)
    assert (none_right.estimate, none_right.low, none_right.high) == (0.0, 0.0, 0.0)


def test_throughput_and_latency_intervals_of_constant_and_noisy_rounds():
    from compress.core.stats import series_median_interval, throughput_interval

    flat = [10_000_000] * 100  # 10 ms a call
    t = throughput_interval(flat, batch_size=8)
    assert (t.estimate, t.low, t.high) == (pytest.approx(800.0, rel=1e-12),) * 3
    m = series_median_interval(flat)
    assert (m.estimate, m.low, m.high) == (pytest.approx(10.0, rel=1e-12),) * 3
    rng = np.random.default_rng(4)
    noisy = [int(x) for x in 10_000_000 * np.exp(0.1 * rng.standard_normal(200))]
    t = throughput_interval(noisy, batch_size=8)
    assert t.estimate == pytest.approx(8 / (np.mean(noisy) / 1e9))
    assert t.low < t.estimate < t.high and t.high - t.low > 10  # one batch-mean per replicate, not one overall
    assert throughput_interval(noisy, 8).low == t.low and throughput_interval(noisy, 8, seed=3).low != t.low
    m = series_median_interval(noisy)
    assert m.estimate == pytest.approx(np.median(noisy) / 1e6) and m.low < m.estimate < m.high
    assert series_median_interval(noisy).low == m.low and series_median_interval(noisy, seed=3).low != m.low


def _reference_block_length(x) -> int:
    """Politis and White's (2004) automatic block length for the circular bootstrap, with Patton, Politis and
    White's (2009) correction, written out with loops from the papers' definitions, and the documented clamps
    (at least ceil(n^(1/3)), at most n/5; the floor for fewer than 10 rounds or no variance)."""
    x = [float(v) for v in x]
    n = len(x)
    if n < 2:
        return 1
    floor, cap = math.ceil(n ** (1 / 3)), max(1, n // 5)
    mean = sum(x) / n
    d = [v - mean for v in x]
    var = sum(v * v for v in d) / n
    if var == 0 or n < 10:
        return min(floor, cap)

    def r(k: int) -> float:
        return sum(d[i] * d[i + k] for i in range(n - k)) / n

    k_n = max(5, math.ceil(math.sqrt(math.log10(n))))
    max_lag = min(n - 1, math.ceil(math.sqrt(n)) + k_n + cap)
    c = 2 * math.sqrt(math.log10(n) / n)
    m_hat = max_lag - k_n
    for m in range(0, max_lag - k_n + 1):  # the first lag after which k_n autocorrelations are all insignificant
        if all(abs(r(m + j) / var) < c for j in range(1, k_n + 1)):
            m_hat = m
            break
    big_m = min(2 * max(m_hat, 1), max_lag)

    def flat_top(t: float) -> float:
        return 1.0 if abs(t) <= 0.5 else 2 * (1 - abs(t)) if abs(t) <= 1 else 0.0

    g0 = sum(flat_top(k / big_m) * r(abs(k)) for k in range(-big_m, big_m + 1))
    g = sum(flat_top(k / big_m) * abs(k) * r(abs(k)) for k in range(-big_m, big_m + 1))
    if g0 <= 0:
        return min(floor, cap)
    d_cb = (4 / 3) * g0 ** 2
    return min(max(floor, math.ceil((2 * g ** 2 / d_cb) ** (1 / 3) * n ** (1 / 3))), cap)


def _ar1(n: int, phi: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.zeros(n)
    for i in range(1, n):
        x[i] = phi * x[i - 1] + rng.standard_normal()
    return x


@pytest.mark.parametrize("series", [
    pytest.param(_ar1(300, 0.0, 1), id="iid-300"),
    pytest.param(_ar1(300, 0.5, 2), id="ar0.5-300"),
    pytest.param(_ar1(400, 0.7, 3), id="ar0.7-400"),
    pytest.param(_ar1(2000, 0.8, 4), id="ar0.8-2000"),
    pytest.param(_ar1(1000, 0.95, 5), id="ar0.95-1000"),
    pytest.param(_ar1(60, 0.6, 6), id="ar0.6-60"),
    pytest.param(_ar1(10, 0.6, 7), id="ar0.6-10"),
    pytest.param(np.tile([1.0, -1.0], 50), id="alternating"),
    pytest.param(np.linspace(0, 1, 200), id="trend"),
    pytest.param(np.arange(9, dtype=float), id="nine-rounds"),
    pytest.param(np.full(100, 3.0), id="constant"),
    pytest.param(np.array([5.0]), id="one-round"),
    pytest.param(np.array([1.0, 2.0]), id="two-rounds"),
])
def test_block_length_matches_the_papers_formula(series):
    assert block_length(series) == _reference_block_length(series)


def test_block_length_spans_its_range():
    """The reference cases above are not all clamped: some land strictly between the floor and the cap."""
    lengths = {n: (block_length(_ar1(n, phi, s)), math.ceil(n ** (1 / 3)), n // 5)
               for n, phi, s in [(2000, 0.8, 4), (400, 0.7, 3)]}
    assert any(floor < got < cap for got, floor, cap in lengths.values()), lengths


def test_block_bootstrap_indices_edges():
    one = block_bootstrap_indices(1, 5, resamples=3, seed=0)
    assert one.tolist() == [[0], [0], [0]]  # one round is a valid series
    idx = block_bootstrap_indices(10, 1, resamples=2000, seed=0)
    steps = (np.diff(idx, axis=1) % 10 == 1).mean()
    assert steps < 0.2  # block 1: independent draws (1 in 10 consecutive by chance), not pairs
    assert idx[:, 0].min() == 0 and idx[:, 0].max() == 9  # every round can start a block
    again = block_bootstrap_indices(10, 1, resamples=2000, seed=0)
    assert np.array_equal(idx, again) and not np.array_equal(idx, block_bootstrap_indices(10, 1, 2000, seed=1))
    with pytest.raises(ValueError):
        block_bootstrap_indices(0, 1)


def test_paired_inputs_edges():
    from compress.core.stats import paired_table, speedup_replicates

    # 0/1 integers count like booleans (not as bit patterns under ~).
    assert paired_table([1, 1, 0, 0], [1, 0, 1, 0]).tolist() == [1, 1, 1, 1]
    assert paired_table([1, 1, 0], [1, 0, 0]).dtype == np.int64
    with pytest.raises(ValueError, match="3 and 2"):
        paired_table([True] * 3, [True] * 2)
    with pytest.raises(ValueError, match="2 reference, 3 artifact"):
        speedup_interval([1, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        speedup_interval([], [])
    assert speedup_interval([10], [5]).estimate == 2.0  # one round is enough for an estimate
    # A round timed as 0 ns counts as 1 ns (no division by zero), and only then.
    est, reps, _ = speedup_replicates([10, 10], [0, 0])
    assert est == 10.0 and speedup_replicates([10, 10], [1.5, 1.5])[0] == pytest.approx(10 / 1.5)


def test_accuracy_drop_interval_edges():
    one = accuracy_drop_interval([True], [False])
    assert (one.estimate, one.low, one.high) == (1.0, 1.0, 1.0)  # one example: a drop of exactly one
    with pytest.raises(ValueError):
        accuracy_drop_interval([], [])
    ref, art = _pairs(700, 100, 60, 140)
    assert accuracy_drop_interval(ref, art).low == accuracy_drop_interval(ref, art).low  # seeded
    assert accuracy_drop_interval(ref, art).low != accuracy_drop_interval(ref, art, seed=1).low
    assert "relative accuracy drop" in accuracy_drop_interval(ref, art, relative=True).method
    assert "(accuracy drop)" in accuracy_drop_interval(ref, art).method
    # A reference that is never right: the relative drop is 0 on every resample, not a division by zero.
    none_right = accuracy_drop_interval([False] * 20, [True] * 5 + [False] * 15, relative=True)
    assert (none_right.estimate, none_right.low, none_right.high) == (0.0, 0.0, 0.0)


def test_proportion_and_percentile_intervals_carry_their_confidence():
    from compress.core.stats import percentile_interval

    i = proportion_interval(9, 10, confidence=0.9)
    assert (i.estimate, i.confidence) == (0.9, 0.9)
    from scipy.stats import beta

    assert i.low == pytest.approx(beta.ppf(0.05, 9, 2)) and i.high == pytest.approx(beta.ppf(0.95, 10, 1))
    assert proportion_interval(1, 1).estimate == 1.0  # one trial is a valid proportion
    with pytest.raises(ValueError):
        proportion_interval(0, 0)
    p = percentile_interval(2.0, np.arange(101), 0.9, "how")
    assert (p.estimate, p.low, p.high) == (2.0, pytest.approx(5.0), pytest.approx(95.0))
    assert (p.confidence, p.method) == (0.9, "how")


def test_ratio_of_independent_runs():
    from compress.core.stats import ratio_of_independent

    new = (3.0, np.array([2.0, 3.0, 4.0, 6.0]))
    old = (1.5, np.array([1.0, 1.0, 2.0, 2.0]))
    i = ratio_of_independent(new, old, 0.5, "ratio")
    reps = np.array([2.0, 3.0, 2.0, 3.0])  # paired by replicate index
    assert i.estimate == 2.0 and (i.low, i.high) == tuple(np.quantile(reps, [0.25, 0.75]))
    assert (i.confidence, i.method) == (0.5, "ratio")


@pytest.mark.parametrize("confidence, ok", [(0.5, True), (0.5 - 1e-12, False), (0.999, True), (1.0, False),
                                            (1.5, False)])
def test_confidence_must_be_from_one_half_to_below_one(confidence, ok):
    if ok:
        assert proportion_interval(5, 10, confidence).confidence == confidence
    else:
        with pytest.raises(ValueError, match="confidence"):
            proportion_interval(5, 10, confidence)


# ----------------------------------------------------------------------------- block length at its boundaries
# Series built so that each step of the Politis-White choice is known by hand: their autocovariances are
# exact counts of products of +-1 spikes, so which lags are significant, the window and the result follow.


def test_block_length_of_short_series_is_capped_at_a_fifth():
    """Under 10 rounds the length is min(ceil(n^(1/3)), max(1, n // 5)) = 1; from 10 to 14 rounds the cap
    n // 5 = 2 is below the floor ceil(n^(1/3)) = 3, so every series of that length gets 2."""
    for n in range(1, 10):
        assert block_length(np.arange(n, dtype=float)) == 1, n
    rng = np.random.default_rng(0)
    for n in range(10, 15):
        assert block_length(np.arange(n, dtype=float)) == 2 and block_length(rng.standard_normal(n)) == 2, n


def test_block_length_of_constant_rounds_is_the_floor_without_a_numpy_warning():
    """No variance: the floor ceil(100^(1/3)) = 5, decided before any autocorrelation (a division by the zero
    variance) is computed, so the gate prints no RuntimeWarning on constant timings."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert block_length(np.full(100, 7.0)) == 5


def _spike_pairs(lag: int, n: int = 200, period: int = 20) -> np.ndarray:
    """Zeros with a pair of equal spikes ``lag`` apart at the start of every ``period`` rounds, the pairs'
    signs alternating (mean 0): the autocorrelation is exactly 1/2 at ``lag`` and 0 at every other lag up to
    ``period - lag - 1``."""
    x = np.zeros(n)
    for j, start in enumerate(range(0, n, period)):
        x[start] = x[start + lag] = (-1.0) ** j
    return x


def test_block_length_looks_for_the_first_run_of_five_insignificant_lags():
    """K_n = max(5, sqrt(log10 n)) = 5 here. 200 rounds: band 2 sqrt(log10(200)/200) = 0.21, floor 6, cap 40.

    A correlation of 1/2 at lag 6 comes after five lags of none: the run starts at m = 0, the window is
    2 lags of zero autocovariance, g = 0, so the floor, 6 (a run of six would reach past lag 6 and give 14).
    The same correlation at lag 2 is inside the first five: m = 2, window 4, g0 = var (1 + 2 * 1/2),
    g = 2 * 2 * var / 2, so the length is ceil((2 g^2 / (4/3 g0^2))^(1/3) 200^(1/3)) = ceil(1.5^(1/3) 5.85) = 7.
    """
    lag6, lag2 = _spike_pairs(6), _spike_pairs(2)
    var = float(lag6 @ lag6) / 200
    assert float(lag6[:-6] @ lag6[6:]) / 200 == var / 2 and float(lag2[:-2] @ lag2[2:]) / 200 == var / 2
    assert block_length(lag6) == 6 == _reference_block_length(lag6)
    assert math.ceil(1.5 ** (1 / 3) * 200 ** (1 / 3)) == 7
    assert block_length(lag2) == 7 == _reference_block_length(lag2)


def test_block_length_falls_back_to_the_floor_without_a_positive_long_run_variance():
    """Lag 1 carries the only correlation within the window: m = 1, window 2 (weights 1 and 0), so
    g0 = var + 2 acov(1). Blocks (1, -1, 0 x 8) give acov(1) = -var / 2 exactly, g0 = 0; blocks
    (1, -2, 1, 0 x 7) give -2/3 var (lag 2, 1/6, is inside the band 0.28), g0 < 0. Either way there is no
    optimal length to compute, and the floor ceil(100^(1/3)) = 5 is used."""
    zero, negative = np.tile([1.0, -1.0] + [0.0] * 8, 10), np.tile([1.0, -2.0, 1.0] + [0.0] * 7, 10)
    var = float(zero @ zero) / 100
    assert var + 2 * (float(zero[:-1] @ zero[1:]) / 100) == 0.0
    assert block_length(zero) == 5 == _reference_block_length(zero)
    assert block_length(negative) == 5 == _reference_block_length(negative)


def test_relative_accuracy_drop_prints_no_numpy_warning():
    """The relative drop divides only where the reference got something right and is 0 elsewhere, with no
    division warning on the way."""
    import warnings

    ref, art = _pairs(700, 100, 60, 140)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        accuracy_drop_interval(ref, art, relative=True)
        none_right = accuracy_drop_interval([False] * 20, [True] * 5 + [False] * 15, relative=True)
    assert (none_right.estimate, none_right.low, none_right.high) == (0.0, 0.0, 0.0)


def test_an_autocorrelation_exactly_on_the_band_is_significant():
    """Insignificant means strictly inside 2 sqrt(log10 n / n) (0.2828 for 100 rounds). Integer spikes (every
    dot product exact, in any summation order): a pair (a, a) 5 rounds apart, and isolated spikes 12 apart
    that sum with it to 0, their squares chosen (by a search) so that the lag-5 autocorrelation a^2 / sum(x^2)
    is the band to the last bit; every other lag up to 11 is 0. On the band, lag 5 counts: m = 5, the window
    10 lags (weight 1 at lag 5), g0 = var (1 + 2 band), g = 10 band var, so the length is
    ceil((1.5 (10 band / (1 + 2 band))^2)^(1/3) 100^(1/3)) = 8. Just inside the band, the first five lags are
    all insignificant: m = 0, a window of 2 zero lags, the floor 5."""
    n, a, u, w1, w2 = 100, 16_777_234, 8_104_928, 805, 2770
    band = 2 * math.sqrt(math.log10(n) / n)

    def series(w2: int) -> np.ndarray:
        x = np.zeros(n)
        x[0] = x[5] = a
        x[17] = x[29] = -u
        x[41] = -(2 * a - 2 * u)
        x[53], x[65], x[77], x[89] = w1, -w1, w2, -w2
        return x

    on, inside = series(w2), series(w2 + 1)
    for x in (on, inside):
        assert x.sum() == 0 and float(x @ x) < 2 ** 53
        assert [float(x[:-k] @ x[k:]) for k in range(1, 12)] == [0.0] * 4 + [float(a * a)] + [0.0] * 6
    assert float(a * a) / n / (float(on @ on) / n) == band
    assert float(a * a) / n / (float(inside @ inside) / n) < band
    assert math.ceil((1.5 * (10 * band / (1 + 2 * band)) ** 2) ** (1 / 3) * n ** (1 / 3)) == 8
    assert block_length(on) == 8 == _reference_block_length(on)
    assert block_length(inside) == 5 == _reference_block_length(inside)


def test_relative_to_divides_where_there_is_a_base_and_is_zero_elsewhere():
    import warnings

    from compress.core.stats import relative_to

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = relative_to(np.array([0.1, -0.2, 0.3, 0.0]), np.array([0.5, 0.0, 0.25, 0.0]))
    assert got.tolist() == [0.1 / 0.5, 0.0, 0.3 / 0.25, 0.0]


def test_unpaired_accuracy_drop_interval_is_reproducible():
    """Seeded: the same interval every time, another seed another one. Seven resamples, so that the bounds
    interpolate between a few replicates and an unseeded run would move them."""
    from compress.core.stats import unpaired_accuracy_drop_interval

    old, new = [True] * 70 + [False] * 30, [True] * 60 + [False] * 40
    a, b = unpaired_accuracy_drop_interval(old, new), unpaired_accuracy_drop_interval(old, new)
    assert (a.low, a.high) == (b.low, b.high) and a.low < 0.1 < a.high
    few = [unpaired_accuracy_drop_interval(old, new, resamples=7, seed=s) for s in (1, 1, 2)]
    assert (few[0].low, few[0].high) == (few[1].low, few[1].high) != (few[2].low, few[2].high)


def _tagger_counts(rng, n, hit):
    """Per-sentence (correct, predicted, gold) of one type: 2 gold entities each, found with chance ``hit``."""
    found = rng.random((n, 2)) < hit
    correct = found.sum(1)
    return np.stack([correct, correct + (rng.random(n) < 0.1), np.full(n, 2)], axis=1)[:, None, :]


def _weaker(ref: np.ndarray, misses: int) -> np.ndarray:
    """``ref``'s counts with one correct entity fewer in each of its first ``misses`` sentences."""
    art = ref.copy()
    art[:misses, 0, 0] = np.maximum(art[:misses, 0, 0] - 1, 0)
    return art


def test_f1_intervals_resample_sentences_and_pair_them():
    from compress.core.stats import f1_drop_interval, f1_interval, ratio_interval, unpaired_f1_drop_interval
    from compress.tasks.token_classification.metrics import scores_from_counts

    rng = np.random.default_rng(3)
    ref = _tagger_counts(rng, 400, 0.8)
    art = ref.copy()
    art[:40, 0, 0] = np.maximum(art[:40, 0, 0] - 1, 0)  # the artifact misses one entity in 40 sentences
    art[:40, 0, 1] = np.maximum(art[:40, 0, 1] - 1, 0)
    f1 = f1_interval(ref)
    assert f1.estimate == pytest.approx(scores_from_counts(["X"], ref)["f1"], abs=1e-12)
    assert f1.low < f1.estimate < f1.high and "400 sentences" in f1.method
    drop = f1_drop_interval(ref, art)
    assert drop.estimate == pytest.approx(scores_from_counts(["X"], ref)["f1"] - scores_from_counts(["X"], art)["f1"])
    assert 0 < drop.low <= drop.estimate <= drop.high
    # Pairing removes the sentence-to-sentence spread the two share: much narrower than unpaired (2.9x here).
    unpaired = unpaired_f1_drop_interval(ref, art)
    assert (drop.high - drop.low) < (unpaired.high - unpaired.low) / 2
    same = f1_drop_interval(ref, ref)
    assert (same.estimate, same.low, same.high) == (0.0, 0.0, 0.0)
    # Seeded: the same numbers every time.
    assert f1_drop_interval(ref, art).low == drop.low and unpaired_f1_drop_interval(ref, art).low == unpaired.low
    assert f1_interval(ref).high == f1.high
    # (sentences, 3) totals are taken as they are; other shapes and unpaired lengths are refused.
    assert f1_interval(ref[:, 0, :]).estimate == f1.estimate
    with pytest.raises(ValueError, match="not paired"):
        f1_drop_interval(ref, art[:-1])
    with pytest.raises(ValueError, match="shape"):
        f1_interval(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="no sentences"):
        f1_interval(np.zeros((0, 3)))
    # No entity predicted or gold anywhere: F1 0, not a division by zero.
    assert f1_interval(np.zeros((5, 1, 3))).estimate == 0.0
    words = ratio_interval([[9, 10]] * 50 + [[10, 10]] * 50)
    assert words.estimate == pytest.approx(0.95) and words.low < 0.95 < words.high
    with pytest.raises(ValueError, match="no words"):
        ratio_interval([[0, 0]])


def test_f1_intervals_of_one_sentence_and_of_unpaired_sets():
    from compress.core.stats import f1_drop_interval, ratio_interval, unpaired_f1_drop_interval

    one_ref, one_art = np.array([[[2, 2, 2]]]), np.array([[[1, 2, 2]]])  # F1 1.0 and 0.5
    single = f1_drop_interval(one_ref, one_art)
    assert (single.estimate, single.low, single.high) == (0.5, 0.5, 0.5)
    words = ratio_interval([[3, 4]])
    assert (words.estimate, words.low, words.high) == (0.75, 0.75, 0.75)
    # Unpaired: the estimate is the difference of the two F1s, and each side is resampled on its own.
    rng = np.random.default_rng(5)
    old, new = _tagger_counts(rng, 300, 0.8), _tagger_counts(rng, 200, 0.6)
    f1 = lambda c: 2 * c[..., 0].sum() / (c[..., 1].sum() + c[..., 2].sum())  # noqa: E731
    drop = unpaired_f1_drop_interval(old, new)
    assert drop.estimate == pytest.approx(f1(old) - f1(new), abs=1e-12)
    assert 0 < drop.low < drop.estimate < drop.high < 2 * drop.estimate
    with pytest.raises(ValueError, match="no sentences"):
        unpaired_f1_drop_interval(old, np.zeros((0, 1, 3)))
    with pytest.raises(ValueError, match="no sentences"):
        unpaired_f1_drop_interval(np.zeros((0, 1, 3)), new)
    # Seeded: the word-agreement interval is the same every time, another seed another one.
    spread = [[int(h), 10] for h in rng.integers(0, 11, size=40)]
    few = [ratio_interval(spread, resamples=7, seed=s) for s in (1, 1, 2)]
    assert (few[0].low, few[0].high) == (few[1].low, few[1].high) != (few[2].low, few[2].high)
    # Both sides are resampled: the unpaired interval is wider than either side's own (about sqrt(2) times
    # for two sides of equal size and spread).
    a, b = _tagger_counts(rng, 300, 0.7), _tagger_counts(rng, 300, 0.6)
    from compress.core.stats import f1_interval

    width = lambda i: i.high - i.low  # noqa: E731
    assert width(unpaired_f1_drop_interval(a, b)) > 1.25 * max(width(f1_interval(a)), width(f1_interval(b)))


def test_seed_group_f1_drop_and_word_agreement_add_the_seed_spread():
    """The seed-group twins of ``f1_drop_interval`` / ``ratio_interval``: the estimate is the mean of the
    seeds' own values, the test-set term a paired bootstrap of the seed mean, the seed term the spread of
    the seeds' values; seeds that scatter give a wider interval around the same mean."""
    from compress.core.stats import f1_drop_interval, mean_f1_drop_over_seeds_interval, mean_ratio_over_seeds_interval
    from compress.tasks.token_classification.metrics import scores_from_counts

    rng = np.random.default_rng(11)
    ref = _tagger_counts(rng, 300, 0.85)

    f1 = lambda c: scores_from_counts(["X"], c)["f1"]  # noqa: E731
    tight = [_weaker(ref, 30), _weaker(ref, 30), _weaker(ref, 30)]
    loose = [_weaker(ref, 0), _weaker(ref, 30), _weaker(ref, 60)]
    t, lo = mean_f1_drop_over_seeds_interval(ref, tight), mean_f1_drop_over_seeds_interval(ref, loose)
    assert t.estimate == pytest.approx(f1(ref) - f1(tight[0]))
    assert lo.estimate == pytest.approx(np.mean([f1(ref) - f1(a) for a in loose]))
    assert t.low < t.estimate < t.high and "3 seeds x 300 sentences" in t.method
    assert (lo.high - lo.low) > (t.high - t.low)
    # Identical seeds: no seed term, so about the single artifact's paired interval (t, not percentile, bounds).
    single = f1_drop_interval(ref, tight[0])
    assert (t.high - t.low) == pytest.approx(single.high - single.low, rel=0.25)
    assert mean_f1_drop_over_seeds_interval(ref, [ref, ref]).high == 0.0  # no spread at all: a point
    with pytest.raises(ValueError, match="at least two seeds"):
        mean_f1_drop_over_seeds_interval(ref, [tight[0]])
    with pytest.raises(ValueError, match="not paired"):
        mean_f1_drop_over_seeds_interval(ref, [tight[0], tight[1][:-1]])

    same = [[9, 10]] * 60 + [[10, 10]] * 40
    other = [[8, 10]] * 60 + [[10, 10]] * 40
    words = mean_ratio_over_seeds_interval([same, other])
    assert words.estimate == pytest.approx((0.94 + 0.88) / 2)
    assert words.low < words.estimate < words.high
    assert mean_ratio_over_seeds_interval([same, same]).high - mean_ratio_over_seeds_interval([same, same]).low < (
        words.high - words.low)
    with pytest.raises(ValueError, match="different sentences"):
        mean_ratio_over_seeds_interval([same, other[:-1]])
    with pytest.raises(ValueError, match="no words"):
        mean_ratio_over_seeds_interval([[[0, 0], [0, 0]], [[0, 0], [0, 0]]])


def test_seed_group_share_of_the_reference_f1_is_paired_and_adds_the_seed_spread():
    """A target stated as a share ("keeps 95% of the teacher's F1"): each seed's F1 over the reference's on the
    same sentences, averaged; the bootstrap moves the reference with the seeds, so the interval is the ratio's."""
    from compress.core.stats import mean_f1_drop_over_seeds_interval, mean_f1_share_over_seeds_interval
    from compress.tasks.token_classification.metrics import scores_from_counts

    rng = np.random.default_rng(12)
    ref = _tagger_counts(rng, 300, 0.85)

    f1 = lambda c: scores_from_counts(["X"], c)["f1"]  # noqa: E731
    tight, loose = [_weaker(ref, 30)] * 3, [_weaker(ref, 0), _weaker(ref, 30), _weaker(ref, 60)]
    t, lo = mean_f1_share_over_seeds_interval(ref, tight), mean_f1_share_over_seeds_interval(ref, loose)
    assert t.estimate == pytest.approx(f1(tight[0]) / f1(ref))
    assert lo.estimate == pytest.approx(np.mean([f1(a) / f1(ref) for a in loose]))
    assert t.low < t.estimate < t.high < 1.0 and "share of the reference" in t.method
    assert (lo.high - lo.low) > (t.high - t.low)
    # the same ordering as the drop in points, scaled by the reference's F1
    drop = mean_f1_drop_over_seeds_interval(ref, tight)
    assert 1 - t.estimate == pytest.approx(drop.estimate / f1(ref))
    assert mean_f1_share_over_seeds_interval(ref, [ref, ref]).low == 1.0  # itself: all of it, no spread
    nothing = ref.copy()
    nothing[..., 0] = 0
    nothing[..., 1] = 0
    with pytest.raises(ValueError, match="finds no entity"):
        mean_f1_share_over_seeds_interval(nothing, tight)
    with pytest.raises(ValueError, match="not paired"):
        mean_f1_share_over_seeds_interval(ref, [tight[0], tight[1][:-1]])


def test_shares_pooled_over_teachers_are_the_mean_of_each_teachers_share_and_add_the_teachers_spread():
    """One recipe read on several teachers: each teacher's share (a mean over its own students), averaged; the
    teachers' spread is a variance term of its own, so teachers that disagree widen the interval."""
    from compress.core.stats import mean_f1_share_over_seeds_interval, mean_f1_share_over_teachers_interval

    rng = np.random.default_rng(21)
    lucky, plain = _tagger_counts(rng, 300, 0.85), _tagger_counts(rng, 300, 0.75)
    students = [_weaker(lucky, 40), _weaker(lucky, 50), _weaker(lucky, 60)]
    own = [(lucky, students), (plain, [_weaker(plain, m) for m in (0, 10, 20)])]
    pooled = mean_f1_share_over_teachers_interval(own)
    each = [mean_f1_share_over_seeds_interval(t, s) for t, s in own]
    assert pooled.estimate == pytest.approx(np.mean([e.estimate for e in each]))
    assert pooled.low < pooled.estimate < pooled.high and "2 teachers" in pooled.method
    # two teachers alike: no teachers' spread, so narrower than two that disagree
    alike = mean_f1_share_over_teachers_interval([(lucky, students), (lucky, students)])
    assert alike.estimate == pytest.approx(each[0].estimate)
    assert (alike.high - alike.low) < (pooled.high - pooled.low)
    with pytest.raises(ValueError, match="at least two teachers"):
        mean_f1_share_over_teachers_interval(own[:1])
    with pytest.raises(ValueError, match="not paired"):
        mean_f1_share_over_teachers_interval([own[0], (plain[:-1], [s[:-1] for s in own[1][1]])])
