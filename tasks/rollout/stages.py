"""Prefect tasks for the canary rollout (thin wrappers), the person's decision as a typed run input,
and the context managers the flow holds for the rollout's length: the lock and the judge."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.input import RunInput

from quantgate.conf.schema import PipelineConfig
from quantgate.tasks.judge.endpoint import judge_endpoint
from quantgate.tasks.rollout import steps
from quantgate.tasks.rollout.context import RolloutContext, close_mlflow_run, prepare_rollout
from quantgate.tasks.rollout.log import RolloutLock, RolloutLog, rollouts_dir
from quantgate.tasks.rollout.manual import ManualResult, act
from quantgate.tasks.rollout.pair_judge import LikelihoodJudge, LlmJudge, PairJudge
from quantgate.tasks.rollout.progress import Action, next_action
from quantgate.tasks.rollout.report import write_report


class PersonDecision(RunInput):
    """What a person answers to a paused rollout (Prefect UI, or `quantgate promote|rollback`)."""

    choice: Literal["promote", "rollback", "extend"]
    reason: str = ""


@dataclass(frozen=True)
class RolloutSummary:
    outcome: str  # promoted | rolled_back | paused | nothing
    reason: str
    variant: str
    canary_version: str
    champion_version: str
    rollout_id: str
    mlflow_run_id: str
    experiment_id: str
    tracking_uri: str
    report_path: str
    plot_path: str
    timeline: str
    flow_run_id: str = ""


@contextlib.contextmanager
def rollout_lock(config: PipelineConfig, registered_model: str) -> Iterator[None]:
    with RolloutLock(rollouts_dir(config.runtime.state_dir.resolve(), registered_model)):
        yield


def judge_required(config: PipelineConfig, ctx: RolloutContext) -> bool:
    mode = config.rollout.analysis.judge
    if ctx.verdict == "monitor" and mode == "off":
        raise ValueError(f"rollout.analysis.judge: off, but {ctx.variant} is a `monitor` variant: it goes "
                         "live "
                         "only with the judge watching (seed 000); set it to auto or on")
    return mode == "on" or ctx.verdict == "monitor" or (mode == "auto" and config.judge.enabled)


@contextlib.contextmanager
def rollout_judge(config: PipelineConfig, ctx: RolloutContext) -> Iterator[PairJudge | None]:
    """None when no judge watches; the likelihood judge needs no server (the champion scores)."""
    a = config.rollout.analysis
    if not judge_required(config, ctx):
        yield None
    elif a.judge_mode == "likelihood":
        yield LikelihoodJudge(a.likelihood_tie_band)
    else:
        with judge_endpoint(config.judge, str(config.runtime.state_dir.resolve())) as endpoint:
            yield LlmJudge(endpoint.client(config.judge), a.judge_mode, config.judge.tie_band,
                           a.judge_max_pairs_per_step)


@task(name="rollout-prepare", cache_policy=NO_CACHE)
def prepare_task(*, config: PipelineConfig, variant: str | None, run: str | None,
                 faults: dict[str, float]) -> RolloutContext:
    return prepare_rollout(config, variant=variant, run=run, faults=faults)


@task(name="rollout-next", cache_policy=NO_CACHE)
def next_task(*, config: PipelineConfig, ctx: RolloutContext, first: bool = False) -> Action:
    action = next_action(RolloutLog.read(Path(ctx.log_path)), config.rollout.steps)
    if first and ctx.resumed and config.rollout.on_resume == "rollback" and action.kind in ("step", "pause"):
        return Action("rollback", action.step, "the rollout's process died; rollout.on_resume: rollback")
    return action


@task(name="rollout-step", task_run_name="step {k}", cache_policy=NO_CACHE)
def step_task(*, config: PipelineConfig, ctx: RolloutContext, k: int, base_url: str,
              judge: PairJudge | None) -> str:
    return steps.run_step(config, ctx, k, base_url, judge)


@task(name="rollout-promote", cache_policy=NO_CACHE)
def promote_task(*, config: PipelineConfig, ctx: RolloutContext, reason: str, base_url: str | None) -> None:
    steps.promote(config, ctx, reason, base_url)


@task(name="rollout-rollback", cache_policy=NO_CACHE)
def rollback_task(*, config: PipelineConfig, ctx: RolloutContext, reason: str, base_url: str | None) -> None:
    steps.rollback(config, ctx, reason, base_url)


@task(name="rollout-record", cache_policy=NO_CACHE)
def record_task(*, ctx: RolloutContext, event: str, data: dict) -> None:
    steps.record(ctx, event, **data)


@task(name="rollout-report", cache_policy=NO_CACHE)
def report_task(*, ctx: RolloutContext) -> RolloutSummary:
    log = RolloutLog.read(Path(ctx.log_path))
    md, png = write_report(ctx)
    last = log.entries[-1]
    outcome = last["event"] if log.finished else "paused"
    if outcome == "paused":
        close_mlflow_run(ctx, "paused", last.get("reason", ""))
    return RolloutSummary(outcome, last.get("reason", ""), ctx.variant, ctx.canary_version,
                          ctx.champion_version, ctx.rollout_id, ctx.mlflow_run_id, ctx.experiment_id,
                          ctx.tracking_uri, str(Path(ctx.log_dir) / "report.md"), png, md)


@task(name="manual-rollback", task_run_name="rollback-aliases")
def manual_rollback_task(*, config: PipelineConfig, run: str | None) -> ManualResult:
    """`quantgate rollback` as a task: the `rollback` deployment's one step."""
    return act(config, "rollback", run)
