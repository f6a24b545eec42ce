"""The `canary_rollout` flow: the gate's winner earns live traffic step by step, and loses it at once.

    lock the model → champion and canary from the registry → serve both, weight 0
      → for each step: weight, analysis windows, decision
          passed → next step · failed → roll back · inconclusive → pause for a person
      → all passed: promote · report (timeline and plot) to Prefect and MLflow

Resumable: every transition is in the rollout's log before it happens, and the flow asks the log
what to do next, so a rollout killed anywhere and started again goes on from its last recorded step.
"""

from __future__ import annotations

from dataclasses import replace

from prefect import flow, runtime
from prefect.artifacts import create_markdown_artifact
from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import pause_flow_run
from prefect.settings import PREFECT_API_URL

from quantgate.conf.schema import PipelineConfig
from quantgate.flows.naming import rollout_run_name
from quantgate.tasks.rollout.context import AlreadyChampion, RolloutContext, registered_model
from quantgate.tasks.rollout.pair_judge import PairJudge
from quantgate.tasks.rollout.progress import Action
from quantgate.tasks.rollout.stages import (
    PersonDecision,
    RolloutSummary,
    next_task,
    prepare_task,
    promote_task,
    record_task,
    report_task,
    rollback_task,
    rollout_judge,
    rollout_lock,
    step_task,
)
from quantgate.tasks.rollout.steps import serving
from quantgate.tasks.runtime.stop import keep_stop_handlers


def _ask_person(config: PipelineConfig, ctx: RolloutContext, action: Action) -> bool:
    """Pause the flow run for a typed decision; False when the rollout is left paused."""
    record_task(ctx=ctx, event="paused", data={"step": action.step, "reason": action.reason,
                                               "flow_run_id": str(runtime.flow_run.id),
                                               "api_url": PREFECT_API_URL.value()})
    print(f"      paused for a person: {action.reason}\n      answer in the Prefect UI (flow run "
          f"{runtime.flow_run.id}) or with `quantgate promote` / `quantgate rollback`", flush=True)
    try:
        answer = pause_flow_run(wait_for_input=PersonDecision, timeout=int(config.rollout.pause_timeout_s))
        choice, by, reason = answer.choice, "a person", answer.reason
    except FlowPauseTimeout:
        if config.rollout.on_pause_timeout == "leave_paused":
            return False
        choice, by, reason = (config.rollout.on_pause_timeout,
                              f"the pause timeout ({config.rollout.pause_timeout_s:g} s)", "")
    record_task(ctx=ctx, event="resumed", data={"step": action.step, "choice": choice, "by": by,
                                                "reason": reason})
    return True


def _walk(config: PipelineConfig, ctx: RolloutContext, action: Action, url: str,
          judge: PairJudge | None) -> None:
    while action.kind != "done":
        if action.kind == "step":
            step_task(config=config, ctx=ctx, k=action.step, base_url=url, judge=judge)
        elif action.kind == "pause":
            if not _ask_person(config, ctx, action):
                return
        elif action.kind == "promote":
            promote_task(config=config, ctx=ctx, reason=action.reason, base_url=url)
        else:
            rollback_task(config=config, ctx=ctx, reason=action.reason, base_url=url)
        action = next_task(config=config, ctx=ctx)


@flow(name="canary_rollout", flow_run_name=rollout_run_name, log_prints=True)
def canary_rollout(config: PipelineConfig, variant: str | None = None, run: str | None = None,
                   inject: dict[str, float] | None = None) -> RolloutSummary | None:
    keep_stop_handlers()
    with rollout_lock(config, registered_model(config, run)):
        try:
            ctx = prepare_task(config=config, variant=variant, run=run, faults=inject or {})
        except AlreadyChampion as exc:  # e.g. a second gate event for the same winner
            print(f"rollout: nothing to do: {exc}")
            return None
        steps = ", ".join(f"{s:g}" for s in config.rollout.steps)
        print(f"rollout {ctx.rollout_id}{' (resumed)' if ctx.resumed else ''}: {ctx.variant} version "
              f"{ctx.canary_version} ({ctx.verdict}) against champion version {ctx.champion_version}; "
              f"steps {steps} %{'; faults ' + str(ctx.faults) if ctx.faults else ''}", flush=True)
        action = next_task(config=config, ctx=ctx, first=True)
        if action.kind != "done":
            with serving(config, ctx) as url, rollout_judge(config, ctx) as judge:
                print(f"      serving on {url} (champion and canary); judge "
                      f"{'on mirrored prompts' if judge else 'off'}", flush=True)
                _walk(config, ctx, action, url, judge)
        summary = replace(report_task(ctx=ctx), flow_run_id=str(runtime.flow_run.id))
    create_markdown_artifact(key=f"rollout-{ctx.rollout_id.lower()}", markdown=summary.timeline,
                             description=f"canary rollout of {ctx.variant}: {summary.outcome}")
    return summary
