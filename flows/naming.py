"""Flow-run names that say what a run does (the Prefect UI lists runs by name): the model, and for
a rollout the variant, instead of Prefect's random adjective-animal."""

from __future__ import annotations

from typing import Any

from prefect import runtime


def _served() -> str:
    config: Any = runtime.flow_run.parameters.get("config")
    model = config.get("model", {}) if isinstance(config, dict) else getattr(config, "model", None)
    get = model.get if isinstance(model, dict) else (lambda k: getattr(model, k, None))
    return str(get("served_name") or get("name") or "model").rsplit("/", 1)[-1]


def quantize_run_name() -> str:
    drifted = runtime.flow_run.parameters.get("traffic_window")
    return f"quantize-{_served()}" + ("-on-drift" if drifted else "")


def rollout_run_name() -> str:
    return f"rollout-{_served()}-{runtime.flow_run.parameters.get('variant') or 'winner'}"


def drift_run_name() -> str:
    return f"drift-watch-{_served()}"


def rollback_run_name() -> str:
    return f"rollback-{_served()}"
