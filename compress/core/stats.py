"""Confidence intervals the gate decides on: speedups over paired rounds, paired accuracy differences.

A gate that compares one measured number with a limit passes or fails on noise whenever the number
sits near the limit. Every statistical rule therefore gets an interval at a stated confidence
(95% by default) and three outcomes: *pass* when the whole interval is on the good side of the
limit, *fail* when the whole interval is on the bad side, *inconclusive* when it straddles the
limit (more rounds or more examples would decide).

Why these intervals:

- **Speedups: a circular block bootstrap over the paired rounds** (circular blocks). Each round
  gives one ratio ``reference_time / artifact_time``; the estimate is the median of those ratios
  (what ``bench`` always reported). Rounds are not independent: a machine that is slow for a few
  seconds slows a run of consecutive rounds, and on these shared machines the step time drifts
  ~25% within an hour. An i.i.d. bootstrap would treat correlated neighbours as fresh evidence and
  give too narrow an interval (too many false alarms); resampling whole blocks of consecutive
  rounds keeps that dependence. The block length is chosen from the data (Politis and White's
  automatic rule, see :func:`block_length`), so a drifting run gets longer blocks, hence a wider,
  honest interval. The bootstrap is seeded: the same file always gives the same verdict.
- **Accuracy differences: a paired bootstrap over examples.** Two models scored on the same
  sentences differ only where exactly one of them is right; resampling examples (as the 2x2 table
  of both-right / only-reference / only-artifact / neither counts, a multinomial draw) keeps that
  pairing, which is far tighter than two separate intervals. Examples are exchangeable, so no
  blocks are needed. The exact McNemar p-value (``benchmarks.accuracy.mcnemar_p``) is reported
  beside it.
- **Agreement: Clopper-Pearson**, the exact binomial interval (never narrower than it should be,
  also at 100% agreement where normal approximations collapse).
- **Several seeds of one recipe:** the mean over seeds, with a standard error that adds the
  between-seed spread to the test-set sampling error (variance components, Welch-Satterthwaite
  degrees of freedom, Student t). It is conservative: the between-seed spread already contains
  part of the test-set noise.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

DEFAULT_CONFIDENCE = 0.95
#: Bootstrap replicates: the Monte Carlo error of a 95% percentile bound is then well under the
#: interval's own width (about 0.5% of it at 4,000).
RESAMPLES = 4000
#: Fixed seed: the gate is a pure function of its input files.
SEED = 20240515


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided interval at ``confidence``, and how it was obtained."""

    estimate: float
    low: float
    high: float
    confidence: float
    method: str

    def text(self, fmt: str = "{:.4g}", scale: float = 1.0, suffix: str = "") -> str:
        """``[low, high]suffix (95%)`` with both bounds formatted by ``fmt`` after multiplying by ``scale``."""
        return f"[{fmt.format(scale * self.low)}, {fmt.format(scale * self.high)}]{suffix} ({100 * self.confidence:g}%)"

    def as_dict(self) -> dict:
        return asdict(self)

    def verdict(self, limit: float, higher_is_better: bool, eps: float = 1e-9) -> str:
        """``pass`` when the whole interval is on the good side of ``limit``, ``fail`` when it is all on the
        bad side, else ``inconclusive``. A bound exactly on the limit counts as on the good side."""
        if higher_is_better:
            if self.low >= limit - eps:
                return "pass"
            return "fail" if self.high < limit - eps else "inconclusive"
        if self.high <= limit + eps:
            return "pass"
        return "fail" if self.low > limit + eps else "inconclusive"


def _check_confidence(confidence: float) -> None:
    if not 0.5 <= confidence < 1:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")


def percentile_interval(estimate: float, replicates: np.ndarray, confidence: float, method: str) -> Interval:
    """The percentile bootstrap interval of ``replicates`` around ``estimate``."""
    _check_confidence(confidence)
    alpha = 1 - confidence
    low, high = np.quantile(np.asarray(replicates, dtype=float), [alpha / 2, 1 - alpha / 2])
    return Interval(float(estimate), float(low), float(high), confidence, method)


# ----------------------------------------------------------------------------- block bootstrap over rounds


def block_length(values: Sequence[float]) -> int:
    """Block length for a circular block bootstrap of ``values`` (a time series of rounds).

    Politis and White's (2004) automatic choice, with the correction of Patton, Politis and White
    (2009), for the circular block bootstrap: it estimates how far the autocorrelation reaches
    (the first lag after which ``K`` consecutive sample autocorrelations are all within
    ``2 sqrt(log10(n) / n)``), and balances the bootstrap's bias against its variance from the
    autocovariances up to twice that lag (flat-top window). Independent rounds get short blocks,
    drifting rounds long ones. The result is kept between ``ceil(n^(1/3))`` (timings always have
    some short-range dependence that a short series cannot show) and ``n/5`` (a resample still
    mixes at least five blocks).
    """
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 2:
        return 1
    floor, cap = math.ceil(n ** (1 / 3)), max(1, n // 5)
    x = x - x.mean()
    var = float(x @ x) / n
    if var == 0 or n < 10:
        return int(min(floor, cap))
    k_n = max(5, math.ceil(math.sqrt(math.log10(n))))
    max_lag = min(n - 1, math.ceil(math.sqrt(n)) + k_n + cap)
    acov = np.array([var] + [float(x[:-k] @ x[k:]) / n for k in range(1, max_lag + 1)])
    band = 2 * math.sqrt(math.log10(n) / n)
    insignificant = np.abs(acov[1:] / var) < band
    m_hat = next((m for m in range(0, max_lag - k_n + 1) if insignificant[m:m + k_n].all()), max_lag - k_n)
    big_m = min(2 * max(m_hat, 1), max_lag)
    lags = np.arange(1, big_m + 1)
    t = lags / big_m
    weight = np.where(t <= 0.5, 1.0, 2 * (1 - t))
    g0 = var + 2 * float(np.sum(weight * acov[1:big_m + 1]))
    g = 2 * float(np.sum(weight * lags * acov[1:big_m + 1]))
    if g0 <= 0:
        return int(min(floor, cap))
    optimal = (2 * g * g / ((4 / 3) * g0 * g0)) ** (1 / 3) * n ** (1 / 3)
    return int(min(max(floor, math.ceil(optimal)), cap))


def block_bootstrap_indices(n: int, block: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """``(resamples, n)`` indices: each row strings together circular blocks of ``block`` consecutive rounds
    starting at uniformly drawn positions, cut to ``n``."""
    if n < 1:
        raise ValueError("block bootstrap of no rounds")
    block = max(1, min(block, n))
    rng = np.random.default_rng(seed)
    blocks = math.ceil(n / block)
    starts = rng.integers(0, n, size=(resamples, blocks))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]) % n
    return idx.reshape(resamples, blocks * block)[:, :n]


def _paired_ratios(reference_ns: Sequence[float], artifact_ns: Sequence[float]) -> np.ndarray:
    ref = np.asarray(reference_ns, dtype=float)
    art = np.maximum(np.asarray(artifact_ns, dtype=float), 1.0)
    if ref.shape != art.shape:
        raise ValueError(f"paired rounds differ in number: {ref.shape[0]} reference, {art.shape[0]} artifact")
    if ref.size == 0:
        raise ValueError("no rounds")
    return ref / art


def speedup_replicates(reference_ns: Sequence[float], artifact_ns: Sequence[float], resamples: int = RESAMPLES,
                       seed: int = SEED) -> tuple[float, np.ndarray, int]:
    """Median per-round speedup, its block-bootstrap replicates, and the block length used."""
    ratios = _paired_ratios(reference_ns, artifact_ns)
    block = block_length(np.log(ratios))
    idx = block_bootstrap_indices(len(ratios), block, resamples, seed)
    return float(np.median(ratios)), np.median(ratios[idx], axis=1), block


def speedup_interval(reference_ns: Sequence[float], artifact_ns: Sequence[float],
                     confidence: float = DEFAULT_CONFIDENCE, resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """Interval of the median paired speedup ``median_i(reference_i / artifact_i)`` (circular block bootstrap)."""
    estimate, reps, block = speedup_replicates(reference_ns, artifact_ns, resamples, seed)
    return percentile_interval(estimate, reps, confidence,
                               f"circular block bootstrap over {len(reference_ns)} paired rounds, block {block}")


def ratio_of_independent(new: tuple[float, np.ndarray], old: tuple[float, np.ndarray], confidence: float,
                         method: str) -> Interval:
    """Interval of ``new / old`` from the bootstrap replicates of two independent runs (paired by replicate index,
    which draws from the product of the two bootstrap distributions)."""
    est = new[0] / old[0]
    reps = np.asarray(new[1], dtype=float) / np.asarray(old[1], dtype=float)
    return percentile_interval(est, reps, confidence, method)


def series_median_interval(times_ns: Sequence[float], confidence: float = DEFAULT_CONFIDENCE,
                           resamples: int = RESAMPLES, seed: int = SEED, scale: float = 1e-6) -> Interval:
    """Interval of the median of a time series of call times (circular block bootstrap), times ``scale`` (ns -> ms)."""
    x = np.asarray(times_ns, dtype=float) * scale
    block = block_length(x)
    reps = np.median(x[block_bootstrap_indices(len(x), block, resamples, seed)], axis=1)
    return percentile_interval(float(np.median(x)), reps, confidence,
                               f"circular block bootstrap over {len(x)} rounds, block {block}")


def throughput_interval(times_ns: Sequence[float], batch_size: int, confidence: float = DEFAULT_CONFIDENCE,
                        resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """Interval of ``batch_size / mean call time`` in sequences per second (circular block bootstrap)."""
    x = np.asarray(times_ns, dtype=float) / 1e9
    block = block_length(x)
    reps = batch_size / x[block_bootstrap_indices(len(x), block, resamples, seed)].mean(axis=1)
    return percentile_interval(batch_size / float(x.mean()), reps, confidence,
                               f"circular block bootstrap over {len(x)} rounds, block {block}")


# ----------------------------------------------------------------------------- paired accuracy


def paired_table(correct_a: Sequence[bool], correct_b: Sequence[bool]) -> np.ndarray:
    """Counts ``[both right, only a right, only b right, neither]`` of two models on the same examples."""
    a = np.asarray(correct_a, dtype=bool)
    b = np.asarray(correct_b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"paired examples differ in number: {a.shape[0]} and {b.shape[0]}")
    return np.array([np.sum(a & b), np.sum(a & ~b), np.sum(~a & b), np.sum(~a & ~b)], dtype=np.int64)


def relative_to(drop: np.ndarray, base: np.ndarray) -> np.ndarray:
    """``drop / base`` element-wise, 0 where ``base`` is 0 (a reference that got nothing right has lost
    nothing), without numpy's division warning."""
    has_base = base > 0
    return np.where(has_base, drop / np.where(has_base, base, 1.0), 0.0)


def accuracy_drop_interval(correct_reference: Sequence[bool], correct_artifact: Sequence[bool],
                           confidence: float = DEFAULT_CONFIDENCE, relative: bool = False,
                           resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """Interval of ``accuracy(reference) - accuracy(artifact)`` on the same examples (paired bootstrap).

    ``relative=True``: of that drop divided by the reference's accuracy. Resampling the 2x2 table as
    one multinomial draw per replicate is the paired bootstrap over examples, done in closed form.
    """
    table = paired_table(correct_reference, correct_artifact)
    n = int(table.sum())
    if n == 0:
        raise ValueError("no examples")
    draws = np.random.default_rng(seed).multinomial(n, table / n, size=resamples)

    def stat(t: np.ndarray) -> np.ndarray:
        t = np.atleast_2d(t).astype(float)
        drop = (t[:, 1] - t[:, 2]) / n
        if not relative:
            return drop
        ref_acc = (t[:, 0] + t[:, 1]) / n
        return relative_to(drop, ref_acc)

    what = "relative accuracy drop" if relative else "accuracy drop"
    return percentile_interval(float(stat(table)[0]), stat(draws), confidence,
                               f"paired bootstrap over {n} examples ({what})")


def _micro_f1(counts: np.ndarray) -> np.ndarray:
    """Micro F1 ``2c / (p + g)`` of summed ``(correct, predicted, gold)`` counts (last axis; 0 for 0/0).

    Equal to seqeval's ``2PR / (P + R)`` with ``P = c/p`` and ``R = c/g``, which simplifies to it."""
    c, total = counts[..., 0].astype(float), (counts[..., 1] + counts[..., 2]).astype(float)
    has = total > 0
    return np.where(has, 2.0 * c / np.where(has, total, 1.0), 0.0)


def _sentence_totals(counts: Sequence) -> np.ndarray:
    """``(sentences, 3)`` entity counts summed over the types of :func:`compress.tasks.token_classification.metrics.sentence_counts`."""
    a = np.asarray(counts, dtype=np.int64)
    if a.ndim == 3:
        a = a.sum(axis=1)
    if a.ndim != 2 or a.shape[1] != 3:
        raise ValueError(f"entity counts should be (sentences, types, 3) or (sentences, 3), got shape {a.shape}")
    return a


def f1_interval(counts: Sequence, confidence: float = DEFAULT_CONFIDENCE, resamples: int = RESAMPLES,
                seed: int = SEED) -> Interval:
    """Entity micro F1 with a bootstrap over sentences (a sentence's entities are resampled together)."""
    totals = _sentence_totals(counts)
    n = len(totals)
    if n == 0:
        raise ValueError("no sentences")
    weights = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=resamples)
    return percentile_interval(float(_micro_f1(totals.sum(axis=0))), _micro_f1(weights @ totals), confidence,
                               f"bootstrap over {n} sentences (entity F1)")


def f1_drop_interval(reference_counts: Sequence, artifact_counts: Sequence, confidence: float = DEFAULT_CONFIDENCE,
                     resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """Interval of ``F1(reference) - F1(artifact)`` on the same sentences: a paired bootstrap that resamples
    sentences, each with both models' entity counts (what the F1 gate rules are decided on)."""
    ref, art = _sentence_totals(reference_counts), _sentence_totals(artifact_counts)
    if len(ref) != len(art):
        raise ValueError(f"{len(ref)} reference sentences but {len(art)} artifact sentences: not paired")
    n = len(ref)
    if n == 0:
        raise ValueError("no sentences")
    weights = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=resamples)
    estimate = float(_micro_f1(ref.sum(axis=0)) - _micro_f1(art.sum(axis=0)))
    return percentile_interval(estimate, _micro_f1(weights @ ref) - _micro_f1(weights @ art), confidence,
                               f"paired bootstrap over {n} sentences (entity F1 drop)")


def type_f1_drop_intervals(types: Sequence[str], reference_counts: Sequence, artifact_counts: Sequence,
                           confidence: float = DEFAULT_CONFIDENCE, resamples: int = RESAMPLES,
                           seed: int = SEED) -> dict[str, Interval]:
    """Per entity type, the interval of ``F1(reference) - F1(artifact)`` on the same sentences.

    The paired bootstrap of :func:`f1_drop_interval`, one type at a time: each replicate resamples whole
    sentences (with both models' ``(correct, predicted, gold)`` counts of every type), so the types of one
    replicate share its sentences. A rare type's F1 moves by several points with one entity; this interval
    says whether a per-type loss is more than that noise (its lower bound above zero)."""
    ref, art = np.asarray(reference_counts, dtype=np.int64), np.asarray(artifact_counts, dtype=np.int64)
    if ref.shape != art.shape or ref.ndim != 3 or ref.shape[1:] != (len(types), 3):
        raise ValueError(f"per-type counts should both be (sentences, {len(types)} types, 3); got {ref.shape} and "
                         f"{art.shape}")
    n = len(ref)
    if n == 0:
        raise ValueError("no sentences")
    weights = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=resamples)
    flat = (n, len(types) * 3)
    drops = (_micro_f1((weights @ ref.reshape(flat)).reshape(resamples, len(types), 3))
             - _micro_f1((weights @ art.reshape(flat)).reshape(resamples, len(types), 3)))
    estimates = _micro_f1(ref.sum(axis=0)) - _micro_f1(art.sum(axis=0))
    return {t: percentile_interval(float(estimates[i]), drops[:, i], confidence,
                                   f"paired bootstrap over {n} sentences ({t} F1 drop)")
            for i, t in enumerate(types)}


def unpaired_f1_drop_interval(old_counts: Sequence, new_counts: Sequence, confidence: float = DEFAULT_CONFIDENCE,
                              resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """``F1(old) - F1(new)`` when the sentences differ: two independent bootstraps over sentences."""
    old, new = _sentence_totals(old_counts), _sentence_totals(new_counts)
    if not len(old) or not len(new):
        raise ValueError("no sentences")
    rng = np.random.default_rng(seed)
    w_old = rng.multinomial(len(old), np.full(len(old), 1.0 / len(old)), size=resamples)
    w_new = rng.multinomial(len(new), np.full(len(new), 1.0 / len(new)), size=resamples)
    estimate = float(_micro_f1(old.sum(axis=0)) - _micro_f1(new.sum(axis=0)))
    return percentile_interval(estimate, _micro_f1(w_old @ old) - _micro_f1(w_new @ new), confidence,
                               f"two independent bootstraps over {len(old)} and {len(new)} sentences (entity F1 drop)")


def _scores(values: Sequence[float], what: str) -> np.ndarray:
    a = np.asarray(values, dtype=float).reshape(-1)
    if len(a) == 0:
        raise ValueError(f"no {what}")
    return a


def mean_interval(values: Sequence[float], confidence: float = DEFAULT_CONFIDENCE, resamples: int = RESAMPLES,
                  seed: int = SEED, unit: str = "questions") -> Interval:
    """The mean of per-example scores in [0, 1] (a reader's per-question F1) with a bootstrap over the examples."""
    a = _scores(values, unit)
    weights = np.random.default_rng(seed).multinomial(len(a), np.full(len(a), 1.0 / len(a)), size=resamples)
    return percentile_interval(float(a.mean()), weights @ a / len(a), confidence,
                               f"bootstrap over {len(a)} {unit} (mean score)")


def mean_drop_interval(reference: Sequence[float], artifact: Sequence[float], confidence: float = DEFAULT_CONFIDENCE,
                       resamples: int = RESAMPLES, seed: int = SEED, unit: str = "questions") -> Interval:
    """Interval of ``mean(reference) - mean(artifact)`` of per-example scores on the same examples (a reader's
    F1 or exact match per question): a paired bootstrap, each resampled question carrying both models' scores."""
    ref, art = _scores(reference, unit), _scores(artifact, unit)
    if len(ref) != len(art):
        raise ValueError(f"{len(ref)} reference {unit} but {len(art)} artifact {unit}: not paired")
    diff = ref - art
    weights = np.random.default_rng(seed).multinomial(len(diff), np.full(len(diff), 1.0 / len(diff)), size=resamples)
    return percentile_interval(float(diff.mean()), weights @ diff / len(diff), confidence,
                               f"paired bootstrap over {len(diff)} {unit} (F1 drop)")


def unpaired_mean_drop_interval(old: Sequence[float], new: Sequence[float], confidence: float = DEFAULT_CONFIDENCE,
                                resamples: int = RESAMPLES, seed: int = SEED, unit: str = "questions") -> Interval:
    """``mean(old) - mean(new)`` of per-example scores when the examples differ: two independent bootstraps."""
    a, b = _scores(old, unit), _scores(new, unit)
    rng = np.random.default_rng(seed)
    w_a = rng.multinomial(len(a), np.full(len(a), 1.0 / len(a)), size=resamples)
    w_b = rng.multinomial(len(b), np.full(len(b), 1.0 / len(b)), size=resamples)
    return percentile_interval(float(a.mean() - b.mean()), w_a @ a / len(a) - w_b @ b / len(b), confidence,
                               f"two independent bootstraps over {len(a)} and {len(b)} {unit} (F1 drop)")


def ratio_interval(counts: Sequence, confidence: float = DEFAULT_CONFIDENCE, resamples: int = RESAMPLES,
                   seed: int = SEED) -> Interval:
    """``sum(hits) / sum(totals)`` of per-sentence ``(hits, total)`` pairs (words tagged as the reference
    tagged them), bootstrapped over sentences: a sentence's words are not independent of one another."""
    a = np.asarray(counts, dtype=np.int64).reshape(-1, 2)
    n = len(a)
    if n == 0 or a[:, 1].sum() == 0:
        raise ValueError("no words")
    weights = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=resamples)
    sums = weights @ a
    reps = relative_to(sums[:, 0].astype(float), sums[:, 1].astype(float))
    return percentile_interval(float(a[:, 0].sum() / a[:, 1].sum()), reps, confidence,
                               f"bootstrap over {n} sentences (share of words)")


def unpaired_accuracy_drop_interval(correct_old: Sequence[bool], correct_new: Sequence[bool],
                                    confidence: float = DEFAULT_CONFIDENCE, relative: bool = False,
                                    resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """``accuracy(old) - accuracy(new)`` (or relative to ``old``) when the examples differ: two independent
    binomial bootstraps. Much wider than the paired interval; used only when pairing is impossible."""
    old = np.asarray(correct_old, dtype=bool)
    new = np.asarray(correct_new, dtype=bool)
    rng = np.random.default_rng(seed)
    p_old = rng.binomial(len(old), old.mean(), size=resamples) / len(old)
    p_new = rng.binomial(len(new), new.mean(), size=resamples) / len(new)
    drop = p_old - p_new
    est = float(old.mean() - new.mean())
    if relative:
        drop = relative_to(drop, p_old)
        est = est / float(old.mean()) if old.mean() > 0 else 0.0
    return percentile_interval(est, drop, confidence,
                               f"independent bootstraps over {len(old)} and {len(new)} examples (not paired)")


def detectable_drop(correct_reference: Sequence[bool], correct_artifact: Sequence[bool],
                    confidence: float = DEFAULT_CONFIDENCE, power: float = 0.8) -> float:
    """The smallest true accuracy difference this paired test set detects with ``power``.

    Normal approximation of the paired difference: ``(z_(1-a/2) + z_power) * sqrt(d / n)``, where
    ``d`` is the share of examples on which the two models disagree about correctness (the
    McNemar discordant rate; at least one example's worth, so identical models give a finite size).
    """
    from statistics import NormalDist

    table = paired_table(correct_reference, correct_artifact)
    n = int(table.sum())
    discordant = max(int(table[1] + table[2]), 1) / n
    z = NormalDist().inv_cdf
    return float((z(1 - (1 - confidence) / 2) + z(power)) * math.sqrt(discordant / n))


def proportion_interval(successes: int, n: int, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """Clopper-Pearson (exact binomial) interval of ``successes / n``."""
    from scipy.stats import binomtest

    _check_confidence(confidence)
    if n < 1:
        raise ValueError("proportion of no trials")
    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=confidence, method="exact")
    return Interval(successes / n, float(ci.low), float(ci.high), confidence, f"Clopper-Pearson over {n} examples")


def mean_over_seeds_interval(per_seed: np.ndarray, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """Interval of the mean of a per-example quantity over seeds of one recipe.

    ``per_seed`` is ``(seeds, examples)``: for example ``correct_reference - correct_seed`` (its mean
    is the accuracy drop) or ``prediction_seed == prediction_reference`` (agreement). The standard
    error adds the test-set term (the variance over examples of the seed-averaged quantity, over
    ``n``) and the seed term (the variance of the per-seed means, over the number of seeds); the
    degrees of freedom follow Welch-Satterthwaite, and the interval uses Student's t.
    """
    _check_confidence(confidence)
    x = np.asarray(per_seed, dtype=float)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 2:
        raise ValueError("mean over seeds needs at least two seeds and two examples")
    seeds, n = x.shape
    estimate = float(x.mean())
    var_examples = float(x.mean(axis=0).var(ddof=1)) / n
    var_seeds = float(x.mean(axis=1).var(ddof=1)) / seeds
    return _seed_and_test_t(estimate, var_examples, n, var_seeds, seeds, confidence, f"{n} examples", "")


def _seed_and_test_t(estimate: float, var_test: float, n: int, var_seeds: float, seeds: int, confidence: float,
                     units: str, what: str, unit: str = "seed") -> Interval:
    """Student's t interval around ``estimate`` whose variance is a test-set term (``n`` units) plus a seed
    term (``seeds``; ``unit`` names what they are), degrees of freedom by Welch-Satterthwaite; a point when both
    terms are 0."""
    from scipy.stats import t as student_t

    se2 = var_test + var_seeds
    if se2 == 0:
        return Interval(estimate, estimate, estimate, confidence, f"mean over {seeds} {unit}s x {units} (no spread)")
    df = se2 ** 2 / ((var_test ** 2) / (n - 1) + (var_seeds ** 2) / (seeds - 1))
    half = float(student_t.ppf(1 - (1 - confidence) / 2, df)) * math.sqrt(se2)
    return Interval(estimate, estimate - half, estimate + half, confidence,
                    f"mean over {seeds} {unit}s x {units}{what}, {unit} and test-set variance, t with {df:.1f} df")


def _seed_mean_interval(per_seed: np.ndarray, replicates: np.ndarray, n: int, confidence: float,
                        what: str, unit: str = "seed") -> Interval:
    """Interval of a statistic's mean over seeds when the statistic is not a mean over examples (entity F1,
    a ratio of sums), :func:`mean_over_seeds_interval`'s rule with the test-set term from a bootstrap.

    ``per_seed`` holds each seed's statistic on the whole test set, ``replicates`` the seed-averaged
    statistic on each resample of the ``n`` sentences. The standard error adds the test-set term (the
    replicates' variance) and the seed term (the variance of the per-seed values over the number of
    seeds); degrees of freedom by Welch-Satterthwaite, Student's t.
    """
    _check_confidence(confidence)
    per_seed = np.asarray(per_seed, dtype=float)
    seeds = len(per_seed)
    estimate = float(per_seed.mean())
    var_test = float(np.var(replicates, ddof=1))
    var_seeds = float(per_seed.var(ddof=1)) / seeds
    return _seed_and_test_t(estimate, var_test, n, var_seeds, seeds, confidence, f"{n} sentences", f" ({what})",
                            unit)


def _paired_seed_counts(reference_counts: Sequence, seed_counts: Sequence[Sequence], resamples: int,
                        seed: int) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """The reference's and each seed's ``(sentences, 3)`` totals, checked to be paired, and the multinomial
    sentence weights of a paired bootstrap shared by all of them."""
    ref = _sentence_totals(reference_counts)
    members = [_sentence_totals(c) for c in seed_counts]
    if len(members) < 2:
        raise ValueError("a mean over seeds needs at least two seeds")
    if any(len(m) != len(ref) for m in members):
        raise ValueError(f"{len(ref)} reference sentences but seeds with {sorted({len(m) for m in members})}: not paired")
    n = len(ref)
    if n < 2:
        raise ValueError("a mean over seeds needs at least two sentences")
    return ref, members, np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=resamples)


def mean_f1_drop_over_seeds_interval(reference_counts: Sequence, seed_counts: Sequence[Sequence],
                                     confidence: float = DEFAULT_CONFIDENCE, resamples: int = RESAMPLES,
                                     seed: int = SEED) -> Interval:
    """Interval of ``F1(reference) - mean over seeds of F1(seed)`` on the same sentences: a seed group of
    taggers against the reference, the entity-F1 twin of :func:`mean_over_seeds_interval` (the test-set
    term from a paired bootstrap that resamples sentences with every model's counts)."""
    ref, members, weights = _paired_seed_counts(reference_counts, seed_counts, resamples, seed)
    per_seed = np.array([float(_micro_f1(ref.sum(axis=0)) - _micro_f1(m.sum(axis=0))) for m in members])
    replicates = _micro_f1(weights @ ref) - np.mean([_micro_f1(weights @ m) for m in members], axis=0)
    return _seed_mean_interval(per_seed, replicates, len(ref), confidence, "entity F1 drop, paired bootstrap")


def _f1_shares(ref: np.ndarray, members: list[np.ndarray], weights: np.ndarray,
               who: str) -> tuple[np.ndarray, np.ndarray]:
    """Each member's entity F1 over ``ref``'s on the whole set, and the members' mean share on each bootstrap draw
    (``weights``); refused when ``who`` (the reference) finds no entity, since a share of 0 means nothing."""
    ref_f1 = _micro_f1(ref.sum(axis=0))
    if ref_f1 == 0:
        raise ValueError(f"{who} finds no entity (F1 0): a share of it means nothing")
    per_member = np.array([float(_micro_f1(m.sum(axis=0)) / ref_f1) for m in members])
    ref_draws = _micro_f1(weights @ ref)
    return per_member, np.mean([relative_to(_micro_f1(weights @ m), ref_draws) for m in members], axis=0)


def mean_f1_share_over_seeds_interval(reference_counts: Sequence, seed_counts: Sequence[Sequence],
                                      confidence: float = DEFAULT_CONFIDENCE, resamples: int = RESAMPLES,
                                      seed: int = SEED) -> Interval:
    """Interval of the mean over seeds of ``F1(seed) / F1(reference)`` on the same sentences: how much of its
    teacher's entity F1 a seed group keeps, a target stated as a share ("keeps 95% of the teacher"). The
    teacher's F1 moves with the sentences as much as the students' do, so the bootstrap resamples both together
    (paired); the seed term is the spread of the seeds' shares, as in :func:`mean_f1_drop_over_seeds_interval`."""
    ref, members, weights = _paired_seed_counts(reference_counts, seed_counts, resamples, seed)
    per_seed, replicates = _f1_shares(ref, members, weights, "the reference")
    return _seed_mean_interval(per_seed, replicates, len(ref), confidence, "share of the reference's entity F1, "
                               "paired bootstrap")


def mean_f1_share_over_teachers_interval(groups: Sequence[tuple[Sequence, Sequence[Sequence]]],
                                         confidence: float = DEFAULT_CONFIDENCE, resamples: int = RESAMPLES,
                                         seed: int = SEED) -> Interval:
    """Interval of the mean over teachers of :func:`mean_f1_share_over_seeds_interval`'s estimate: ``groups`` holds
    ``(teacher counts, [each of its students' counts])`` per teacher, all on the same sentences.

    Why: a teacher's own test F1 is partly luck (two teachers equal on validation differed by 2.5 test points on
    WNUT-17), and a share divides by it, so one teacher's share says as much about that teacher as about the
    recipe. Pooling teachers trained alike is the recipe's reading. The test-set term comes from one bootstrap over
    the sentences shared by every teacher and student (they answer the same sentences, so their errors move
    together); the second term is the spread of the per-teacher shares over the number of teachers, which holds
    the seeds' spread too (each teacher's share is already a mean over its own students): a two-stage estimate."""
    if len(groups) < 2:
        raise ValueError("a mean over teachers needs at least two teachers")
    per_teacher, replicates, n = [], [], None
    for reference_counts, seed_counts in groups:
        ref, members, weights = _paired_seed_counts(reference_counts, seed_counts, resamples, seed)
        if n is not None and len(ref) != n:
            raise ValueError(f"teachers scored on {n} and {len(ref)} sentences: not paired")
        n = len(ref)
        shares, draws = _f1_shares(ref, members, weights, "a teacher")  # the same weights for every teacher
        per_teacher.append(float(shares.mean()))
        replicates.append(draws)
    return _seed_mean_interval(np.array(per_teacher), np.mean(replicates, axis=0), n, confidence,
                               "share of each teacher's entity F1, mean over its students, paired bootstrap",
                               unit="teacher")


def mean_ratio_over_seeds_interval(seed_counts: Sequence[Sequence], confidence: float = DEFAULT_CONFIDENCE,
                                   resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """Mean over seeds of :func:`ratio_interval`'s ``sum(hits) / sum(totals)`` (a seed group's word agreement),
    its test-set term from a bootstrap over the sentences all seeds share."""
    members = [np.asarray(c, dtype=np.int64).reshape(-1, 2) for c in seed_counts]
    if len(members) < 2:
        raise ValueError("a mean over seeds needs at least two seeds")
    n = len(members[0])
    if any(len(m) != n for m in members):
        raise ValueError("the seeds were scored on different sentences: not paired")
    if n < 2 or any(m[:, 1].sum() == 0 for m in members):
        raise ValueError("no words")
    weights = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=resamples)
    per_seed = np.array([m[:, 0].sum() / m[:, 1].sum() for m in members], dtype=float)
    replicates = np.mean([relative_to((weights @ m)[:, 0].astype(float), (weights @ m)[:, 1].astype(float))
                          for m in members], axis=0)
    return _seed_mean_interval(per_seed, replicates, n, confidence, "words, bootstrap over sentences")


# ----------------------------------------------------------------------------- history


def history_score(value: float, window: Sequence[float], floor_se: float = 0.0) -> tuple[float, float, float]:
    """``(score, mean, sd)`` of ``value`` against past ``window`` values: ``(value - mean) / sd``.

    ``sd`` is the window's sample standard deviation, but never below ``floor_se`` (the current
    run's own standard error): a metric that happened to be identical in every past run (accuracy
    of an unchanged model) would otherwise flag any change of one example as infinitely unusual.
    """
    w = np.asarray(window, dtype=float)
    if len(w) < 2:
        raise ValueError("a history window needs at least two runs")
    mean = float(w.mean())
    sd = max(float(w.std(ddof=1)), float(floor_se))
    if sd == 0:
        return (0.0 if value == mean else math.copysign(math.inf, value - mean)), mean, sd
    return (value - mean) / sd, mean, sd


def history_flagged(score: float, window_size: int, threshold: float, test: str) -> bool:
    """Whether a score (negative = worse) is outside the window's spread.

    ``z``: beyond ``threshold`` standard deviations. ``t``: the same one-sided false-alarm
    probability as ``threshold`` has under a normal distribution, but from Student's t with
    ``window - 1`` degrees of freedom on the prediction-interval scale (``sd * sqrt(1 + 1/N)``), so
    a short window, whose sd is itself uncertain, needs a larger deviation before it flags.
    """
    if test == "z":
        return score < -threshold
    if test == "t":
        from statistics import NormalDist

        from scipy.stats import t as student_t

        alpha = NormalDist().cdf(-threshold)
        scaled = score / math.sqrt(1 + 1 / window_size)
        return bool(student_t.cdf(scaled, window_size - 1) < alpha)
    raise ValueError(f"unknown history test {test!r} (z or t)")
