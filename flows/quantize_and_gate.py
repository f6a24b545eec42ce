"""The main flow: traffic -> calibration -> variants on Ray -> evaluation -> gate -> MLflow.

Ordering and fan-out only: every step is a task in `quantgate.tasks`. Heavy steps
(calibration, each variant's quantization, each evaluation) are Ray tasks with resources
from conf; a failing variant fails alone and is recorded as failed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import flow, runtime
from prefect.artifacts import create_markdown_artifact
from prefect.futures import PrefectFuture, as_completed
from prefect_ray import RayTaskRunner
from prefect_ray.context import remote_options

from quantgate.conf.methods import VariantSpec
from quantgate.conf.schema import PipelineConfig
from quantgate.flows.performance import (
    artifact_links,
    performance_files,
    performance_section,
    predicted_for,
    run_bench_step,
)
from quantgate.tasks.calibrate.stats import calibration_code_digest
from quantgate.tasks.evaluate.lmeval import lmeval_code_digest
from quantgate.tasks.evaluate.perplexity import eval_code_digest
from quantgate.tasks.gate.report import comparison_rows, gate_report
from quantgate.tasks.judge.reliability import judge_vote
from quantgate.tasks.judge.server import local_judge_server, packaged_judge_gguf
from quantgate.tasks.perf.plan import plan_lines
from quantgate.tasks.quantize.run import quantize_code_digest
from quantgate.tasks.registry.publish import PublishInputs
from quantgate.tasks.registry.tracking import tracking_uri
from quantgate.tasks.stages import (
    calibrate_task,
    drift_task,
    evaluate_task,
    gate_task,
    judge_task,
    lmeval_task,
    plan_task,
    prepare_traffic_task,
    publish_task,
    quantize_task,
    resolve_model_task,
    score_variant_task,
)


@dataclass(frozen=True)
class FlowSummary:
    table: list[tuple[str, ...]]
    winner: str | None
    decision: str
    registered_model: str
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    canary_version: str | None
    flow_run_id: str
    quarantine_path: str


def variant_dir(state: Path, spec: VariantSpec, *, model_digest: str, calib_hash: str,
                max_seq_len: int) -> str:
    """Content-addressed output folder: same spec, model, calibration and code -> same folder."""
    key = json.dumps([spec.model_dump(mode="json", exclude={"resources", "control"}),
                      model_digest, calib_hash, max_seq_len, quantize_code_digest(spec.method)],
                     sort_keys=True)
    return str(state / "variants" / f"{spec.name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}")


def _outcome(future: PrefectFuture[Any]) -> tuple[Any, str]:
    """(result, "") or (None, one-line error) of a finished task. A task that raised comes
    back as a failed state; a worker that died (OOM kill, segfault) raises from Ray itself."""
    try:
        value = future.result(raise_on_failure=False)
    except Exception as exc:  # noqa: BLE001 - any way a worker dies is this variant's failure
        value = exc
    if not isinstance(value, BaseException):
        return value, ""
    text = f"{type(value).__name__}: {value}".strip()
    return None, text.splitlines()[0]


def _gpu_shortfall(spec: VariantSpec) -> str:
    import ray

    have = ray.cluster_resources().get("GPU", 0) if ray.is_initialized() else 0
    need = spec.resources.num_gpus
    return f"resources.num_gpus={need} but the Ray cluster has {have} GPU" if need > have else ""


def _eval_artifacts(lm: Any, judged: str | None) -> list[str]:
    """lm-eval results and samples; the judge's summary and (redacted) transcript."""
    if lm is None:
        return []
    out = Path(lm.samples_path).parent
    files = [out / "lmeval.json", out / "lmeval_samples.jsonl"]
    if judged:
        files += [out / "judge" / "judge_summary.json", out / "judge" / "judge_transcript.jsonl"]
    return [str(f) for f in files if f.is_file()]


def _judge_variants(config: PipelineConfig, state: Path, baseline_samples: str,
                    candidates: dict[str, str]) -> dict[str, Any]:
    """Judge every variant's replay answers against the baseline's; a judge that cannot run
    is reported and the run goes on (the gate then has no judge result for that variant)."""
    conf = config.judge
    if not conf.enabled or not candidates:
        return {}
    print(f"[5/7] judging {len(candidates)} variants (pairwise, both orders, "
          f"≤ {conf.max_pairs} prompts each)")
    with contextlib.ExitStack() as stack:
        base_url = conf.base_url
        if base_url is None:
            try:
                gguf = packaged_judge_gguf(state / "models")
                base_url = stack.enter_context(local_judge_server(
                    gguf, log_path=state / "judge-server.log", threads=conf.threads))
            except Exception as exc:  # noqa: BLE001 - no judge is a reported gap, not a crash
                print(f"      judge not started: {type(exc).__name__}: {exc}")
                return {}
        futures = {}
        for name, samples in candidates.items():
            with remote_options(num_cpus=0):
                futures[name] = judge_task.submit(
                    variant=name, baseline_samples=baseline_samples, candidate_samples=samples,
                    conf=conf, base_url=base_url, out_dir=str(Path(samples).parent / "judge"))
        judged = {}
        for name, fut in futures.items():
            judged[name], err = _outcome(fut)
            s = judged[name]
            print(f"      {name}: judge FAILED: {err}" if err else
                  f"      {name}: win-or-tie {s.win_or_tie:.2f} [{s.ci_low:.2f}, {s.ci_high:.2f}] "
                  f"over {s.decided} decided of {s.pairs} ({s.identical} identical, "
                  f"{s.inconsistent} inconsistent, {s.unparseable} unparseable)")
        return {n: s for n, s in judged.items() if s is not None}


def _bench(config: PipelineConfig, state: Path, paths: dict[str, str], heldout: str) -> Any:
    """Speed and energy of everything that quantized, in one Ray task asking for all its CPUs, so it
    runs after the evaluations, alone. A failed bench is reported; the gate then ranks on bytes."""
    if not config.bench.enabled:
        return None
    print(f"[6/7] bench: {len(paths)} models, batch sizes {list(config.bench.batch_sizes)}, one process")
    report, err = _outcome(run_bench_step(config, state, paths, heldout))
    if err:
        print(f"      bench FAILED: {err}")
    return report


@flow(name="quantize_and_gate", task_runner=RayTaskRunner(), log_prints=True)
def quantize_and_gate(config: PipelineConfig) -> FlowSummary:
    state = config.runtime.state_dir.resolve()
    ev = config.eval

    print("[1/7] model: resolving", config.model.name)
    model = resolve_model_task(name=config.model.name, cache_dir=str(state / "models"))
    print(f"[2/7] traffic: reading {config.traffic.path}")
    traffic = prepare_traffic_task(conf=config.traffic, out_root=str(state / "traffic"))
    print(f"      {traffic.valid} valid, {traffic.quarantined} quarantined -> "
          f"{traffic.quarantine_path}; PII redacted: {traffic.pii_redacted}")

    # One result file per (held-out set, dtype, eval code) next to what was evaluated.
    eval_file = f"eval-{Path(traffic.heldout_path).parent.name}-{ev.dtype}-{eval_code_digest()}.json"

    def submit_eval(variant: str, checkpoint: str, out_dir: str) -> PrefectFuture[Any]:
        out = Path(out_dir) / eval_file
        with remote_options(num_cpus=ev.num_cpus):
            return evaluate_task.submit(
                variant=variant, checkpoint=checkpoint, heldout_path=traffic.heldout_path,
                out_path=str(out), window=ev.window, batch_size=ev.batch_size, dtype=ev.dtype,
                num_cpus=ev.num_cpus)

    lm = config.lmeval
    lm_key = hashlib.sha256(lm.model_dump_json().encode()).hexdigest()[:8]
    lm_dir = f"lmeval-{Path(traffic.heldout_path).parent.name}-{ev.dtype}-{lmeval_code_digest()}-{lm_key}"

    def submit_lmeval(variant: str, checkpoint: str, out_root: str) -> PrefectFuture[Any]:
        with remote_options(num_cpus=lm.num_cpus):
            return lmeval_task.submit(variant=variant, checkpoint=checkpoint,
                                      out_dir=str(Path(out_root) / lm_dir), conf=lm,
                                      replay_path=traffic.heldout_path, dtype=ev.dtype)

    print("[3/7] calibration and baseline evaluation (Ray)")
    with remote_options(num_cpus=ev.num_cpus):
        calib_f = calibrate_task.submit(
            model_path=model.path, calibration_path=traffic.calibration_path,
            out_dir=str(state / "calibration" / f"{traffic.calibration_hash}-{model.digest[:12]}"
                        f"-{calibration_code_digest()}"),
            max_seq_len=config.calibration.max_seq_len, top_k=config.calibration.top_outliers,
            num_cpus=ev.num_cpus)
        base_f = submit_eval("baseline", model.path, str(state / "evals" / model.digest[:16]))
    base_lm_f = submit_lmeval("baseline", model.path, str(state / "evals" / model.digest[:16]))

    plans = plan_task(conf=config.plan, model_path=model.path, specs=list(config.variants))
    controls = {s.name for s in config.variants if s.control}
    for line in plan_lines(plans, config.plan, controls):
        print("      " + line)
    print(f"[4/7] quantizing {len(config.variants)} variants (Ray)")
    errors: dict[str, str] = {}
    quant_fs: dict[str, PrefectFuture[Any]] = {}
    for spec in config.variants:
        plan = plans[spec.name]
        if plan.skip and config.plan.skip and not spec.control:
            errors[spec.name] = f"skipped by the planner: {plan.reason}"
            continue
        if shortfall := _gpu_shortfall(spec):
            errors[spec.name] = f"variants[{spec.name}].{shortfall}"
            continue
        with remote_options(num_cpus=spec.resources.num_cpus, num_gpus=spec.resources.num_gpus,
                            memory=int(spec.resources.memory_gb * 2**30)):
            quant_fs[spec.name] = quantize_task.submit(
                spec=spec, model_path=model.path, calibration_path=traffic.calibration_path,
                out_dir=variant_dir(state, spec, model_digest=model.digest,
                                    calib_hash=traffic.calibration_hash,
                                    max_seq_len=config.calibration.max_seq_len),
                max_seq_len=config.calibration.max_seq_len)

    names = {id(f): n for n, f in quant_fs.items()}
    eval_fs: dict[str, PrefectFuture[Any]] = {}
    lmeval_fs: dict[str, PrefectFuture[Any]] = {}
    for fut in as_completed(list(quant_fs.values())):
        name = names[id(fut)]
        q, err = _outcome(fut)
        if err:
            errors[name] = err
            print(f"      {name}: FAILED: {err}")
            continue
        reused = q.reused or fut.state.name == "Cached"
        print(f"      {name}: quantized in {q.seconds:.1f} s{' (reused)' if reused else ''}")
        eval_fs[name] = submit_eval(name, q.checkpoint, q.checkpoint)
        lmeval_fs[name] = submit_lmeval(name, q.checkpoint, q.checkpoint)

    print("[5/7] evaluating (perplexity by slice, lm-eval tasks)")
    baseline_eval = base_f.result()
    baseline_lm = base_lm_f.result()
    for task, why in baseline_lm.skipped.items():
        print(f"      lm-eval {task}: skipped, {why}")
    lm_results: dict[str, Any] = {}
    for name, fut in lmeval_fs.items():
        lm_results[name], err = _outcome(fut)
        if err:
            errors[name] = f"lm-eval: {err}"
    judges = _judge_variants(config, state, baseline_lm.samples_path,
                             {n: r.samples_path for n, r in lm_results.items() if r is not None})
    calib = calib_f.result()
    bench = _bench(config, state, {"baseline": model.path, **{
        n: quant_fs[n].result().checkpoint for n in eval_fs if n not in errors}}, traffic.heldout_path)
    drift = drift_task(stats_path=calib.stats_path, pointer_file=str(state / "calibration" / "LATEST"))
    scores, checkpoints = [], {}
    for spec in config.variants:
        result, quantized = None, None
        if spec.name in eval_fs:
            result, err = _outcome(eval_fs[spec.name])
            if err:
                errors[spec.name] = err
            else:
                quantized = quant_fs[spec.name].result()
                checkpoints[spec.name] = quantized.checkpoint
        scores.append(score_variant_task(
            name=spec.name, method=spec.method, control=spec.control,
            checkpoint=quantized.checkpoint if quantized else None, eval_result=result,
            quantize_seconds=quantized.seconds if quantized else float("nan"),
            error=errors.get(spec.name, ""), lmeval=lm_results.get(spec.name),
            judge=judges.get(spec.name), perf=bench.metrics(spec.name) if bench else None))
    baseline = score_variant_task(name="baseline", method="baseline", control=True,
                                  checkpoint=model.path, eval_result=baseline_eval,
                                  quantize_seconds=0.0, lmeval=baseline_lm,
                                  perf=bench.metrics("baseline") if bench else None)

    print("[7/7] gate and MLflow")
    vote = judge_vote(config.judge) if config.judge.enabled else None
    if vote is not None:
        print(f"      {vote.note}")
    decision = gate_task(baseline=baseline_eval, variants=scores, gate=config.gate,
                         min_slice_tokens=ev.min_slice_tokens, baseline_lmeval=baseline_lm,
                         min_slice_items=lm.min_slice_items, judge_vote=vote)
    rows = comparison_rows(baseline_eval, baseline_bytes=baseline.size_bytes,
                           baseline_bpw=baseline.bits_per_weight, variants=scores,
                           decision=decision, baseline_perf=baseline.perf)
    report = gate_report(model=model.name, rows=rows, decision=decision, gate=config.gate,
                         heldout_requests=traffic.heldout,
                         heldout_tokens=baseline_eval.tokens, min_slice_tokens=ev.min_slice_tokens,
                         baseline_lmeval=baseline_lm, variants=scores, judge_vote=vote)
    flow_run_id = str(runtime.flow_run.id)
    run_dir = state / "runs" / flow_run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    predicted = predicted_for(config, model.path, bench, scores)
    perf_files = performance_files(config, run_dir, plans, bench, scores, decision, predicted)
    report += "\n" + performance_section(config, plans, bench, predicted)
    config_file = run_dir / "pipeline_config.json"
    config_file.write_text(config.model_dump_json(indent=1))
    uri = tracking_uri(config.runtime.mlflow_tracking_uri, state)
    parent_metrics = {"traffic.valid": traffic.valid, "traffic.quarantined": traffic.quarantined,
                      "calibration.tokens": calib.tokens, "baseline.ppl": baseline_eval.ppl,
                      **{f"traffic.pii_redacted.{k}": v for k, v in traffic.pii_redacted.items()}}
    if drift is not None:
        parent_metrics["calibration.drift"] = drift
    record = publish_task(
        PublishInputs(
            tracking_uri=uri, experiment=config.runtime.experiment or model.name,
            artifact_root=state / "mlartifacts", model_name=model.name,
            registered_model=config.model.served_name or model.name,
            model_digest=model.digest, calibration_hash=traffic.calibration_hash,
            params={"model": config.model.name, "traffic.path": str(config.traffic.path),
                    "traffic.seed": str(config.traffic.seed),
                    "traffic.calibration_size": str(traffic.calibration),
                    "traffic.heldout_size": str(traffic.heldout),
                    "gate.recovery": str(config.gate.recovery), "eval.dtype": ev.dtype,
                    "variants": ",".join(v.name for v in config.variants)},
            parent_metrics={k: float(v) for k, v in parent_metrics.items()},
            parent_artifacts=[str(config_file), traffic.quarantine_path, traffic.summary_path,
                              calib.summary_path, *perf_files.values()],
            flow_run_id=flow_run_id,
            child_tags={"energy_method": bench.energy_method, "bench.batch": str(bench.gate_batch)}
            if bench else {"energy_method": "not measured"}),
        baseline=baseline, variants=scores, decision=decision, gate_report=report,
        checkpoints=checkpoints,
        variant_artifacts={"baseline": _eval_artifacts(baseline_lm, None),
                           **{n: [str(Path(c) / "quantgate_variant.json"),
                                  *_eval_artifacts(lm_results.get(n), judges.get(n) and c)]
                              for n, c in checkpoints.items()}})
    links = artifact_links(uri, record.experiment_id, record.parent_run_id, perf_files)
    create_markdown_artifact(key="gate-report", markdown=report + links, description="offline gate")
    return FlowSummary(rows, decision.winner, decision.reason, model.name, uri, record.experiment_id,
                       record.parent_run_id, record.canary_version, flow_run_id,
                       traffic.quarantine_path)
