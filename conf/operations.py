"""Operations: the drift watch and the scheduled deployments (`quantgate deploy`, docs/operations.md).

Seed 000 (test-time quantization): a calibration ages with the traffic. The drift watch compares the
activation statistics of the most recent traffic with those of the champion's calibration and, over
`threshold`, emits the event that starts `quantize_and_gate` on the recent window.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from quantgate.conf.base import Strict


class DriftConf(Strict):
    """`drift_score` is the mean over Linear layers of the RMS of log(mean |activation| ratio) per
    input channel (kernels/activation_stats.py). Measured on SmolLM2 (`python bench/drift_scores.py`,
    docs/operations.md "Drift"): resamples of the demo traffic 0.019-0.021 from its calibration, half
    of the window code/French/Spanish 0.036, all of it 0.051."""

    window_requests: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="the most recent complete lines of traffic.path to read; default "
        "1.25 x (traffic.calibration_size + traffic.heldout_size): enough to requantize on, with room for "
        "quarantined lines")
    threshold: Annotated[float, Field(gt=0)] = 0.03


class DeployConf(Strict):
    """What `quantgate deploy` serves, in one process: schedules and triggers are Prefect's."""

    name: str | None = Field(default=None, description="deployment name (default: the served model's)")
    quantize_cron: str = Field(default="0 3 * * 1", description="quantize_and_gate: weekly, Monday 03:00")
    drift_interval_s: Annotated[int, Field(ge=10)] = Field(default=3600, description="drift_watch: hourly")
    timezone: str = "UTC"
    rollout_on_gate: bool = Field(default=True, description="a passing gate's event starts canary_rollout")
    requantize_on_drift: bool = Field(default=True, description="a drift event starts quantize_and_gate")
    collision: Annotated[str, Field(pattern="^(ENQUEUE|CANCEL_NEW)$")] = Field(
        default="ENQUEUE", description="a run that fires while one of the same deployment runs: queued "
        "(ENQUEUE) or cancelled (CANCEL_NEW); Prefect's deployment concurrency limit of 1")
