"""Argo Rollouts' analysis semantics, on measurements whose right answer is known."""

from quantgate.conf.rollout import RolloutConf
from quantgate.tasks.rollout.analysis import Measurement
from quantgate.tasks.rollout.decide import decide_step


def m(metric: str, phase: str) -> Measurement:
    return Measurement(metric, phase, f"{metric} {phase}")  # type: ignore[arg-type]


OK = [m("error_rate", "successful"), m("latency", "successful")]


def test_all_successful_passes():
    assert decide_step([OK], RolloutConf()).outcome == "passed"


def test_one_failure_fails_with_failure_limit_zero_even_if_others_pass():
    d = decide_step([[m("error_rate", "successful"), m("latency", "failed")]], RolloutConf())
    assert d.outcome == "failed" and d.reason.startswith("latency") and d.failed_metrics == ("latency",)


def test_every_metric_that_failed_is_named_not_only_the_first():
    d = decide_step([[m("error_rate", "successful"), m("latency", "failed"), m("judge", "failed")]],
                    RolloutConf())
    assert d.outcome == "failed" and d.failed_metrics == ("latency", "judge")
    assert "latency failed" in d.reason and "judge failed" in d.reason


def test_failure_limit_allows_that_many_failures():
    conf = RolloutConf(failure_limit=1)
    one = [m("error_rate", "successful"), m("latency", "failed")]
    assert decide_step([one], conf).outcome != "failed"
    assert decide_step([one, one], conf).outcome == "failed"


def test_inconclusive_repeats_then_pauses():
    conf = RolloutConf(inconclusive_limit=1)
    inc = [m("error_rate", "successful"), m("latency", "inconclusive")]
    assert decide_step([inc], conf).outcome == "repeat"
    assert decide_step([inc, inc], conf).outcome == "inconclusive"
    assert decide_step([inc], RolloutConf(inconclusive_limit=0)).outcome == "inconclusive"


def test_a_step_never_passes_on_an_inconclusive_metric():
    inc = [m("error_rate", "successful"), m("judge", "inconclusive")]
    assert decide_step([inc], RolloutConf()).outcome != "passed"


def test_errors_repeat_until_the_consecutive_limit():
    err = [m("error_rate", "successful"), m("judge", "error")]
    conf = RolloutConf(consecutive_error_limit=2)
    assert decide_step([err, err], conf).outcome == "repeat"
    assert decide_step([err, err, err], conf).outcome == "failed"
    assert decide_step([err, err, err], conf).failed_metrics == ("judge",)
    assert decide_step([err, OK + [m("judge", "successful")], err], conf).outcome == "repeat"
