"""Child processes that start and stop with the run that started them."""

from __future__ import annotations

import os
import signal
import socket
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
