"""Pairwise LLM-as-judge: a candidate's answers against the baseline's, on the same prompts.

Each pair is judged twice, the candidate first as A and then as B. Two readings:

- text (default): the strict JSON verdict of each order. The pair's outcome is known only when both
  orders agree (after mapping A/B back to candidate/baseline); otherwise it is counted as
  inconsistent and left out, never guessed.
- prob (needs an endpoint that returns logprobs): the judge's probabilities for the
  verdict tokens, averaged over both orders, which cancels its position bias; the candidate
  wins when its averaged probability beats the baseline's by more than `tie_band`.
- rubric, reference (grading.py): each answer graded alone on 1-5 (reference: against the other
  answer as reference), two calls per pair as above; the margin is the score difference.

Identical answers are ties without a judge call. The win-or-tie rate over decided pairs
gets a percentile-bootstrap confidence interval; the gate reads its lower bound.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from quantgate.tasks.judge.client import Chat
from quantgate.tasks.judge.grading import GRADED_MODES, grade, written_score
from quantgate.tasks.judge.prompt import (
    OWN_ANSWER_CHARS,
    SCHEMA,
    messages,
    parse_verdict,
    verdict_probabilities,
)
from quantgate.tasks.traffic.redact import redact

Outcome = Literal["win", "tie", "loss"]
_CANDIDATE_AS = {"first": "A", "second": "B"}
MAX_TOKENS = OWN_ANSWER_CHARS // 2 + 24  # room for the JSON around a full own_answer


@dataclass(frozen=True)
class Pair:
    id: str
    request: str
    candidate: str
    baseline: str
    label: Outcome | None = None  # known answer (reliability checks), else None


@dataclass(frozen=True)
class PairJudgment:
    id: str
    outcome: Outcome | None  # None: undecided (inconsistent or unparseable)
    text: tuple[str | None, str | None]  # candidate-perspective text verdict per order
    prob_margin: float | None  # P(candidate) - P(baseline), averaged over orders
    identical: bool = False
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class JudgeSummary:
    pairs: int
    identical: int
    decided: int
    wins: int
    ties: int
    losses: int
    unparseable: int  # judgments (2 per judged pair) without a valid JSON verdict
    errors: int  # judgments the endpoint never answered
    inconsistent: int  # judged pairs whose two text verdicts disagree
    # consistent / judged pairs with both verdicts parsed; NaN in the graded modes, which have no
    # order to swap (each answer is graded alone), so there is nothing to be consistent across
    swap_consistency: float
    win_or_tie: float
    ci_low: float
    ci_high: float
    mode: str

    def one_line(self) -> str:
        return (f"win-or-tie {self.win_or_tie:.2f} [{self.ci_low:.2f}, {self.ci_high:.2f}] over "
                f"{self.decided} decided of {self.pairs} ({self.identical} identical, "
                f"{self.inconsistent} inconsistent, {self.unparseable} unparseable)")


def _to_candidate(verdict: str | None, order: str) -> Outcome | None:
    if verdict is None:
        return None
    if verdict == "tie":
        return "tie"
    return "win" if verdict == _CANDIDATE_AS[order] else "loss"


def _by_margin(margin: float, tie_band: float) -> Outcome:
    return "win" if margin > tie_band else "loss" if margin < -tie_band else "tie"


def _graded_pair(endpoint: Chat, pair: Pair, *, mode: str, tie_band: float,
                 transcript: list[dict] | None) -> PairJudgment:
    """Both answers graded, each alone (rubric) or against the other as reference; no order, so the
    two text slots hold the one outcome read from the written digits."""
    scores, digits, errors = {}, {}, []
    for role, answer, other in (("candidate", pair.candidate, pair.baseline),
                                ("baseline", pair.baseline, pair.candidate)):
        score, call = grade(endpoint, pair.request, answer, other if mode == "reference" else None)
        scores[role] = score
        digits[role] = written_score(call)
        if call.error:
            errors.append(call.error)
        if transcript is not None:
            transcript.append({"id": pair.id, "graded": role, "request": redact(pair.request).text,
                               "answer": redact(answer).text, "reply": call.content, "score": score,
                               "error": call.error, "seconds": round(call.seconds, 2)})
    margin = None if None in scores.values() else (scores["candidate"] - scores["baseline"]) / 4
    text = (None if None in digits.values()
            else _by_margin((digits["candidate"] - digits["baseline"]) / 4, 0.0))
    outcome = None if margin is None else _by_margin(margin, tie_band)
    return PairJudgment(pair.id, outcome, (text, text), margin, errors=tuple(errors))


def judge_pair(endpoint: Chat, pair: Pair, *, mode: str, tie_band: float,
               transcript: list[dict] | None = None) -> PairJudgment:
    if " ".join(pair.candidate.split()) == " ".join(pair.baseline.split()):
        return PairJudgment(pair.id, "tie", ("tie", "tie"), 0.0, identical=True)
    if mode in GRADED_MODES:
        return _graded_pair(endpoint, pair, mode=mode, tie_band=tie_band, transcript=transcript)
    texts, probs, errors = [], [], []
    for order in ("first", "second"):
        a, b = (pair.candidate, pair.baseline) if order == "first" else (pair.baseline, pair.candidate)
        call = endpoint.chat(messages(pair.request, a, b), schema=SCHEMA, logprobs=(mode == "prob"),
                             max_tokens=MAX_TOKENS)
        verdict = parse_verdict(call.content)
        texts.append(_to_candidate(verdict, order))
        p = verdict_probabilities(call.logprobs)
        if p is not None:
            cand, base = _CANDIDATE_AS[order], "B" if _CANDIDATE_AS[order] == "A" else "A"
            probs.append(p[cand] - p[base])
        if call.error:
            errors.append(call.error)
        if transcript is not None:
            transcript.append({"id": pair.id, "order": order, "candidate_is": _CANDIDATE_AS[order],
                               "request": redact(pair.request).text, "answer_a": redact(a).text,
                               "answer_b": redact(b).text, "reply": call.content, "verdict": verdict,
                               "probs": p, "error": call.error, "seconds": round(call.seconds, 2)})
    margin = sum(probs) / 2 if len(probs) == 2 else None
    if mode == "prob" and margin is not None:
        outcome: Outcome | None = _by_margin(margin, tie_band)
    else:
        outcome = texts[0] if texts[0] is not None and texts[0] == texts[1] else None
    return PairJudgment(pair.id, outcome, (texts[0], texts[1]), margin, errors=tuple(errors))


def bootstrap_ci(values: list[float], *, level: float = 0.95, resamples: int = 2000,
                 seed: int = 0) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    lo = means[int((1 - level) / 2 * resamples)]
    hi = means[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return lo, hi


def summarize(judgments: list[PairJudgment], mode: str) -> JudgeSummary:
    outcomes = Counter(j.outcome for j in judgments if j.outcome is not None)
    decided = [j for j in judgments if j.outcome is not None]
    judged = [j for j in judgments if not j.identical]
    both = [j for j in judged if None not in j.text] if mode not in GRADED_MODES else []
    wot = [1.0 if j.outcome in ("win", "tie") else 0.0 for j in decided]
    lo, hi = bootstrap_ci(wot)
    return JudgeSummary(
        pairs=len(judgments), identical=sum(j.identical for j in judgments), decided=len(decided),
        wins=outcomes["win"], ties=outcomes["tie"], losses=outcomes["loss"],
        unparseable=sum(t is None for j in judged for t in j.text) - sum(len(j.errors) for j in judged),
        errors=sum(len(j.errors) for j in judged),
        inconsistent=sum(j.text[0] != j.text[1] for j in both),
        swap_consistency=(sum(j.text[0] == j.text[1] for j in both) / len(both)) if both else float("nan"),
        win_or_tie=sum(wot) / len(wot) if wot else float("nan"), ci_low=lo, ci_high=hi, mode=mode)


def judge_pairs(endpoint: Chat, pairs: list[Pair], *, mode: str, tie_band: float,
                transcript_path: Path | None = None) -> tuple[JudgeSummary, list[PairJudgment]]:
    transcript: list[dict] = []
    judgments = [judge_pair(endpoint, p, mode=mode, tie_band=tie_band, transcript=transcript)
                 for p in pairs]
    if transcript_path is not None:
        transcript_path.parent.mkdir(parents=True, exist_ok=True)
        with transcript_path.open("w", encoding="utf-8") as f:
            for row in transcript:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return summarize(judgments, mode), judgments
