"""The analysis after each step: every metric measured, each measurement successful, failed or
inconclusive, as Argo Rollouts defines them (failure checked first; neither condition true is
inconclusive; an exception while measuring is an error).

- error_rate: all requests of the rollout so far, the canary's routed and shadowed. Failed when the
  failure e-value crosses 1/α (sequential.py: anytime-valid, read after every window; the mean of
  the routed failures' e-process and the shadowed pairs' one), or when the canary's error rate is
  above `max_error_rate` on at least `min_error_samples` answers; successful when it is at most
  `max_error_rate`.
- latency, tpot: the window's service times (the replica's, queueing excluded), canary against the
  champion (routed, mirrored and shadowed requests; when the window has too few, the nearest earlier
  windows': this process's before those of a rollout it resumed), by a one-sided Mann-Whitney test
  of the canary's times divided by the tolerance against the champion's: Kayenta's rank test, not a
  bare p95 ratio. The looks are fixed in advance (one per step), so each uses α / len(steps) (Bonferroni).
- energy: estimated J/token per request (the replica's CPU seconds × the hardware profile's watts
  per busy core ÷ its tokens; an estimate, as the bench's CPU meter), the same rank test against
  `energy_tolerance`. Not measured where the profile states no CPU power (GPU profiles: NVML per
  replica is the cluster's job).
- judge: mirrored and shadowed pairs of the rollout so far (the same prompt to both; pair_judge.py
  says who judges). Failed when the loss e-value crosses 1/α or the canary loses more than
  `judge_max_loss_share` of at least `judge_min_pairs` pairs; successful when it loses at most
  that share of enough pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from scipy.stats import mannwhitneyu

from quantgate.conf.rollout import AnalysisConf
from quantgate.tasks.rollout.sequential import failure_evalue, loss_evalue

Phase = Literal["successful", "failed", "inconclusive", "error"]


@dataclass(frozen=True)
class Measurement:
    metric: str
    phase: Phase
    reason: str
    value: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _shadow_discordance(records: list[dict[str, Any]]) -> tuple[int, int]:
    """Shadowed requests (routed to the champion, copied to the canary at once, whatever either
    answered): (canary alone failed, champion alone failed)."""
    routed = {r["id"]: r for r in records if not r.get("mirror") and r["arm"] == "champion"}
    canary_only = champion_only = 0
    for r in records:
        twin = routed.get(r["id"]) if r.get("mirror") and r["arm"] == "canary" else None
        if twin is not None and (r["status"] >= 500) != (twin["status"] >= 500):
            canary_only += r["status"] >= 500
            champion_only += twin["status"] >= 500
    return canary_only, champion_only


def error_rate(records: list[dict[str, Any]], conf: AnalysisConf) -> Measurement:
    routed = [r for r in records if not r.get("mirror")]
    canary = [r for r in records if r["arm"] == "canary"]  # routed and shadowed
    failed = [r for r in canary if r["status"] >= 500]
    rate = len(failed) / len(canary) if canary else 0.0
    champ = [r for r in routed if r["arm"] == "champion"]
    champ_rate = sum(r["status"] >= 500 for r in champ) / len(champ) if champ else 0.0
    # Two e-processes, one per kind of evidence; their mean is one too (an average of e-values is an
    # e-value), at most halving either's strength.
    e_routed = failure_evalue((r["arm"] == "canary", r["weight"]) for r in routed if r["status"] >= 500)
    e = (e_routed + loss_evalue(*_shadow_discordance(records))) / 2
    value = {"canary_requests": len(canary), "canary_errors": len(failed), "canary_rate": rate,
             "champion_rate": champ_rate, "e_value": e}
    if e >= 1 / conf.alpha:
        return Measurement("error_rate", "failed", f"canary errors {len(failed)}/{len(canary)} against "
                           f"champion {champ_rate:.1%}: e-value {e:.1f} ≥ 1/α = {1 / conf.alpha:.0f}", value)
    if len(canary) >= conf.min_error_samples and rate > conf.max_error_rate:
        return Measurement("error_rate", "failed", f"canary error rate {rate:.1%} > "
                           f"{conf.max_error_rate:.0%} "
                           f"on {len(canary)} requests", value)
    if rate <= conf.max_error_rate:
        return Measurement("error_rate", "successful", f"canary {len(failed)}/{len(canary)} errors", value)
    return Measurement("error_rate", "inconclusive", f"canary {len(failed)}/{len(canary)} errors: above "
                       f"{conf.max_error_rate:.0%} on too few requests to fail", value)


def _p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.95 * len(s)))]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def rank_test(metric: str, key: str, window: list[dict[str, Any]], fallbacks: Sequence[list[dict[str, Any]]],
              tolerance: float, alpha_look: float, min_samples: int, show: Any = _ms) -> Measurement:
    """Canary's `key` against the champion's in the window; when the window has too few champion
    samples (at 100 % only shadowed and mirrored requests reach the champion), against the first of
    `fallbacks` (earlier records, nearest first) that has enough. Nearest first because service times
    depend on the load the replicas ran under: a rollout resumed with other pacing must not judge
    its canary against champion times measured before the restart when newer ones exist."""
    def times(recs: list[dict[str, Any]], arm: str) -> list[float]:
        return [r[key] for r in recs if r["arm"] == arm and r["status"] == 200 and r.get(key) is not None]

    canary, champion = times(window, "canary"), times(window, "champion")
    for earlier in fallbacks:
        if len(champion) >= min_samples:
            break
        champion = times(earlier + window, "champion")
    value: dict[str, Any] = {"canary_n": len(canary), "champion_n": len(champion)}
    if len(canary) < min_samples or len(champion) < min_samples:
        return Measurement(metric, "inconclusive", f"{len(canary)} canary and {len(champion)} champion "
                           f"samples: fewer than {min_samples}", value)
    p = float(mannwhitneyu([c / tolerance for c in canary], champion, alternative="greater").pvalue)
    value |= {"canary_p95": _p95(canary), "champion_p95": _p95(champion),
              "p95_ratio": _p95(canary) / _p95(champion), "p_value": p, "alpha": alpha_look}
    ratio = f"p95 {show(value['canary_p95'])} vs {show(value['champion_p95'])}"
    if p < alpha_look:
        return Measurement(metric, "failed", f"{ratio}: canary above {tolerance}× the champion's "
                           f"(Mann-Whitney p = {p:.2g} < {alpha_look:.3g})", value)
    return Measurement(metric, "successful", f"{ratio} (p = {p:.2g})", value)


def judge_pairs(outcomes: list[str], conf: AnalysisConf) -> Measurement:
    """`outcomes`: the canary's result per mirrored pair judged so far: win, tie, loss or undecided."""
    wins, losses = outcomes.count("win"), outcomes.count("loss")
    ties = outcomes.count("tie")
    pairs = wins + losses + ties
    share = losses / pairs if pairs else 0.0
    e = loss_evalue(losses, wins)
    value = {"pairs": pairs, "wins": wins, "ties": ties, "losses": losses,
             "undecided": len(outcomes) - pairs, "loss_share": share, "e_value": e}
    tally = f"canary {wins} wins, {ties} ties, {losses} losses"
    if e >= 1 / conf.alpha:
        return Measurement("judge", "failed", f"{tally}: loss e-value {e:.1f} ≥ {1 / conf.alpha:.0f}", value)
    if pairs >= conf.judge_min_pairs and share > conf.judge_max_loss_share:
        return Measurement("judge", "failed", f"{tally}: loses {share:.0%} > "
                           f"{conf.judge_max_loss_share:.0%} of mirrored pairs", value)
    if pairs >= conf.judge_min_pairs:
        return Measurement("judge", "successful", tally, value)
    return Measurement("judge", "inconclusive", f"{tally}: {pairs} judged pairs, fewer than "
                       f"{conf.judge_min_pairs}", value)
