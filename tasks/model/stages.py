"""Prefect task for the model stage: the baseline checkpoint the run quantizes."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from quantgate.tasks.model.source import ModelRef, resolve_model


@task(name="resolve-model", task_run_name="resolve-model-{name}")
def resolve_model_task(*, name: str, state_dir: str) -> ModelRef:
    return resolve_model(name, Path(state_dir) / "models")
