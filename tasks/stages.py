"""Thin Prefect task wrappers: set threads, call one function, return paths.

Results are cached on the hash of the inputs (and the task's source), so an identical
re-run skips finished work; the functions underneath are idempotent on their output
folders too, so a run killed half-way resumes without redoing finished variants.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import INPUTS, TASK_SOURCE

from quantgate.conf.methods import VariantSpec
from quantgate.conf.schema import BenchConf, GateConf, JudgeConf, LmEvalConf, PlanConf, TrafficConf
from quantgate.tasks.calibrate.stats import CalibrationResult, calibrate_file, calibration_drift
from quantgate.tasks.evaluate.lmeval import LmEvalResult, run_lmeval
from quantgate.tasks.evaluate.perplexity import EvalResult, evaluate_checkpoint
from quantgate.tasks.gate.decide import GateDecision, JudgeVote, VariantScores, decide
from quantgate.tasks.judge.pairwise import JudgeSummary
from quantgate.tasks.judge.replay import judge_replay
from quantgate.tasks.model.load import set_threads
from quantgate.tasks.model.size import checkpoint_size
from quantgate.tasks.model.source import ModelRef, resolve_model
from quantgate.tasks.perf.bench import BenchReport, run_bench
from quantgate.tasks.perf.plan import plan_variants
from quantgate.tasks.perf.roofline import VariantPlan
from quantgate.tasks.quantize.run import QuantizeResult, quantize_variant
from quantgate.tasks.registry.publish import PublishInputs, RunRecord, publish_run
from quantgate.tasks.traffic.prepare import PreparedTraffic, prepare_traffic

CACHED = {"cache_policy": INPUTS + TASK_SOURCE, "persist_result": True}


@task(name="calibrate", task_run_name="calibrate", **CACHED)
def calibrate_task(*, model_path: str, calibration_path: str, out_dir: str, max_seq_len: int,
                   top_k: int, num_cpus: float) -> CalibrationResult:
    set_threads(num_cpus)
    return calibrate_file(model_path, calibration_path, out_dir, max_seq_len=max_seq_len,
                          top_k=top_k)


@task(name="quantize", task_run_name="quantize-{spec.name}", **CACHED)
def quantize_task(*, spec: VariantSpec, model_path: str, calibration_path: str, out_dir: str,
                  max_seq_len: int) -> QuantizeResult:
    set_threads(spec.resources.num_cpus)
    return quantize_variant(spec, model_path=model_path, calibration_path=calibration_path,
                            out_dir=out_dir, max_seq_len=max_seq_len)


@task(name="evaluate", task_run_name="evaluate-{variant}", **CACHED)
def evaluate_task(*, variant: str, checkpoint: str, heldout_path: str, out_path: str,
                  window: int, batch_size: int, dtype: str, num_cpus: float) -> EvalResult:
    set_threads(num_cpus)
    return evaluate_checkpoint(checkpoint, heldout_path, out_path, window=window,
                               batch_size=batch_size, dtype=dtype)


@task(name="lm-eval", task_run_name="lm-eval-{variant}", **CACHED)
def lmeval_task(*, variant: str, checkpoint: str, out_dir: str, conf: LmEvalConf, replay_path: str,
                dtype: str) -> LmEvalResult:
    set_threads(conf.num_cpus)
    return run_lmeval(checkpoint, out_dir, tasks=list(conf.tasks), replay_path=replay_path,
                      replay_size=conf.replay_size, batch_size=conf.batch_size, dtype=dtype,
                      limit=conf.limit, backend=conf.backend)


# The judge server's port changes from run to run: not part of what the result depends on.
@task(name="judge", task_run_name="judge-{variant}", cache_policy=(INPUTS - "base_url") + TASK_SOURCE,
      persist_result=True)
def judge_task(*, variant: str, baseline_samples: str, candidate_samples: str, conf: JudgeConf,
               base_url: str, out_dir: str) -> JudgeSummary:
    return judge_replay(baseline_samples=baseline_samples, candidate_samples=candidate_samples,
                        conf=conf, base_url=base_url, out_dir=out_dir)


# Driver-side steps: cheap, run inline in the flow's process (called, not submitted).

@task(name="resolve-model")
def resolve_model_task(*, name: str, cache_dir: str) -> ModelRef:
    return resolve_model(name, Path(cache_dir))


@task(name="prepare-traffic")
def prepare_traffic_task(*, conf: TrafficConf, out_root: str) -> PreparedTraffic:
    return prepare_traffic(conf, Path(out_root))


@task(name="calibration-drift")
def drift_task(*, stats_path: str, pointer_file: str) -> float | None:
    """Drift against the previous run's calibration (None on the first run), then move the
    pointer to this run's stats."""
    pointer = Path(pointer_file)
    previous = pointer.read_text().strip() if pointer.is_file() else None
    drift = None
    if previous and previous != stats_path and Path(previous).is_file():
        drift = calibration_drift(previous, stats_path)
    pointer.write_text(stats_path)
    return drift


@task(name="score-variant")
def score_variant_task(*, name: str, method: str, control: bool, checkpoint: str | None,
                       eval_result: EvalResult | None, quantize_seconds: float,
                       error: str = "", lmeval: LmEvalResult | None = None,
                       judge: JudgeSummary | None = None,
                       perf: dict[str, float] | None = None) -> VariantScores:
    if checkpoint is None or eval_result is None:
        return VariantScores(name, method, control, None, error=error)
    size = checkpoint_size(checkpoint)
    return VariantScores(name, method, control, eval_result, size.bytes, size.bits_per_weight,
                         quantize_seconds, error, lmeval, judge, perf or {})


@task(name="plan", task_run_name="plan-{conf.target}")
def plan_task(*, conf: PlanConf, model_path: str, specs: list[VariantSpec]) -> dict[str, VariantPlan]:
    return plan_variants(conf, model_path, specs)


@task(name="bench", task_run_name="bench", **CACHED)
def bench_task(*, conf: BenchConf, paths: dict[str, str], heldout_path: str, out_path: str) -> BenchReport:
    set_threads(conf.num_cpus)
    return run_bench(conf, paths, heldout_path=heldout_path, out_path=out_path)


@task(name="gate")
def gate_task(*, baseline: EvalResult, variants: list[VariantScores], gate: GateConf,
              min_slice_tokens: int, baseline_lmeval: LmEvalResult | None, min_slice_items: int,
              judge_vote: JudgeVote | None) -> GateDecision:
    return decide(baseline, variants, gate, min_slice_tokens=min_slice_tokens,
                  baseline_lmeval=baseline_lmeval, min_slice_items=min_slice_items,
                  judge_vote=judge_vote)


@task(name="publish-mlflow")
def publish_task(inputs: PublishInputs, **kwargs: Any) -> RunRecord:
    return publish_run(inputs, **kwargs)
