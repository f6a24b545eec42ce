"""`quantgate up | down`: a Prefect server, an MLflow server and a Ray head that outlive a run, on
127.0.0.1, telemetry off, recorded in `<state>/stack.json`. A run (or `quantgate deploy`) with the stack
up uses it; `down` stops exactly the processes `up` started (each in its own session, stopped as a
group), never another Ray or server on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from quantgate.tasks.runtime.child_process import free_port
from quantgate.tasks.runtime.servers import port_free, prefect_server_env

STACK_FILE = "stack.json"
# Ray 2.60: `ray start --head` turns token auth on exactly when ~/.ray/auth_token exists, and a client
# connecting by address sends the token only with RAY_AUTH_MODE=token (STACK.md). The stack always
# makes the token (Ray's own `get-auth-token --generate`) and every client of it sets the mode.
RAY_CLIENT_ENV = {"RAY_AUTH_MODE": "token"}


@dataclass(frozen=True)
class Service:
    name: str  # prefect | mlflow | ray
    pid: int
    address: str  # what a client uses: the API URL, the tracking URI, the Ray GCS address
    ui: str  # what a person opens ("" for none)
    log: str


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):  # a zombie child of this process is not alive
        if Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z"):
            return False
    return True


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def healthy(s: Service) -> bool:
    if not _alive(s.pid):
        return False
    if s.name == "prefect":
        return _http_ok(f"{s.address}/health")
    if s.name == "mlflow":
        return _http_ok(f"{s.address}/health")
    host, port = s.address.rsplit(":", 1)
    import socket

    with socket.socket() as sock:
        return sock.connect_ex((host, int(port))) == 0


def read_stack(state_dir: Path) -> dict[str, Service]:
    path = state_dir / STACK_FILE
    if not path.is_file():
        return {}
    return {k: Service(**v) for k, v in json.loads(path.read_text()).items()}


def _write_stack(state_dir: Path, services: dict[str, Service]) -> None:
    tmp = state_dir / (STACK_FILE + ".tmp")
    tmp.write_text(json.dumps({k: asdict(v) for k, v in services.items()}, indent=1))
    tmp.replace(state_dir / STACK_FILE)


def live_stack(state_dir: Path) -> dict[str, Service]:
    """The services of the recorded stack that answer now."""
    return {k: s for k, s in read_stack(state_dir).items() if healthy(s)}


def use_stack(state_dir: Path) -> dict[str, Service]:
    """With the stack up, this process (and what it starts) uses its servers; a URL already in the
    environment wins. Returns the live services (the caller points Ray at the head)."""
    live = live_stack(state_dir)
    if "prefect" in live:
        os.environ.setdefault("PREFECT_API_URL", live["prefect"].address)
    if "mlflow" in live:
        os.environ.setdefault("MLFLOW_TRACKING_URI", live["mlflow"].address)
    if "ray" in live:
        os.environ.update(RAY_CLIENT_ENV)
    return live


def _port(wanted: int) -> int:
    return wanted if port_free(wanted) else free_port()


def _start(state_dir: Path, name: str, cmd: list[str], env: dict[str, str]) -> tuple[int, str]:
    log = state_dir / f"{name}-stack.log"
    with log.open("ab") as out:
        # From the state dir: Ray puts its cwd first on every worker's sys.path, and from the repo root
        # our `kernels/` folder would shadow the PyPI `kernels` package that transformers probes for.
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                stdin=subprocess.DEVNULL, cwd=state_dir)
    return proc.pid, str(log)


def _wait(s: Service, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not healthy(s):
        if not _alive(s.pid) or time.monotonic() > deadline:
            stop_service(s)
            raise RuntimeError(f"{s.name} did not come up; see {s.log}")
        time.sleep(0.5)


def start_stack(state_dir: Path, *, prefect_port: int, mlflow_port: int, ray_port: int, ray_cpus: int,
                tracking_store: str, env: dict[str, str]) -> tuple[dict[str, Service], list[str]]:
    """Start what is not already up; returns the stack and the names started now."""
    services, started = live_stack(state_dir), []
    base = {**os.environ, **env}
    if "prefect" not in services:
        port = _port(prefect_port)
        cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port),
               "--analytics-off"]
        pid, log = _start(state_dir, "prefect", cmd, {**base, **prefect_server_env(port)})
        services["prefect"] = Service("prefect", pid, f"http://127.0.0.1:{port}/api", f"http://127.0.0.1:{port}",
                                      log)
        started.append("prefect")
    if "mlflow" not in services:
        port = _port(mlflow_port)
        cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
               "--backend-store-uri", tracking_store,
               "--artifacts-destination", str(state_dir / "mlartifacts"), "--workers", "1"]
        pid, log = _start(state_dir, "mlflow", cmd, {**base, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
        url = f"http://127.0.0.1:{port}"
        services["mlflow"] = Service("mlflow", pid, url, url, log)
        started.append("mlflow")
    for name in started:
        _wait(services[name])
    if "ray" not in services:
        port = _port(ray_port)
        # --block: one foreground process owns the head's daemons; stopping its group stops them all.
        cmd = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block",
               "--node-ip-address", "127.0.0.1", "--port", str(port), "--num-cpus", str(ray_cpus),
               "--include-dashboard", "false", "--disable-usage-stats"]
        ray_env = {**base, **RAY_CLIENT_ENV, "PREFECT_API_URL": services["prefect"].address,
                   "MLFLOW_TRACKING_URI": services["mlflow"].address}
        ray_token(ray_env)
        pid, log = _start(state_dir, "ray", cmd, ray_env)
        services["ray"] = Service("ray", pid, f"127.0.0.1:{port}", "", log)
        started.append("ray")
        _wait(services["ray"])
    _write_stack(state_dir, services)
    return services, started


def _ours(s: Service) -> bool:
    """The recorded pid still runs what `up` started (a pid reused since is left alone)."""
    try:
        return s.name.encode() in Path(f"/proc/{s.pid}/cmdline").read_bytes()
    except OSError:
        return False


def ray_token(env: dict[str, str]) -> None:
    """Ray's auth token in ~/.ray/auth_token, made once (its output, the token, is never printed)."""
    subprocess.run([str(Path(sys.executable).with_name("ray")), "get-auth-token", "--generate"], env=env,
                   check=True, capture_output=True)


def stop_service(s: Service, timeout_s: float = 10) -> None:
    if not _ours(s):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(s.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(s.pid) and time.monotonic() < deadline:
        time.sleep(0.3)
    if not _alive(s.pid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(s.pid, signal.SIGKILL)


def stop_stack(state_dir: Path) -> list[str]:
    """Stop what `up` started (Ray first: its workers talk to the servers); the record goes."""
    services = read_stack(state_dir)
    for name in ("ray", "mlflow", "prefect"):
        if name in services and _alive(services[name].pid):
            stop_service(services[name])
    (state_dir / STACK_FILE).unlink(missing_ok=True)
    return [n for n in ("ray", "mlflow", "prefect") if n in services]
