import math

import pytest

from quantgate.conf.schema import GateConf
from quantgate.tasks.evaluate.perplexity import EvalResult, SlicePpl
from quantgate.tasks.gate.decide import VariantScores, decide
from quantgate.tasks.judge.reliability import JudgeVote

SLICES = {"min_slice_tokens": 100, "min_slice_items": 20}  # the smallest slices that gate
COUNTS = JudgeVote(True, 0.5, "judge counts", min_decided=10, min_consistency=0.5)
ADVISORY = JudgeVote(False, 0.5, "judge advisory: agreement 0.60", min_decided=10, min_consistency=0.5)


def _eval(ppl, slices):
    return EvalResult(ppl, 1000, {k: SlicePpl(v, 500) for k, v in slices.items()}, 0, 1.0)


BASE = _eval(10.0, {"domain=code": 8.0, "domain=math": 12.0})


def _v(name, ppl, slices, size, control=False):
    return VariantScores(name, "m", control, _eval(ppl, slices), size, 4.0, 1.0)


def test_worst_slice_fails_a_variant_whose_average_passes():
    v = _v("a", 10.2, {"domain=code": 8.1, "domain=math": 14.0}, 100)
    d = decide(BASE, [v], GateConf(recovery=0.95), **SLICES)
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
    d = decide(BASE, [ok_big, ok_small, control, failed], GateConf(), **SLICES)
    assert d.winner == "small"
    assert d.verdicts["rtn"].passed and d.verdicts["boom"].reasons == ["failed: OOM"]


def test_per_metric_threshold_and_small_slices_ignored():
    v = _v("a", 11.0, {"domain=code": 8.0, "domain=math": 12.0}, 1)
    assert not decide(BASE, [v], GateConf(), min_slice_tokens=1, min_slice_items=20).verdicts["a"].passed
    loose = GateConf(per_metric={"ppl": 0.9})
    assert decide(BASE, [v], loose, min_slice_tokens=1, min_slice_items=20).verdicts["a"].passed
    v2 = _v("b", 10.0, {"domain=code": 8.0, "domain=math": 40.0}, 1)
    assert decide(BASE, [v2], GateConf(), min_slice_tokens=501, min_slice_items=20).verdicts["b"].passed
    assert math.isclose(decide(BASE, [v2], GateConf(), min_slice_tokens=501, min_slice_items=20).verdicts["b"]
                        .worst_recovery, 1.0)


def test_unknown_objective_is_named_at_config_load():
    with pytest.raises(ValueError, match=r"objective(.|\n)*unknown \['speed'\]"):
        GateConf(objective=("speed",))


def test_default_objective_is_measured_energy_then_bytes():
    ok = {"domain=code": 8.1, "domain=math": 12.1}
    frugal = _with(_v("frugal", 10.1, ok, 300), perf={"energy.j_per_token": 0.5})
    small = _with(_v("small", 10.1, ok, 100), perf={"energy.j_per_token": 0.9})
    unmeasured = _v("unmeasured", 10.1, ok, 10)  # bench failed: ranks after every measured one
    d = decide(BASE, [small, unmeasured, frugal], GateConf(), **SLICES)
    assert d.winner == "frugal" and "energy.j_per_token" in d.reason
    tie = _with(frugal, name="tie", size_bytes=200)
    assert decide(BASE, [frugal, tie], GateConf(), **SLICES).winner == "tie"
    fast = GateConf(objective=("perf.decode_tok_s",))
    quick = _with(small, perf={"perf.decode_tok_s": 30.0})
    slow = _with(frugal, perf={"perf.decode_tok_s": 20.0})
    assert decide(BASE, [slow, quick], fast, **SLICES).winner == "small"


def _lm(metrics, slices=None):
    from quantgate.tasks.evaluate.lmeval import LmEvalResult

    return LmEvalResult(metrics, {}, slices or {}, {}, "")


def _judge(ci_low, decided=20, consistency=1.0):
    from quantgate.tasks.judge.pairwise import JudgeSummary

    return JudgeSummary(20, 5, decided, 5, 8, 7, 0, 0, 0, consistency, 0.65, ci_low, 0.8, "text")


def _with(v, **kw):
    from dataclasses import replace

    return replace(v, **kw)


BASE_LM = _lm({"qg_arith.exact_match": 0.20, "qg_facts_mc.acc": 0.60, "qg_json_tool.call_exact": 0.0},
              {"qg_replay.token_f1": {"domain=code": (0.30, 40), "domain=math": (0.20, 40),
                                      "lang=fr": (0.25, 5)}})


def test_task_metric_recovery_gates_and_a_zero_baseline_does_not():
    good = _with(_v("good", 10.1, {"domain=code": 8.1, "domain=math": 12.1}, 100),
                 lmeval=_lm({"qg_arith.exact_match": 0.19, "qg_facts_mc.acc": 0.60,
                             "qg_json_tool.call_exact": 0.0}))
    bad = _with(good, name="bad", lmeval=_lm({"qg_arith.exact_match": 0.10, "qg_facts_mc.acc": 0.61,
                                              "qg_json_tool.call_exact": 0.0}))
    d = decide(BASE, [good, bad], GateConf(), **SLICES, baseline_lmeval=BASE_LM)
    assert d.verdicts["good"].passed, d.verdicts["good"].reasons
    assert d.verdicts["good"].task_recovery["lmeval.qg_arith.exact_match"] == pytest.approx(0.95)
    assert "lmeval.qg_json_tool.call_exact" not in d.verdicts["good"].task_recovery
    assert any("baseline scores 0" in n for n in d.verdicts["good"].notes)
    assert d.verdicts["bad"].reasons == ["lmeval.qg_arith.exact_match recovery 0.500 < 0.95"]


def test_worst_task_slice_gates_and_small_slices_do_not():
    lm = _lm(dict(BASE_LM.metrics), {"qg_replay.token_f1": {"domain=code": (0.30, 40),
                                                             "domain=math": (0.15, 40),
                                                             "lang=fr": (0.0, 5)}})
    v = _with(_v("v", 10.0, {"domain=code": 8.0, "domain=math": 12.0}, 100), lmeval=lm)
    verdict = decide(BASE, [v], GateConf(), **SLICES, baseline_lmeval=BASE_LM).verdicts["v"]
    assert verdict.worst_task_slice == "lmeval.qg_replay.token_f1@domain=math"
    assert verdict.worst_task_slice_recovery == pytest.approx(0.75)
    assert not verdict.passed and "worst slice lmeval.qg_replay.token_f1@domain=math" in verdict.reasons[0]


def test_judge_blocks_only_when_its_reliability_earns_a_vote():

    v = _with(_v("v", 10.0, {"domain=code": 8.0, "domain=math": 12.0}, 100), judge=_judge(0.40))
    counts = decide(BASE, [v], GateConf(), **SLICES,
                    judge_vote=COUNTS).verdicts["v"]
    assert not counts.passed and counts.reasons == ["judge win-or-tie CI low 0.40 < 0.5"]
    advisory = decide(BASE, [v], GateConf(), **SLICES,
                      judge_vote=ADVISORY).verdicts["v"]
    assert advisory.passed and advisory.notes == ["judge advisory: agreement 0.60"]
    few = _with(v, judge=_judge(0.0, decided=4, consistency=0.14))  # a run where it rarely decides
    inconclusive = decide(BASE, [few], GateConf(), **SLICES,
                          judge_vote=COUNTS).verdicts["v"]
    assert inconclusive.passed and inconclusive.notes[0].startswith("judge inconclusive: 4 decided")
    fine = _with(v, judge=_judge(0.55))
    assert decide(BASE, [fine], GateConf(), **SLICES,
                  judge_vote=COUNTS).verdicts["v"].passed
