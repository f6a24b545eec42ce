"""The comparison table and the gate report, as markdown (readable in a terminal too)."""

from __future__ import annotations

import math

from quantgate.conf.methods import ENGINE_SERVES
from quantgate.conf.schema import GateConf
from quantgate.tasks.evaluate.lmeval import LmEvalResult
from quantgate.tasks.evaluate.perplexity import EvalResult
from quantgate.tasks.gate.decide import GateDecision, VariantScores, rel
from quantgate.tasks.gate.evidence import OVERALL, Check
from quantgate.tasks.judge.reliability import JudgeVote

HEADER = ("variant", "PPL", "PPL Δ [CI]", "KL nats/token [CI]", "worst PPL slice Δ", "worst task Δ [CI]",
          "flips (task)", "judge win-or-tie [95% CI]", "size MB", "bits/w", "decode × baseline", "J/token",
          "quantize s", "stage", "verdict (decided by)")


def _delta(c: Check | None) -> str:
    if c is None:
        return "-"
    i = c.interval
    return f"{c.key.removeprefix('lmeval.')} {rel(i.estimate)} [{rel(i.low)}, {rel(i.high)}]"


def _worst(checks: list[Check], *, ppl: bool, overall: bool) -> Check | None:
    """The check whose interval reaches furthest into degradation, among perplexity's (`ppl`) or
    the task metrics', overall or on slices."""
    pool = [c for c in checks if (c.metric == "ppl" if ppl else c.metric.startswith("lmeval."))
            and (c.slice == OVERALL) == overall]
    return max(pool, key=lambda c: c.interval.high) if pool else None


def _flips(checks: list[Check]) -> str:
    flipped = [c for c in checks if c.flips is not None and c.slice == OVERALL]
    if not flipped:
        return "-"
    c = max(flipped, key=lambda c: c.flips.share if c.flips else 0)
    f = c.flips
    assert f is not None
    name = c.metric.removeprefix("lmeval.")
    return f"{name} {f.share:.0%} (−{f.lost}/+{f.gained}, McNemar p={c.mcnemar_p:.2g})"


def _perf_cells(perf: dict[str, float]) -> tuple[str, str]:
    """Speed ratio to the baseline (fp32 on CPU, bf16 on GPU) and J/token, both at the bench's gate batch."""
    if not perf:
        return "-", "-"
    batch = int(perf.get("perf.batch", 1))
    ratio = perf.get(f"perf.speedup_vs_baseline.bs{batch}", float("nan"))
    level = f"{batch} clients" if "perf.requests_per_s" in perf else f"bs {batch}"  # served, or batched
    return f"{ratio:.2f} ({level})", f"{perf.get('energy.j_per_token', float('nan')):.4f}"


def comparison_rows(
    baseline: EvalResult, *, baseline_bytes: int, baseline_bpw: float,
    variants: list[VariantScores], decision: GateDecision, baseline_perf: dict[str, float] | None = None,
) -> list[tuple[str, ...]]:
    rows = [("baseline", f"{baseline.ppl:.3f}", "reference", "-", "-", "-", "-", "-",
             f"{baseline_bytes / 1e6:.1f}", f"{baseline_bpw:.2f}", *_perf_cells(baseline_perf or {}), "-",
             "-", "reference")]
    assert len(rows[0]) == len(HEADER)
    for v in variants:
        verdict = decision.verdicts[v.name]
        if v.eval is None:
            label = v.error if v.error.startswith("skipped") else f"FAILED: {v.error}"
            rows.append((v.name, *["-"] * (len(HEADER) - 2), label))
            continue
        j = v.judge
        judge_txt = ("-" if j is None else f"none decided of {j.pairs}" if not j.decided
                     else f"{j.win_or_tie:.2f} [{j.ci_low:.2f}, {j.ci_high:.2f}] n={j.decided}")
        label = f"{verdict.status.upper()} ({verdict.decided_by})"
        if v.control:
            label = f"control, {label}"
        if v.eval.not_served:
            label = f"{label}; {v.eval.not_served} (reference path, never canaried)"
        elif not ENGINE_SERVES.get(v.method, True):
            label = f"{label}; not servable on vLLM (reference path, never canaried)"
        if decision.winner == v.name:
            label = f"WINNER, {label}"
        overall = next(c for c in verdict.checks if c.metric == "ppl" and c.slice == OVERALL)
        i = overall.interval
        ppl_delta = f"{rel(i.estimate)} [{rel(i.low)}, {rel(i.high)}]"
        kl = next((c.interval for c in verdict.checks if c.key == "kl"), None)
        kl_txt = f"{kl.estimate:.4f} [{kl.low:.4f}, {kl.high:.4f}]" if kl else "-"
        rows.append((v.name, f"{v.eval.ppl:.3f}", ppl_delta, kl_txt,
                     _delta(_worst(verdict.checks, ppl=True, overall=False)),
                     _delta(_worst(verdict.checks, ppl=False, overall=True)), _flips(verdict.checks),
                     judge_txt, f"{v.size_bytes / 1e6:.1f}", f"{v.bits_per_weight:.2f}",
                     *_perf_cells(v.perf), f"{v.quantize_seconds:.1f}", verdict.stage, label))
    return rows


def decision_lines(decision: GateDecision) -> list[str]:
    """One line per variant: the verdict, what decided it and why."""
    return [f"- **{name}**: {v.status} (decided by `{v.decided_by}`, stage {v.stage}): "
            + "; ".join(v.reasons) for name, v in decision.verdicts.items()]


def detectable(c: Check) -> float:
    """The degradation a paired test of this size finds with 80 % power at the gate's one-sided
    level: (z_0.975 + z_0.8) standard errors, the standard error read off the 95 % interval."""
    return (1.96 + 0.8416) * (c.interval.high - c.interval.low) / (2 * 1.96)


def evidence_table(decision: GateDecision, *, slices_shown: int = 3) -> str:
    """Every gating metric overall, with its interval, p-value and the effect this sample size
    detects, per variant; the worst few rejected slices too (the MLflow run has them all)."""
    rows = []
    for name, v in decision.verdicts.items():
        rejected = sorted((c for c in v.checks if c.slice != OVERALL and c.rejected),
                          key=lambda c: -c.interval.estimate)
        shown = {c.key for c in rejected[:slices_shown]}
        for c in v.checks:
            if c.slice != OVERALL and c.key not in shown:
                continue
            i = c.interval
            fmt = "{:.4f}".format if c.metric == "kl" else rel
            rows.append((name, c.key, fmt(i.estimate), f"[{fmt(i.low)}, {fmt(i.high)}]", str(i.n),
                         f"{i.p_beyond:.4f}", "yes" if c.rejected else "",
                         f"{c.flips.share:.0%}" if c.flips else "-",
                         f"{detectable(c):.4f}" if c.metric == "kl" else rel(detectable(c)).lstrip("+"),
                         "-" if math.isinf(c.items_to_decide) else str(int(c.items_to_decide))))
    header = ("variant", "metric", "Δ", "CI", "n", "p (beyond investigate)", "rejected", "flips",
              "detects (80 % power)", "items to decide")
    return markdown_table(rows, header)


def markdown_table(rows: list[tuple[str, ...]], header: tuple[str, ...] = HEADER) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def lmeval_table(baseline: LmEvalResult, variants: list[VariantScores]) -> str:
    """Task metric values, each variant's with its recovery against the baseline."""
    metrics = sorted(baseline.metrics)
    header = ("variant", *metrics)
    rows = [("baseline", *[f"{baseline.metrics[m]:.3f}" for m in metrics])]
    for v in variants:
        if v.lmeval is None:
            continue
        cells = []
        for m in metrics:
            got, base = v.lmeval.metrics.get(m), baseline.metrics[m]
            cells.append("-" if got is None else
                         f"{got:.3f} ({got / base:.2f})" if base > 0 else f"{got:.3f}")
        rows.append((v.name, *cells))
    return markdown_table(rows, header)


def judge_lines(variants: list[VariantScores], vote: JudgeVote | None) -> list[str]:
    if vote is None:
        return ["Judge: disabled."]
    lines = [f"Judge: {vote.note}. Pass rule when it counts: lower 95 % bound of the win-or-tie "
             f"rate ≥ {vote.margin}.", ""]
    for v in variants:
        j = v.judge
        if j is not None:
            lines.append(f"- {v.name}: {j.wins} wins, {j.ties} ties, {j.losses} losses over "
                         f"{j.decided} decided pairs of {j.pairs} ({j.identical} identical answers, "
                         f"{j.inconsistent} inconsistent across the position swap, {j.unparseable} "
                         f"unparseable verdicts, {j.errors} endpoint errors); "
                         + ("graded alone, no order to swap" if math.isnan(j.swap_consistency)
                            else f"swap consistency {j.swap_consistency:.2f}"))
    return lines


def gate_report(
    *, model: str, rows: list[tuple[str, ...]], decision: GateDecision, gate: GateConf,
    heldout_requests: int, heldout_tokens: int, min_slice_tokens: int,
    baseline_lmeval: LmEvalResult | None = None, variants: list[VariantScores] | None = None,
    judge_vote: JudgeVote | None = None,
) -> str:
    lines = [
        f"# Gate report: {model}",
        "",
        f"**Decision:** {decision.reason}.",
        "",
        f"Held-out traffic: {heldout_requests} requests, {heldout_tokens} scored answer tokens. "
        f"Δ is the relative degradation against the baseline, paired on the same requests and items "
        f"(positive = worse: PPL ratio − 1, 1 − task score ratio), with its {gate.confidence:.0%} "
        f"bootstrap interval; KL is the mean next-token KL from the baseline (nats per token). "
        f"Budgets (enable / monitor / investigate): "
        + "; ".join(f"{k} {b.enable:.4f} / {b.monitor:.4f} / {b.investigate:.4f} nats" if k == "kl" else
                    f"{k} {b.enable:.1%} / {b.monitor:.1%} / {b.investigate:.1%}"
                    for k, b in gate.budgets.items())
        + f". Reject: beyond investigate with confidence, {gate.slice_correction} correction across "
        f"each variant's tests (slices with ≥ {min_slice_tokens} tokens for PPL). Objective among "
        f"pass (then monitor) non-control variants: {', '.join(gate.objective)}.",
        "",
        markdown_table(rows),
        "",
        "## Verdicts",
        "",
        *decision_lines(decision),
        "",
        "## Paired evidence (gating metrics overall; the worst slices where they reject)",
        "",
        evidence_table(decision),
        "",
    ]
    if baseline_lmeval is not None:
        lines += ["## lm-eval tasks (value, recovery)", "", lmeval_table(baseline_lmeval, variants or []), ""]
        lines += [f"- {t}: skipped, {why}" for t, why in baseline_lmeval.skipped.items()]
        lines += ["## LLM-as-judge", "", *judge_lines(variants or [], judge_vote), ""]
    notes = [f"- {n}: {'; '.join(v.notes)}" for n, v in decision.verdicts.items() if v.notes]
    if notes:
        lines += ["## Notes", "", *notes, ""]
    return "\n".join(lines)
