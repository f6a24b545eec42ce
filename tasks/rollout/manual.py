"""What a person does from the command line: promote, roll back, look at the state.

A paused rollout whose flow run is still waiting is answered through Prefect (`resume_flow_run` with
the typed input), so the flow itself acts and records it. A rollout whose process is gone is
finished here, under the rollout lock, from its log. Without a rollout in progress, `rollback`
restores `previous-champion`. Each is idempotent: the second run finds nothing to do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mlflow.tracking import MlflowClient

from quantgate.conf.schema import PipelineConfig
from quantgate.tasks.registry import champion as registry
from quantgate.tasks.registry.tracking import tracking_uri
from quantgate.tasks.rollout import steps
from quantgate.tasks.rollout.context import RolloutContext, registered_model
from quantgate.tasks.rollout.log import RolloutBusy, RolloutLock, newest, rollouts_dir, unfinished
from quantgate.tasks.rollout.window import read_jsonl


@dataclass(frozen=True)
class ManualResult:
    did: Literal["promoted", "rolled_back", "resumed", "requested", "nothing"]
    message: str


def _resume_paused(paused: dict[str, Any], choice: str) -> bool:
    """Answer a flow run that is waiting in its pause; False when none is waiting any more."""
    if not paused.get("api_url"):
        return False
    old = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = paused["api_url"]
    try:
        from prefect.client.orchestration import get_client
        from prefect.flow_runs import resume_flow_run

        with get_client(sync_client=True) as client:
            run = client.read_flow_run(paused["flow_run_id"])
            if run.state is None or not run.state.is_paused():
                return False
        resume_flow_run(paused["flow_run_id"], run_input={"choice": choice, "reason": f"quantgate {choice}"})
        return True
    except Exception:  # the server that held the pause is gone: the rollout is finished from its log
        return False
    finally:
        if old is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = old


def act(config: PipelineConfig, choice: Literal["promote", "rollback"],
        run: str | None = None) -> ManualResult:
    state = config.runtime.state_dir.resolve()
    model = registered_model(config, run)
    folder = rollouts_dir(state, model)
    log = unfinished(folder)
    if log is not None:
        ctx = RolloutContext(**log.entries[0]["context"])
        last = log.entries[-1]
        if last["event"] == "paused" and _resume_paused(last, choice):
            return ManualResult("resumed", f"rollout {ctx.rollout_id} was waiting for a person: answered "
                                f"{choice}; its flow run {last['flow_run_id']} acts on it")
        try:
            with RolloutLock(folder):
                reason = f"quantgate {choice} (rollout {ctx.rollout_id} had stopped at `{last['event']}`)"
                (steps.promote if choice == "promote" else steps.rollback)(config, ctx, reason, None)
                return ManualResult("promoted" if choice == "promote" else "rolled_back",
                                    f"rollout {ctx.rollout_id} of {ctx.variant}: {reason}")
        except RolloutBusy:
            if choice == "promote":
                raise RolloutBusy(f"rollout {ctx.rollout_id} of {ctx.variant} is running: it promotes itself "
                                  "when its steps pass (or `quantgate rollback` to stop it)") from None
            client = MlflowClient(tracking_uri=ctx.tracking_uri)
            registry.remove_canary(client, model, f"quantgate rollback during rollout {ctx.rollout_id}")
            return ManualResult("requested", f"rollout {ctx.rollout_id} is running: `canary` alias removed; "
                                "it "
                                "rolls back before its next window")
    client = MlflowClient(tracking_uri=tracking_uri(config.runtime.mlflow_tracking_uri, state))
    if choice == "promote":
        version = registry.alias_version(client, model, registry.CANARY)
        if version is None:
            return ManualResult("nothing", f"{model}: no `canary` alias, nothing to promote")
        registry.promote(client, model, version, "quantgate promote (no rollout: analysis skipped)")
        return ManualResult("promoted", f"{model}: version {version} is the champion")
    if registry.alias_version(client, model, registry.PREVIOUS) is None:
        return ManualResult("nothing", f"{model}: nothing was promoted, nothing to roll back")
    restored = registry.restore_previous(client, model, "quantgate rollback")
    if restored is None:
        return ManualResult("nothing", f"{model}: the champion is `previous-champion` already")
    return ManualResult("rolled_back", f"{model}: champion restored to version {restored}")


def status(config: PipelineConfig, run: str | None = None) -> dict[str, Any]:
    state = config.runtime.state_dir.resolve()
    model = registered_model(config, run)
    client = MlflowClient(tracking_uri=tracking_uri(config.runtime.mlflow_tracking_uri, state))
    aliases = {}
    for alias, version in registry.aliases(client, model).items():
        variant = client.get_model_version(model, version).tags.get("variant", "?") if version else None
        aliases[alias] = {"version": version, "variant": variant}
    out: dict[str, Any] = {"model": model, "aliases": aliases, "rollout": None}
    log = newest(rollouts_dir(state, model))
    if log is None:
        return out
    step = log.last("step")
    window = log.last("window")
    try:
        with RolloutLock(rollouts_dir(state, model)):
            running = False
    except RolloutBusy:
        running = True
    records = read_jsonl(Path(log.path.parent) / "requests.jsonl")
    arms = {arm: _figures([r for r in records if r["arm"] == arm]) for arm in ("champion", "canary")}
    out["rollout"] = {
        "id": log.rollout_id, "variant": log.entries[0]["context"]["variant"],
        "state": log.entries[-1]["event"], "running": running,
        "step": None if step is None else step["step"] + 1, "steps": log.entries[0]["steps"],
        "weight": None if step is None else step["weight"],
        "last_analysis": None if window is None else [
            {"metric": m["metric"], "phase": m["phase"], "reason": m["reason"]}
            for m in window["measurements"]],
        "deployments": arms, "ray_serve": None if window is None else window.get("ray_serve"),
        "log": str(log.path)}
    return out


def _figures(records: list[dict[str, Any]]) -> dict[str, Any]:
    ok = sorted(r["total_s"] for r in records if r["status"] == 200 and r.get("total_s") is not None)
    q = (lambda f: round(ok[min(len(ok) - 1, int(f * len(ok)))], 3)) if ok else (lambda f: None)
    return {"requests": len(records), "errors": sum(r["status"] >= 500 for r in records),
            "tokens": sum(r.get("completion_tokens") or 0 for r in records), "p50_s": q(0.5),
            "p95_s": q(0.95)}
