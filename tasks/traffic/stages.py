"""Prefect task for the traffic stage: the log validated, redacted and split."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from quantgate.conf.schema import TrafficConf
from quantgate.tasks.traffic.prepare import PreparedTraffic, prepare_traffic


@task(name="prepare-traffic")
def prepare_traffic_task(*, conf: TrafficConf, state_dir: str) -> PreparedTraffic:
    return prepare_traffic(conf, Path(state_dir) / "traffic")
