"""rollback: the manual deployment (`quantgate deploy`), the same act as `quantgate rollback`: a rollout
in progress rolls back; after a promotion, `champion` goes back to `previous-champion`; run twice, the
second finds nothing to do."""

from __future__ import annotations

from prefect import flow

from quantgate.conf.schema import PipelineConfig
from quantgate.flows.naming import rollback_run_name
from quantgate.tasks.rollout.stages import manual_rollback_task


@flow(name="rollback", flow_run_name=rollback_run_name, log_prints=True)
def rollback(config: PipelineConfig, run: str | None = None) -> str:
    result = manual_rollback_task(config=config, run=run)
    print(f"rollback: {result.did}: {result.message}")
    return result.did
