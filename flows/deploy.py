"""`quantgate deploy`: the four deployments of one model, served by one process (Prefect's runner), or
registered on a work pool whose workers run them (`--work-pool`, the cluster profile).

    quantize_and_gate  weekly cron, and on a drift event (the event's window as its traffic)
    drift_watch        hourly
    canary_rollout     on a passing gate's event (the winner and its run from the event)
    rollback           manual (the Prefect UI's "Run", or `prefect deployment run rollback/<name>`)

Schedules and triggers are Prefect's own (deployment event triggers on the server's automations), and
each deployment has a concurrency limit of 1 (queued or cancelled by `deploy.collision`), so two runs of
one model never overlap. Stopping the process does not pause the schedules (`pause_on_shutdown=False`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from prefect import serve
from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
from prefect.deployments.runner import EntrypointType
from prefect.events import DeploymentEventTrigger
from prefect.schedules import Cron, Interval

from quantgate.conf.schema import PipelineConfig
from quantgate.flows.canary_rollout import canary_rollout
from quantgate.flows.drift_watch import drift_watch
from quantgate.flows.quantize_and_gate import quantize_and_gate
from quantgate.flows.rollback import rollback
from quantgate.tasks.runtime.events import DRIFT_DETECTED, GATE_PASSED, model_resource

# By module, not file: a run's task functions are pickled for Ray workers by module name, and a flow
# loaded from a file path would name a module (`quantize_and_gate`) no worker can import.
MODULE = EntrypointType.MODULE_PATH


def deployment_config(config: PipelineConfig) -> dict[str, Any]:
    """The flows' parameter: the gate's winner is rolled out by the triggered canary_rollout
    deployment, not inside quantize_and_gate's run."""
    rollout = config.rollout.model_copy(update={"auto": False})
    return config.model_copy(update={"rollout": rollout}).model_dump(mode="json")


def _on(event: str, served: str, name: str, parameters: dict[str, Any]) -> DeploymentEventTrigger:
    resource = model_resource(served)["prefect.resource.id"]
    return DeploymentEventTrigger(name=name, expect={event}, match={"prefect.resource.id": resource},
                                  parameters=parameters)


def deployments(config: PipelineConfig) -> list[Any]:
    """Each flow run starts in a fresh process from the flow's module (the runner's engine), so Ray is
    reached through the environment `serve_deployments` inherits: RAY_ADDRESS, and the head's own
    environment for its workers (PREFECT_API_URL, MLFLOW_TRACKING_URI: `quantgate up`)."""
    conf, served = config.deploy, config.model.served_name or config.model.name
    name, params = conf.name or served, {"config": deployment_config(config)}
    limit = ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy(conf.collision))
    tags = ["quantgate", f"model:{served}"]
    drift_trigger = _on(DRIFT_DETECTED, served, f"requantize {served} on drift",
                        {**params, "traffic_window": "{{ event.payload.window }}"})
    gate_trigger = _on(GATE_PASSED, served, f"roll out {served}'s gate winner",
                       {**params, "variant": "{{ event.payload.winner }}", "run": "{{ event.payload.run }}"})
    common = {"name": name, "entrypoint_type": MODULE, "parameters": params, "concurrency_limit": limit,
              "tags": tags}
    return [
        quantize_and_gate.to_deployment(
            **common, schedule=Cron(conf.quantize_cron, timezone=conf.timezone),
            triggers=[drift_trigger] if conf.requantize_on_drift else [],
            description=f"Quantize {served}, evaluate every variant on its traffic, gate (weekly; on drift)"),
        drift_watch.to_deployment(
            **common, schedule=Interval(timedelta(seconds=conf.drift_interval_s), timezone=conf.timezone),
            description=f"Has {served}'s traffic drifted from the champion's calibration?"),
        canary_rollout.to_deployment(
            **common, triggers=[gate_trigger] if conf.rollout_on_gate else [],
            description=f"Canary rollout of {served}'s gate winner on Ray Serve, rolled back on the metric"),
        rollback.to_deployment(
            **common, description=f"Roll {served} back: stop a rollout, or restore previous-champion"),
    ]


def work_pool_type(pool: str) -> str | None:
    """The pool's worker type, or None when the server has no pool of that name."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            return client.read_work_pool(pool).type
        except ObjectNotFound:
            return None


def register_deployments(config: PipelineConfig, pool: str, env: dict[str, str]) -> list[str]:
    """The same deployments on work pool `pool`: a worker (a process, or a Kubernetes Job per run) runs
    each flow run from the installed package. `env` becomes the flow-run process's environment (job
    variables, stored on the Prefect server: never a secret); the image, volumes and secrets are the
    pool's job template's (infra/k8s/work-pool-template.json)."""
    names = []
    for d in deployments(config):
        d.job_variables = {**d.job_variables, "env": {**d.job_variables.get("env", {}), **env}}
        d.apply(work_pool_name=pool)
        names.append(d.full_name)
    return names


def serve_deployments(config: PipelineConfig) -> None:
    """Runs until SIGTERM or Ctrl-C; the schedules stay active after it stops."""
    serve(*deployments(config), pause_on_shutdown=False, print_starting_message=False)
