"""What a rollout does next, read from its log alone: the same answer for a fresh rollout, one that
resumes after its process was killed at any point, and one whose person has just decided."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from quantgate.tasks.rollout.log import RolloutLog

Kind = Literal["step", "pause", "promote", "rollback", "done"]


@dataclass(frozen=True)
class Action:
    kind: Kind
    step: int = 0  # index into the steps
    reason: str = ""


def next_action(log: RolloutLog, steps: tuple[float, ...]) -> Action:
    if log.finished:
        return Action("done", reason=log.entries[-1].get("reason", ""))
    if (e := log.last("rolling_back")) is not None:
        return Action("rollback", reason=e["reason"])
    if (e := log.last("promoting")) is not None:
        return Action("promote", reason=e["reason"])
    last = log.last("step", "decision", "paused", "resumed")
    if last is None:
        return Action("step", 0)
    k = last.get("step", 0)
    if last["event"] == "step":  # killed mid-step: that step again, from its weight
        return Action("step", k, "resumed mid-step")
    if last["event"] == "paused":
        return Action("pause", k, last["reason"])
    if last["event"] == "resumed":
        choice = last["choice"]
        if choice == "extend":
            return Action("step", k, f"extended by {last.get('by', 'a person')}")
        return Action("promote" if choice == "promote" else "rollback", k,
                      f"{choice} by {last.get('by', 'a person')}: {last.get('reason', '')}".rstrip(": "))
    outcome = last["outcome"]
    if outcome == "failed":
        return Action("rollback", k, f"step {k + 1} ({steps[k]:g} %) failed: {last['reason']}")
    if outcome == "inconclusive":
        return Action("pause", k, f"step {k + 1} ({steps[k]:g} %) inconclusive: {last['reason']}")
    if k + 1 < len(steps):
        return Action("step", k + 1)
    return Action("promote", k, f"all {len(steps)} steps passed")
