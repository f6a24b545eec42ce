"""Prefect tasks for calibration: activation statistics of the calibration set, their drift against
the previous run's, and the drift watch's window, assessment and event."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from quantgate.conf.schema import CalibrationConf
from quantgate.tasks.calibrate.drift import DriftReport, assess_drift, record_trigger
from quantgate.tasks.calibrate.stats import (
    CalibrationResult,
    calibrate_file,
    calibration_dir,
    calibration_drift,
)
from quantgate.tasks.calibrate.window import TrafficWindow, cut_window
from quantgate.tasks.model.source import ModelRef
from quantgate.tasks.runtime.caching import CACHED
from quantgate.tasks.runtime.events import DRIFT_DETECTED, emit
from quantgate.tasks.runtime.threads import set_threads
from quantgate.tasks.traffic.prepare import PreparedTraffic


@task(name="calibrate", task_run_name="calibrate", **CACHED)
def calibrate_task(*, model: ModelRef, traffic: PreparedTraffic, conf: CalibrationConf, num_cpus: float,
                   state_dir: str) -> CalibrationResult:
    set_threads(num_cpus)
    out = calibration_dir(state_dir, calibration_hash=traffic.calibration_hash, model_digest=model.digest)
    return calibrate_file(model.path, traffic.calibration_path, out, max_seq_len=conf.max_seq_len,
                          top_k=conf.top_outliers)


@task(name="calibration-drift")
def drift_task(*, calibration: CalibrationResult, state_dir: str) -> float | None:
    """Drift against the previous run's calibration (None on the first run), then move the
    pointer to this run's stats."""
    pointer = Path(state_dir) / "calibration" / "LATEST"
    previous = pointer.read_text().strip() if pointer.is_file() else None
    drift = None
    if previous and previous != calibration.stats_path and Path(previous).is_file():
        drift = calibration_drift(previous, calibration.stats_path)
    pointer.write_text(calibration.stats_path)
    return drift


@task(name="traffic-window", task_run_name="traffic-window-last-{n}")
def traffic_window_task(*, source: str, n: int, state_dir: str) -> TrafficWindow:
    """The last `n` complete lines of the traffic log, as a file of their own."""
    return cut_window(Path(source), n, Path(state_dir) / "drift" / "windows")


@task(name="assess-drift")
def assess_drift_task(*, reference_stats: str, window_stats: str, window: TrafficWindow, threshold: float,
                      state_dir: str) -> DriftReport:
    return assess_drift(reference_stats=reference_stats, window_stats=window_stats, window=window,
                        threshold=threshold, drift_dir=Path(state_dir) / "drift")


@task(name="announce-drift")
def announce_drift_task(*, report: DriftReport, served_model: str, flow_run_id: str, state_dir: str) -> str:
    """The drift event (its payload names the window to requantize on and the report), then the
    marker that keeps the same traffic from triggering again."""
    event_id = emit(DRIFT_DETECTED, served_model, {
        "window": report.window.path, "requests": report.window.requests, "score": round(report.score, 4),
        "threshold": report.threshold, "report": report.report_path}, related_flow_run=flow_run_id)
    record_trigger(report, Path(state_dir) / "drift")
    return event_id
