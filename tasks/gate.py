"""Offline gate v1: perplexity recovery against the baseline, overall and on the worst slice.

Recovery for perplexity (lower is better) is baseline_ppl / variant_ppl, so 1.0 is no loss
and 0.95 means the variant's PPL is 5.3 % higher. A variant passes when overall and worst-slice
recovery are both ≥ the threshold from conf. Among passing non-control variants the winner is
the best by the conf objective (default: fewest bytes). No variant passing is a valid outcome:
the champion stays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from quantgate.conf.schema import GateConf
from quantgate.tasks.evaluate import EvalResult


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


@dataclass(frozen=True)
class Verdict:
    name: str
    passed: bool
    recovery: float = float("nan")
    worst_slice: str = ""
    worst_recovery: float = float("nan")
    reasons: list[str] = field(default_factory=list)


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


def judge_variant(v: VariantScores, baseline: EvalResult, gate: GateConf, *, min_tokens: int) -> Verdict:
    if v.eval is None:
        return Verdict(v.name, False, reasons=[f"failed: {v.error}"])
    threshold = gate.threshold("ppl")
    recovery = baseline.ppl / v.eval.ppl
    per_slice = slice_recoveries(baseline, v.eval, min_tokens)
    worst = min(per_slice, key=per_slice.__getitem__) if per_slice else "overall"
    worst_rec = per_slice.get(worst, recovery)
    reasons = []
    if recovery < threshold:
        reasons.append(f"ppl recovery {recovery:.3f} < {threshold}")
    if worst_rec < threshold:
        reasons.append(f"worst slice {worst} recovery {worst_rec:.3f} < {threshold}")
    return Verdict(v.name, not reasons, recovery, worst, worst_rec, reasons)


def _objective_value(v: VariantScores, key: str) -> float:
    values = {"size.bytes": float(v.size_bytes), "size.bits_per_weight": v.bits_per_weight}
    if key not in values:
        raise ValueError(f"gate.objective: unknown {key!r}; known: {sorted(values)}")
    return values[key]


def decide(
    baseline: EvalResult, variants: list[VariantScores], gate: GateConf, *, min_slice_tokens: int
) -> GateDecision:
    verdicts = {v.name: judge_variant(v, baseline, gate, min_tokens=min_slice_tokens) for v in variants}
    eligible = [v for v in variants if verdicts[v.name].passed and not v.control]
    if not eligible:
        return GateDecision(verdicts, None, "no variant passed the gate: the champion stays")
    best = min(eligible, key=lambda v: tuple(_objective_value(v, k) for k in gate.objective))
    return GateDecision(verdicts, best.name,
                        f"{best.name} passes and is best by {', '.join(gate.objective)}")
