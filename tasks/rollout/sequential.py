"""Anytime-valid tests for a canary: e-values that may be looked at after every window.

An e-process is a nonnegative supermartingale under the null; by Ville's inequality the chance it
ever crosses 1/α is at most α, however often it is read (Ramdas et al., "Game-theoretic statistics
and safe anytime-valid inference", 2023). Lindon, Ham, Tingley & Bojinov (KDD 2022,
arXiv 2205.14762) use such tests for Netflix's canaries on count data. Here:

- Failures. The router sends each request to the canary with probability w (the step's weight),
  independently of everything else. Given that a request failed, it came from the canary with
  probability θ = w·r / (w·r + 1 − w), r = canary error rate / champion error rate. Under the null
  r = 1, θ = w exactly, whatever the champion's own error rate, so each failure's arm is a
  likelihood-ratio factor θ_r/w (canary) or (1−θ_r)/(1−w) (champion); a uniform mixture over a grid
  of r > 1 is an e-process for H0: r ≤ 1 (one-sided: the likelihood ratio is monotone in r).
  Failures at w = 0 or 1 carry no information on r and leave it unchanged.
- Judge verdicts. Among mirrored pairs the judge decided (not ties), the canary loses with
  probability q; a mixture over q > 1/2 of (q/½)^losses·((1−q)/½)^wins is an e-process for
  H0: q ≤ 1/2 (the canary is no worse than the champion).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

RATE_RATIOS = (1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0)
LOSS_SHARES = (0.6, 0.7, 0.8, 0.9)


def _mixture(log_lrs: Iterable[float]) -> float:
    logs = list(log_lrs)
    top = max(logs)
    return math.exp(top) * sum(math.exp(x - top) for x in logs) / len(logs)


def failure_evalue(failures: Iterable[tuple[bool, float]], ratios: tuple[float, ...] = RATE_RATIOS) -> float:
    """`failures`: for each failed routed request, (was it the canary's, the canary weight w then)."""
    events = [(c, w) for c, w in failures if 0 < w < 1]
    if not events:
        return 1.0

    def log_lr(r: float) -> float:
        total = 0.0
        for canary, w in events:
            theta = w * r / (w * r + 1 - w)
            total += math.log(theta / w) if canary else math.log((1 - theta) / (1 - w))
        return total

    return _mixture(log_lr(r) for r in ratios)


def loss_evalue(losses: int, wins: int, shares: tuple[float, ...] = LOSS_SHARES) -> float:
    """Canary losses and wins among the judge's decided pairs."""
    if losses + wins == 0:
        return 1.0
    return _mixture(losses * math.log(q / 0.5) + wins * math.log((1 - q) / 0.5) for q in shares)
