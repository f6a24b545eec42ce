"""Prefect task for publishing: the run's evidence and decision into MLflow, and the run's record
(which checkpoints it made, on which traffic) for the commands that act on a finished run."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from prefect import task

from quantgate.conf.schema import PipelineConfig
from quantgate.tasks.calibrate.stats import CalibrationResult
from quantgate.tasks.gate.stages import GateOutcome, RunReport
from quantgate.tasks.model.source import ModelRef
from quantgate.tasks.perf.bench import BenchReport
from quantgate.tasks.registry.champion import champion_calibration
from quantgate.tasks.registry.publish import PublishInputs, RunRecord, publish_run
from quantgate.tasks.registry.run_record import write_run_record
from quantgate.tasks.registry.tracking import flat_params, tracking_uri
from quantgate.tasks.runtime.clock import RunTimes
from quantgate.tasks.runtime.events import GATE_PASSED, emit
from quantgate.tasks.traffic.prepare import PreparedTraffic


def run_key(config_json: dict, model: ModelRef, traffic: PreparedTraffic, report_markdown: str) -> str:
    """The pipeline run's identity: what was asked (the config, less where state lives and which ports
    serve it), on which model and traffic, and what came out (the report, every number in it)."""
    asked = {k: v for k, v in config_json.items() if k != "runtime"}
    key = json.dumps([asked, model.digest, traffic.calibration_hash, traffic.heldout_path, report_markdown],
                     sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:24]


@task(name="publish-mlflow")
def publish_task(*, config: PipelineConfig, model: ModelRef, traffic: PreparedTraffic,
                 calibration: CalibrationResult, drift: float | None, outcome: GateOutcome, report: RunReport,
                 bench: BenchReport | None, flow_run_id: str, times: RunTimes) -> RunRecord:
    state = config.runtime.state_dir.resolve()
    config_json = config.model_dump(mode="json")
    metrics = {"traffic.valid": traffic.valid, "traffic.quarantined": traffic.quarantined,
               "calibration.tokens": calibration.tokens, "baseline.ppl": outcome.baseline.eval.ppl,
               **{f"traffic.pii_redacted.{k}": v for k, v in traffic.pii_redacted.items()}}
    if drift is not None:
        metrics["calibration.drift"] = drift
    metrics |= times.metrics()
    params = flat_params({k: v for k, v in config_json.items() if k not in ("variants", "runtime")})
    params["variants"] = ",".join(v.name for v in config.variants)
    inputs = PublishInputs(
        tracking_uri=tracking_uri(config.runtime.mlflow_tracking_uri, state),
        experiment=config.runtime.experiment or model.name, artifact_root=state / "mlartifacts",
        model_name=model.name, registered_model=config.model.served_name or model.name,
        model_digest=model.digest, calibration_hash=traffic.calibration_hash,
        run_key=run_key(config_json, model, traffic, report.markdown), params=params,
        parent_metrics={k: float(v) for k, v in metrics.items()},
        parent_artifacts=[traffic.quarantine_path, traffic.summary_path, calibration.summary_path,
                          calibration.stats_path,  # the drift watch compares traffic with it
                          *report.files.values()],
        flow_run_id=flow_run_id,
        child_tags={"energy_method": bench.energy_method, "bench.batch": str(bench.gate_batch)}
        if bench else {"energy_method": "not measured"})
    specs = {s.name: flat_params(s.model_dump(mode="json", exclude={"name"})) for s in config.variants}
    record = publish_run(inputs, baseline=outcome.baseline, variants=outcome.variants,
                         decision=outcome.decision, variant_params=specs,
                         gate_report=report.markdown + "\n## Where the time went\n\n" + times.table())
    write_run_record(state, flow_run_id, model=model, traffic=traffic, outcome=outcome, record=asdict(record))
    return record


@task(name="champion-calibration")
def champion_calibration_task(*, config: PipelineConfig, registered_model: str) -> str | None:
    """The champion's calibration statistics, fetched from MLflow (None: no champion yet)."""
    from mlflow.tracking import MlflowClient

    state = config.runtime.state_dir.resolve()
    client = MlflowClient(tracking_uri(config.runtime.mlflow_tracking_uri, state))
    return champion_calibration(client, registered_model, state / "drift" / "champion")


@task(name="announce-gate")
def announce_gate_task(*, registered_model: str, winner: str, version: str, verdict: str,
                       flow_run_id: str, parent_run_id: str) -> str:
    """A passing gate's event: the canary_rollout deployment's trigger starts the winner's rollout."""
    return emit(GATE_PASSED, registered_model, {"winner": winner, "version": version, "verdict": verdict,
                                                "run": flow_run_id, "mlflow_run": parent_run_id},
                related_flow_run=flow_run_id)
