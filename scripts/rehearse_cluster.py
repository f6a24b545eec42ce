"""Rehearse the cluster profile's wiring on this one machine (`make rehearse`).

    PostgreSQL (Debian's)  <- Prefect server (its database) and MLflow server (its backend store)
    MLflow server          -- artifacts served through it (--artifacts-destination): no shared path
    judge endpoint         -- llama.cpp's OpenAI-compatible server, its own process, behind an API key
    Ray head + 2nd node    -- `ray start`, each node its own process tree, PREFECT_HOME and folder
    Prefect process pool   -- workers in their own folders run the flow runs (as Jobs would)

The driver (this script) registers the deployments on the pool as a user would (`quantgate deploy
--work-pool`, conf/cluster-local.yaml), asks for a quantize_and_gate run, lets drift_watch fire on its
schedule, then replaces the worker by another (a new folder and Prefect home: a new pod) and asks
again: the second run must find the first one's task results in the result storage on the shared
state dir. It checks what each service holds and stops everything it started (logs are kept under
.rehearsal/). Loopback only, telemetry off. Needs root or the `postgres` user for initdb.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from quantgate.conf.load import load_config
from quantgate.tasks.judge.server import packaged_judge_gguf, server_command
from quantgate.tasks.runtime.child_process import free_port
from quantgate.tasks.runtime.servers import QUIET_ENV, prefect_server_env
from quantgate.tasks.runtime.stack import RAY_CLIENT_ENV, Service, ray_token

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PG = next(Path("/usr/lib/postgresql").glob("*/bin"), None)
POOL = "rehearsal"


def _start(name: str, cmd: list[str], env: dict[str, str], cwd: Path, address: str = "") -> Service:
    """`cmd` in its own folder and process group; its log beside the folder."""
    log = cwd.parent / f"{name}.log"
    cwd.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True, stdin=subprocess.DEVNULL)
    return Service(name, proc.pid, address, "", str(log))


def _healthy(s: Service) -> bool:
    if s.address.startswith("http"):
        try:
            with urllib.request.urlopen(f"{s.address}/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False
    host, port = s.address.rsplit(":", 1)
    with socket.socket() as sock:
        return sock.connect_ex((host, int(port))) == 0


def _stop(s: Service) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(s.pid, signal.SIGTERM)
    for _ in range(40):
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(s.pid, os.WNOHANG)[0]:
                return
        time.sleep(0.25)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(s.pid, signal.SIGKILL)


def _wait(s: Service, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not _healthy(s):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{s.name} did not come up: see {s.log}")
        time.sleep(0.5)
    print(f"  {s.name:14} up: {s.address}", flush=True)


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def postgres(work: Path, port: int) -> Service:
    if PG is None:
        raise SystemExit("Debian's postgresql is not installed: apt-get install postgresql")
    data = work / "pg"
    if not (data / "PG_VERSION").exists():
        data.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(work, "postgres")
            shutil.chown(data, "postgres")
        subprocess.run(_as_postgres([str(PG / "initdb"), "-D", str(data), "--auth=trust", "-U", "postgres"]),
                       check=True, capture_output=True)
    cmd = _as_postgres([str(PG / "postgres"), "-D", str(data), "-p", str(port), "-k", str(data),
                        "-c", "listen_addresses=127.0.0.1"])
    s = _start("postgres", cmd, dict(os.environ), data)
    s = Service("postgres", s.pid, f"127.0.0.1:{port}", "", s.log)
    _wait(s)
    for db in ("prefect", "mlflow"):  # fresh: what is checked is this rehearsal's, nothing older
        for tool in ("dropdb", "createdb"):
            cmd = [str(PG / tool), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", db]
            subprocess.run(_as_postgres(cmd), capture_output=True, check=tool == "createdb")
    return s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, choices=(1, 2), default=1, help=(
        "2: a second Ray node. Ray runs more than one node on a host only with "
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1, and then listens on every interface while it runs"))
    nodes = parser.parse_args().nodes
    work = (ROOT / ".rehearsal").resolve()
    work.mkdir(exist_ok=True)
    for stale in ("artifact-store", "worker-state", "worker-1", "worker-2", "prefect-server"):
        shutil.rmtree(work / stale, ignore_errors=True)  # the judge's model cache is kept
    for log in work.glob("*.log"):  # this rehearsal's logs only: the checks read the judge's
        log.unlink()
    ports = {k: free_port() for k in ("pg", "prefect", "mlflow", "ray", "judge", "dashboard")}
    started: list[Service] = []
    base = {**os.environ, **QUIET_ENV, **RAY_CLIENT_ENV}
    if nodes == 2:
        print("note: two Ray nodes on one host: Ray listens on every interface while the rehearsal runs")
        base["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "1"
    ray_token(base)
    judge_key = secrets.token_urlsafe(24)  # as the cluster's Secret quantgate-judge: env only
    t0 = time.monotonic()
    try:
        print("starting the services (loopback):", flush=True)
        started.append(postgres(work, ports["pg"]))
        pg_url = f"postgres@127.0.0.1:{ports['pg']}"
        api = f"http://127.0.0.1:{ports['prefect']}/api"
        prefect_env = {**base, **prefect_server_env(ports["prefect"]),
                       "PREFECT_HOME": str(work / "prefect-server"),
                       "PREFECT_API_DATABASE_CONNECTION_URL": f"postgresql+asyncpg://{pg_url}/prefect"}
        server = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1",
                  "--port", str(ports["prefect"]), "--analytics-off"]
        started.append(_start("prefect-server", server, prefect_env, work / "prefect-server", api))
        tracking = f"http://127.0.0.1:{ports['mlflow']}"
        started.append(_start("mlflow-server", [
            str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(ports["mlflow"]),
            "--backend-store-uri", f"postgresql+psycopg2://{pg_url}/mlflow", "--workers", "1",
            "--artifacts-destination", str(work / "artifact-store")],
            {**base, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}, work / "mlflow-server", tracking))
        gguf = packaged_judge_gguf(work / "judge" / "models")
        started.append(_start("judge", server_command(gguf, port=ports["judge"], threads=2),
                              {**base, "API_KEY": judge_key}, work / "judge", f"127.0.0.1:{ports['judge']}"))
        for s in started[1:]:
            _wait(s)
        node_env = {**base, "PREFECT_API_URL": api, "MLFLOW_TRACKING_URI": tracking,
                    "QG_JUDGE_API_KEY": judge_key}  # every node's, as raycluster.yaml gives every group
        ray_addr = f"127.0.0.1:{ports['ray']}"
        ray = [str(BIN / "ray"), "start", "--block", "--node-ip-address", "127.0.0.1",
               "--num-cpus", str(2 // nodes), "--disable-usage-stats"]
        # The dashboard (loopback) serves Ray's state API: which node ran which task.
        head_cmd = [*ray, "--head", "--port", str(ports["ray"]), "--include-dashboard", "true",
                    "--dashboard-host", "127.0.0.1", "--dashboard-port", str(ports["dashboard"])]
        head_env = {**node_env, "PREFECT_HOME": str(work / "node-head")}
        started.append(head := _start("ray-head", head_cmd, head_env, work / "node-head", ray_addr))
        _wait(head)
        if nodes == 2:
            node2_env = {**node_env, "PREFECT_HOME": str(work / "node-2")}
            started.append(_start("ray-node-2", [*ray, "--address", ray_addr], node2_env, work / "node-2",
                                  ray_addr))
        _wait_nodes(ray_addr, nodes, base)
        os.environ.update({**QUIET_ENV, **RAY_CLIENT_ENV})
        os.environ.update({"PREFECT_API_URL": api, "MLFLOW_TRACKING_URI": tracking})
        conf = _conf(work, f"http://127.0.0.1:{ports['judge']}/v1", ray_addr)
        driver_env = {k: v for k, v in node_env.items() if k != "QG_JUDGE_API_KEY"}  # needs no key
        subprocess.run([str(BIN / "prefect"), "work-pool", "create", POOL, "--type", "process",
                        "--overwrite"], env=driver_env, check=True, capture_output=True)
        subprocess.run([str(BIN / "quantgate"), "deploy", "--work-pool", POOL, "--config", str(conf)],
                       env=driver_env, cwd=ROOT, check=True)
        print(f"services up and deployed in {time.monotonic() - t0:.0f} s", flush=True)
        return _rehearse(work, node_env, started, api, tracking, conf, f"http://127.0.0.1:{ports['dashboard']}")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave services behind
        for s in reversed(started):
            _stop(s)
        print(f"stopped: {', '.join(s.name for s in reversed(started))}; logs under {work}", flush=True)


def _wait_nodes(address: str, n: int, env: dict[str, str]) -> None:
    code = (f"import ray, time; ray.init(address={address!r}, log_to_driver=False)\n"
            f"while len([x for x in ray.nodes() if x['Alive']]) < {n}: time.sleep(0.5)\n"
            "print(len(ray.nodes()), ray.cluster_resources().get('CPU'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd="/")
    print(f"  ray            {out.stdout.strip().replace(' ', ' nodes, CPUs ')} at {address}", flush=True)


def _conf(work: Path, judge_url: str, ray_address: str) -> Path:
    """conf/cluster-local.yaml with this rehearsal's addresses (as an operator writes the Services'
    into conf/cluster.yaml) and its paths made absolute. The workers learn the Ray head from the
    deployment (RAY_ADDRESS in its job variables), not from their own environment."""
    raw = yaml.safe_load((ROOT / "conf" / "cluster-local.yaml").read_text())
    raw["traffic"]["path"] = str((ROOT / "conf" / raw["traffic"]["path"]).resolve())
    raw["runtime"]["state_dir"] = str(work / "worker-state")
    raw["judge"]["base_url"] = judge_url
    raw["runtime"]["ray_address"] = ray_address
    out = work / "cluster-local.yaml"
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    load_config(out)  # fails here, naming the key, rather than in the worker
    return out


def _worker(n: int, work: Path, env: dict[str, str]) -> Service:
    """A worker in a folder and Prefect home of its own: what a new pod would be."""
    home = work / f"worker-{n}"
    cmd = [str(BIN / "prefect"), "worker", "start", "--pool", POOL, "--type", "process"]
    print(f"  prefect-worker-{n} started in {home}", flush=True)
    return _start(f"prefect-worker-{n}", cmd, {**env, "PREFECT_HOME": str(home)}, home)


def _rehearse(work: Path, env: dict[str, str], started: list[Service], api: str, tracking: str,
              conf: Path, dashboard: str) -> int:
    from rehearsal_checks import Checks

    config = load_config(conf)
    name = config.deploy.name or config.model.served_name or config.model.name
    checks = Checks(api.removesuffix("/api"), tracking, name)
    started.append(worker := _worker(1, work, env))
    first = checks.run_deployment(f"quantize_and_gate/{name}")
    checks.mlflow(config.model.name, work / "artifact-store")
    checks.judge(config.model.name, work / "judge.log", str(config.judge.base_url))
    checks.scheduled(f"drift_watch/{name}")
    checks.placement(dashboard, config.runtime.ray_address)
    _stop(worker)
    started.remove(worker)
    started.append(_worker(2, work, env))
    second = checks.run_deployment(f"quantize_and_gate/{name}")
    checks.cached(first, second, config.runtime.state_dir / "prefect" / "results")
    return checks.verdict()


if __name__ == "__main__":
    raise SystemExit(main())
