"""The offline gate: a verdict per variant from paired evidence against budgets.

Every comparison is paired on the same items (tasks/gate/evidence.py) and gives an interval on the
relative degradation (positive = worse) and a one-sided test against the metric's `investigate`
budget. With `gate.slice_correction: holm` all of one variant's tests (each metric overall and on
every slice large enough to gate) form one family, so the chance that a variant no worse than its
budgets is rejected anywhere stays ≤ (1 − confidence) / 2 however many slices there are, while a
single slice that regresses clearly can still reject it. Verdicts:

- `reject`: some metric, overall or on a slice, is beyond its `investigate` budget with confidence
  (or the judge, when its measured reliability earns it a vote, says it loses with confidence);
- `pass`: not rejected, and every gating metric's interval ends within its `enable` budget;
- `monitor`: not rejected, perplexity's interval within its `monitor` budget, and every task
  metric still possibly within its own (too few items to call): canary only with the judge on
  live traffic (seed 000's middle tier);
- `inconclusive`: none of these; the reason names the metric and the items that would decide it.

A wide interval alone never rejects, and one metric's gain never offsets another's loss: each task
gates on the metric that measures it (gate.task_metrics). Among `pass` (then `monitor`)
non-control variants the winner is the best by the conf objective on measured numbers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from quantgate.conf.methods import ENGINE_SERVES
from quantgate.conf.schema import OBJECTIVES, GateConf
from quantgate.tasks.evaluate.lmeval import LmEvalResult, read_lmeval
from quantgate.tasks.evaluate.long_context import LongContextResult
from quantgate.tasks.evaluate.perplexity import EvalResult, read_eval
from quantgate.tasks.gate.evidence import OVERALL, Check, kl_checks, perplexity_checks, task_checks
from quantgate.tasks.gate.paired import holm
from quantgate.tasks.judge.pairwise import JudgeSummary
from quantgate.tasks.judge.reliability import JudgeVote

SHIPPABLE = ("pass", "monitor")


@dataclass(frozen=True)
class VariantScores:
    name: str
    method: str
    control: bool
    eval: EvalResult | None  # None when the variant failed
    size_bytes: int = 0
    bits_per_weight: float = float("nan")
    quantize_seconds: float = float("nan")
    quantize_cpu_seconds: float = float("nan")
    error: str = ""
    lmeval: LmEvalResult | None = None
    judge: JudgeSummary | None = None
    long: LongContextResult | None = None  # the long-context probe (long_context.enabled)
    # Measured by the bench at bench.gate_batch: "perf.decode_tok_s", "perf.tpot_ms",
    # "perf.ttft_ms", "energy.j_per_token", ... (empty when the bench did not run).
    perf: dict[str, float] = field(default_factory=dict)
    checkpoint: str | None = None  # the evaluated checkpoint folder (None: nothing to register)

    @property
    def stage(self) -> str:
        """The last stage this variant reached: ppl | tasks | judge | bench (none: it failed)."""
        if self.eval is None:
            return "none"
        return ("bench" if self.perf else "judge" if self.judge else "tasks" if self.lmeval else "ppl")


@dataclass(frozen=True)
class Verdict:
    name: str
    status: str  # pass | monitor | reject | inconclusive
    decided_by: str = ""  # "<metric>@<slice>", "<metric>", "judge", "error"
    stage: str = "none"
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    # Point estimates for tables and plots: baseline / variant PPL; variant / baseline task score.
    recovery: float = float("nan")
    worst_slice: str = ""
    worst_recovery: float = float("nan")
    task_recovery: dict[str, float] = field(default_factory=dict)
    worst_task_slice: str = ""
    worst_task_slice_recovery: float = float("nan")

    @property
    def passed(self) -> bool:
        """May go to the canary (a `monitor` variant only with the judge watching)."""
        return self.status in SHIPPABLE


def _is_task(c: Check) -> bool:
    return c.metric.startswith("lmeval.")


def _recovery(c: Check) -> float:
    d = c.interval.estimate
    return 1 / (1 + d) if c.metric in ("ppl", "long_ppl") else 1 - d


def rel(x: float) -> str:
    """A relative degradation as text: +2.2 %, or ×8,643 once a ratio is past ten (a collapsed model)."""
    return f"×{1 + x:,.0f}" if x >= 9 else f"{x:+.1%}"


def _pct(c: Check) -> str:
    i = c.interval
    if c.metric == "kl":  # absolute: nats per token
        return f"{c.key} {i.estimate:.4f} [{i.low:.4f}, {i.high:.4f}] nats/token"
    return f"{c.key} {rel(i.estimate)} [{rel(i.low)}, {rel(i.high)}]"


def _limit(c: Check, value: float) -> str:
    return f"{value:.4f}" if c.metric == "kl" else f"{value:.1%}"


def corrected(checks: list[Check], gate: GateConf, look: str = "all") -> list[Check]:
    """Each check's `rejected`, one-sided at (1 − confidence) / 2 (the interval's lower end), with
    Holm's step-down across the variant's whole family when conf asks for it. With a two-look
    perplexity screen each look spends its share of that rate (`gate.alpha_share`)."""
    alpha = (1 - gate.confidence) / 2 * gate.alpha_share(look)
    pvalues = {c.key: c.interval.p_beyond for c in checks}
    if gate.slice_correction == "holm":
        rejected = holm(pvalues, alpha=alpha)
    else:
        rejected = {k: p <= alpha for k, p in pvalues.items()}
    return [dataclasses.replace(c, rejected=rejected[c.key]) for c in checks]


def _point_estimates(checks: list[Check]) -> dict:
    ppl = {c.slice: _recovery(c) for c in checks if c.metric == "ppl"}
    slices = {k: r for k, r in ppl.items() if k != OVERALL}
    worst = min(slices, key=slices.__getitem__) if slices else ""
    tasks = {c.metric: _recovery(c) for c in checks if _is_task(c) and c.slice == OVERALL}
    task_slices = {c.key: _recovery(c) for c in checks if _is_task(c) and c.slice != OVERALL}
    worst_task = min(task_slices, key=task_slices.__getitem__) if task_slices else ""
    return {"recovery": ppl.get(OVERALL, math.nan), "worst_slice": worst,
            "worst_recovery": slices.get(worst, ppl.get(OVERALL, math.nan)), "task_recovery": tasks,
            "worst_task_slice": worst_task,
            "worst_task_slice_recovery": task_slices.get(worst_task, math.nan)}


def servable(v: VariantScores) -> bool:
    """Its format has a production engine, and the engine served it here (not refused, not a fallback)."""
    return ENGINE_SERVES.get(v.method, True) and not (v.eval is not None and v.eval.not_served)


def paired_baseline(evaluated: EvalResult | None, run_baseline: EvalResult | None) -> EvalResult | None:
    """The baseline a variant's perplexity pairs with: the run's, or the one scored on the same path
    (a variant the engine does not serve is scored on the reference path, against that baseline)."""
    if evaluated is not None and evaluated.paired_baseline:
        return read_eval(evaluated.paired_baseline)
    return run_baseline


def paired_lmeval(evaluated: LmEvalResult, run_baseline: LmEvalResult) -> LmEvalResult:
    """The baseline a variant's task evals pair with: the run's, or the one run on the same path (a
    variant the engine does not serve runs on the HF path, against that baseline)."""
    return read_lmeval(evaluated.paired_baseline) if evaluated.paired_baseline else run_baseline


def gate_variant(v: VariantScores, baseline: VariantScores, gate: GateConf, *, min_slice_tokens: int,
                 min_slice_items: int, judge_vote: JudgeVote | None = None) -> Verdict:
    if v.eval is None:
        status = "inconclusive" if v.error.startswith("skipped") else "reject"
        return Verdict(v.name, status, "error", "none", [v.error or "not evaluated"])
    base_eval = paired_baseline(v.eval, baseline.eval)
    assert base_eval is not None, "the baseline is evaluated before the gate"
    checks = perplexity_checks(base_eval, v.eval, gate, min_tokens=min_slice_tokens)
    checks += kl_checks(base_eval, v.eval, gate, min_tokens=min_slice_tokens)
    notes: list[str] = []
    if baseline.lmeval is not None and v.lmeval is not None:
        more, notes = task_checks(paired_lmeval(v.lmeval, baseline.lmeval).samples_path,
                                  v.lmeval.samples_path, gate, min_items=min_slice_items)
        checks += more
    if baseline.long is not None and v.long is not None:  # at the served context: KV error adds up
        checks += perplexity_checks(baseline.long.perplexity, v.long.perplexity, gate,
                                    min_tokens=min_slice_tokens, metric="long_ppl")
    checks = corrected(checks, gate, v.eval.look)
    status, decided_by, reasons, judge_notes = _status(v, baseline, checks, gate, judge_vote)
    return Verdict(v.name, status, decided_by, v.stage, reasons, notes + judge_notes, checks,
                   **_point_estimates(checks))


def screen(baseline: VariantScores, v: VariantScores, gate: GateConf, *, min_slice_tokens: int) -> Verdict:
    """The perplexity stage alone: a variant rejected here skips the later stages when gate.staged
    (its final verdict is this one: the same tests)."""
    ppl_only = dataclasses.replace(v, lmeval=None, judge=None, perf={}, long=None)
    verdict = gate_variant(ppl_only, dataclasses.replace(baseline, lmeval=None, long=None), gate,
                           min_slice_tokens=min_slice_tokens, min_slice_items=1)
    if v.eval is None or v.eval.look != "first":
        return verdict
    n, of = len(v.eval.requests), len(baseline.eval.requests) if baseline.eval else 0
    look = f"first look ({n} of {of} requests, at {gate.screen_alpha_share:.0%} of the false-alarm rate)"
    return dataclasses.replace(verdict, reasons=[f"{look}: {r}" for r in verdict.reasons])


def _status(v: VariantScores, baseline: VariantScores, checks: list[Check], gate: GateConf,
            vote: JudgeVote | None) -> tuple[str, str, list[str], list[str]]:
    family = f"Holm across {len(checks)} tests" if gate.slice_correction == "holm" else "uncorrected"
    if rejected := [c for c in checks if c.rejected]:
        # a metric rejected overall is named as such; else the slice with the strongest evidence
        c = min(rejected, key=lambda c: (c.slice != OVERALL, c.interval.p_beyond, -c.interval.estimate))
        at = f" (rejected at stage {v.stage})" if v.stage == "ppl" and v.lmeval is None else ""
        return "reject", c.key, [f"{_pct(c)} beyond investigate budget "
                                 f"{_limit(c, gate.budget(c.metric).investigate)} with confidence "
                                 f"(p={c.interval.p_beyond:.4f}, {family}){at}"], []
    judge_ok, judge_notes = _judge(v, vote)
    if judge_ok is False:
        j = v.judge
        assert j is not None and vote is not None
        return "reject", "judge", [f"judge win-or-tie {j.win_or_tie:.2f} [{j.ci_low:.2f}, {j.ci_high:.2f}] "
                                   f"below margin {vote.margin} with confidence"], judge_notes
    if baseline.lmeval is not None and v.lmeval is None:
        return "inconclusive", "lmeval", ["task evals did not run for this variant; "
                                          f"{v.error or 'no result'}"], judge_notes
    overall = [c for c in checks if c.slice == OVERALL]
    slack = {c.key: gate.budget(c.metric).enable - c.interval.high for c in overall}
    binding = min(overall, key=lambda c: slack[c.key])
    if slack[binding.key] >= 0 and judge_ok is not None:
        limit = gate.budget(binding.metric).enable
        return "pass", binding.key, [f"every gating metric within its enable budget; closest: "
                                     f"{_pct(binding)} ≤ {_limit(binding, limit)}"], judge_notes
    # perplexity and KL are resolved well at these sizes; task metrics may stay too uncertain to call
    ppl_beyond = [c for c in overall if not _is_task(c) and c.interval.high > gate.budget(c.metric).monitor]
    tasks_beyond = [c for c in overall if _is_task(c) and c.interval.low > gate.budget(c.metric).monitor]
    if not ppl_beyond and not tasks_beyond:
        short = [c for c in overall if c.interval.high > gate.budget(c.metric).enable]
        def reach(c: Check) -> float:  # how far past enable, in units of the monitor budget
            b = gate.budget(c.metric)
            return (c.interval.high - b.enable) / max(b.monitor, 1e-9)

        c = max([c for c in short if _is_task(c)] or short or [binding], key=reach)
        b = gate.budget(c.metric)
        why = (f"beyond enable {_limit(c, b.enable)}, within monitor {_limit(c, b.monitor)}"
               if c.interval.low > b.enable else
               f"too uncertain to pass (enable {_limit(c, b.enable)}); {_items(c)}")
        return "monitor", c.key, [f"{_pct(c)} {why}; perplexity and KL within monitor: canary only "
                                  "with the judge watching live traffic"], judge_notes
    c = (ppl_beyond or tasks_beyond)[0]
    b = gate.budget(c.metric)
    return "inconclusive", c.key, [f"{_pct(c)} beyond the monitor budget {_limit(c, b.monitor)} but not "
                                   f"beyond investigate {_limit(c, b.investigate)} with confidence: "
                                   f"investigate; {_items(c)}"], judge_notes


def _items(c: Check) -> str:
    need = c.items_to_decide
    if math.isinf(need):
        return "no number of items decides it at this effect"
    return f"~{int(need)} items would decide it at the observed effect (have {c.interval.n}): collect more"


def _judge(v: VariantScores, vote: JudgeVote | None) -> tuple[bool | None, list[str]]:
    """True: counts and does not block a pass; None: counts, not enough to pass; False: counts and
    rejects. A judge that does not count (advisory, did not run, too few decided pairs) is True."""
    if vote is None:
        return True, []
    j = v.judge
    if j is None:
        return True, ["judge did not run"] if v.lmeval is not None else []
    if not vote.counts:
        return True, [vote.note]
    # NaN consistency: a graded mode, with no order to swap; its decided count still has to reach
    # the minimum.
    if j.decided < vote.min_decided or j.swap_consistency < vote.min_consistency:
        return True, [f"judge inconclusive: {j.decided} decided pairs, swap consistency "
                      f"{j.swap_consistency:.2f} on this run's prompts"]
    if j.ci_high < vote.margin:
        return False, []
    if not j.ci_low >= vote.margin:
        return None, [f"judge win-or-tie CI low {j.ci_low:.2f} < {vote.margin}: at best monitor"]
    return True, []


def _objective_value(v: VariantScores, key: str) -> float:
    """Lower is better; a figure not measured (bench off or failed) ranks after every measured one."""
    values = {"size.bytes": float(v.size_bytes), "size.bits_per_weight": v.bits_per_weight,
              "perf.decode_tok_s": -v.perf.get("perf.decode_tok_s", float("nan"))}
    if key not in values and key not in OBJECTIVES:
        raise ValueError(f"gate.objective: unknown {key!r}; known: {list(OBJECTIVES)}")
    value = values.get(key, v.perf.get(key, float("nan")))
    return float("inf") if math.isnan(value) else value


@dataclass(frozen=True)
class GateDecision:
    verdicts: dict[str, Verdict]
    winner: str | None
    reason: str


def decide(baseline: VariantScores, variants: list[VariantScores], gate: GateConf, *,
           min_slice_tokens: int, min_slice_items: int, judge_vote: JudgeVote | None = None) -> GateDecision:
    verdicts = {v.name: gate_variant(v, baseline, gate, min_slice_tokens=min_slice_tokens,
                                     min_slice_items=min_slice_items, judge_vote=judge_vote)
                for v in variants}
    # A winner goes to the canary, and the canary serves on the production engine: a format no
    # engine serves (QuIP#, AQLM) is gated and reported, never chosen.
    eligible = [v for v in variants if verdicts[v.name].passed and not v.control and servable(v)]
    if not eligible:
        unservable = [v.name for v in variants if verdicts[v.name].passed and not servable(v)]
        why = (f" ({', '.join(unservable)} passed, but the serving engine does not serve it)"
               if unservable else "")
        return GateDecision(verdicts, None, f"no variant passed the gate{why}: the champion stays")
    best = min(eligible, key=lambda v: (verdicts[v.name].status != "pass",
                                        *(_objective_value(v, k) for k in gate.objective)))
    status = verdicts[best.name].status
    how = "passes" if status == "pass" else "is within the monitor tier (canary with the judge watching)"
    return GateDecision(verdicts, best.name, f"{best.name} {how} and is best by {', '.join(gate.objective)}")
