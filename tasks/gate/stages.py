"""Prefect tasks for the decision: score every variant (size, measured speed and energy), gate them
against the baseline, and write the report with the performance evidence beside it."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from prefect import task

from quantgate.conf.engine import EngineConf
from quantgate.conf.methods import VariantSpec
from quantgate.conf.schema import EvalConf, GateConf, JudgeConf, LmEvalConf
from quantgate.tasks.evaluate.perplexity import EvalResult
from quantgate.tasks.gate.decide import GateDecision, VariantScores, decide, gate_variant
from quantgate.tasks.gate.report import HEADER, comparison_rows, gate_report, markdown_table
from quantgate.tasks.gate.staged import StagedScores, score_in_stages
from quantgate.tasks.judge.reliability import JudgeVote, judge_vote
from quantgate.tasks.model.size import checkpoint_size
from quantgate.tasks.perf.bench import BenchReport
from quantgate.tasks.perf.pareto import ParetoPoint, quality_of
from quantgate.tasks.perf.plan import RunPlan
from quantgate.tasks.perf.report import performance_files, performance_section, predicted_for
from quantgate.tasks.runtime.caching import CACHED
from quantgate.tasks.runtime.threads import set_threads
from quantgate.tasks.traffic.prepare import PreparedTraffic


@dataclass(frozen=True)
class GateOutcome:
    baseline: VariantScores
    variants: list[VariantScores]
    decision: GateDecision
    vote: JudgeVote | None


def scored(v: VariantScores, bench: BenchReport | None) -> VariantScores:
    """`v` with its checkpoint's size and the bench's figures; a variant that failed stays as it is."""
    if v.checkpoint is None or v.eval is None:
        return v
    size = checkpoint_size(v.checkpoint)
    return dataclasses.replace(v, size_bytes=size.bytes, bits_per_weight=size.bits_per_weight,
                               perf=bench.metrics(v.name) if bench else {})


@task(name="gate")
def gate_task(*, baseline: VariantScores, variants: list[VariantScores], bench: BenchReport | None,
              gate: GateConf, judge: JudgeConf, min_slice_tokens: int, min_slice_items: int) -> GateOutcome:
    base, scores = scored(baseline, bench), [scored(v, bench) for v in variants]
    vote = judge_vote(judge) if judge.enabled else None
    decision = decide(base, scores, gate, min_slice_tokens=min_slice_tokens,
                      min_slice_items=min_slice_items, judge_vote=vote)
    return GateOutcome(base, scores, decision, vote)


@task(name="score", task_run_name="score-{variant}", **CACHED)
def staged_scores_task(*, variant: str, checkpoint: str, traffic: PreparedTraffic, eval_conf: EvalConf,
                       lmeval_conf: LmEvalConf, engine: EngineConf, gate: GateConf, state_dir: str,
                       baseline: EvalResult, baseline_checkpoint: str, baseline_results_dir: str,
                       min_slice_tokens: int) -> StagedScores:
    """A variant's perplexity looks, their screens and its task evals, on one engine server (staged.py)."""
    set_threads(eval_conf.num_cpus)
    return score_in_stages(variant=variant, checkpoint=checkpoint, traffic=traffic, eval_conf=eval_conf,
                           lmeval_conf=lmeval_conf, engine=engine, gate=gate, state_dir=state_dir,
                           baseline=baseline, baseline_checkpoint=baseline_checkpoint,
                           baseline_results_dir=baseline_results_dir, min_slice_tokens=min_slice_tokens)


@task(name="survivors")
def survivors_task(*, baseline: VariantScores, variants: list[VariantScores], gate: GateConf,
                   min_slice_tokens: int, min_slice_items: int) -> list[str]:
    """The variants that go on to the judge and the bench: every evaluated one, less (gate.staged)
    those the perplexity and task evidence already rejects."""
    out = []
    for v in variants:
        if v.eval is None:
            continue
        verdict = gate_variant(v, baseline, gate, min_slice_tokens=min_slice_tokens,
                               min_slice_items=min_slice_items) if gate.staged else None
        if verdict is not None and verdict.status == "reject":
            print(f"      {v.name}: rejected at stage {verdict.stage} by {verdict.decided_by}, skips the "
                  "judge and the bench")
        else:
            out.append(v.name)
    return out


def pareto_points(outcome: GateOutcome) -> list[ParetoPoint]:
    """Each measured variant: the lowest recovery the gate checked against its J/token and tokens/s."""
    verdicts = outcome.decision.verdicts
    return [ParetoPoint(s.name, quality_of(verdicts[s.name]), s.perf.get("energy.j_per_token", math.nan),
                        s.perf.get("perf.decode_tok_s", math.nan), verdicts[s.name].passed)
            for s in outcome.variants if s.eval is not None and s.perf]


@dataclass(frozen=True)
class RunReport:
    markdown: str
    table: list[tuple[str, ...]]
    header: tuple[str, ...]
    files: dict[str, str]  # roofline plan, bench JSON, Pareto plot, the run's config

    def table_text(self) -> str:
        return markdown_table(self.table, self.header)


@task(name="report")
def report_task(*, model_name: str, model_path: str, outcome: GateOutcome, plan: RunPlan,
                bench: BenchReport | None, specs: tuple[VariantSpec, ...], gate: GateConf,
                bench_hardware: str, heldout_requests: int, min_slice_tokens: int, state_dir: str,
                flow_run_id: str, config_json: str) -> RunReport:
    """The report and its files, under `<state>/runs/<flow run id>/`."""
    out = Path(state_dir) / "runs" / flow_run_id
    out.mkdir(parents=True, exist_ok=True)
    (out / "pipeline_config.json").write_text(config_json)
    base, decision = outcome.baseline, outcome.decision
    assert base.eval is not None, "the baseline is evaluated before the report"
    rows = comparison_rows(base.eval, baseline_bytes=base.size_bytes, baseline_bpw=base.bits_per_weight,
                           variants=outcome.variants, decision=decision, baseline_perf=base.perf)
    text = gate_report(model=model_name, rows=rows, decision=decision, gate=gate,
                       heldout_requests=heldout_requests, heldout_tokens=base.eval.tokens,
                       min_slice_tokens=min_slice_tokens, baseline_lmeval=base.lmeval,
                       variants=outcome.variants, judge_vote=outcome.vote)
    predicted = predicted_for(model_path, bench_hardware, bench, list(specs))
    files = performance_files(out, plan, bench, pareto_points(outcome), predicted,
                                threshold=1 / (1 + gate.budget("ppl").enable))
    text += "\n" + performance_section(plan, bench, bench_hardware, predicted)
    return RunReport(text, rows, HEADER, {**files, "config": str(out / "pipeline_config.json")})
