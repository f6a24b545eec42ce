"""Paired statistics on scenarios whose right answer is known by construction."""

import math

import numpy as np
import pytest
from scipy import stats

from quantgate.tasks.gate.paired import (
    Flips,
    flips,
    holm,
    items_to_detect,
    mcnemar_p,
    perplexity_degradation,
    score_degradation,
)


def _flip(outcomes: np.ndarray, p_lose: float, p_gain: float, rng: np.random.Generator) -> np.ndarray:
    u = rng.random(len(outcomes))
    return np.where(outcomes == 1, (u >= p_lose).astype(int), (u < p_gain).astype(int))


def test_identical_answers_give_a_zero_width_interval_at_zero():
    base = np.array([1, 0, 1, 1, 0, 1])
    iv = score_degradation(base, base)
    assert (iv.estimate, iv.low, iv.high, iv.n) == (0.0, 0.0, 0.0, 6)


def test_a_planted_ten_percent_loss_is_found_and_bracketed():
    rng = np.random.default_rng(1)
    base = (rng.random(600) < 0.7).astype(int)
    var = _flip(base, p_lose=0.10, p_gain=0.0, rng=rng)
    iv = score_degradation(base, var)
    truth = 1 - var.mean() / base.mean()
    assert iv.low > 0.03 and iv.low <= truth <= iv.high and iv.estimate == pytest.approx(truth)


def test_symmetric_flips_rarely_look_like_a_loss_over_40_seeds():
    """The null: the variant flips 15 % of answers each way (kv_fp8's pattern), accuracy unchanged
    in expectation. A 95 % interval should exclude zero on the bad side in about 2.5 % of runs."""
    alarms = 0
    for seed in range(40):
        rng = np.random.default_rng(100 + seed)
        base = (rng.random(120) < 0.5).astype(int)
        var = _flip(base, p_lose=0.15, p_gain=0.15, rng=rng)
        alarms += score_degradation(base, var, seed=seed, resamples=1000).low > 0
    assert alarms <= 3  # 2.5 % of 40 is 1; 3 or more would be p < 0.08 under a calibrated interval


def test_perplexity_interval_from_per_request_nll_brackets_the_planted_shift():
    rng = np.random.default_rng(2)
    tokens = rng.integers(20, 200, 150)
    base = tokens * rng.uniform(1.5, 3.0, 150)  # requests differ a lot in difficulty
    var = base + tokens * (0.02 + rng.normal(0, 0.01, 150))  # +0.02 nats per token, noisy
    iv = perplexity_degradation(base, var, tokens)
    truth = math.expm1((var.sum() - base.sum()) / tokens.sum())
    assert iv.estimate == pytest.approx(truth) and iv.low <= truth <= iv.high
    assert 0.015 < iv.low and iv.high < 0.025  # pairing removes the difficulty spread
    unpaired = stats.ttest_ind(var / tokens, base / tokens).pvalue
    assert unpaired > 0.05  # the same data unpaired cannot even tell there is a shift


def test_flips_and_the_exact_mcnemar_p():
    f = flips([1] * 10 + [0] * 2 + [1] * 5, [0] * 10 + [1] * 2 + [1] * 5)
    assert f == Flips(lost=10, gained=2, n=17) and f.share == pytest.approx(12 / 17)
    assert mcnemar_p(f) == pytest.approx(2 * (1 + 12 + 66) / 2**12)  # 2·P(X ≤ 2), X ~ Bin(12, ½)
    assert mcnemar_p(Flips(0, 0, 5)) == 1.0
    with pytest.raises(ValueError, match="0 or 1"):
        flips([0, 2], [1, 1])


def test_items_to_detect_matches_a_simulated_paired_test():
    acc, p_lose, p_gain = 0.5, 0.14, 0.06  # per-item difference: -1 w.p. .14·acc, +1 w.p. .06·(1-acc)
    d = np.array([-1, 0, 1])
    probs = np.array([acc * p_lose, 1 - acc * p_lose - (1 - acc) * p_gain, (1 - acc) * p_gain])
    mean = (d * probs).sum()
    sd = math.sqrt((d**2 * probs).sum() - mean**2)
    assert -mean == pytest.approx(0.04)
    n = items_to_detect(-mean, sd, alpha=0.05, power=0.8)
    rng = np.random.default_rng(3)
    hits = 0
    for _ in range(400):
        diffs = rng.choice(d, size=n, p=probs)
        hits += stats.ttest_1samp(diffs, 0).pvalue < 0.05
    assert abs(hits / 400 - 0.8) < 0.06, (n, hits)
    assert items_to_detect(-2 * mean, sd) < n / 3  # twice the effect: a quarter of the items


def test_holm_controls_across_slices_and_stops_at_the_first_keep():
    rejected = holm({"a": 0.001, "b": 0.013, "c": 0.02, "d": 0.5}, alpha=0.05)
    # thresholds 0.05/4, 0.05/3, 0.05/2, 0.05: a ✓ (0.0125), b ✓ (0.0167), c ✓ (0.025), d ✗
    assert rejected == {"a": True, "b": True, "c": True, "d": False}
    assert holm({"a": 0.02, "b": 0.001}, alpha=0.05) == {"a": True, "b": True}
    assert holm({"a": 0.03, "b": 0.03, "c": 0.03}, alpha=0.05) == dict.fromkeys("abc", False)


def test_bad_inputs_name_what_is_wrong():
    with pytest.raises(ValueError, match="baseline scores 0"):
        score_degradation([0, 0, 0], [1, 0, 0])
    with pytest.raises(ValueError, match="same items"):
        score_degradation([1, 0], [1, 0, 1])
    with pytest.raises(ValueError, match="tokens"):
        perplexity_degradation([1.0, 2.0], [1.0, 2.0], [3])
