"""The comparison table and the gate report, as markdown (readable in a terminal too)."""

from __future__ import annotations

from quantgate.conf.schema import GateConf
from quantgate.tasks.evaluate.lmeval import LmEvalResult
from quantgate.tasks.evaluate.perplexity import EvalResult
from quantgate.tasks.gate.decide import GateDecision, VariantScores
from quantgate.tasks.judge.reliability import JudgeVote

HEADER = ("variant", "PPL", "recovery", "worst slice (PPL, recovery)", "tasks: worst recovery",
          "tasks: worst slice", "judge win-or-tie [95% CI]", "size MB", "bits/w", "decode × baseline",
          "J/token", "quantize s", "verdict")


def _perf_cells(perf: dict[str, float]) -> tuple[str, str]:
    """Speed ratio to the baseline (fp32 on CPU, bf16 on GPU) and J/token, both at the bench's gate batch."""
    if not perf:
        return "-", "-"
    batch = int(perf.get("perf.batch", 1))
    ratio = perf.get(f"perf.speedup_vs_baseline.bs{batch}", float("nan"))
    return f"{ratio:.2f} (bs {batch})", f"{perf.get('energy.j_per_token', float('nan')):.4f}"


def comparison_rows(
    baseline: EvalResult, *, baseline_bytes: int, baseline_bpw: float,
    variants: list[VariantScores], decision: GateDecision, baseline_perf: dict[str, float] | None = None,
) -> list[tuple[str, ...]]:
    rows = [("baseline", f"{baseline.ppl:.3f}", "1.000", "-", "-", "-", "-",
             f"{baseline_bytes / 1e6:.1f}", f"{baseline_bpw:.2f}", *_perf_cells(baseline_perf or {}), "-",
             "reference")]
    for v in variants:
        verdict = decision.verdicts[v.name]
        if v.eval is None:
            label = v.error if v.error.startswith("skipped") else f"FAILED: {v.error}"
            rows.append((v.name, *["-"] * (len(HEADER) - 2), label))
            continue
        tasks = verdict.task_recovery
        worst_task = min(tasks, key=tasks.__getitem__) if tasks else ""
        task_txt = f"{worst_task.removeprefix('lmeval.')} {tasks[worst_task]:.3f}" if worst_task else "-"
        task_slice = (f"{verdict.worst_task_slice.removeprefix('lmeval.')} "
                      f"{verdict.worst_task_slice_recovery:.3f}" if verdict.worst_task_slice else "-")
        j = v.judge
        judge_txt = f"{j.win_or_tie:.2f} [{j.ci_low:.2f}, {j.ci_high:.2f}] n={j.decided}" if j else "-"
        worst = v.eval.slices.get(verdict.worst_slice)
        worst_txt = (f"{verdict.worst_slice} ({worst.ppl:.3f}, {verdict.worst_recovery:.3f})"
                     if worst else "-")
        label = "PASS" if verdict.passed else "fail: " + "; ".join(verdict.reasons)
        if v.control:
            label = f"control, {label}"
        if decision.winner == v.name:
            label = f"WINNER ({label})"
        rows.append((v.name, f"{v.eval.ppl:.3f}", f"{verdict.recovery:.3f}", worst_txt, task_txt,
                     task_slice, judge_txt, f"{v.size_bytes / 1e6:.1f}", f"{v.bits_per_weight:.2f}",
                     *_perf_cells(v.perf), f"{v.quantize_seconds:.1f}", label))
    return rows


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
                         f"unparseable verdicts, {j.errors} endpoint errors); swap consistency "
                         f"{j.swap_consistency:.2f}")
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
        f"Threshold: recovery ≥ {gate.threshold('ppl')} for PPL (baseline / variant) and for every "
        f"lm-eval task metric (variant / baseline), overall and on the worst slice (slices with "
        f"≥ {min_slice_tokens} tokens for PPL). Objective among passing "
        f"non-control variants: {', '.join(gate.objective)}.",
        "",
        markdown_table(rows),
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
