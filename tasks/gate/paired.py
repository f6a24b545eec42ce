"""Paired comparisons of a variant with the baseline on the same items: intervals on the relative
degradation, answer flips, McNemar's exact test, the items a paired test needs, and Holm's
correction across slices.

Pairing is what makes ~100 items usable: the item-to-item spread (hard vs easy questions) cancels
in the per-item difference, so the interval is set by how often the two models disagree, not by
how hard the items are. Sizes to expect (Miller, "Adding Error Bars to Evals", arXiv 2411.00640):
at ~100 items a paired test resolves roughly 10 points of accuracy, at ~1,000 roughly 3. Accuracy
can hold while answers flip both ways (Dutta et al., "Accuracy is Not All You Need",
arXiv 2407.09141), so flips are reported next to it.

Degradation is signed so that positive is worse: for a score (higher is better) 1 − variant /
baseline, for perplexity variant / baseline − 1. Intervals are bootstrap (BCa, resampling items
with their pairs, a fixed seed) from scipy.stats.bootstrap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Interval:
    """Relative degradation (positive = worse) and its two-sided interval at `level`."""

    estimate: float
    low: float
    high: float
    n: int
    level: float
    # One-sided p-value of "degradation <= beyond" (the budget tested against), from the bootstrap's
    # standard error (a Wald test: unlike counting resamples it resolves the small p-values that
    # Holm's correction over dozens of slices needs). 1.0 when nothing was tested.
    beyond: float = math.nan
    p_beyond: float = 1.0


@dataclass(frozen=True)
class Flips:
    """0/1 outcomes that changed: `lost` right → wrong, `gained` wrong → right, of `n` items."""

    lost: int
    gained: int
    n: int

    @property
    def share(self) -> float:
        return (self.lost + self.gained) / self.n if self.n else 0.0


def _interval(samples: tuple[np.ndarray, ...], statistic, *, level: float, resamples: int,
              seed: int, beyond: float | None) -> Interval:
    n = len(samples[0])
    estimate = float(statistic(*samples, axis=-1))
    tested = math.nan if beyond is None else beyond
    if n < 2 or np.array_equal(samples[0], samples[1]):  # same answers: nothing to resample
        p = 1.0 if beyond is None or estimate <= beyond else 0.0
        return Interval(estimate, estimate, estimate, n, level, tested, p)
    with np.errstate(divide="ignore", invalid="ignore"):
        for method in ("BCa", "percentile"):  # BCa is undefined on some degenerate resamplings
            res = stats.bootstrap(samples, statistic, paired=True, vectorized=True, n_resamples=resamples,
                                  confidence_level=level, method=method, rng=np.random.default_rng(seed))
            low, high = res.confidence_interval
            if not (math.isnan(low) or math.isnan(high)):
                break
    p = 1.0
    if beyond is not None:
        se = float(np.std(res.bootstrap_distribution, ddof=1))
        p = float(stats.norm.sf((estimate - beyond) / se)) if se > 0 else float(estimate <= beyond)
    return Interval(estimate, float(low), float(high), n, level, tested, p)


def score_degradation(baseline: Sequence[float], variant: Sequence[float], *, level: float = 0.95,
                      resamples: int = 2000, seed: int = 0, beyond: float | None = None) -> Interval:
    """1 − mean(variant) / mean(baseline) over the same items, for a higher-is-better score
    (accuracy, exact match, F1). Baseline mean 0 has no relative degradation: ValueError."""
    b, v = _pair(baseline, variant)
    if b.mean() == 0:
        raise ValueError("the baseline scores 0 on these items: no relative degradation to compute")

    def statistic(base: np.ndarray, var: np.ndarray, axis: int = -1) -> np.ndarray:
        return 1.0 - var.mean(axis=axis) / base.mean(axis=axis)

    return _interval((b, v), statistic, level=level, resamples=resamples, seed=seed, beyond=beyond)


def perplexity_degradation(baseline_nll: Sequence[float], variant_nll: Sequence[float],
                           tokens: Sequence[int], *, level: float = 0.95, resamples: int = 2000,
                           seed: int = 0, beyond: float | None = None) -> Interval:
    """variant PPL / baseline PPL − 1, from each request's summed NLL (nats) under both models over
    the same scored tokens; requests are the resampled unit (tokens within one are not independent)."""
    b, v = _pair(baseline_nll, variant_nll)
    t = np.asarray(tokens, dtype=float)
    if t.shape != b.shape or (t <= 0).any():
        raise ValueError("tokens: one positive count per request, as many as NLLs")

    def statistic(base: np.ndarray, var: np.ndarray, tok: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.expm1((var.sum(axis=axis) - base.sum(axis=axis)) / tok.sum(axis=axis))

    return _interval((b, v, t), statistic, level=level, resamples=resamples, seed=seed, beyond=beyond)


def flips(baseline: Sequence[int], variant: Sequence[int]) -> Flips:
    b, v = _pair(baseline, variant)
    if not np.isin(np.concatenate([b, v]), (0, 1)).all():
        raise ValueError("flips: outcomes must be 0 or 1")
    return Flips(int(((b == 1) & (v == 0)).sum()), int(((b == 0) & (v == 1)).sum()), len(b))


def mcnemar_p(f: Flips) -> float:
    """Exact two-sided McNemar: under no difference each discordant item is a fair coin."""
    discordant = f.lost + f.gained
    return 1.0 if discordant == 0 else float(stats.binomtest(f.lost, discordant, 0.5).pvalue)


def items_to_detect(effect: float, sd_diff: float, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Items a two-sided paired test at `alpha` needs to find a mean per-item difference `effect`
    with probability `power`, when per-item differences have standard deviation `sd_diff`
    (normal approximation: n = ((z₁₋α/₂ + z_power) σ / effect)²)."""
    if effect == 0:
        return math.inf  # no sample size finds a zero effect
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return math.ceil((z * sd_diff / abs(effect)) ** 2)


def holm(pvalues: Mapping[str, float], *, alpha: float = 0.05) -> dict[str, bool]:
    """Holm's step-down rejections across slices: the family-wise false-alarm rate stays ≤ `alpha`
    whatever the dependence between slices (they overlap: a request is in a domain, a tenant, ...)."""
    rejected: dict[str, bool] = dict.fromkeys(pvalues, False)
    ordered = sorted(pvalues.items(), key=lambda kv: kv[1])
    for rank, (name, p) in enumerate(ordered):
        if p > alpha / (len(ordered) - rank):
            break
        rejected[name] = True
    return rejected


def _pair(baseline: Sequence[float], variant: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    b, v = np.asarray(baseline, dtype=float), np.asarray(variant, dtype=float)
    if b.ndim != 1 or b.shape != v.shape or not len(b):
        raise ValueError(f"paired items: baseline has {b.shape}, variant {v.shape}; need the same items")
    return b, v


def items_to_decide_score(baseline: Sequence[float], variant: Sequence[float], *, budget: float,
                          alpha: float = 0.05, power: float = 0.8) -> float:
    """Items that would tell, at the observed effect, whether 1 − mean(v)/mean(b) is above or below
    `budget`: that degradation equals the budget exactly when mean((1 − budget)·b − v) = 0, so the
    per-item differences (1 − budget)·b_i − v_i are what a paired test on more items would see."""
    b, v = _pair(baseline, variant)
    d = (1 - budget) * b - v
    return items_to_detect(float(d.mean()), float(d.std(ddof=1)) if len(d) > 1 else 0.0,
                           alpha=alpha, power=power)


def items_to_decide_ppl(baseline_nll: Sequence[float], variant_nll: Sequence[float],
                        tokens: Sequence[int], *, budget: float, alpha: float = 0.05,
                        power: float = 0.8) -> float:
    """As `items_to_decide_score`, for PPL ratio − 1 against `budget`: the ratio equals 1 + budget
    exactly when the mean of v_i − b_i − log(1 + budget)·t_i over requests is 0."""
    b, v = _pair(baseline_nll, variant_nll)
    d = v - b - math.log1p(budget) * np.asarray(tokens, dtype=float)
    return items_to_detect(float(d.mean()), float(d.std(ddof=1)) if len(d) > 1 else 0.0,
                           alpha=alpha, power=power)


def per_token_mean(values: Sequence[float], tokens: Sequence[int], *, level: float = 0.95,
                   resamples: int = 2000, seed: int = 0, beyond: float | None = None) -> Interval:
    """Σ values / Σ tokens over requests (a per-token mean such as next-token KL, already a
    comparison with the baseline), resampling requests."""
    v, t = _pair(values, tokens)
    if (t <= 0).any():
        raise ValueError("tokens: one positive count per request")

    def statistic(val: np.ndarray, tok: np.ndarray, axis: int = -1) -> np.ndarray:
        return val.sum(axis=axis) / tok.sum(axis=axis)

    return _interval((v, t), statistic, level=level, resamples=resamples, seed=seed, beyond=beyond)


def items_to_decide_mean(values: Sequence[float], tokens: Sequence[int], *, budget: float,
                         alpha: float = 0.05, power: float = 0.8) -> float:
    """As `items_to_decide_score`, for a per-token mean against `budget`: Σv / Σt = budget exactly
    when the mean of v_i − budget·t_i over requests is 0."""
    v, t = _pair(values, tokens)
    d = v - budget * t
    return items_to_detect(float(d.mean()), float(d.std(ddof=1)) if len(d) > 1 else 0.0,
                           alpha=alpha, power=power)
