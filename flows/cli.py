"""`quantgate`: run the flow, validate a config, or browse past runs.

    quantgate run [--config FILE] [--variants a,b,...] [--traffic PATH]
    quantgate bench [--config FILE] [--batch 1,8] [--checkpoint NAME=DIR ...]  # speed, energy
    quantgate validate [--config FILE]
    quantgate ui [--config FILE]      # Prefect UI + MLflow UI over the run state
    quantgate rollout [--variant NAME] [--run ID] [--inject errors=0.2]  # canary on Ray Serve
    quantgate promote | rollback | status [--run ID]
    quantgate up | down               # Prefect, MLflow and a Ray head on 127.0.0.1, kept across runs
    quantgate deploy [--config FILE]  # weekly quantize_and_gate, hourly drift_watch, triggered rollout
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from quantgate.conf.load import ConfigError, load_config
from quantgate.conf.schema import PipelineConfig
from quantgate.flows.bench_cli import add_parser as add_bench_parser
from quantgate.flows.ops_cli import add_parsers as add_ops_parsers
from quantgate.flows.rollout_cli import add_parsers as add_rollout_parsers
from quantgate.tasks.runtime.child_process import free_port, stop_child
from quantgate.tasks.runtime.servers import configure_process_env, port_free, prefect_server, ray_cluster
from quantgate.tasks.runtime.stack import use_stack
from quantgate.tasks.runtime.stop import install_stop_handlers, stop_requested, stop_signal


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="quantgate", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the quantize_and_gate flow")
    run.add_argument("--config", type=Path, help="pipeline YAML (default: embedded default.yaml)")
    run.add_argument("--variants", help="comma-separated variant names (default: all in config)")
    run.add_argument("--traffic", type=Path, help="traffic log JSONL (default: from config)")
    add_bench_parser(sub)
    add_rollout_parsers(sub)
    add_ops_parsers(sub)
    val = sub.add_parser("validate", help="load and validate a config, print it")
    val.add_argument("--config", type=Path)
    ui = sub.add_parser("ui", help="serve the Prefect and MLflow UIs over past runs")
    ui.add_argument("--config", type=Path)
    return p


def _config(args: argparse.Namespace) -> PipelineConfig:
    config = load_config(args.config)
    if getattr(args, "traffic", None):
        traffic = config.traffic.model_copy(update={"path": args.traffic.resolve()})
        config = config.model_copy(update={"traffic": traffic})
    if getattr(args, "variants", None):
        config = config.select([v.strip() for v in args.variants.split(",") if v.strip()])
    return config


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    install_stop_handlers()
    try:
        config = _config(args)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.command == "validate":
        print(config.model_dump_json(indent=2))
        return 0
    state = config.runtime.state_dir.resolve()
    if args.command == "deploy" and args.work_pool:  # the state dir is the workers' (a cluster's claim)
        from quantgate.flows.ops_cli import deploy_to_pool

        return deploy_to_pool(config, state, args.work_pool)
    state.mkdir(parents=True, exist_ok=True)
    env = configure_process_env(state, offline=config.runtime.offline)
    if args.command in ("up", "down", "deploy"):
        from quantgate.flows.ops_cli import run_ops

        return run_ops(args, config, state, env)
    config = _on_stack(config, state)
    if args.command == "ui":
        return _serve_ui(config, state)
    if args.command == "bench":
        from quantgate.flows.bench_cli import run_bench_cli

        return run_bench_cli(args, config, state)
    if args.command == "rollout":
        from quantgate.flows.rollout_cli import run_rollout

        return run_rollout(args, config, state, env)
    if args.command in ("promote", "rollback", "status"):
        from quantgate.flows.rollout_cli import run_manual

        return run_manual(args, config)
    return _run(config, state, env)


def _on_stack(config: PipelineConfig, state: Path) -> PipelineConfig:
    """With `quantgate up`'s stack running, the command uses its servers and its Ray head."""
    live = use_stack(state)
    if "ray" not in live or config.runtime.ray_address != "local":
        return config
    return config.model_copy(update={"runtime": config.runtime.model_copy(
        update={"ray_address": live["ray"].address})})


def _stopped(start: float) -> int:
    name = stop_signal() or "SIGINT"
    print(f"stopped by {name} after {time.perf_counter() - start:.0f} s; every server this run started "
          "is down. Run the same command again to resume.", file=sys.stderr)
    return 128 + int(getattr(signal, name))


def _run(config: PipelineConfig, state: Path, env: dict[str, str]) -> int:
    start = time.perf_counter()
    try:
        # The imports and Ray's start run while the Prefect server starts (seconds of CPU each).
        with prefect_server(state, config.runtime.prefect_port, ui=False, wait=False) as server:
            # Imported only now: prefect reads PREFECT_API_URL once, on import; read earlier, it
            # would start a temporary server of its own instead of using this one.
            from quantgate.flows.quantize_and_gate import quantize_and_gate

            with ray_cluster(address=config.runtime.ray_address, num_cpus=config.runtime.ray_num_cpus,
                             env=env, state_dir=state):
                server.ready()
                state_obj = quantize_and_gate(config, return_state=True)
    except BaseException as exc:
        from prefect.exceptions import TerminationSignal  # prefect is imported by now

        # Ours, Prefect's own while a flow run holds SIGTERM, or Ray's rendering of either.
        if isinstance(exc, KeyboardInterrupt | TerminationSignal) or stop_requested():
            return _stopped(start)
        raise
    if stop_requested():  # Prefect caught the stop and returned the crashed flow run's state
        return _stopped(start)
    if state_obj.is_failed():
        exc = state_obj.result(raise_on_failure=False)
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    summary = state_obj.result()
    print()
    print(summary.table)
    print()
    print(f"gate: {summary.decision}")
    print()
    print("where the time went:")
    print(summary.timing)
    print()
    if summary.canary_version:
        print(f"registry: {summary.registered_model} version "
              f"{summary.canary_version} has alias `canary`")
    if summary.rollout is not None:
        from quantgate.flows.rollout_cli import print_summary

        print_summary(summary.rollout, config, server.api_url)
    elif summary.rollout_note:
        print(summary.rollout_note)
    if summary.reused:
        print("MLflow: this run's results were published already: nothing new was recorded")
    print(f"quarantine: {summary.quarantine_path}")
    print(f"MLflow:  {summary.tracking_uri}  experiment {summary.experiment_id}, "
          f"run {summary.parent_run_id}")
    print(f"         browse: `quantgate ui`, then http://127.0.0.1:{config.runtime.mlflow_ui_port}/#/experiments/"
          f"{summary.experiment_id}/runs/{summary.parent_run_id}")
    print(f"Prefect: flow run {summary.flow_run_id} (server was {server.api_url})")
    print(f"         browse: `quantgate ui`, then http://127.0.0.1:{config.runtime.prefect_port}"
          f"/runs/flow-run/{summary.flow_run_id}")
    print(f"wall time: {time.perf_counter() - start:.0f} s")
    return 0


def _serve_ui(config: PipelineConfig, state: Path) -> int:
    import subprocess

    from quantgate.tasks.runtime.stack import live_stack

    live = live_stack(state)
    if {"prefect", "mlflow"} <= set(live):  # `quantgate up` serves both UIs already
        print(f"Prefect UI: {live['prefect'].ui}\nMLflow UI:  {live['mlflow'].ui}\n"
              "(the stack's servers: `quantgate down` stops them)")
        return 0

    from quantgate.tasks.registry.tracking import tracking_uri  # imports mlflow: only when it is needed

    uri = tracking_uri(config.runtime.mlflow_tracking_uri, state)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    port = config.runtime.mlflow_ui_port if port_free(config.runtime.mlflow_ui_port) else free_port()
    mlflow = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
                               "--host", "127.0.0.1", "--port", str(port)], env=env)
    try:
        with prefect_server(state, config.runtime.prefect_port, ui=True) as server:
            print(f"Prefect UI: {server.ui_url}\nMLflow UI:  http://127.0.0.1:{port}"
                  "\nCtrl-C to stop.", flush=True)
            mlflow.wait()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        stop_child(mlflow, grace_s=20)  # its port is free once this returns
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
