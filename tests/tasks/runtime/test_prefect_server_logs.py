"""A flow's last logs reach our Prefect server before it stops: nothing is posted to a server that is gone."""

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(240)

SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from quantgate.tasks.runtime.servers import free_port, prefect_server

    with prefect_server(Path(sys.argv[1]), free_port(), ui=False):
        from prefect import flow, get_run_logger

        @flow
        def chatty():
            for i in range(300):  # more than the log worker sends before the flow returns
                get_run_logger().info("line %d", i)

        chatty()
    print("server stopped")
""")


def test_the_flows_queued_logs_are_sent_before_the_server_stops(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True,
                          timeout=200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "server stopped" in proc.stdout
    # What Prefect's log worker writes when it posts to a server that has stopped.
    assert "Error logging to API" not in proc.stderr, proc.stderr[-3000:]
