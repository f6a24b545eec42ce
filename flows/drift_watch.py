"""drift_watch: has the traffic moved away from what the champion was calibrated on? In the order of
the pipeline diagram: the champion's calibration (MLflow) -> the recent window of the traffic log
(complete lines only) -> redaction, quarantine and sampling as in quantize_and_gate -> the window's
activation statistics -> the drift score -> over the threshold, the drift event that starts
quantize_and_gate on the window (`quantgate deploy`), with the drift report attached.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, runtime
from prefect.artifacts import create_markdown_artifact

from quantgate.conf.schema import PipelineConfig
from quantgate.flows.naming import drift_run_name
from quantgate.tasks.calibrate.drift import DriftReport, report_markdown
from quantgate.tasks.calibrate.stages import (
    announce_drift_task,
    assess_drift_task,
    calibrate_task,
    traffic_window_task,
)
from quantgate.tasks.model.stages import resolve_model_task
from quantgate.tasks.registry.stages import champion_calibration_task
from quantgate.tasks.runtime.events import DRIFT_DETECTED
from quantgate.tasks.traffic.stages import prepare_traffic_task


def window_size(config: PipelineConfig) -> int:
    t = config.traffic
    return config.drift.window_requests or round(1.25 * (t.calibration_size + t.heldout_size))


@flow(name="drift_watch", flow_run_name=drift_run_name, log_prints=True)
def drift_watch(config: PipelineConfig) -> DriftReport | None:
    state, flow_run_id = str(config.runtime.state_dir.resolve()), str(runtime.flow_run.id)
    model = resolve_model_task(name=config.model.name, state_dir=state)
    served = config.model.served_name or model.name
    reference = champion_calibration_task(config=config, registered_model=served)
    if reference is None:
        print(f"no champion of {served} with calibration statistics yet: nothing to compare with "
              "(quantize_and_gate registers one)")
        return None
    window = traffic_window_task(source=str(config.traffic.path), n=window_size(config), state_dir=state)
    print(f"window: the last {window.requests} complete requests of {window.source}"
          + (f" ({window.partial_tail_bytes} bytes of a line still being written left for later)"
             if window.partial_tail_bytes else ""))
    conf = config.traffic.model_copy(update={"path": Path(window.path)})
    traffic = prepare_traffic_task(conf=conf, state_dir=state)
    print("      " + traffic.summary_line())
    stats = calibrate_task(model=model, traffic=traffic, conf=config.calibration,
                           num_cpus=config.eval.num_cpus, state_dir=state)
    report = assess_drift_task(reference_stats=reference, window_stats=stats.stats_path, window=window,
                               threshold=config.drift.threshold, state_dir=state)
    print(report.one_line())
    if report.trigger:
        event = announce_drift_task(report=report, served_model=served, flow_run_id=flow_run_id,
                                    state_dir=state)
        print(f"event {DRIFT_DETECTED} ({event}): requantize on {window.path}")
    create_markdown_artifact(key="drift-report", markdown=report_markdown(report),
                             description=report.one_line())
    return report
