"""The rollout's units of work: serve, run a step, promote, roll back. Each writes its transition
to the log (and the log to MLflow) before it acts, so a kill anywhere leaves a log that says what
to do next (progress.py)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from quantgate.conf.hardware import hardware_profile
from quantgate.conf.schema import PipelineConfig
from quantgate.tasks.engine.metrics import EngineSnapshot, parse_metrics
from quantgate.tasks.registry import champion as registry
from quantgate.tasks.rollout.analysis import Measurement
from quantgate.tasks.rollout.context import RolloutContext, close_mlflow_run
from quantgate.tasks.rollout.decide import decide_step
from quantgate.tasks.rollout.log import RolloutLog
from quantgate.tasks.rollout.pair_judge import PairJudge
from quantgate.tasks.rollout.window import run_window
from quantgate.tasks.serving import app
from quantgate.tasks.serving import metrics as serve_metrics
from quantgate.tasks.traffic.load import read_requests


def _log(ctx: RolloutContext) -> RolloutLog:
    return RolloutLog.read(Path(ctx.log_path))


def record(ctx: RolloutContext, event: str, **data: Any) -> None:
    """Append to the log (fsynced), then copy the log to the rollout's MLflow run."""
    _log(ctx).append(event, **data)
    with contextlib.suppress(Exception):  # the file is the record; MLflow's copy catches up next time
        MlflowClient(tracking_uri=ctx.tracking_uri).log_artifact(ctx.mlflow_run_id, ctx.log_path, "rollout")


def spec(config: PipelineConfig, ctx: RolloutContext) -> app.ServingSpec:
    s = config.rollout.serving
    return app.ServingSpec(
        app_name=f"quantgate-{ctx.registered_model}", model_names=ctx.served_names, log_dir=ctx.log_dir,
        champion=app.ArmSpec(f"models:/{ctx.registered_model}@champion", ctx.champion_version,
                             ctx.champion_path),
        canary=app.ArmSpec(f"models:/{ctx.registered_model}@canary", ctx.canary_version, ctx.canary_path),
        host=s.host, port=s.port, replica_cpus=s.replica_cpus, replica_gpus=s.replica_gpus,
        engine=config.engine.model_dump(mode="json"),
        state_dir=str(config.runtime.state_dir.resolve()), api_key_env=s.api_key_env,
        default_max_tokens=s.default_max_tokens, max_tokens=s.max_tokens, max_prompt_chars=s.max_prompt_chars,
        max_queue=s.max_queue, canary_faults=dict(ctx.faults))


def current_weight(ctx: RolloutContext, steps: tuple[float, ...]) -> float:
    last = _log(ctx).last("step")
    return steps[last["step"]] / 100 if last else 0.0


@contextlib.contextmanager
def serving(config: PipelineConfig, ctx: RolloutContext) -> Iterator[str]:
    """The app up at the weight the log last recorded (0 for a new rollout); down at the end."""
    sp = spec(config, ctx)
    url = app.deploy(sp, weight=current_weight(ctx, config.rollout.steps),
                     mirror_share=config.rollout.mirror_share, shadow_share=config.rollout.shadow_share)
    try:
        yield url
    finally:
        with contextlib.suppress(Exception):
            app.shutdown(sp.app_name)


def _metrics(ctx: RolloutContext, k: int, weight: float, ms: list[Measurement]) -> None:
    values = {"rollout.weight": weight}
    for m in ms:
        for key in ("canary_rate", "p95_ratio", "p_value", "loss_share", "e_value"):
            if isinstance(m.value.get(key), int | float):
                values[f"rollout.{m.metric}.{key}"] = float(m.value[key])
    client = MlflowClient(tracking_uri=ctx.tracking_uri)
    for key, v in values.items():
        client.log_metric(ctx.mlflow_run_id, key, v, step=k)


def run_step(config: PipelineConfig, ctx: RolloutContext, k: int, base_url: str,
             judge: PairJudge | None) -> str:
    """Set step k's weight, analyse windows until the step is decided; returns the outcome."""
    conf = config.rollout
    weight = conf.steps[k] / 100
    record(ctx, "step", step=k, weight=weight)
    app.deploy(spec(config, ctx), weight=weight, mirror_share=conf.mirror_share,
               shadow_share=conf.shadow_share)
    prompts = [r.messages for r in read_requests(Path(ctx.heldout_path))]
    windows: list[list[Measurement]] = []
    client = MlflowClient(tracking_uri=ctx.tracking_uri)
    api_key = os.environ.get(conf.serving.api_key_env or "") or None
    began = _log(ctx).last("started", "restarted")  # this process's part of the rollout began here
    while True:
        if registry.alias_version(client, ctx.registered_model, registry.CANARY) != ctx.canary_version:
            record(ctx, "decision", step=k, outcome="failed", failed_metrics=[],
                   reason="the `canary` alias was removed (a person rolled back)")
            return "failed"
        engines_before = _engine_snapshots(spec(config, ctx).app_name)
        w = run_window(base_url=base_url, model_name=ctx.served_names[0], prompts=prompts, weight=weight,
                       step_index=k, conf=conf, log_dir=ctx.log_dir, judge=judge, api_key=api_key,
                       watts_per_busy_core=hardware_profile(config.bench.hardware).watts_per_busy_core,
                       resumed_at=began["t"] if began else 0.0)
        windows.append(w.measurements)
        # Ray Serve's own per-deployment counters and latency histogram, cumulative, beside the
        # window's per-request samples (the operator's view; the analysis reads the samples).
        record(ctx, "window", step=k, weight=weight, **w.to_dict(),
               ray_serve=serve_metrics.cluster_metrics(spec(config, ctx).app_name),
               engines=_engine_windows(engines_before, _engine_snapshots(spec(config, ctx).app_name)))
        _metrics(ctx, k, weight, w.measurements)
        decision = decide_step(windows, conf)
        print(f"      step {k + 1}/{len(conf.steps)} ({conf.steps[k]:g} %): {w.sent} requests in "
              f"{w.wall_s:.0f} s {w.statuses}; " + "; ".join(f"{m.metric} {m.phase}" for m in w.measurements)
              + f" -> {decision.outcome}", flush=True)
        if decision.outcome != "repeat":
            record(ctx, "decision", step=k, outcome=decision.outcome, reason=decision.reason,
                   failed_metrics=list(decision.failed_metrics))
            return decision.outcome


def _engine_snapshots(app_name: str) -> dict[str, EngineSnapshot]:
    """Each arm's engine metrics now (an arm that does not answer is left out: the window's errors
    say why)."""
    from ray import serve

    out = {}
    for role in ("champion", "canary"):
        with contextlib.suppress(Exception):
            text = serve.get_deployment_handle(role, app_name).metrics_text.remote().result(timeout_s=15)
            out[role] = parse_metrics(text)
    return out


def _engine_windows(before: dict[str, EngineSnapshot], after: dict[str, EngineSnapshot]) -> dict[str, dict]:
    """The engines' own view of the window, per arm: TTFT, ITL, queueing and end-to-end quantiles
    from their histograms, requests and tokens (beside the router's per-request samples)."""
    return {role: {k: v for k, v in after[role].since(before[role]).summary().items() if v == v}
            for role in after if role in before}


def promote(config: PipelineConfig, ctx: RolloutContext, reason: str, base_url: str | None) -> None:
    record(ctx, "promoting", reason=reason)
    if base_url is not None:  # the canary takes all traffic; it is the champion from here on
        app.deploy(spec(config, ctx), weight=1.0, mirror_share=0.0)
    client = MlflowClient(tracking_uri=ctx.tracking_uri)
    registry.promote(client, ctx.registered_model, ctx.canary_version, f"rollout {ctx.rollout_id}: {reason}")
    record(ctx, "promoted", reason=reason)
    close_mlflow_run(ctx, "promoted", reason)


def rollback(config: PipelineConfig, ctx: RolloutContext, reason: str, base_url: str | None) -> None:
    record(ctx, "rolling_back", reason=reason)
    if base_url is not None:  # weight 0 at once: no user request reaches the canary from here on
        app.deploy(spec(config, ctx), weight=0.0, mirror_share=0.0)
    client = MlflowClient(tracking_uri=ctx.tracking_uri)
    registry.remove_canary(client, ctx.registered_model, f"rollout {ctx.rollout_id} rolled back: {reason}")
    client.set_model_version_tag(ctx.registered_model, ctx.canary_version, "rollout.rolled_back",
                                 reason[:4000])
    record(ctx, "rolled_back", reason=reason)
    close_mlflow_run(ctx, "rolled_back", reason)
