"""Prefect tasks for calibration: activation statistics of the calibration set, and their drift
against the previous run's."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from quantgate.conf.schema import CalibrationConf
from quantgate.tasks.calibrate.stats import (
    CalibrationResult,
    calibrate_file,
    calibration_dir,
    calibration_drift,
)
from quantgate.tasks.model.source import ModelRef
from quantgate.tasks.runtime.caching import CACHED
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
