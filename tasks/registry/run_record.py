"""The record a finished run leaves for later commands (`quantgate bench`, the canary): which model,
which held-out traffic, which checkpoint each variant made, and where MLflow has it. Written under
`<state>/runs/<flow run id>/run_record.json`; `<state>/runs/LATEST` names the newest."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from quantgate.tasks.gate.stages import GateOutcome
from quantgate.tasks.model.source import ModelRef
from quantgate.tasks.traffic.prepare import PreparedTraffic

RECORD = "run_record.json"


class NoRunRecord(FileNotFoundError):
    """No finished run in this state dir (or not the one asked for)."""


def write_run_record(state_dir: Path, flow_run_id: str, *, model: ModelRef, traffic: PreparedTraffic,
                     outcome: GateOutcome, record: dict[str, Any]) -> Path:
    out = state_dir / "runs" / flow_run_id
    out.mkdir(parents=True, exist_ok=True)
    data = {"flow_run_id": flow_run_id, "model": {"name": model.name, "path": model.path,
                                                  "digest": model.digest},
            "heldout_path": traffic.heldout_path,
            "checkpoints": {v.name: v.checkpoint for v in outcome.variants
                            if v.checkpoint is not None and v.eval is not None},
            "winner": outcome.decision.winner, "mlflow": record}
    tmp = out / f"{RECORD}.partial"
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(out / RECORD)
    latest = state_dir / "runs" / "LATEST.partial"
    latest.write_text(flow_run_id)
    os.replace(latest, state_dir / "runs" / "LATEST")
    return out / RECORD


def read_run_record(state_dir: Path, flow_run_id: str | None = None) -> dict[str, Any]:
    """The record of `flow_run_id`, or of the newest finished run."""
    runs = state_dir / "runs"
    if flow_run_id is None:
        if not (runs / "LATEST").is_file():
            raise NoRunRecord(f"{runs}: no finished run yet (run `quantgate run` first)")
        flow_run_id = (runs / "LATEST").read_text().strip()
    path = runs / flow_run_id / RECORD
    if not path.is_file():
        raise NoRunRecord(f"{path}: no record of flow run {flow_run_id}")
    return json.loads(path.read_text())
