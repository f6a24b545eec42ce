"""Rehearse the cluster profile's wiring on this one machine (`make rehearse`).

    PostgreSQL (Debian's)  <- Prefect server (its database) and MLflow server (its backend store)
    MLflow server          -- artifacts served through it (--artifacts-destination): no shared path
    Ray head + 2nd node    -- `ray start`, each node its own process tree, PREFECT_HOME and folder
    Prefect process pool   -- a worker in its own folder runs the flow run the driver asks for

The driver (this script) deploys `quantize_and_gate` to the pool with conf/cluster-local.yaml, asks
for a run, waits, checks what each service holds, and stops everything it started (logs are kept
under .rehearsal/). Loopback only, telemetry off. Needs root or the `postgres` user for initdb.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from quantgate.conf.load import load_config
from quantgate.tasks.runtime.child_process import free_port
from quantgate.tasks.runtime.servers import QUIET_ENV, ui_api_env
from quantgate.tasks.runtime.stack import RAY_CLIENT_ENV, Service, ray_token

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PG = next(Path("/usr/lib/postgresql").glob("*/bin"), None)


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
    for db in ("prefect", "mlflow"):
        createdb = [str(PG / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", db]
        subprocess.run(_as_postgres(createdb), capture_output=True)  # exists already on a second run
    return s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, choices=(1, 2), default=1, help=(
        "2: a second Ray node. Ray runs more than one node on a host only with "
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1, and then listens on every interface while it runs"))
    nodes = parser.parse_args().nodes
    work = (ROOT / ".rehearsal").resolve()
    work.mkdir(exist_ok=True)
    ports = {k: free_port() for k in ("pg", "prefect", "mlflow", "ray")}
    started: list[Service] = []
    base = {**os.environ, **QUIET_ENV, **RAY_CLIENT_ENV}
    if nodes == 2:
        print("note: two Ray nodes on one host: Ray listens on every interface while the rehearsal runs")
        base["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "1"
    ray_token(base)
    t0 = time.monotonic()
    try:
        print("starting the services (loopback):", flush=True)
        started.append(postgres(work, ports["pg"]))
        pg_url = f"postgres@127.0.0.1:{ports['pg']}"
        api = f"http://127.0.0.1:{ports['prefect']}/api"
        prefect_env = {**base, **ui_api_env(ports["prefect"]), "PREFECT_HOME": str(work / "prefect-server"),
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
        for s in started[1:]:
            _wait(s)
        node_env = {**base, "PREFECT_API_URL": api, "MLFLOW_TRACKING_URI": tracking}
        ray_addr = f"127.0.0.1:{ports['ray']}"
        ray = [str(BIN / "ray"), "start", "--block", "--node-ip-address", "127.0.0.1",
               "--num-cpus", str(2 // nodes), "--disable-usage-stats"]
        head_cmd = [*ray, "--head", "--port", str(ports["ray"]), "--include-dashboard", "false"]
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
        worker_env = {**node_env, "RAY_ADDRESS": ray_addr, "PREFECT_HOME": str(work / "worker")}
        subprocess.run([str(BIN / "prefect"), "work-pool", "create", "rehearsal", "--type", "process",
                        "--overwrite"], env=worker_env, check=True, capture_output=True)
        worker = [str(BIN / "prefect"), "worker", "start", "--pool", "rehearsal", "--type", "process"]
        started.append(_start("prefect-worker", worker, worker_env, work / "worker"))
        return _run(work, api, tracking, t0)
    finally:
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


def _run(work: Path, api: str, tracking: str, t0: float) -> int:
    from mlflow.tracking import MlflowClient
    from prefect.deployments import run_deployment

    from quantgate.flows.deploy import MODULE
    from quantgate.flows.quantize_and_gate import quantize_and_gate

    config = load_config(ROOT / "conf" / "cluster-local.yaml")
    config = config.model_copy(update={"runtime": config.runtime.model_copy(
        update={"state_dir": work / "worker-state"})})
    deployment = quantize_and_gate.to_deployment(name="rehearsal", entrypoint_type=MODULE,
                                                 parameters={"config": config.model_dump(mode="json")})
    deployment.apply(work_pool_name="rehearsal")
    print(f"services up in {time.monotonic() - t0:.0f} s; quantize_and_gate/rehearsal on the process pool",
          flush=True)
    t1 = time.monotonic()
    run = run_deployment("quantize_and_gate/rehearsal", timeout=1800)
    print(f"flow run {run.name} ({run.id}): {run.state.name} in {time.monotonic() - t1:.0f} s; "
          f"Prefect UI {api.removesuffix('/api')}/runs/flow-run/{run.id}", flush=True)
    client = MlflowClient(tracking)
    exp = client.get_experiment_by_name(config.model.name)
    runs = client.search_runs([exp.experiment_id]) if exp else []
    stored = sorted(p.name for p in (work / "artifact-store").rglob("*") if p.is_file())
    print(f"MLflow on PostgreSQL: experiment {exp.experiment_id if exp else '-'} "
          f"(artifact root {exp.artifact_location if exp else '-'}), {len(runs)} runs; "
          f"{len(stored)} artifact files written through the server", flush=True)
    ok = run.state.is_completed() and len(runs) >= 3 and "pipeline_config.json" in stored
    print("rehearsal: " + ("PASSED" if ok else "FAILED"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
