"""Prefect task caching shared by every stage: results are keyed on the hash of the inputs and of
the task's source, and persisted, so an identical re-run skips finished work. The functions under
the tasks are idempotent on their content-addressed output folders too, so a run killed half-way
resumes without redoing finished work even where Prefect's cache missed."""

from __future__ import annotations

from typing import Any

from prefect.cache_policies import INPUTS, TASK_SOURCE

CACHED: dict[str, Any] = {"cache_policy": INPUTS + TASK_SOURCE, "persist_result": True}

