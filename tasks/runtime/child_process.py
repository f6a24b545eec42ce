"""Child processes that start and stop with the run that started them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys


def own_session_tied_to_parent() -> None:
    """`preexec_fn` for a helper server (Prefect, the judge): runs in the child before exec.

    Its own session: a SIGTERM or Ctrl-C sent to the CLI's process group must not kill the
    server before the CLI has used it to shut down (a served runner pauses its deployments
    through the API; with the server gone it retries for minutes). PDEATHSIG: if the CLI
    itself is killed outright, the kernel still stops the server instead of orphaning it."""
    os.setsid()
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_child(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM, then SIGKILL after `grace_s`, and wait until `proc` is gone.

    Waiting is the point: a server (MLflow's, which forwards the signal to its uvicorn) holds its
    port until it has exited, and whoever stopped it may reuse or report that port at once."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()
