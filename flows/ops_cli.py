"""`quantgate up | down | deploy`, and the stack's lines of `quantgate status`.

    quantgate up        Prefect server, MLflow server (job execution off) and a Ray head on 127.0.0.1
    quantgate down      stops exactly what `up` started
    quantgate deploy    the scheduled and triggered deployments, served from this process
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from quantgate.conf.schema import PipelineConfig
from quantgate.tasks.runtime.stack import (
    RAY_CLIENT_ENV,
    Service,
    live_stack,
    read_stack,
    start_stack,
    stop_stack,
)


def add_parsers(sub: Any) -> None:
    for name, text in (("up", "start Prefect, MLflow and a Ray head on 127.0.0.1, kept across runs"),
                       ("down", "stop what `quantgate up` started"),
                       ("deploy", "serve the deployments: weekly quantize_and_gate, hourly drift_watch, "
                                  "canary_rollout on a passing gate, manual rollback")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--config", type=Path)


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


def deploy(config: PipelineConfig, state: Path, env: dict[str, str]) -> int:
    services = up(config, state, env)
    os.environ["PREFECT_API_URL"] = services["prefect"].address
    os.environ["MLFLOW_TRACKING_URI"] = services["mlflow"].address
    os.environ["RAY_ADDRESS"] = services["ray"].address  # what Ray Serve's own ray.init connects to
    os.environ.update(RAY_CLIENT_ENV)
    runtime = config.runtime.model_copy(update={"state_dir": state})
    config = config.model_copy(update={"runtime": runtime})
    # Ray puts a driver's working directory first on its workers' sys.path: from the repo root our
    # `kernels/` would shadow the PyPI package transformers probes for (servers.ray_cluster does the same).
    os.chdir(state)
    from quantgate.flows.deploy import serve_deployments

    d, served = config.deploy, config.model.served_name or config.model.name
    name = d.name or served
    print(f"deployments of {served}, served from this process (Ctrl-C stops it; the schedules stay on):")
    print(f"  quantize_and_gate/{name}  cron {d.quantize_cron!r} ({d.timezone})"
          + ("; and on each drift event" if d.requantize_on_drift else ""))
    print(f"  drift_watch/{name}        every {d.drift_interval_s} s")
    print(f"  canary_rollout/{name}     on each passing gate's event" if d.rollout_on_gate
          else f"  canary_rollout/{name}     manual")
    print(f"  rollback/{name}           manual")
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
