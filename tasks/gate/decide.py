"""Offline gate: recovery against the baseline on every metric, its worst slice, and the judge.

Recovery for perplexity (lower is better) is baseline_ppl / variant_ppl; for lm-eval task
metrics (higher is better) it is variant / baseline. 1.0 is no loss. A variant passes when
every recovery, overall and on the worst slice, is ≥ its threshold from conf, and (when the
judge's measured reliability earns it a vote) the lower bound of its judge win-or-tie rate
reaches the margin. A task metric the baseline scores 0 on measures nothing here and does
not gate. Among passing non-control variants the winner is the best by the conf objective, on
measured numbers (default: lowest J/token at the bench's gate batch, then fewest bytes). No
variant passing is a valid outcome: the champion stays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from quantgate.conf.schema import OBJECTIVES, GateConf
from quantgate.tasks.evaluate.lmeval import LmEvalResult
from quantgate.tasks.evaluate.perplexity import EvalResult
from quantgate.tasks.judge.pairwise import JudgeSummary
from quantgate.tasks.judge.reliability import JudgeVote


@dataclass(frozen=True)
class VariantScores:
    name: str
    method: str
    control: bool
    eval: EvalResult | None  # None when the variant failed
    size_bytes: int = 0
    bits_per_weight: float = float("nan")
    quantize_seconds: float = float("nan")
    error: str = ""
    lmeval: LmEvalResult | None = None
    judge: JudgeSummary | None = None
    # Measured by the bench at bench.gate_batch: "perf.decode_tok_s", "perf.tpot_ms",
    # "perf.ttft_ms", "energy.j_per_token", ... (empty when the bench did not run).
    perf: dict[str, float] = field(default_factory=dict)
    checkpoint: str | None = None  # the evaluated checkpoint folder (None: nothing to register)


@dataclass(frozen=True)
class Verdict:
    name: str
    passed: bool
    recovery: float = float("nan")
    worst_slice: str = ""
    worst_recovery: float = float("nan")
    reasons: list[str] = field(default_factory=list)
    task_recovery: dict[str, float] = field(default_factory=dict)  # "lmeval.<task>.<metric>"
    worst_task_slice: str = ""  # "<task>.<metric>@<slice>"
    worst_task_slice_recovery: float = float("nan")
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class GateDecision:
    verdicts: dict[str, Verdict]
    winner: str | None
    reason: str


def slice_recoveries(baseline: EvalResult, variant: EvalResult, min_tokens: int) -> dict[str, float]:
    return {
        name: base.ppl / variant.slices[name].ppl
        for name, base in baseline.slices.items()
        if base.tokens >= min_tokens and name in variant.slices
    }


def task_recoveries(baseline: LmEvalResult, variant: LmEvalResult, *, min_items: int
                    ) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """(per metric, per metric@slice, notes): variant / baseline for higher-is-better metrics."""
    overall, per_slice, notes = {}, {}, []
    for metric, base in sorted(baseline.metrics.items()):
        if metric not in variant.metrics:
            notes.append(f"lmeval.{metric} missing for this variant")
        elif base <= 0:
            notes.append(f"lmeval.{metric}: baseline scores 0, does not gate")
        else:
            overall[f"lmeval.{metric}"] = variant.metrics[metric] / base
    for metric, slices in baseline.slices.items():
        for name, (base, items) in slices.items():
            got = variant.slices.get(metric, {}).get(name)
            if items >= min_items and base > 0 and got is not None:
                per_slice[f"lmeval.{metric}@{name}"] = got[0] / base
    return overall, per_slice, notes


def gate_variant(v: VariantScores, baseline: EvalResult, gate: GateConf, *, min_tokens: int,
                 baseline_lmeval: LmEvalResult | None = None, min_slice_items: int,
                 judge_vote: JudgeVote | None = None) -> Verdict:
    if v.eval is None:
        return Verdict(v.name, False, reasons=[f"failed: {v.error}"])
    threshold = gate.threshold("ppl")
    recovery = baseline.ppl / v.eval.ppl
    per_slice = slice_recoveries(baseline, v.eval, min_tokens)
    worst = min(per_slice, key=per_slice.__getitem__) if per_slice else "overall"
    worst_rec = per_slice.get(worst, recovery)
    reasons, notes = [], []
    if recovery < threshold:
        reasons.append(f"ppl recovery {recovery:.3f} < {threshold}")
    if worst_rec < threshold:
        reasons.append(f"worst slice {worst} recovery {worst_rec:.3f} < {threshold}")
    tasks, task_slices = {}, {}
    if baseline_lmeval is not None:
        if v.lmeval is None:
            reasons.append("lm-eval did not run")
        else:
            tasks, task_slices, notes = task_recoveries(baseline_lmeval, v.lmeval, min_items=min_slice_items)
    for metric, rec in tasks.items():
        if rec < gate.threshold(metric):
            reasons.append(f"{metric} recovery {rec:.3f} < {gate.threshold(metric)}")
    worst_task = min(task_slices, key=task_slices.__getitem__) if task_slices else ""
    if worst_task:
        rec, need = task_slices[worst_task], gate.threshold(worst_task.split("@")[0])
        if rec < need:
            reasons.append(f"worst slice {worst_task} recovery {rec:.3f} < {need}")
    if judge_vote is not None:
        if v.judge is None:
            notes.append("judge did not run")
        elif not judge_vote.counts:
            notes.append(judge_vote.note)
        elif (v.judge.decided < judge_vote.min_decided
              or not v.judge.swap_consistency >= judge_vote.min_consistency):
            notes.append(f"judge inconclusive: {v.judge.decided} decided pairs, swap consistency "
                         f"{v.judge.swap_consistency:.2f} on this run's prompts")
        elif not v.judge.ci_low >= judge_vote.margin:
            reasons.append(f"judge win-or-tie CI low {v.judge.ci_low:.2f} < {judge_vote.margin}")
    return Verdict(v.name, not reasons, recovery, worst, worst_rec, reasons, tasks, worst_task,
                   task_slices.get(worst_task, float("nan")), notes)


def _objective_value(v: VariantScores, key: str) -> float:
    """Lower is better; a figure not measured (bench off or failed) ranks after every measured one."""
    values = {"size.bytes": float(v.size_bytes), "size.bits_per_weight": v.bits_per_weight,
              "perf.decode_tok_s": -v.perf.get("perf.decode_tok_s", float("nan"))}
    if key not in values and key not in OBJECTIVES:
        raise ValueError(f"gate.objective: unknown {key!r}; known: {list(OBJECTIVES)}")
    value = values.get(key, v.perf.get(key, float("nan")))
    return float("inf") if math.isnan(value) else value


def decide(
    baseline: EvalResult, variants: list[VariantScores], gate: GateConf, *, min_slice_tokens: int,
    baseline_lmeval: LmEvalResult | None = None, min_slice_items: int,
    judge_vote: JudgeVote | None = None,
) -> GateDecision:
    verdicts = {v.name: gate_variant(v, baseline, gate, min_tokens=min_slice_tokens,
                                     baseline_lmeval=baseline_lmeval, min_slice_items=min_slice_items,
                                     judge_vote=judge_vote)
                for v in variants}
    eligible = [v for v in variants if verdicts[v.name].passed and not v.control]
    if not eligible:
        return GateDecision(verdicts, None, "no variant passed the gate: the champion stays")
    best = min(eligible, key=lambda v: tuple(_objective_value(v, k) for k in gate.objective))
    return GateDecision(verdicts, best.name,
                        f"{best.name} passes and is best by {', '.join(gate.objective)}")
