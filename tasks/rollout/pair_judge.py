"""Who judges a rollout's mirrored pairs (the same prompt answered by canary and champion).

- likelihood (default): the champion's model scores both answers, teacher-forced, as the mean
  negative log-likelihood per token (GPTScore: Fu et al., "GPTScore: Evaluate as You Desire",
  NAACL 2024, arXiv 2302.04166, with the champion as the evaluating model). The router records the
  scores with each pair; judging costs nothing more here. The canary loses a pair when its answer is
  `tie_band` nats per token less likely than the champion's own, wins when that much more likely.
  It asks "would the model we trust have said this?": it catches a canary that emits broken or
  off-distribution text, not one that is fluent and wrong.
- an LLM mode (text, prob, rubric, reference): the pipeline's judge, pairwise or graded
  (tasks/judge/pairwise.py), at most `per_step` pairs per window (each pair costs judge calls).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quantgate.tasks.judge.client import Chat
from quantgate.tasks.judge.pairwise import Pair, judge_pairs


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


@dataclass(frozen=True)
class LikelihoodJudge:
    tie_band: float
    per_step: int | None = None  # no limit: the scores are already in the mirror log

    def judge(self, pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for r in pairs:
            cn, bn = r.get("canary_nll"), r.get("champion_nll")
            if _same(r["canary"], r["champion"]):
                outcome, margin = "tie", 0.0
            elif cn is None or bn is None:
                outcome, margin = "undecided", None
            else:
                margin = cn - bn  # > 0: the champion finds the canary's answer less likely
                outcome = "loss" if margin > self.tie_band else "win" if margin < -self.tie_band else "tie"
            out.append({"id": r["id"], "outcome": outcome, "identical": _same(r["canary"], r["champion"]),
                        "margin_nats": margin})
        return out


@dataclass(frozen=True)
class LlmJudge:
    chat: Chat
    mode: str
    tie_band: float
    per_step: int | None

    def judge(self, pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        asked = [Pair(r["id"], r["request"], candidate=r["canary"], baseline=r["champion"]) for r in pairs]
        _, judged = judge_pairs(self.chat, asked, mode=self.mode, tie_band=self.tie_band)
        return [{"id": j.id, "outcome": j.outcome or "undecided", "identical": j.identical,
                 "margin": j.prob_margin} for j in judged]


PairJudge = LikelihoodJudge | LlmJudge
