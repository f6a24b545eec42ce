"""The anytime-valid tests: under the null, reading the e-value after every event crosses 1/α at most
α of the time; under a real difference it crosses quickly."""

import random

from quantgate.tasks.rollout.sequential import failure_evalue, loss_evalue


def _ever_crosses(rng: random.Random, canary_rate: float, champion_rate: float, w: float, n: int) -> bool:
    failures = []
    for _ in range(n):
        canary = rng.random() < w
        if rng.random() < (canary_rate if canary else champion_rate):
            failures.append((canary, w))
            if failure_evalue(failures) >= 20:  # looked at after every single failure
                return True
    return False


def test_failure_evalue_keeps_its_false_alarm_rate_under_continuous_monitoring():
    rng = random.Random(0)
    alarms = sum(_ever_crosses(rng, 0.1, 0.1, 0.25, 300) for _ in range(300))
    assert alarms / 300 <= 0.05 + 0.03  # α = 0.05, plus Monte Carlo slack (3 σ ≈ 0.038)


def test_failure_evalue_catches_a_canary_that_fails_more():
    rng = random.Random(1)
    caught = sum(_ever_crosses(rng, 0.2, 0.0, 0.25, 200) for _ in range(50))
    assert caught >= 45


def test_failures_at_full_or_zero_weight_carry_no_evidence():
    assert failure_evalue([(True, 1.0)] * 50 + [(False, 0.0)] * 50) == 1.0


def test_loss_evalue():
    assert loss_evalue(0, 0) == 1.0
    assert loss_evalue(7, 0) >= 20  # seven straight losses: the canary is worse
    assert loss_evalue(3, 3) < 1  # even split: evidence for the null
