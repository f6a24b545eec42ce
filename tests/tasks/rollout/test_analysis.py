"""Each metric's measurement on request records whose right answer is known."""

from quantgate.conf.rollout import AnalysisConf
from quantgate.tasks.rollout.analysis import error_rate, judge_pairs, rank_test

CONF = AnalysisConf()


def rec(arm: str, status: int = 200, total: float = 0.1, weight: float = 0.25, mirror: bool = False) -> dict:
    return {"arm": arm, "status": status, "total_s": total, "tpot_s": total / 10, "weight": weight,
            "mirror": mirror}


def test_error_rate_fails_a_canary_that_errs_and_passes_a_clean_one():
    clean = [rec("canary") for _ in range(10)] + [rec("champion") for _ in range(30)]
    assert error_rate(clean, CONF).phase == "successful"
    bad = [rec("canary", 500) for _ in range(4)] + clean
    m = error_rate(bad, CONF)
    assert m.phase == "failed" and m.value["e_value"] >= 20
    # the champion failing as often: no evidence against the canary
    both = [rec("canary", 500)] + [rec("champion", 500) for _ in range(3)] + clean
    assert error_rate(both, CONF).phase != "failed"
    # mirrored champion calls are not routed: they never count
    mirrored = clean + [rec("champion", 500, mirror=True) for _ in range(5)]
    assert error_rate(mirrored, CONF).value["champion_rate"] == 0


def test_rank_test_tolerates_noise_and_fails_real_slowness():
    champ = [rec("champion", total=0.10 + 0.01 * (i % 5)) for i in range(20)]
    same = [rec("canary", total=0.105 + 0.01 * (i % 5)) for i in range(8)]
    slow = [rec("canary", total=0.5 + 0.01 * i) for i in range(8)]
    assert rank_test("latency", "total_s", champ + same, [], 1.25, 0.0125, 4).phase == "successful"
    m = rank_test("latency", "total_s", champ + slow, [], 1.25, 0.0125, 4)
    assert m.phase == "failed" and m.value["p95_ratio"] > 3
    few = rank_test("latency", "total_s", champ + slow[:2], [], 1.25, 0.0125, 4)
    assert few.phase == "inconclusive"
    # at 100 % only mirrored requests reach the champion: earlier windows' champion times are used
    assert rank_test("latency", "total_s", slow, champ, 1.25, 0.0125, 4).phase == "failed"


def test_judge_fails_garbage_and_passes_ties():
    assert judge_pairs(["tie"] * 8, CONF).phase == "successful"
    assert judge_pairs(["loss"] * 3 + ["tie"] * 5, CONF).phase == "failed"  # 37 % > 20 % of 8 pairs
    assert judge_pairs(["loss", "tie"], CONF).phase == "inconclusive"  # too few pairs to say
    assert judge_pairs(["undecided"] * 10, CONF).phase == "inconclusive"
