"""The local stack the flow runs on: one Prefect server and one Ray, loopback only,
telemetry off. Environment goes in before prefect/ray/mlflow are imported, and is handed
to every Ray worker (env vars set later never reach them)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from quantgate.conf.settings import env_settings
from quantgate.tasks.runtime.child_process import free_port, own_session_tied_to_parent, stop_child

# Telemetry off, loopback only (STACK.md): Ray otherwise listens on every interface.
QUIET_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PREFECT_SERVER_API_HOST": "127.0.0.1",
    "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "true",
    "PREFECT_LOGGING_LEVEL": "INFO",
    "PREFECT_LOGGING_LOG_PRINTS": "true",
}


def flow_run_env(state_dir: Path, *, offline: bool) -> dict[str, str]:
    """What a flow-run process needs wherever it starts (this process, Prefect's runner, a work
    pool's worker on another node): telemetry off, and Prefect's task results under the run's state
    dir, which the cluster shares between nodes, so a run resumed elsewhere finds them (cached)."""
    env = dict(QUIET_ENV)
    env["PREFECT_LOCAL_STORAGE_PATH"] = str(state_dir.resolve() / "prefect" / "results")
    if offline:
        env |= {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return env


def configure_process_env(state_dir: Path, *, offline: bool) -> dict[str, str]:
    """Set (and return) the environment every process of a run shares: the flow run's, and a
    Prefect home of its own under the state dir."""
    env = {**flow_run_env(state_dir, offline=offline), "PREFECT_HOME": str(state_dir.resolve() / "prefect")}
    for key, value in env.items():
        os.environ.setdefault(key, value)
    return {k: os.environ[k] for k in env}


@dataclass(frozen=True)
class PrefectServer:
    api_url: str
    ui_url: str
    process: subprocess.Popen[bytes] | None  # None when an existing server is reused
    ready: Callable[[], None] = lambda: None  # returns once the server answers (prefect_server's wait)


def _healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def prefect_server_env(port: int) -> dict[str, str]:
    """What every Prefect server we start needs besides QUIET_ENV.

    The UI asks the API at PREFECT_UI_API_URL, which defaults to port 4200 whatever `--port` says: on
    any other port the UI would show "Can't connect to Server API" (seen in the browser test).
    Deployment concurrency slots are held through leases, kept by default in the server's memory: a
    run killed with its worker, then a server restart, left the slot taken for good (the next run of
    that deployment waited forever, seen in the rehearsal). On disk (the server's PREFECT_HOME) the
    lease outlives the restart, expires and is revoked, and the slot comes back."""
    return {"PREFECT_UI_API_URL": f"http://127.0.0.1:{port}/api",
            "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect.server.concurrency.lease_storage.filesystem"}


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def start_prefect_server(port: int, log: IO[bytes], *, ui: bool, env: dict[str, str],
                         timeout_s: float = 90) -> tuple[subprocess.Popen[bytes], str]:
    """A Prefect server on 127.0.0.1:`port`, healthy, tied to this process: (process, API URL).
    `env` is the server's whole environment (its PREFECT_HOME holds its database)."""
    proc, api = launch_prefect_server(port, log, ui=ui, env=env)
    wait_for_prefect(proc, api, log, timeout_s=timeout_s)
    return proc, api


def launch_prefect_server(port: int, log: IO[bytes], *, ui: bool, env: dict[str, str]
                          ) -> tuple[subprocess.Popen[bytes], str]:
    """The server's process, started and not waited for (`wait_for_prefect`)."""
    cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
           "--port", str(port), "--ui" if ui else "--no-ui", "--analytics-off"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            env={**env, **prefect_server_env(port)}, preexec_fn=own_session_tied_to_parent)
    return proc, f"http://127.0.0.1:{port}/api"


def wait_for_prefect(proc: subprocess.Popen[bytes], api: str, log: IO[bytes], *, timeout_s: float = 90
                     ) -> None:
    deadline = time.monotonic() + timeout_s
    while not _healthy(api):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_child(proc, grace_s=20)
            raise RuntimeError(f"Prefect server did not start; see {log.name}")
        time.sleep(0.2)


@contextlib.contextmanager
def prefect_server(state_dir: Path, port: int, *, ui: bool = True, wait: bool = True
                   ) -> Iterator[PrefectServer]:
    """Use the server named by PREFECT_API_URL, else start one on `port` (or a free port if
    that one is taken), its SQLite under state_dir. `wait=False`: the block starts while the server
    does (it imports, starts Ray: seconds of CPU each) and calls `ready()` before it talks to it.

    Services stay on: task runs executed on Ray workers reach the server as events, and the
    server's task-run recorder service is what turns them into task runs in the UI."""
    if shared := env_settings().prefect_api_url:
        api = shared.rstrip("/")
        yield PrefectServer(api, api.removesuffix("/api"), None)
        return
    # A busy port may hold another project's server (another database): start our own
    # elsewhere rather than write into it. A shared server is chosen with PREFECT_API_URL.
    if not port_free(port):
        port = free_port()
    log = (state_dir / "prefect-server.log").open("ab")
    try:
        proc, api = launch_prefect_server(port, log, ui=ui, env=dict(os.environ))
    except BaseException:
        log.close()
        raise
    try:
        server = PrefectServer(api, f"http://127.0.0.1:{port}", proc,
                               lambda: wait_for_prefect(proc, api, log))
        if wait:
            server.ready()
        os.environ["PREFECT_API_URL"] = api
        yield server
    finally:
        _send_pending_prefect_logs()
        os.environ.pop("PREFECT_API_URL", None)
        stop_child(proc, grace_s=20)
        log.close()


def _send_pending_prefect_logs() -> None:
    """Let Prefect's background log worker deliver what it holds before its server goes: else it
    posts them after, and the run's last line is Prefect's "--- Error logging to API ---"."""
    handlers = sys.modules.get("prefect.logging.handlers")  # None when no flow ran in this process
    if handlers is not None:
        with contextlib.suppress(Exception):  # best effort: stopping the server must not fail
            handlers.APILogWorker.drain_all(timeout=5)


def ray_init_kwargs(*, address: str, num_cpus: int, env: dict[str, str]) -> dict[str, object]:
    kwargs: dict[str, object] = {"runtime_env": {"env_vars": env}, "log_to_driver": False}
    if address == "local":
        kwargs |= {"address": "local", "num_cpus": num_cpus, "include_dashboard": False,
                   "object_store_memory": 256 * 2**20, "_node_ip_address": "127.0.0.1"}
    else:
        kwargs["address"] = address
    return kwargs


@contextlib.contextmanager
def ray_cluster(*, address: str, num_cpus: int, env: dict[str, str], state_dir: Path) -> Iterator[None]:
    import ray

    if ray.is_initialized():
        yield
        return
    env = {**env, "PREFECT_API_URL": os.environ.get("PREFECT_API_URL", "")}
    # Ray puts the driver's working directory first on every worker's sys.path. From the repo
    # root that would make our `kernels/` folder shadow the PyPI `kernels` package that
    # transformers probes for, so the driver starts Ray from the state dir instead.
    cwd = os.getcwd()
    os.chdir(state_dir)
    # Ray's core worker installs a C-level SIGTERM handler that logs and aborts the driver,
    # replacing ours (which unwinds, so the servers this process started are stopped).
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        ray.init(**ray_init_kwargs(address=address, num_cpus=num_cpus, env=env))
    finally:
        os.chdir(cwd)
        if threading.current_thread() is threading.main_thread():
            for sig, handler in handlers.items():
                if handler is not None:
                    signal.signal(sig, handler)
    try:
        yield
    finally:
        ray.shutdown()
