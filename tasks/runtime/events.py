"""The events quantgate emits to Prefect, and that the deployments' triggers wait for (`quantgate
deploy`): a passing gate starts the winner's canary rollout; drifted traffic starts requantization.
One resource per served model, so that triggers (and the UI's event feed) are per model."""

from __future__ import annotations

from typing import Any

GATE_PASSED = "quantgate.gate.passed"
DRIFT_DETECTED = "quantgate.drift.detected"


def model_resource(served_model: str) -> dict[str, str]:
    return {"prefect.resource.id": f"quantgate.model.{served_model}",
            "prefect.resource.name": served_model}


def emit(event: str, served_model: str, payload: dict[str, Any], *,
         related_flow_run: str | None = None) -> str:
    """Emit `event` about the model; returns the event id (the run's log names it)."""
    from prefect.events import emit_event

    related = ([{"prefect.resource.id": f"prefect.flow-run.{related_flow_run}",
                 "prefect.resource.role": "flow-run"}] if related_flow_run else None)
    sent = emit_event(event=event, resource=model_resource(served_model), payload=payload, related=related)
    return str(sent.id) if sent is not None else ""
