"""Record a finished run in MLflow: parent run, one child per variant (and the baseline),
registered versions for the variants that passed, alias `canary` on the winner."""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mlflow.entities import RunStatus
from mlflow.tracking import MlflowClient

from quantgate.tasks.gate.decide import GateDecision, VariantScores
from quantgate.tasks.perf.bench import BenchReport
from quantgate.tasks.registry.tracking import (
    ensure_experiment,
    log_child_run,
    log_metrics,
    move_alias,
    quantize_note_metrics,
    register_version,
)


@dataclass(frozen=True)
class RunRecord:
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    child_run_ids: dict[str, str]
    registered: dict[str, str]  # variant -> model version
    canary_version: str | None


@dataclass(frozen=True)
class PublishInputs:
    tracking_uri: str
    experiment: str
    artifact_root: Path
    model_name: str
    registered_model: str
    model_digest: str
    calibration_hash: str
    params: dict[str, str]
    parent_metrics: dict[str, float]
    parent_artifacts: list[str]
    flow_run_id: str
    child_tags: dict[str, str] = field(default_factory=dict)  # e.g. energy_method, bench.batch


def publish_run(
    inp: PublishInputs, *, baseline: VariantScores, variants: list[VariantScores],
    decision: GateDecision, gate_report: str, checkpoints: dict[str, str],
    variant_artifacts: dict[str, list[str]],
) -> RunRecord:
    client = MlflowClient(tracking_uri=inp.tracking_uri)
    exp_id = ensure_experiment(client, inp.experiment, inp.artifact_root)
    parent = client.create_run(exp_id, run_name=f"quantize_and_gate {inp.flow_run_id[:8]}", tags={
        "model": inp.model_name, "model_digest": inp.model_digest,
        "calibration_hash": inp.calibration_hash, "prefect.flow_run_id": inp.flow_run_id,
        "gate.winner": decision.winner or "none"})
    pid = parent.info.run_id
    for k, v in inp.params.items():
        client.log_param(pid, k, v)
    log_metrics(client, pid, inp.parent_metrics)
    for path in inp.parent_artifacts:
        client.log_artifact(pid, path)
    client.log_text(pid, gate_report, "gate_report.md")
    tags = {"calibration_hash": inp.calibration_hash, **inp.child_tags}
    children = {"baseline": log_child_run(
        client, experiment_id=exp_id, parent_run_id=pid, scores=baseline, verdict=None,
        tags=tags, params={"method": "baseline"}, artifacts=variant_artifacts.get("baseline", []))}
    registered: dict[str, str] = {}
    for v in variants:
        verdict = decision.verdicts[v.name]
        with tempfile.TemporaryDirectory() as tmp:
            verdict_file = Path(tmp) / "gate_verdict.json"
            verdict_file.write_text(json.dumps(verdict.__dict__, indent=1))
            children[v.name] = log_child_run(
                client, experiment_id=exp_id, parent_run_id=pid, scores=v, verdict=verdict,
                tags=tags, params={"method": v.method, "control": str(v.control)},
                artifacts=[*variant_artifacts.get(v.name, []), str(verdict_file)])
        if v.name in checkpoints:
            log_metrics(client, children[v.name], quantize_note_metrics(checkpoints[v.name]))
        if verdict.passed and v.name in checkpoints:
            registered[v.name] = _register(client, inp.registered_model, children[v.name],
                                           checkpoints[v.name], v.name)
    canary = registered.get(decision.winner) if decision.winner else None
    if canary is not None:
        move_alias(client, inp.registered_model, "canary", canary,
                   reason=f"offline gate winner {decision.winner} (run {pid})")
    client.set_terminated(pid, RunStatus.to_string(RunStatus.FINISHED))
    return RunRecord(inp.tracking_uri, exp_id, pid, children, registered, canary)


def _register(client: MlflowClient, model: str, run_id: str, checkpoint: str, variant: str) -> str:
    version = register_version(client, model, run_id, checkpoint)
    client.set_model_version_tag(model, version, "variant", variant)
    return version


def publish_bench(tracking_uri: str, experiment: str, artifact_root: Path, report: BenchReport,
                  json_path: str) -> str:
    """A `bench` parent run (the JSON as artifact) with one child run per model."""
    client = MlflowClient(tracking_uri=tracking_uri)
    exp_id = ensure_experiment(client, experiment, artifact_root)
    tags = {"energy_method": report.energy_method, "bench.batch": str(report.gate_batch),
            "machine": report.machine}
    parent = client.create_run(exp_id, run_name=f"bench {time.strftime('%Y-%m-%d %H:%M')}", tags=tags)
    pid = parent.info.run_id
    client.log_artifact(pid, json_path)
    for name, model in report.models.items():
        child = client.create_run(exp_id, run_name=name, tags={
            **tags, "mlflow.parentRunId": pid, "variant": name, "bench.path": model.path[:4000]})
        metrics = report.metrics(name)
        log_metrics(client, child.info.run_id, {k: v for k, v in metrics.items() if v == v})
        client.set_terminated(child.info.run_id, RunStatus.to_string(RunStatus.FINISHED))
    client.set_terminated(pid, RunStatus.to_string(RunStatus.FINISHED))
    return pid
