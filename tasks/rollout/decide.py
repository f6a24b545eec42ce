"""What a step's analysis means for the rollout, with Argo Rollouts' limits. Each step is one analysis
run: its windows' measurements are counted per metric.

- a metric failed more than `failure_limit` times → failed (roll back), naming every metric that
  did (a garbled canary is often slower too: the judge's verdict must not hide behind latency's);
- a metric errored more than `consecutive_error_limit` times in a row → failed;
- the last window has an error → repeat the window at the same weight;
- the last window has an inconclusive metric: repeat while that metric's inconclusive count is at
  most `inconclusive_limit`, then inconclusive (pause for a person);
- every metric successful in the last window → passed (next step). A step never passes on an
  inconclusive or missing measurement (an inconclusive background analysis once let an Argo rollout
  promote).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

from quantgate.conf.rollout import RolloutConf
from quantgate.tasks.rollout.analysis import Measurement

Outcome = Literal["passed", "failed", "inconclusive", "repeat"]


@dataclass(frozen=True)
class StepDecision:
    outcome: Outcome
    reason: str
    failed_metrics: tuple[str, ...] = ()  # the metrics whose failures decided a "failed" outcome


def _trailing_errors(windows: list[list[Measurement]], metric: str) -> int:
    n = 0
    for window in reversed(windows):
        m = next((m for m in window if m.metric == metric), None)
        if m is None or m.phase != "error":
            break
        n += 1
    return n


def decide_step(windows: list[list[Measurement]], conf: RolloutConf) -> StepDecision:
    if not windows or not windows[-1]:
        raise ValueError("decide_step: no measurement to decide on")
    failed = Counter(m.metric for w in windows for m in w if m.phase == "failed")
    if over := [m for m in windows[-1] if failed[m.metric] > conf.failure_limit]:
        return StepDecision("failed", "; ".join(f"{m.metric}: {m.reason}" for m in over),
                            tuple(m.metric for m in over))
    for m in windows[-1]:
        if (n := _trailing_errors(windows, m.metric)) > conf.consecutive_error_limit:
            return StepDecision("failed", f"{m.metric}: measurement errored {n} times in a row: {m.reason}",
                                (m.metric,))
    if errors := [m for m in windows[-1] if m.phase == "error"]:
        return StepDecision("repeat", "; ".join(f"{m.metric}: {m.reason}" for m in errors))
    inconclusive = Counter(m.metric for w in windows for m in w if m.phase == "inconclusive")
    open_ = [m for m in windows[-1] if m.phase == "inconclusive"]
    if over := [m for m in open_ if inconclusive[m.metric] > conf.inconclusive_limit]:
        return StepDecision("inconclusive", "; ".join(f"{m.metric}: {m.reason}" for m in over))
    if open_:
        return StepDecision("repeat", "; ".join(f"{m.metric}: {m.reason}" for m in open_))
    return StepDecision("passed", "; ".join(f"{m.metric}: {m.reason}" for m in windows[-1]))
