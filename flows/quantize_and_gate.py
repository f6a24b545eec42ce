"""The main flow, in the order of the pipeline diagram: model and traffic -> calibration and the
baseline's evaluation -> plan -> variants quantized on Ray, each scored as soon as it is done,
cheapest evidence first on one engine server (perplexity looks and their screen, then task evals)
-> judge -> bench -> gate -> report -> MLflow. A variant the staged gate rejects skips every later
stage.

Ordering and fan-out only: every stage is a typed task in `quantgate.tasks`; the heavy ones run as
Ray tasks with resources from conf, and a variant that fails (bad parameter, crash, dead worker)
fails alone, recorded with a one-line error.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import flow, runtime
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.futures import PrefectFuture
from prefect_ray import RayTaskRunner
from prefect_ray.context import remote_options

from quantgate.conf.methods import VariantSpec
from quantgate.conf.schema import PipelineConfig
from quantgate.flows.canary_rollout import canary_rollout
from quantgate.flows.naming import quantize_run_name
from quantgate.flows.outcomes import as_finished, outcome, value
from quantgate.tasks.calibrate.stages import calibrate_task, drift_task
from quantgate.tasks.engine.probe import probe_candidates
from quantgate.tasks.engine.stages import probe_task, refusals_task
from quantgate.tasks.evaluate.stages import (
    evaluate_task,
    lmeval_task,
    long_context_task,
    reference_baseline_task,
    scored_line,
)
from quantgate.tasks.gate.decide import VariantScores, paired_lmeval
from quantgate.tasks.gate.staged import StagedScores
from quantgate.tasks.gate.stages import gate_task, report_task, staged_scores_task, survivors_task
from quantgate.tasks.gate.times import run_times
from quantgate.tasks.judge.endpoint import judge_endpoint
from quantgate.tasks.judge.stages import judge_task
from quantgate.tasks.model.source import ModelRef
from quantgate.tasks.model.stages import resolve_model_task
from quantgate.tasks.perf.bench import BenchReport, bench_table
from quantgate.tasks.perf.plan import RunPlan
from quantgate.tasks.perf.report import artifact_links
from quantgate.tasks.perf.stages import bench_task, plan_task
from quantgate.tasks.quantize.stages import quantize_task
from quantgate.tasks.registry.stages import announce_gate_task, publish_task
from quantgate.tasks.rollout.stages import RolloutSummary
from quantgate.tasks.runtime.clock import Stopwatch
from quantgate.tasks.runtime.events import GATE_PASSED
from quantgate.tasks.runtime.stop import keep_stop_handlers
from quantgate.tasks.traffic.prepare import PreparedTraffic
from quantgate.tasks.traffic.stages import prepare_traffic_task


@dataclass(frozen=True)
class FlowSummary:
    table: str
    winner: str | None
    decision: str
    registered_model: str
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    canary_version: str | None
    flow_run_id: str
    quarantine_path: str
    reused: bool
    timing: str
    rollout: RolloutSummary | None = None
    rollout_note: str = ""


def _quantize(config: PipelineConfig, spec: VariantSpec, model: ModelRef, traffic: PreparedTraffic,
              state: str) -> PrefectFuture[Any]:
    r = spec.resources
    with remote_options(num_cpus=r.num_cpus, num_gpus=r.num_gpus, memory=int(r.memory_gb * 2**30)):
        return quantize_task.submit(spec=spec, model=model, traffic=traffic,
                                    max_seq_len=config.calibration.max_seq_len, state_dir=state)


def _perplexity(config: PipelineConfig, checkpoint: str, results_dir: str,
                traffic: PreparedTraffic) -> PrefectFuture[Any]:
    """The baseline's perplexity per request and its top-k record, the variants' KL reference;
    scored by the serving engine (eval.backend)."""
    state = str(config.runtime.state_dir.resolve())
    with remote_options(num_cpus=config.eval.num_cpus):
        return evaluate_task.submit(variant="baseline", checkpoint=checkpoint, results_dir=results_dir,
                                    traffic=traffic, conf=config.eval, engine=config.engine, state_dir=state)


def _tasks(config: PipelineConfig, checkpoint: str, results_dir: str, traffic: PreparedTraffic
           ) -> PrefectFuture[Any]:
    """The baseline's task suite (lmeval.backend)."""
    state = str(config.runtime.state_dir.resolve())
    with remote_options(num_cpus=config.lmeval.num_cpus):
        return lmeval_task.submit(variant="baseline", checkpoint=checkpoint, results_dir=results_dir,
                                  traffic=traffic, conf=config.lmeval, dtype=config.eval.dtype,
                                  engine=config.engine, state_dir=state)


def _score(config: PipelineConfig, name: str, checkpoint: str, traffic: PreparedTraffic,
           base_ppl: PrefectFuture[Any], model: ModelRef, after: list[Any]) -> PrefectFuture[Any]:
    """A variant's perplexity looks, each screened, then its task evals unless a screen rejects it
    (gate.staged), on one engine server; on the reference path against the baseline scored there
    (`model`: where that baseline lives; `after`: its evaluation) when the engine does not serve it."""
    state = str(config.runtime.state_dir.resolve())
    with remote_options(num_cpus=config.eval.num_cpus):
        return staged_scores_task.submit(wait_for=after,
            variant=name, checkpoint=checkpoint, traffic=traffic, eval_conf=config.eval,
            lmeval_conf=config.lmeval, engine=config.engine, gate=config.gate, state_dir=state,
            baseline=base_ppl, baseline_checkpoint=model.path, baseline_results_dir=model.results_dir(state),
            min_slice_tokens=config.eval.min_slice_tokens)


def _long(config: PipelineConfig, name: str, checkpoint: str, results_dir: str) -> PrefectFuture[Any]:
    with remote_options(num_cpus=config.long_context.num_cpus):
        return long_context_task.submit(variant=name, checkpoint=checkpoint, results_dir=results_dir,
                                        conf=config.long_context, dtype=config.eval.dtype)


def _reference_baseline(config: PipelineConfig, model: ModelRef, traffic: PreparedTraffic,
                        state: str) -> PrefectFuture[Any]:
    """The baseline scored on the reference path, the pair of the variants the engine does not serve."""
    with remote_options(num_cpus=config.eval.num_cpus):
        return reference_baseline_task.submit(checkpoint=model.path, results_dir=model.results_dir(state),
                                              traffic=traffic, conf=config.eval)


def _heartbeat(budgets: dict[str, float], pending: dict[Any, Any], queued: list[Any] | None = None) -> Any:
    """Prints what runs, for how long, against which budget (2-bit methods), and how many wait
    (`queued`: quantizations held back until a CPU is free)."""
    def beat(running: dict[tuple[str, str], float]) -> None:
        now = time.time()
        waiting = f"{len(pending) - len(running) + len(queued or [])} waiting for a CPU"
        if not running:  # the CPUs are busy with work submitted before these (the baseline's evaluations)
            print(f"      … {waiting} (earlier stages hold the CPUs)")
            return
        print("      … running: " + ", ".join(
            f"{stage} {name} {now - since:.0f} s"
            + (f" of {budgets[name]:.0f}" if stage == "quantize" and name in budgets else "")
            for (stage, name), since in sorted(running.items())) + f"; {waiting}")
    return beat


def _local_cpus(config: PipelineConfig) -> int | None:
    """The CPUs of the run's own Ray (None on a cluster: its scheduler decides)."""
    return config.runtime.ray_num_cpus if config.runtime.ray_address == "local" else None


def _next_quantizations(queue: list[VariantSpec], cpus: int | None, held: float,
                        busy: bool) -> list[VariantSpec]:
    """Take from `queue`, in conf order, the quantizations whose CPUs are free (`held` of `cpus` are
    taken; at least one when nothing runs). Ray does not run tasks in submission order across
    resource shapes: given every quantization at once, it ran the 2-bit ones before a survivor's,
    whose evaluations then ran alone at the end with a core idle. Held back here, quantizations
    leave evaluations the next free CPU. `cpus` None (a cluster): all at once."""
    taken = []
    while queue and (cpus is None or not busy or held + queue[0].resources.num_cpus <= cpus):
        taken.append(queue.pop(0))
        held, busy = held + taken[-1].resources.num_cpus, True
    return taken


class _Progress:
    """The variants stage's progress as a Prefect artifact: the share of variants that are done
    (failed, rejected at the perplexity screen, or through their task evals)."""

    def __init__(self, names: list[str]) -> None:
        self.names, self.rejected = set(names), set[str]()
        self.id = create_progress_artifact(0.0, key="variants-progress",
                                           description=f"{len(names)} variants: quantized and evaluated")

    def update(self, done: set[str]) -> None:
        done = (done | self.rejected) & self.names
        update_progress_artifact(self.id, 100.0 * len(done) / max(1, len(self.names)))


def _on_window(config: PipelineConfig, traffic_window: str | None) -> PipelineConfig:
    """The config on the drift event's traffic window in place of traffic.path (None: unchanged)."""
    if not traffic_window:
        return config
    window = config.traffic.model_copy(update={"path": Path(traffic_window)})
    return config.model_copy(update={"traffic": window})


def _announce(served: str, decision: Any, record: Any, flow_run_id: str) -> None:
    """A winner with a registered version: the gate's event, which starts the rollout deployment."""
    if decision.winner is None or record.canary_version is None:
        return
    event = announce_gate_task(registered_model=served, winner=decision.winner, version=record.canary_version,
                               verdict=decision.verdicts[decision.winner].status, flow_run_id=flow_run_id,
                               parent_run_id=record.parent_run_id)
    print(f"      event {GATE_PASSED} ({event}): {decision.winner}, version {record.canary_version}")


def _plan(config: PipelineConfig, model: ModelRef, traffic: PreparedTraffic, state: str) -> RunPlan:
    """The roofline plan, then again without the formats the engine refuses here (asked or remembered)."""
    plan = plan_task(conf=config.plan, model=model, variants=config.variants)
    if refused := _ask_the_engine(config, plan, model, traffic, state):
        plan = plan_task(conf=config.plan, model=model, variants=config.variants, refused=refused)
    print("\n".join("      " + line for line in plan.lines))
    return plan


def _ask_the_engine(config: PipelineConfig, plan: RunPlan, model: ModelRef, traffic: PreparedTraffic,
                    state: str) -> dict[str, str]:
    """The engine's answer, per variant the plan would quantize, on whether it serves that format here:
    remembered, or asked with a one-layer model in that format (engine.probe). Variant -> why not."""
    if config.eval.backend != "engine":
        return {}
    if config.engine.probe and (ask := probe_candidates(list(plan.runnable))):
        print(f"      asking the engine about {len(ask)} formats before quantizing (once per machine)")
        with remote_options(num_cpus=config.engine.threads):  # one engine process asks about them all
            pending = {probe_task.submit(specs=ask, model=model, traffic=traffic, engine=config.engine,
                                         state_dir=state): ("probe", "formats")}
        for future, _ in as_finished(pending, heartbeat=_heartbeat({}, pending)):
            results, err = outcome(future)
            for s in ask:
                said = results[s.name].line(s.name) if results else f"{s.name}: the probe failed: {err}"
                print(f"      {said}")
    return refusals_task(variants=plan.runnable, model=model, traffic=traffic, engine=config.engine,
                         max_seq_len=config.calibration.max_seq_len, state_dir=state)


def _quantize_then_evaluate(config: PipelineConfig, plan: RunPlan, model: ModelRef, traffic: PreparedTraffic,
                            state: str, base_ppl: PrefectFuture[Any]) -> list[VariantScores]:
    """One quantization per variant, each then scored in stages (`_score`: perplexity looks and their
    screens, then task evals unless rejected), and its long-context probe when that is on."""
    def submit(stage: str, name: str, future: PrefectFuture[Any], num_cpus: float) -> None:
        pending[future] = (stage, name)
        cpus_of[future] = num_cpus

    def fill() -> None:
        for spec in _next_quantizations(queue, cpus, sum(cpus_of[f] for f in pending), bool(pending)):
            submit("quantize", spec.name, _quantize(config, spec, model, traffic, state),
                   spec.resources.num_cpus)

    pending: dict[PrefectFuture[Any], tuple[str, str]] = {}
    cpus_of: dict[PrefectFuture[Any], float] = {}
    queue, cpus = list(plan.runnable), _local_cpus(config)
    fill()
    on_reference = plan.on_reference_path(config.eval.backend)
    reference = [_reference_baseline(config, model, traffic, state)] if on_reference else []
    for future in reference:  # once, as soon as a CPU is free, before the variants scored there
        submit("reference path", "baseline", future, config.eval.num_cpus)
    quantized, staged, longs, errors = {}, {}, {}, dict(plan.skipped)
    progress = _Progress([s.name for s in plan.runnable])
    budgets = {s.name: s.time_budget_s for s in plan.runnable if hasattr(s, "time_budget_s")}
    for fut, (stage, name) in as_finished(pending, heartbeat=_heartbeat(budgets, pending, queue)):
        result, err = outcome(fut)
        if err:
            errors[name] = f"{stage}: {err}" if stage != "quantize" else err
            print(f"      {name}: {stage} FAILED: {err}")
        elif stage == "quantize":
            quantized[name] = result
            reused = result.reused or fut.state.name == "Cached"  # Prefect's cache returns the first result
            print(f"      {name}: quantized in {result.seconds:.1f} s{' (reused)' if reused else ''}")
            after = reference if name in on_reference else []
            submit("score", name, _score(config, name, result.checkpoint, traffic, base_ppl, model, after),
                   config.eval.num_cpus)
        elif stage == "reference path":
            print(f"      baseline on the reference path (for {', '.join(on_reference)}): PPL "
                  f"{result.ppl:.3f} in {result.seconds:.0f} s")
        elif stage == "score":
            staged[name] = result
            _print_stages(name, result, staged=config.gate.staged)
            if result.lmeval_error:
                errors[name] = f"tasks: {result.lmeval_error}"
            if result.rejected:
                progress.rejected.add(name)
            elif config.long_context.enabled:
                ckpt = quantized[name].checkpoint
                submit("long context", name, _long(config, name, ckpt, ckpt), config.long_context.num_cpus)
        else:
            longs[name] = result
            print(f"      {name}: long context ({result.context} tokens) PPL {result.perplexity.ppl:.3f}, "
                  f"passkeys {result.passkey_accuracy:.0%} in {result.seconds:.0f} s")
        progress.update(set(errors) | set(staged))
        fill()
    return _scores(config, quantized, staged, longs, errors)


def _print_stages(name: str, scores: StagedScores, *, staged: bool) -> None:
    """What scored the variant (the engine, or why not), each look's screen, and what came of it."""
    print("      " + scored_line(name, scores.eval))
    for look in scores.looks:
        v = look.verdict
        print(f"      {name}: perplexity {look.stage}: {v.status} ({v.decided_by}): " + v.reasons[0])
    if scores.rejected and staged:
        print(f"      {name}: rejected at stage ppl, skips the task evals, the judge and the bench")
    elif scores.lmeval_error:
        print(f"      {name}: tasks FAILED: {scores.lmeval_error}")
    elif scores.lmeval is not None:
        print(f"      {name}: task evals done in {scores.lmeval.seconds:.0f} s")


def _scores(config: PipelineConfig, quantized: dict[str, Any], staged: dict[str, StagedScores],
            longs: dict[str, Any], errors: dict[str, str]) -> list[VariantScores]:
    """Each variant's evidence as far as it got (a screened-out one: its perplexity alone)."""
    scores = []
    for spec in config.variants:
        q, err, got = quantized.get(spec.name), errors.get(spec.name, ""), staged.get(spec.name)
        evaluated = got.eval if got else None
        scores.append(VariantScores(spec.name, spec.method, spec.control, evaluated, error=err,
                                    lmeval=got.lmeval if got else None, long=longs.get(spec.name),
                                    quantize_seconds=q.seconds if q else float("nan"),
                                    quantize_cpu_seconds=q.cpu_seconds if q else float("nan"),
                                    checkpoint=q.checkpoint if q and evaluated else None))
    return scores


def _judge(config: PipelineConfig, state: str, baseline: VariantScores, variants: list[VariantScores],
           survivors: list[str]) -> list[VariantScores]:
    """Each surviving variant's replay answers against the baseline's; a judge that cannot run is
    reported and the run goes on (the gate then has no judge result for that variant)."""
    judged = [v for v in variants if v.lmeval is not None and v.name in survivors]
    if not config.judge.enabled or not judged or baseline.lmeval is None:
        return variants
    print(f"[5/7] judging {len(judged)} variants (pairwise, both orders, ≤ {config.judge.max_pairs} "
          "prompts each)")
    try:
        started = time.time()
        with judge_endpoint(config.judge, state) as endpoint:
            # the server's start and the first judgments can outlast one heartbeat: say it is up
            print(f"      judge up in {time.time() - started:.0f} s; ≤ {2 * config.judge.max_pairs} "
                  "judgments per variant, the identical answers skipped")
            with remote_options(num_cpus=0):  # they wait on the judge: no CPU of their own
                futures = {v.name: judge_task.submit(
                    variant=v.name, baseline_samples=paired_lmeval(v.lmeval, baseline.lmeval).samples_path,
                    candidate_samples=v.lmeval.samples_path, conf=config.judge, endpoint=endpoint)
                    for v in judged}
            pending = {f: ("judge", name) for name, f in futures.items()}
            beat = _heartbeat({}, pending)
            results = {name: outcome(f) for f, (_, name) in as_finished(pending, heartbeat=beat)}
    except Exception as exc:  # noqa: BLE001 - no judge is a reported gap, not a crash
        print(f"      judge not started: {type(exc).__name__}: {exc}")
        return variants
    for name, (summary, err) in results.items():
        print(f"      {name}: judge FAILED: {err}" if err else f"      {name}: {summary.one_line()}")
    return [dataclasses.replace(v, judge=results[v.name][0]) if v.name in results else v for v in variants]


def _bench(config: PipelineConfig, state: str, model: ModelRef, traffic: PreparedTraffic,
           variants: list[VariantScores]) -> BenchReport | None:
    """Speed and energy of everything that quantized, in one Ray task asking for all its CPUs, so it
    runs after the evaluations, alone: on the serving engine, one checkpoint at a time (bench.backend),
    or on our loaders in one process. A failed bench is reported; the gate then ranks on bytes."""
    if not config.bench.enabled:
        return None
    paths = {"baseline": model.path, **{v.name: v.checkpoint for v in variants if v.checkpoint}}
    conf = config.bench
    how = ("each on the engine in turn, clients" if conf.backend == "engine" else "one process, batch sizes")
    print(f"[6/7] bench: {len(paths)} models, {how} {list(conf.batch_sizes)}")
    with remote_options(num_cpus=conf.num_cpus, num_gpus=1 if conf.device == "cuda" else 0):
        future = bench_task.submit(conf=conf, paths=paths, heldout_path=traffic.heldout_path, state_dir=state,
                                   engine=config.engine)
    pending = {future: ("bench", f"{len(paths)} models")}
    for _ in as_finished(pending, heartbeat=_heartbeat({}, pending)):  # a progress line a minute
        pass
    report, err = outcome(future)
    if err:
        print(f"      bench FAILED: {err}")
    else:
        for name, seconds in report.startup_s.items():
            print(f"      {name}: engine up in {seconds:.0f} s (in no figure)")
        for name, why in report.not_benched.items():
            print(f"      {name}: no serving bench: {why}")
        print(bench_table(report), flush=True)
    return report


def _baseline(model: ModelRef, ppl: PrefectFuture[Any], tasks: PrefectFuture[Any],
              long: PrefectFuture[Any] | None) -> VariantScores:
    """The baseline's scores once its evaluations are done (the run cannot go on without them)."""
    baseline = VariantScores("baseline", "baseline", True, value(ppl), lmeval=value(tasks),
                             long=value(long) if long is not None else None,
                             quantize_seconds=0.0, checkpoint=model.path)
    print("      " + scored_line("baseline", baseline.eval))
    for task_name, why in baseline.lmeval.skipped.items():
        print(f"      lm-eval {task_name}: skipped, {why}")
    return baseline


@flow(name="quantize_and_gate", flow_run_name=quantize_run_name, task_runner=RayTaskRunner(), log_prints=True)
def quantize_and_gate(config: PipelineConfig, traffic_window: str | None = None) -> FlowSummary:
    keep_stop_handlers()  # a user's SIGTERM or Ctrl-C stops the run, whatever it is waiting on
    config = _on_window(config, traffic_window)
    state, flow_run_id, clock = str(config.runtime.state_dir.resolve()), str(runtime.flow_run.id), Stopwatch()
    print("[1/7] model: resolving", config.model.name)
    model = resolve_model_task(name=config.model.name, state_dir=state)
    print(f"[2/7] traffic: reading {config.traffic.path}")
    traffic = prepare_traffic_task(conf=config.traffic, state_dir=state)
    print("      " + traffic.summary_line())
    clock.lap("model_and_traffic")

    print("[3/7] calibration and the baseline's evaluation (Ray; reused when model, data and code match)")
    with remote_options(num_cpus=config.eval.num_cpus):
        calibration = calibrate_task.submit(model=model, traffic=traffic, conf=config.calibration,
                                            num_cpus=config.eval.num_cpus, state_dir=state)
    base_ppl = _perplexity(config, model.path, model.results_dir(state), traffic)
    base_tasks = _tasks(config, model.path, model.results_dir(state), traffic)
    base_long = (_long(config, "baseline", model.path, model.results_dir(state))
                 if config.long_context.enabled else None)
    plan = _plan(config, model, traffic, state)

    print(f"[4/7] quantizing {len(plan.runnable)} variants (Ray); each then scored, on one engine server "
          f"where it is served: perplexity and its screen"
          f"{' (a reject skips the later stages)' if config.gate.staged else ''}, task evals")
    variants = _quantize_then_evaluate(config, plan, model, traffic, state, base_ppl)
    baseline = _baseline(model, base_ppl, base_tasks, base_long)
    clock.lap("variants")
    survivors = survivors_task(baseline=baseline, variants=variants, gate=config.gate,
                               min_slice_tokens=config.eval.min_slice_tokens,
                               min_slice_items=config.lmeval.min_slice_items)
    variants = _judge(config, state, baseline, variants, survivors)
    clock.lap("judge")
    bench = _bench(config, state, model, traffic, [v for v in variants if v.name in survivors])
    clock.lap("bench")
    calibrated = value(calibration)
    drift = drift_task(calibration=calibrated, state_dir=state)

    print("[7/7] gate and MLflow")
    gate = gate_task(baseline=baseline, variants=variants, bench=bench, gate=config.gate, judge=config.judge,
                     min_slice_tokens=config.eval.min_slice_tokens,
                     min_slice_items=config.lmeval.min_slice_items)
    if gate.vote is not None:
        print(f"      {gate.vote.note}")
    report = report_task(model_name=model.name, model_path=model.path, outcome=gate, plan=plan, bench=bench,
                         specs=config.variants, gate=config.gate, bench_hardware=config.bench.hardware,
                         heldout_requests=traffic.heldout, min_slice_tokens=config.eval.min_slice_tokens,
                         state_dir=state, flow_run_id=flow_run_id,
                         config_json=config.model_dump_json(indent=1))
    clock.lap("gate_and_report")
    times = run_times(clock.laps, clock.total(), baseline, variants)
    record = publish_task(config=config, model=model, traffic=traffic, calibration=calibrated,
                          drift=drift, outcome=gate, report=report, bench=bench, flow_run_id=flow_run_id,
                          times=times)
    _gate_report_artifact(config, record, report, times)
    rollout, note = _rollout(config, model.name, gate.decision, record, flow_run_id, clock)
    return FlowSummary(report.table_text(), gate.decision.winner, gate.decision.reason,
                       config.model.served_name or model.name, record.tracking_uri, record.experiment_id,
                       record.parent_run_id, record.canary_version, flow_run_id, traffic.quarantine_path,
                       record.reused, run_times(clock.laps, clock.total(), baseline, variants).table(),
                       rollout, note)


def _gate_report_artifact(config: PipelineConfig, record: Any, report: Any, times: Any) -> None:
    """The gate report, where the time went and links to MLflow, as the run's Prefect artifact."""
    links = artifact_links(record.tracking_uri, record.experiment_id, record.parent_run_id, report.files,
                           mlflow_ui_port=config.runtime.mlflow_ui_port)
    create_markdown_artifact(key="gate-report", markdown=report.markdown + "\n## Where the time went\n\n"
                             + times.table() + links, description="offline gate")


def _rollout(config: PipelineConfig, model_name: str, decision: Any, record: Any, flow_run_id: str,
             clock: Stopwatch) -> tuple[RolloutSummary | None, str]:
    """The gate's event, then the winner's canary rollout as a subflow when rollout.auto is on; else why
    there is none. Its time is the flow's last lap (the gate's published times end before it)."""
    _announce(config.model.served_name or model_name, decision, record, flow_run_id)
    winner, version = decision.winner, record.canary_version
    if not config.rollout.auto:
        return None, (f"rollout.auto is off: under `quantgate deploy` the gate's event ({GATE_PASSED}) "
                      "starts the canary_rollout deployment; else `quantgate rollout` starts it")
    if winner is None or version is None:
        return None, "no rollout: the gate chose no winner, the champion stays"
    steps = ", ".join(f"{s:g}" for s in config.rollout.steps)
    print(f"[rollout] {winner} (version {version}) behind a canary on Ray Serve: steps {steps} %")
    state = canary_rollout(config, variant=winner, run=flow_run_id, return_state=True)
    clock.lap("rollout")
    if state.is_failed():
        exc = state.result(raise_on_failure=False)
        return None, f"rollout failed to run: {type(exc).__name__}: {exc}"
    summary = state.result()
    return summary, "" if summary is not None else f"no rollout: {winner} (version {version}) serves already"
