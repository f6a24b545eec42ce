"""A deployment's concurrency slot comes back after its run died and the Prefect server restarted.

Seen in the cluster rehearsal: a run killed with its worker, then a new server process on the same
database, and every later run of that deployment waited for the slot forever (its lease had lived in
the old server's memory, so nothing could expire it). The servers we start keep leases on disk
(servers.prefect_server_env): the lease outlives the restart, expires, is revoked, and the next run
gets the slot. Real server, real SQLite, nothing mocked; the lease is shortened to Prefect's minimum."""

from __future__ import annotations

import time

import pytest

from quantgate.tasks.runtime.child_process import free_port
from quantgate.tasks.runtime.servers import prefect_server

pytestmark = pytest.mark.timeout(300)


def _pending(client, run_id) -> bool:
    """Ask for Pending as a worker does; the server's concurrency rule grants it only with a slot."""
    from prefect.states import Pending

    result = client.set_flow_run_state(run_id, Pending())
    return result.status.value == "ACCEPT"


def test_a_dead_runs_slot_is_released_after_a_server_restart(tmp_path, monkeypatch):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PREFECT_SERVER_CONCURRENCY_INITIAL_DEPLOYMENT_LEASE_DURATION", "30")
    monkeypatch.setenv("PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS", "2")
    port = free_port()
    with prefect_server(tmp_path, port, ui=False) as server, \
            temporary_settings(updates={PREFECT_API_URL: server.api_url}), \
            get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("leases")
        deployment = client.create_deployment(flow_id=flow_id, name="one-at-a-time", concurrency_limit=1)
        first = client.create_flow_run_from_deployment(deployment).id
        second = client.create_flow_run_from_deployment(deployment).id
        assert _pending(client, first)
        assert not _pending(client, second)  # the slot is the first run's
    # The first run's process is gone (it never reports again); a new server on the same home.
    with prefect_server(tmp_path, port, ui=False) as server, \
            temporary_settings(updates={PREFECT_API_URL: server.api_url}), \
            get_client(sync_client=True) as client:
        deadline = time.monotonic() + 150
        while not _pending(client, second):
            assert time.monotonic() < deadline, "the dead run's slot was never released"
            time.sleep(3)
