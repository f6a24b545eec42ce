import math

import pytest

from quantgate.conf.schema import GateConf
from quantgate.tasks.evaluate import EvalResult, SlicePpl
from quantgate.tasks.gate import VariantScores, decide


def _eval(ppl, slices):
    return EvalResult(ppl, 1000, {k: SlicePpl(v, 500) for k, v in slices.items()}, 0, 1.0)


BASE = _eval(10.0, {"domain=code": 8.0, "domain=math": 12.0})


def _v(name, ppl, slices, size, control=False):
    return VariantScores(name, "m", control, _eval(ppl, slices), size, 4.0, 1.0)


def test_worst_slice_fails_a_variant_whose_average_passes():
    v = _v("a", 10.2, {"domain=code": 8.1, "domain=math": 14.0}, 100)
    d = decide(BASE, [v], GateConf(recovery=0.95), min_slice_tokens=100)
    verdict = d.verdicts["a"]
    assert not verdict.passed and verdict.worst_slice == "domain=math"
    assert verdict.worst_recovery == pytest.approx(12 / 14)
    assert verdict.recovery == pytest.approx(10 / 10.2)
    assert d.winner is None and "champion stays" in d.reason


def test_smallest_passing_non_control_wins():
    ok_big = _v("big", 10.1, {"domain=code": 8.1, "domain=math": 12.1}, 200)
    ok_small = _v("small", 10.3, {"domain=code": 8.2, "domain=math": 12.4}, 100)
    control = _v("rtn", 10.0, {"domain=code": 8.0, "domain=math": 12.0}, 50, control=True)
    failed = VariantScores("boom", "m", False, None, error="OOM")
    d = decide(BASE, [ok_big, ok_small, control, failed], GateConf(), min_slice_tokens=100)
    assert d.winner == "small"
    assert d.verdicts["rtn"].passed and d.verdicts["boom"].reasons == ["failed: OOM"]


def test_per_metric_threshold_and_small_slices_ignored():
    v = _v("a", 11.0, {"domain=code": 8.0, "domain=math": 12.0}, 1)
    assert not decide(BASE, [v], GateConf(), min_slice_tokens=1).verdicts["a"].passed
    loose = GateConf(per_metric={"ppl": 0.9})
    assert decide(BASE, [v], loose, min_slice_tokens=1).verdicts["a"].passed
    v2 = _v("b", 10.0, {"domain=code": 8.0, "domain=math": 40.0}, 1)
    assert decide(BASE, [v2], GateConf(), min_slice_tokens=501).verdicts["b"].passed
    assert math.isclose(decide(BASE, [v2], GateConf(), min_slice_tokens=501).verdicts["b"]
                        .worst_recovery, 1.0)


def test_unknown_objective_is_named():
    v = _v("a", 10.0, {}, 1)
    with pytest.raises(ValueError, match="gate.objective"):
        decide(BASE, [v], GateConf(objective=("speed",)), min_slice_tokens=1)
