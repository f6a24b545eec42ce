"""The comparison table and the gate report, as markdown (readable in a terminal too)."""

from __future__ import annotations

from quantgate.conf.schema import GateConf
from quantgate.tasks.evaluate import EvalResult
from quantgate.tasks.gate import GateDecision, VariantScores

HEADER = ("variant", "PPL", "recovery", "worst slice (PPL, recovery)", "size MB", "bits/w",
          "quantize s", "verdict")


def comparison_rows(
    baseline: EvalResult, *, baseline_bytes: int, baseline_bpw: float,
    variants: list[VariantScores], decision: GateDecision,
) -> list[tuple[str, ...]]:
    rows = [("baseline", f"{baseline.ppl:.3f}", "1.000", "-", f"{baseline_bytes / 1e6:.1f}",
             f"{baseline_bpw:.2f}", "-", "reference")]
    for v in variants:
        verdict = decision.verdicts[v.name]
        if v.eval is None:
            rows.append((v.name, "-", "-", "-", "-", "-", "-", f"FAILED: {v.error}"))
            continue
        worst = v.eval.slices.get(verdict.worst_slice)
        worst_txt = (f"{verdict.worst_slice} ({worst.ppl:.3f}, {verdict.worst_recovery:.3f})"
                     if worst else "-")
        label = "PASS" if verdict.passed else "fail: " + "; ".join(verdict.reasons)
        if v.control:
            label = f"control, {label}"
        if decision.winner == v.name:
            label = f"WINNER ({label})"
        rows.append((v.name, f"{v.eval.ppl:.3f}", f"{verdict.recovery:.3f}", worst_txt,
                     f"{v.size_bytes / 1e6:.1f}", f"{v.bits_per_weight:.2f}",
                     f"{v.quantize_seconds:.1f}", label))
    return rows


def markdown_table(rows: list[tuple[str, ...]], header: tuple[str, ...] = HEADER) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def gate_report(
    *, model: str, rows: list[tuple[str, ...]], decision: GateDecision, gate: GateConf,
    heldout_requests: int, heldout_tokens: int, min_slice_tokens: int,
) -> str:
    return "\n".join([
        f"# Gate report: {model}",
        "",
        f"**Decision:** {decision.reason}.",
        "",
        f"Held-out traffic: {heldout_requests} requests, {heldout_tokens} scored answer tokens. "
        f"Threshold: PPL recovery (baseline / variant) ≥ {gate.threshold('ppl')} overall and on "
        f"the worst slice (slices with ≥ {min_slice_tokens} tokens). Objective among passing "
        f"non-control variants: {', '.join(gate.objective)}.",
        "",
        markdown_table(rows),
        "",
    ])
