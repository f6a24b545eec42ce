"""Record a finished pipeline run in MLflow: a parent run, one child per variant (and the baseline),
a registered version per variant that passed, alias `canary` on the winner.

Idempotent: the parent run is keyed on the run's content (`run_key`: what was asked, on which model
and traffic, and what came out), each child on (parent, variant), each version on its checkpoint.
A re-run of the same inputs, a retried flow run, or a run resumed after a crash in the middle of
publishing finds what exists and creates only what is missing: no second parent run, no new version,
no second copy of a checkpoint.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mlflow.entities import RunStatus
from mlflow.tracking import MlflowClient

from quantgate.tasks.gate.decide import GateDecision, VariantScores
from quantgate.tasks.perf.bench import BenchReport
from quantgate.tasks.registry.aliases import move_alias, register_version
from quantgate.tasks.registry.champion import ensure_champion
from quantgate.tasks.registry.logged_models import log_variant_model, version_description
from quantgate.tasks.registry.tracking import (
    ensure_experiment,
    find_run,
    log_child_run,
    log_metrics,
    log_params,
)

RUN_KEY_TAG = "quantgate.run_key"


@dataclass(frozen=True)
class RunRecord:
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    child_run_ids: dict[str, str]
    registered: dict[str, str]  # variant -> model version
    canary_version: str | None
    reused: bool  # the parent run existed already: this publish changed nothing it had


@dataclass(frozen=True)
class PublishInputs:
    tracking_uri: str
    experiment: str
    artifact_root: Path
    model_name: str
    registered_model: str
    model_digest: str
    calibration_hash: str
    run_key: str
    params: dict[str, str]
    parent_metrics: dict[str, float]
    parent_artifacts: list[str]
    flow_run_id: str
    child_tags: dict[str, str] = field(default_factory=dict)  # e.g. energy_method, bench.batch


def _parent(client: MlflowClient, exp_id: str, inp: PublishInputs, winner: str | None) -> tuple[str, bool]:
    """(parent run id, whether it was finished already)."""
    found = find_run(client, exp_id, {RUN_KEY_TAG: inp.run_key})
    if found is not None:
        runs = found.data.tags.get("prefect.flow_run_ids", "").split(",")
        if inp.flow_run_id not in runs:  # say which flow runs published to it, change nothing else
            client.set_tag(found.info.run_id, "prefect.flow_run_ids", ",".join([*runs, inp.flow_run_id]))
        return found.info.run_id, found.info.status == "FINISHED"
    parent = client.create_run(exp_id, run_name=f"quantize_and_gate {inp.flow_run_id[:8]}", tags={
        RUN_KEY_TAG: inp.run_key, "model": inp.model_name, "model_digest": inp.model_digest,
        "calibration_hash": inp.calibration_hash, "prefect.flow_run_id": inp.flow_run_id,
        "prefect.flow_run_ids": inp.flow_run_id, "gate.winner": winner or "none"})
    return parent.info.run_id, False


def evidence_files(v: VariantScores) -> list[str]:
    """What a child run carries: the variant's record, lm-eval's results and per-item samples, the
    judge's summary and (redacted) transcript, where they exist."""
    files = [Path(v.checkpoint) / "quantgate_variant.json"] if v.checkpoint and v.eval else []
    if v.lmeval is not None:
        out = Path(v.lmeval.samples_path).parent
        files += [out / "lmeval.json", out / "lmeval_samples.jsonl"]
        if v.judge is not None:
            files += [out / "judge" / "judge_summary.json", out / "judge" / "judge_transcript.jsonl"]
    return [str(f) for f in files if f.is_file()]


def publish_run(inp: PublishInputs, *, baseline: VariantScores, variants: list[VariantScores],
                decision: GateDecision, gate_report: str, variant_params: dict[str, dict[str, str]]
                ) -> RunRecord:
    client = MlflowClient(tracking_uri=inp.tracking_uri)
    exp_id = ensure_experiment(client, inp.experiment, inp.artifact_root)
    pid, finished = _parent(client, exp_id, inp, decision.winner)
    if not finished:
        log_params(client, pid, inp.params)
        log_metrics(client, pid, inp.parent_metrics)
        for path in inp.parent_artifacts:
            client.log_artifact(pid, path)
        client.log_text(pid, gate_report, "gate_report.md")
    tags = {"calibration_hash": inp.calibration_hash, **inp.child_tags}
    children = {"baseline": log_child_run(
        client, experiment_id=exp_id, parent_run_id=pid, scores=baseline, verdict=None,
        tags=tags, params={"method": "baseline"}, artifacts=evidence_files(baseline))}
    registered: dict[str, str] = {}
    for v in variants:
        verdict = decision.verdicts[v.name]
        with tempfile.TemporaryDirectory() as tmp:
            verdict_file = Path(tmp) / "gate_verdict.json"
            verdict_file.write_text(json.dumps(asdict(verdict), indent=1))
            children[v.name] = log_child_run(
                client, experiment_id=exp_id, parent_run_id=pid, scores=v, verdict=verdict, tags=tags,
                params={"control": str(v.control), **variant_params.get(v.name, {})},
                artifacts=[*evidence_files(v), str(verdict_file)])
        if verdict.passed and v.checkpoint is not None:
            registered[v.name] = register_version(client, inp.registered_model, children[v.name],
                                                  v.checkpoint)
            client.set_model_version_tag(inp.registered_model, registered[v.name], "variant", v.name)
            client.set_model_version_tag(inp.registered_model, registered[v.name], "gate.verdict",
                                         verdict.status)
        if finished:  # a republished run changes nothing
            continue
        if v.name in registered:
            base_ppl = baseline.eval.ppl if baseline.eval else float("nan")
            description = version_description(v, verdict, baseline_ppl=base_ppl, run_id=children[v.name])
            client.update_model_version(inp.registered_model, registered[v.name], description=description)
        log_variant_model(client, exp_id, children[v.name], v, verdict, variant_params.get(v.name, {}))
    if baseline.checkpoint is not None:  # the first run of a model: its baseline serves as champion
        ensure_champion(client, inp.registered_model, children["baseline"], baseline.checkpoint)
    canary = registered.get(decision.winner) if decision.winner else None
    if canary is not None and not finished:  # once: a rollout may have removed it since
        move_alias(client, inp.registered_model, "canary", canary,
                   reason=f"offline gate winner {decision.winner} (run {pid})")
    if not finished:
        client.set_terminated(pid, RunStatus.to_string(RunStatus.FINISHED))
    return RunRecord(inp.tracking_uri, exp_id, pid, children, registered, canary, reused=finished)


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
