"""Where a rollout starts from: which version is champion, which one is the canary, the held-out
traffic to replay, and the rollout's log (new, or the unfinished one it resumes).

The canary is any variant of a finished run that the gate did not reject (its version was
registered), the near-null control `baseline_bf16` included, for drills.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from mlflow.entities import RunStatus
from mlflow.tracking import MlflowClient

from quantgate.conf.schema import PipelineConfig
from quantgate.tasks.engine.checkpoints import servable
from quantgate.tasks.registry.champion import CHAMPION, local_checkpoint, resolve, start_canary
from quantgate.tasks.registry.run_record import read_run_record
from quantgate.tasks.registry.tracking import ensure_experiment, tracking_uri
from quantgate.tasks.rollout.log import RolloutLog, rollouts_dir, unfinished


class NothingToRollOut(LookupError):
    """The run has no such variant, or the gate rejected it (no registered version)."""


class AlreadyChampion(NothingToRollOut):
    """The variant's version serves already (a second gate event for the same winner): nothing to do."""


class UnservableCanary(NothingToRollOut):
    """The variant's format has no production engine (QuIP#, AQLM): the canary refuses it."""


@dataclass(frozen=True)
class RolloutContext:
    rollout_id: str
    log_path: str
    log_dir: str  # the router's request and mirror logs
    registered_model: str
    tracking_uri: str
    mlflow_run_id: str
    variant: str
    verdict: str  # pass | monitor
    champion_version: str
    champion_path: str
    canary_version: str
    canary_path: str
    heldout_path: str
    served_names: tuple[str, ...]
    experiment_id: str = ""
    faults: dict[str, float] = field(default_factory=dict)
    resumed: bool = False


def _record(state: Path, run: str | None) -> dict:
    """The run record by flow run id, or by MLflow parent run id, or the newest."""
    if run is None:
        return read_run_record(state)
    runs = state / "runs"
    if (runs / run).is_dir():
        return read_run_record(state, run)
    import json

    for path in sorted(runs.glob("*/run_record.json")):
        rec = json.loads(path.read_text())
        if rec["mlflow"]["parent_run_id"] == run:
            return rec
    raise NothingToRollOut(f"--run {run}: neither a flow run id nor an MLflow run id of a finished run "
                           f"in {runs}")


def registered_model(config: PipelineConfig, run: str | None) -> str:
    """The registered model a rollout of `run` (default: the newest) acts on."""
    return config.model.served_name or _record(config.runtime.state_dir.resolve(), run)["model"]["name"]


def _canary_version(client: MlflowClient, model: str, record: dict, variant: str) -> tuple[str, str]:
    registered = record["mlflow"]["registered"]
    if variant not in registered:
        known = sorted(registered)
        why = ("not in that run" if variant not in record["checkpoints"] else "rejected by the gate")
        raise NothingToRollOut(f"--variant {variant}: {why}; variants of run {record['flow_run_id']} the "
                               f"gate did not reject: {known or 'none'}")
    version = str(registered[variant])
    verdict = client.get_model_version(model, version).tags.get("gate.verdict", "pass")
    return version, verdict


def prepare_rollout(config: PipelineConfig, *, variant: str | None, run: str | None,
                    faults: dict[str, float]) -> RolloutContext:
    state = config.runtime.state_dir.resolve()
    record = _record(state, run)
    model = config.model.served_name or record["model"]["name"]
    uri = tracking_uri(config.runtime.mlflow_tracking_uri, state)
    client = MlflowClient(tracking_uri=uri)
    folder = rollouts_dir(state, model)
    log = unfinished(folder)
    if log is not None:  # a rollout that did not finish: resumed as it was started
        start = log.entries[0]
        log.append("restarted", after=log.entries[-1]["event"])  # the timeline shows the gap
        return RolloutContext(**{**start["context"], "resumed": True})
    variant = variant or record["winner"]
    if variant is None:
        raise NothingToRollOut(f"run {record['flow_run_id']}: the gate chose no winner; name a variant")
    version, verdict = _canary_version(client, model, record, variant)
    champion = resolve(client, model, CHAMPION, state / "serving-cache")
    if champion.version == version:
        raise AlreadyChampion(f"{variant} (version {version}) is the champion already: nothing to do")
    canary_path = local_checkpoint(client, model, version, state / "serving-cache")
    if why := servable(canary_path):  # gated offline, reported; a canary would serve nothing real
        raise UnservableCanary(f"{variant} (version {version}) cannot be canaried: {why}")
    exp = ensure_experiment(client, config.runtime.experiment or record["model"]["name"],
                            state / "mlartifacts")
    log = RolloutLog.create(folder)
    run_id = client.create_run(exp, run_name=f"rollout {variant} v{version}", tags={
        "rollout.id": log.rollout_id, "rollout.variant": variant, "rollout.canary_version": version,
        "rollout.champion_version": champion.version, "rollout.outcome": "running",
        "quantgate.kind": "rollout"}).info.run_id
    ctx = RolloutContext(
        rollout_id=log.rollout_id, log_path=str(log.path), log_dir=str(log.path.parent),
        registered_model=model, tracking_uri=uri, mlflow_run_id=run_id, variant=variant, verdict=verdict,
        champion_version=champion.version, champion_path=champion.path, canary_version=version,
        canary_path=canary_path, heldout_path=record["heldout_path"],
        served_names=tuple(dict.fromkeys([model, record["model"]["name"]])), experiment_id=exp,
        faults=faults)
    log.append("started", context=asdict(ctx), steps=list(config.rollout.steps))  # before it takes effect
    start_canary(client, model, version, reason=f"rollout {log.rollout_id} of {variant} "
                 f"(run {record['flow_run_id']})")
    return ctx


def close_mlflow_run(ctx: RolloutContext, outcome: str, reason: str) -> None:
    client = MlflowClient(tracking_uri=ctx.tracking_uri)
    client.set_tag(ctx.mlflow_run_id, "rollout.outcome", outcome)
    client.set_tag(ctx.mlflow_run_id, "rollout.reason", reason[:4000])
    client.log_artifact(ctx.mlflow_run_id, ctx.log_path, "rollout")
    status = "FINISHED" if outcome in ("promoted", "rolled_back") else "RUNNING"
    if status == "FINISHED":
        client.set_terminated(ctx.mlflow_run_id, RunStatus.to_string(RunStatus.FINISHED))
