"""`quantgate up | down | deploy`, and the stack's lines of `quantgate status`.

    quantgate up        Prefect server, MLflow server (job execution off) and a Ray head on 127.0.0.1
    quantgate down      stops exactly what `up` started
    quantgate deploy    the scheduled and triggered deployments, served from this process
    quantgate deploy --work-pool NAME   the same deployments registered on a work pool (its workers run them)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from quantgate.conf.schema import PipelineConfig
from quantgate.tasks.runtime.servers import QUIET_ENV, flow_run_env
from quantgate.tasks.runtime.stack import (
    RAY_CLIENT_ENV,
    Service,
    live_stack,
    read_stack,
    start_stack,
    stop_stack,
    use_stack,
)


def add_parsers(sub: Any) -> None:
    for name, text in (("up", "start Prefect, MLflow and a Ray head on 127.0.0.1, kept across runs"),
                       ("down", "stop what `quantgate up` started"),
                       ("deploy", "serve the deployments: weekly quantize_and_gate, hourly drift_watch, "
                                  "canary_rollout on a passing gate, manual rollback")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--config", type=Path)
        if name == "deploy":
            p.add_argument("--traffic", type=Path, help="the live traffic log the deployments read "
                           "(default: from config)")
            p.add_argument("--work-pool", help="register the deployments on this Prefect work pool (its "
                           "workers run them; PREFECT_API_URL or `quantgate up` names the server) and exit")


def stack_lines(state: Path) -> list[str]:
    recorded, live = read_stack(state), live_stack(state)
    if not recorded:
        return ["stack: not up (`quantgate up`); a run starts what it needs"]
    lines = ["stack (`quantgate down` stops it):"]
    for name, s in recorded.items():
        where = s.ui or s.address
        lines.append(f"  {name:8} {'up  ' if name in live else 'DOWN'} {where}  (pid {s.pid}, log {s.log})")
    return lines


def _print_stack(services: dict[str, Service]) -> None:
    s = services
    print(f"Prefect  {s['prefect'].ui}  (API {s['prefect'].address})")
    print(f"MLflow   {s['mlflow'].ui}")
    print(f"Ray      {s['ray'].address}  (head, loopback)")
    print(f"export PREFECT_API_URL={s['prefect'].address} MLFLOW_TRACKING_URI={s['mlflow'].address} "
          f"RAY_ADDRESS={s['ray'].address}")


def up(config: PipelineConfig, state: Path, env: dict[str, str]) -> dict[str, Service]:
    store = config.runtime.mlflow_tracking_uri or f"sqlite:///{(state / 'mlflow.db').resolve()}"
    rt = config.runtime
    services, started = start_stack(state, prefect_port=rt.prefect_port, mlflow_port=rt.mlflow_ui_port,
                                    ray_port=rt.ray_port, ray_cpus=rt.ray_num_cpus, tracking_store=store,
                                    env=env)
    kept = [n for n in services if n not in started]
    print(f"started: {', '.join(started) or 'nothing'}"
          + (f"; already up: {', '.join(kept)}" if kept else ""))
    _print_stack(services)
    return services


def down(state: Path) -> int:
    stopped = stop_stack(state)
    print(f"stopped: {', '.join(stopped)}" if stopped else "nothing to stop: the stack was not up")
    return 0


def _at_state(config: PipelineConfig, state: Path) -> PipelineConfig:
    """The deployments' config names the resolved state dir: their runs start in other folders."""
    return config.model_copy(update={"runtime": config.runtime.model_copy(update={"state_dir": state})})


def _schedule_lines(config: PipelineConfig, api: str) -> list[str]:
    d, served = config.deploy, config.model.served_name or config.model.name
    name = d.name or served
    return [f"  quantize_and_gate/{name}  cron {d.quantize_cron!r} ({d.timezone})"
            + ("; and on each drift event" if d.requantize_on_drift else ""),
            f"  drift_watch/{name}        every {d.drift_interval_s} s",
            f"  canary_rollout/{name}     " + ("on each passing gate's event" if d.rollout_on_gate
                                              else "manual"),
            f"  rollback/{name}           manual",
            f"run one now: PREFECT_API_URL={api} {Path(sys.executable).parent / 'prefect'} deployment run "
            f"'quantize_and_gate/{name}' (or the UI's Run button)"]


def deploy_to_pool(config: PipelineConfig, state: Path, pool: str) -> int:
    """Register, not serve: the pool's workers run the flow runs (each its own process or Job). `state`
    is where the workers keep state (a cluster's claim): nothing is created here."""
    live = use_stack(state)
    api = os.environ.get("PREFECT_API_URL")
    if not api:
        print("error: --work-pool needs a Prefect server: set PREFECT_API_URL, or `quantgate up`",
              file=sys.stderr)
        return 2
    for key, value in QUIET_ENV.items():  # before prefect, ray and mlflow are imported
        os.environ.setdefault(key, value)
    config = _at_state(config, state)
    from quantgate.flows.deploy import register_deployments, work_pool_type

    if work_pool_type(pool) is None:
        print(f"error: --work-pool: no work pool {pool!r} at {api}; create it first, e.g. `prefect work-pool "
              f"create {pool} --type process` (Kubernetes: infra/README.md, with its job template)",
              file=sys.stderr)
        return 2

    env = flow_run_env(state, offline=config.runtime.offline)
    if config.runtime.ray_address != "local":  # prefect-ray's task runner connects through RAY_ADDRESS
        env["RAY_ADDRESS"] = config.runtime.ray_address
    names = register_deployments(config, pool, env)
    print(f"registered on work pool {pool!r} at {api}" + (" (the local stack)" if "prefect" in live else "")
          + f": {', '.join(names)}")
    print("\n".join(_schedule_lines(config, api)))
    print(f"task results (Prefect's cache) under {env['PREFECT_LOCAL_STORAGE_PATH']}: the workers must "
          "share runtime.state_dir")
    return 0


def deploy(config: PipelineConfig, state: Path, env: dict[str, str]) -> int:
    services = up(config, state, env)
    os.environ["PREFECT_API_URL"] = services["prefect"].address
    os.environ["MLFLOW_TRACKING_URI"] = services["mlflow"].address
    os.environ["RAY_ADDRESS"] = services["ray"].address  # what Ray Serve's own ray.init connects to
    os.environ.update(RAY_CLIENT_ENV)
    config = _at_state(config, state)
    # Ray puts a driver's working directory first on its workers' sys.path: from the repo root our
    # `kernels/` would shadow the PyPI package transformers probes for (servers.ray_cluster does the same).
    os.chdir(state)
    from quantgate.flows.deploy import serve_deployments

    served = config.model.served_name or config.model.name
    print(f"deployments of {served}, served from this process (Ctrl-C stops it; the schedules stay on):")
    print("\n".join(_schedule_lines(config, services["prefect"].address)))
    print(f"Prefect UI: {services['prefect'].ui}/deployments", flush=True)
    serve_deployments(config)
    return 0


def run_ops(args: argparse.Namespace, config: PipelineConfig, state: Path, env: dict[str, str]) -> int:
    if args.command == "up":
        up(config, state, env)
        return 0
    if args.command == "down":
        return down(state)
    return deploy(config, state, env)
