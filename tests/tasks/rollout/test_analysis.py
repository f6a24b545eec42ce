"""Each metric's measurement on request records whose right answer is known."""

import itertools

from quantgate.conf.rollout import AnalysisConf
from quantgate.tasks.rollout.analysis import error_rate, judge_pairs, rank_test
from quantgate.tasks.rollout.pair_judge import LikelihoodJudge
from quantgate.tasks.rollout.window import reference_pools

CONF = AnalysisConf()
_ids = itertools.count()


def rec(arm: str, status: int = 200, total: float = 0.1, weight: float = 0.25, mirror: bool = False,
        id: str | None = None) -> dict:
    return {"id": id or f"r{next(_ids)}", "arm": arm, "status": status, "total_s": total,
            "tpot_s": total / 10, "weight": weight, "mirror": mirror}


def shadowed(canary_status: int, champion_status: int = 200, weight: float = 0.05) -> list[dict]:
    """A request routed to the champion and copied to the canary at once: two records, one id."""
    i = f"s{next(_ids)}"
    return [rec("champion", champion_status, weight=weight, id=i),
            rec("canary", canary_status, weight=weight, mirror=True, id=i)]


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


def test_shadowed_failures_fail_a_canary_that_users_barely_reach():
    # At 5 % no routed canary request failed; its shadowed copies fail while the champion answers.
    clean = [rec("champion", weight=0.05) for _ in range(40)]
    good = clean + [r for _ in range(30) for r in shadowed(200)]
    assert error_rate(good, CONF).phase == "successful"
    bad = clean + [r for i in range(30) for r in shadowed(500 if i % 3 == 0 else 200)]
    m = error_rate(bad, CONF)
    assert m.phase == "failed" and m.value["canary_errors"] == 10 and m.value["canary_requests"] == 30
    # both failing on the same requests (a bad prompt, say) is no evidence against the canary
    same = clean + [r for i in range(30) for r in shadowed(500 if i < 3 else 200, 500 if i < 3 else 200)]
    assert error_rate(same, CONF).value["e_value"] <= 1.0


def test_likelihood_judge_reads_the_champions_scores():
    judge = LikelihoodJudge(tie_band=1.0)
    pairs = [{"id": "same", "canary": "Paris.", "champion": " Paris. ", "canary_nll": None,
              "champion_nll": 0.4},
             {"id": "close", "canary": "It is Paris", "champion": "Paris", "canary_nll": 0.9,
              "champion_nll": 0.4},
             {"id": "garbage", "canary": "nud sacs biking", "champion": "Paris", "canary_nll": 14.1,
              "champion_nll": 0.4},
             {"id": "better", "canary": "Paris", "champion": "Lyon?", "canary_nll": 0.3, "champion_nll": 2.5},
             {"id": "unscored", "canary": "Paris!", "champion": "Paris", "canary_nll": None,
              "champion_nll": 0.4}]
    got = {j["id"]: j["outcome"] for j in judge.judge(pairs)}
    assert got == {"same": "tie", "close": "tie", "garbage": "loss", "better": "win", "unscored": "undecided"}


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
    assert rank_test("latency", "total_s", slow, [champ], 1.25, 0.0125, 4).phase == "failed"


def test_rank_test_at_100_percent_uses_the_nearest_champion_times():
    """A rollout resumed under other load: before the restart the replicas served 4 paced requests a
    second (fast), since then unpaced ones (slower for both arms). The canary, as fast as the
    champion under today's load, must not fail against the champion's times from before."""
    before = [rec("champion", total=0.10 + 0.005 * (i % 7)) for i in range(120)]
    since = [rec("champion", total=0.30 + 0.02 * (i % 5)) for i in range(12)]
    canary = [rec("canary", total=0.31 + 0.02 * (i % 5), weight=1.0) for i in range(6)]
    nearest = rank_test("latency", "total_s", canary, [since, before + since], 1.25, 0.0167, 4)
    assert nearest.phase == "successful" and nearest.value["champion_n"] == 12
    pooled = rank_test("latency", "total_s", canary, [before + since], 1.25, 0.0167, 4)
    assert pooled.phase == "failed"  # what pooling everything earlier did: a false rollback
    # too few champion times since the restart: the older ones are the nearest there are (biased if
    # the pacing changed; at 100 % the window's mirrored and shadowed requests spare this)
    m = rank_test("latency", "total_s", canary, [since[:2], before + since[:2]], 1.25, 0.0167, 4)
    assert m.value["champion_n"] == 122


def test_reference_pools_split_at_the_restart_and_the_window():
    records = [{"t": t, "arm": "champion"} for t in (1.0, 2.0, 3.0, 4.0, 5.0)]
    since, earlier = reference_pools(records, started=4.0, resumed_at=2.5)
    assert [r["t"] for r in since] == [3.0] and [r["t"] for r in earlier] == [1.0, 2.0, 3.0]
    since, earlier = reference_pools(records, started=4.0, resumed_at=0.0)  # never restarted
    assert since == earlier


def test_judge_fails_garbage_and_passes_ties():
    assert judge_pairs(["tie"] * 8, CONF).phase == "successful"
    assert judge_pairs(["loss"] * 3 + ["tie"] * 5, CONF).phase == "failed"  # 37 % > 20 % of 8 pairs
    assert judge_pairs(["loss", "tie"], CONF).phase == "inconclusive"  # too few pairs to say
    assert judge_pairs(["undecided"] * 10, CONF).phase == "inconclusive"
