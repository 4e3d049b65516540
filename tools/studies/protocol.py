"""The decision protocol: is a lever better than its baseline, over several seeds, with known power?

One seed judged on ~1,000 sentences sees only differences of about two points; the levers left
to measure are worth 0.3-1 point each. The protocol therefore pools what there is: ``k >= 3``
seeds of the lever, each paired with the same seed of the baseline, all judged on the same
sentences (validation + test: 2,114 for movie-reviews). It reports two tests side by side,
because they answer different questions:

- **The pooled test (sentences as the random units): a paired sign-flip permutation test over
  sentences of the per-sentence difference summed over seeds.** For sentence ``j`` let
  ``D_j = sum_i (lever_ij right - baseline_ij right)``, an integer in ``[-k, k]``. If the lever
  does nothing, each ``D_j`` is as likely to be ``+d`` as ``-d`` (swapping which model is called
  the lever changes nothing), so ``T = sum_j D_j`` is compared with the exact distribution of
  ``sum_j s_j D_j`` over all sign vectors ``s`` (computed by convolving one binomial per value of
  ``|D_j|``: no Monte Carlo, the same file always gives the same p). With one seed this *is* the
  exact McNemar test. It was chosen over a stratified McNemar / Cochran-Mantel-Haenszel test over
  seeds because those treat every seed-sentence pair as independent evidence, while the seeds are
  judged on the *same* sentences: a hard sentence that the lever gets right in all three seeds is
  one piece of evidence, not three. Summing over seeds within a sentence first keeps that
  dependence (three seeds flipping the same 5 sentences give p = 0.0625, not CMH's 6e-5). The
  difference is ``T / (k n)`` (the mean over seeds of the accuracy difference); its interval is
  the normal one from the per-sentence variance of ``D_j / k`` (n in the thousands), and the
  smallest effect detectable with 80% power at the 5% level is
  ``(z_0.975 + z_0.8) * sqrt(sum_j D_j^2) / (k n)``: the null standard error of the test, which
  is set by the observed discordance (with one seed, ``compress.core.stats.detectable_drop``).
  This test conditions on the trained models: it says whether *these* k lever models beat
  *these* k baseline models on sentences like these, not whether a new seed would.
- **The seed-level paired t-test (seeds as the random units).** One accuracy difference per seed
  pair, Student's t with ``k - 1`` degrees of freedom: it carries the training noise (seed to seed
  spread) that the pooled test leaves out, with little power at k = 3 (t_0.975 = 4.30 at 2
  degrees of freedom). Its smallest detectable effect solves the noncentral-t power equation for
  80% at the observed spread.

The decision (:func:`decide`) rests on the pooled interval, checked by the seeds: *better* or
*worse* when the pooled interval excludes zero and every seed pair's difference has that sign;
*seeds disagree* when the interval excludes zero but some seed pair's difference does not share its sign (the
training noise may be larger than the pooled test assumes: add seeds); else *no detectable
difference*, with the effect the protocol could have seen.

A study script, not a feature: it lives in ``tools/studies`` (not installed) and runs from a checkout.
Produced: docs/protocol.md, the verdict columns of "Decide a lever" (through ``tools.studies.compare
--protocol``), and the "pooled 3-seed protocol" tables of docs/ablation.md.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np

from compress.core.stats import _micro_f1
from compress.core.errors import CompressError

DEFAULT_CONFIDENCE = 0.95
DEFAULT_POWER = 0.8
#: The issue's protocol: fewer seeds give the seed-level test too few degrees of freedom to check anything.
MIN_SEEDS = 3


@dataclass(frozen=True)
class PooledTest:
    """The sentence-level paired permutation test over all seed-sentence pairs."""

    seeds: int
    sentences: int
    difference: float  # mean over seeds of accuracy(lever) - accuracy(baseline)
    low: float
    high: float
    p_value: float  # exact, two-sided
    detectable: float  # smallest true |difference| found with `power` at level 1 - confidence
    only_lever: int  # seed-sentence pairs where only the lever is right
    only_baseline: int  # ... only the baseline
    confidence: float
    power: float
    method: str


@dataclass(frozen=True)
class SeedTest:
    """The seed-level paired t-test: one accuracy difference per seed pair."""

    differences: tuple[float, ...]
    mean: float
    low: float
    high: float
    p_value: float
    detectable: float
    df: int
    confidence: float
    power: float
    method: str


@dataclass(frozen=True)
class Decision:
    """Both tests and what they decide together."""

    pooled: PooledTest
    seeds: SeedTest | None
    verdict: str  # "better", "worse", "seeds disagree", "no detectable difference"
    summary: str

    def as_dict(self) -> dict:
        return asdict(self)


def _z(confidence: float, power: float) -> tuple[float, float]:
    if not 0.5 <= confidence < 1 or not 0 < power < 1:
        raise ValueError(f"confidence must be in [0.5, 1) and power in (0, 1); got {confidence}, {power}")
    inv = NormalDist().inv_cdf
    return inv(1 - (1 - confidence) / 2), inv(power)


def _paired(lever_correct: np.ndarray, baseline_correct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lever = np.atleast_2d(np.asarray(lever_correct, dtype=bool))
    base = np.atleast_2d(np.asarray(baseline_correct, dtype=bool))
    if lever.shape != base.shape:
        raise ValueError(f"lever and baseline are not paired: {lever.shape} and {base.shape} (seeds, sentences)")
    if lever.shape[1] == 0:
        raise ValueError("no sentences")
    return lever, base


def sign_flip_null(abs_values: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(support, pmf)`` of ``sum_j s_j a_j`` over independent fair signs ``s_j``, for integers ``a_j >= 0``.

    Exact: the ``m_v`` values equal to ``v`` contribute ``v * (2 B - m_v)`` with ``B ~ Binomial(m_v, 1/2)``;
    the distributions for different ``v`` are convolved.
    """
    from scipy.stats import binom

    a = np.asarray(abs_values, dtype=np.int64)
    a = a[a != 0]
    total = int(a.sum())
    pmf = np.zeros(2 * total + 1)
    pmf[total] = 1.0  # index = value + total
    for v, m in zip(*np.unique(a, return_counts=True)):
        part = np.zeros(2 * int(v) * int(m) + 1)
        part[:: 2 * int(v)] = binom.pmf(np.arange(m + 1), m, 0.5)  # values v*(2b - m), b = 0..m
        pmf = np.convolve(pmf, part)[int(v) * int(m): int(v) * int(m) + 2 * total + 1]
    return np.arange(-total, total + 1), pmf


def pooled_test(lever_correct: np.ndarray, baseline_correct: np.ndarray, confidence: float = DEFAULT_CONFIDENCE,
                power: float = DEFAULT_POWER) -> PooledTest:
    """The pooled sentence-level paired test of ``(seeds, sentences)`` correctness arrays (see the module doc)."""
    z_conf, z_pow = _z(confidence, power)
    lever, base = _paired(lever_correct, baseline_correct)
    k, n = lever.shape
    d = (lever.astype(np.int64) - base.astype(np.int64)).sum(axis=0)  # D_j, in [-k, k]
    t_obs = int(d.sum())
    if not d.any():
        p = 1.0
    else:
        support, pmf = sign_flip_null(np.abs(d))
        p = float(min(1.0, pmf[np.abs(support) >= abs(t_obs)].sum()))
    per_sentence = d / k
    difference = float(per_sentence.mean())
    se = float(per_sentence.std(ddof=1)) / math.sqrt(n) if n > 1 else 0.0
    detectable = (z_conf + z_pow) * math.sqrt(float((d.astype(float) ** 2).sum())) / (k * n)
    return PooledTest(k, n, difference, difference - z_conf * se, difference + z_conf * se, p, detectable,
                      int((lever & ~base).sum()), int((~lever & base).sum()), confidence, power,
                      f"paired sign-flip permutation over {n} sentences of the difference summed over {k} seed(s) "
                      "(exact); normal interval from the per-sentence variance")


def seed_power(effect: float, sd: float, seeds: int, confidence: float = DEFAULT_CONFIDENCE) -> float:
    """Power of the two-sided paired t-test on ``seeds`` differences of spread ``sd`` at a true mean ``effect``."""
    from scipy.stats import nct
    from scipy.stats import t as student_t

    df = seeds - 1
    crit = float(student_t.ppf(1 - (1 - confidence) / 2, df))
    shift = effect / (sd / math.sqrt(seeds))
    return float(nct.sf(crit, df, shift) + nct.cdf(-crit, df, shift))


def _seed_t(diffs: np.ndarray, mean: float, sd: float, confidence: float, power: float, unit: str) -> SeedTest:
    """The paired t-test over seed pairs of per-seed differences ``diffs`` (their mean and spread given, so a
    caller can compute them exactly from integers)."""
    from scipy.optimize import brentq
    from scipy.stats import t as student_t

    _z(confidence, power)
    k = len(diffs)
    if k < 2:
        raise ValueError("a seed-level t-test needs at least two seed pairs")
    df = k - 1
    crit = float(student_t.ppf(1 - (1 - confidence) / 2, df))
    method = f"paired t-test over {k} seed pairs of the {unit} difference, {df} degrees of freedom"
    if sd == 0:  # every pair differs by the same amount: t is infinite (or 0/0 when that amount is 0)
        return SeedTest(tuple(map(float, diffs)), mean, mean, mean, 1.0 if mean == 0 else 0.0, 0.0, df, confidence,
                        power, method + " (no spread between seeds: the test cannot weigh training noise)")
    se = sd / math.sqrt(k)
    p = float(2 * student_t.sf(abs(mean) / se, df))
    high = (crit + 2.0) * se  # the normal approximation's answer is below this; widen until power is reached
    while seed_power(high, sd, k, confidence) < power:
        high *= 2
    detectable = float(brentq(lambda e: seed_power(e, sd, k, confidence) - power, 0.0, high))
    return SeedTest(tuple(map(float, diffs)), mean, mean - crit * se, mean + crit * se, p, detectable, df,
                    confidence, power, method)


def seed_test(lever_correct: np.ndarray, baseline_correct: np.ndarray, confidence: float = DEFAULT_CONFIDENCE,
              power: float = DEFAULT_POWER) -> SeedTest:
    """The paired t-test over seed pairs of the per-seed accuracy differences (two seeds at least)."""
    lever, base = _paired(lever_correct, baseline_correct)
    n = lever.shape[1]
    gains = lever.sum(axis=1).astype(np.int64) - base.sum(axis=1)  # in sentences: equal gains give sd exactly 0
    return _seed_t(gains / n, float(gains.mean()) / n, float(gains.std(ddof=1)) / n, confidence, power, "accuracy")


# ----------------------------------------------------------------------------- entity F1 (taggers)


def _paired_counts(lever_counts: np.ndarray, baseline_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both ``(seeds, sentences, 3)``; counts kept per type, ``(seeds, sentences, types, 3)``, are summed over
    the types, as micro F1 does."""
    lever, base = (np.asarray(c, dtype=np.int64) for c in (lever_counts, baseline_counts))
    lever, base = (c.sum(axis=2) if c.ndim == 4 else c for c in (lever, base))
    if lever.ndim != 3 or lever.shape[2] != 3 or lever.shape != base.shape:
        raise ValueError(f"lever and baseline entity counts are not paired (seeds, sentences, 3): {lever.shape} and "
                         f"{base.shape}")
    if lever.shape[1] == 0:
        raise ValueError("no sentences")
    return lever, base


def _f1_difference(lever: np.ndarray, base: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Mean over seeds of ``F1(lever_i) - F1(base_i)`` with sentence ``weights`` (``(draws, sentences)``)."""
    return np.mean([_micro_f1(weights @ lever[i]) - _micro_f1(weights @ base[i]) for i in range(len(lever))], axis=0)


def f1_pooled_test(lever_counts: np.ndarray, baseline_counts: np.ndarray, confidence: float = DEFAULT_CONFIDENCE,
                   power: float = DEFAULT_POWER, resamples: int = 10000, seed: int = 20240515) -> PooledTest:
    """:func:`pooled_test` for entity F1: ``(seeds, sentences, 3)`` ``(correct, predicted, gold)`` entity counts.

    F1 is a ratio of sums, not a mean over sentences, so the exact sign-flip distribution does not apply; the
    same test is run by Monte Carlo. Under the null, swapping which model is called the lever on a sentence
    (for every seed at once, keeping the seeds' shared sentences one unit) changes nothing; the p-value is the
    share of ``resamples`` random swaps whose mean-over-seeds F1 difference is at least as large as the one
    observed (counted with the observation, so it is never 0). The interval is a paired bootstrap over
    sentences (each resample carries every seed's counts of a sentence, for both models), and the smallest
    detectable effect is ``(z_0.975 + z_0.8)`` times the null distribution's standard deviation.
    """
    z_conf, z_pow = _z(confidence, power)
    lever, base = _paired_counts(lever_counts, baseline_counts)
    k, n, _ = lever.shape
    ones = np.ones((1, n))
    difference = float(_f1_difference(lever, base, ones)[0])
    rng = np.random.default_rng(seed)
    swap = rng.integers(0, 2, size=(resamples, n)).astype(float)
    # per seed: the lever's sums with the swapped sentences' counts exchanged, and the baseline's the other way
    null = np.mean([_micro_f1(lever[i].sum(axis=0) + swap @ (base[i] - lever[i]))
                    - _micro_f1(base[i].sum(axis=0) + swap @ (lever[i] - base[i])) for i in range(k)], axis=0)
    p = float((1 + np.sum(np.abs(null) >= abs(difference) - 1e-12)) / (resamples + 1))
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=resamples).astype(float)
    draws = _f1_difference(lever, base, weights)
    alpha = (1 - confidence) / 2
    low, high = (float(x) for x in np.quantile(draws, [alpha, 1 - alpha]))
    errors = lambda c: c[..., 1] + c[..., 2] - 2 * c[..., 0]  # spurious plus missed entities  # noqa: E731
    return PooledTest(k, n, difference, low, high, p, (z_conf + z_pow) * float(null.std(ddof=1)),
                      int((errors(lever) < errors(base)).sum()), int((errors(lever) > errors(base)).sum()),
                      confidence, power,
                      f"paired swap permutation over {n} sentences, all {k} seed(s) swapped together ({resamples:,} "
                      "Monte Carlo draws); paired bootstrap interval over sentences; entity micro F1, mean over seeds; "
                      "only_lever / only_baseline: seed-sentence pairs with fewer / more spurious plus missed entities")


def f1_seed_test(lever_counts: np.ndarray, baseline_counts: np.ndarray, confidence: float = DEFAULT_CONFIDENCE,
                 power: float = DEFAULT_POWER) -> SeedTest:
    """:func:`seed_test` for entity F1: one F1 difference per seed pair over all the sentences."""
    lever, base = _paired_counts(lever_counts, baseline_counts)
    diffs = _micro_f1(lever.sum(axis=1)) - _micro_f1(base.sum(axis=1))
    return _seed_t(diffs, float(diffs.mean()), float(diffs.std(ddof=1)), confidence, power, "entity F1")


def decide(lever_correct: np.ndarray, baseline_correct: np.ndarray, confidence: float = DEFAULT_CONFIDENCE,
           power: float = DEFAULT_POWER) -> Decision:
    """Both tests and the verdict (see the module docstring for the rule)."""
    pooled = pooled_test(lever_correct, baseline_correct, confidence, power)
    seeds = seed_test(lever_correct, baseline_correct, confidence, power) if pooled.seeds >= 2 else None
    return verdict_of(pooled, seeds, power)


def decide_f1(lever_counts: np.ndarray, baseline_counts: np.ndarray, confidence: float = DEFAULT_CONFIDENCE,
              power: float = DEFAULT_POWER) -> Decision:
    """:func:`decide` for taggers, on entity F1 (:func:`f1_pooled_test` and :func:`f1_seed_test`)."""
    pooled = f1_pooled_test(lever_counts, baseline_counts, confidence, power)
    seeds = f1_seed_test(lever_counts, baseline_counts, confidence, power) if pooled.seeds >= 2 else None
    return verdict_of(pooled, seeds, power)


def verdict_of(pooled: PooledTest, seeds: SeedTest | None, power: float = DEFAULT_POWER) -> Decision:
    """The rule of the module docstring, from the pooled test and the seed-level test."""
    pts = 100
    what = (f"{pts * pooled.difference:+.2f} points [{pts * pooled.low:+.2f}, {pts * pooled.high:+.2f}] over "
            f"{pooled.seeds} seed(s) x {pooled.sentences} sentences (p = {pooled.p_value:.2g})")
    signs = np.sign(seeds.differences) if seeds is not None else np.sign([pooled.difference])
    if pooled.low > 0 or pooled.high < 0:
        direction = 1 if pooled.low > 0 else -1
        if np.all(signs == direction):
            verdict = "better" if direction > 0 else "worse"
            summary = f"the lever is {verdict}: {what}"
        else:
            verdict = "seeds disagree"
            odd = ", ".join(str(i) for i in np.flatnonzero(signs != direction))
            summary = (f"pooled {what}, but seed pair(s) {odd} do not share its sign: the training noise may be "
                       "larger than the pooled test assumes; add seeds")
    else:
        verdict = "no detectable difference"
        summary = (f"no detectable difference: {what}; this protocol detects a true difference of "
                   f"{pts * pooled.detectable:.2f} points with {100 * power:.0f}% power")
    return Decision(pooled, seeds, verdict, summary)


def require_seeds(name: str, lever_seeds: int, baseline: str, baseline_seeds: int, minimum: int = MIN_SEEDS) -> None:
    """Refuse a comparison the protocol cannot make, saying what to give instead."""
    if lever_seeds != baseline_seeds:
        raise CompressError(f"--protocol: {name} has {lever_seeds} seed(s) and the baseline {baseline} has "
                            f"{baseline_seeds}; the protocol pairs seed i with seed i. Give both as NAME=DIR,DIR,DIR "
                            "with the same number of seeds, in seed order.")
    if lever_seeds < minimum:
        raise CompressError(f"--protocol: {name} has {lever_seeds} seed(s); the protocol needs at least {minimum} "
                            f"seeds of the lever and of the baseline (NAME=DIR,DIR,DIR).")
