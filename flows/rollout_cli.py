"""`quantgate rollout | promote | rollback | status`: the canary from the command line.

Exit codes, for scripts and schedulers: 0 promoted (or nothing to do), 1 error, 3 rolled back,
4 paused for a person.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from quantgate.conf.schema import PipelineConfig

EXIT = {"promoted": 0, "nothing": 0, "resumed": 0, "requested": 0, "rolled_back": 3, "paused": 4}


def add_parsers(sub: Any) -> None:
    r = sub.add_parser("rollout", help="roll a variant out behind a canary on Ray Serve")
    r.add_argument("--config", type=Path)
    r.add_argument("--variant", help="a variant of the run the gate did not reject (default: its winner)")
    r.add_argument("--run", help="flow run id or MLflow run id of a finished run (default: the newest)")
    r.add_argument("--inject", action="append", default=[], metavar="KEY=VALUE",
                   help="drill: errors=0.2, latency_ms=500, garbage=0.3 make the canary misbehave")
    for name, text in (("promote", "promote the canary (answers a paused rollout)"),
                       ("rollback", "roll the canary back, or restore previous-champion after a promotion"),
                       ("status", "aliases, weight, step and the last analysis")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--config", type=Path)
        p.add_argument("--run", help="the run whose model to act on (default: the newest)")
        if name == "status":
            p.add_argument("--json", action="store_true")


def print_summary(summary: Any, config: PipelineConfig, api_url: str) -> None:
    print()
    print(summary.timeline)
    print(f"rollout: {summary.outcome}: {summary.reason}")
    print(f"report:  {summary.report_path}\n         plot {summary.plot_path}")
    print(f"MLflow:  run {summary.mlflow_run_id} (artifacts rollout/log.jsonl, rollout/report.md); browse: "
          f"`quantgate ui`, then http://127.0.0.1:{config.runtime.mlflow_ui_port}/#/experiments/"
          f"{summary.experiment_id}/runs/"
          f"{summary.mlflow_run_id}")
    print(f"Prefect: flow run {summary.flow_run_id} (server was {api_url}), "
          f"artifact rollout-{summary.rollout_id.lower()}")


def run_rollout(args: argparse.Namespace, config: PipelineConfig, state: Path, env: dict[str, str]) -> int:
    from quantgate.tasks.runtime.servers import prefect_server, ray_cluster
    from quantgate.tasks.serving.faults import Faults

    try:
        faults = {k: v for k, v in vars(Faults.parse(args.inject)).items() if v}
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    start = time.perf_counter()
    with prefect_server(state, config.runtime.prefect_port, ui=False, wait=False) as server:
        from quantgate.flows.canary_rollout import canary_rollout  # imported while the server starts
        from quantgate.tasks.rollout.context import NothingToRollOut
        from quantgate.tasks.rollout.log import RolloutBusy

        with ray_cluster(address=config.runtime.ray_address, num_cpus=config.runtime.ray_num_cpus, env=env,
                         state_dir=state):
            server.ready()
            st = canary_rollout(config, variant=args.variant, run=args.run, inject=faults, return_state=True)
        if st.is_failed():
            exc = st.result(raise_on_failure=False)
            if isinstance(exc, NothingToRollOut) and "champion already" in str(exc):
                print(f"rollout: nothing to do: {exc}")
                return 0
            kind = "" if isinstance(exc, NothingToRollOut | RolloutBusy) else f"{type(exc).__name__}: "
            print(f"error: {kind}{exc}", file=sys.stderr)
            return 1
        summary = st.result()
        if summary is None:  # the flow printed why: the variant is the champion already
            return 0
        print_summary(summary, config, server.api_url)
    print(f"wall time: {time.perf_counter() - start:.0f} s")
    return EXIT[summary.outcome]


def run_manual(args: argparse.Namespace, config: PipelineConfig) -> int:
    from quantgate.tasks.registry.run_record import NoRunRecord
    from quantgate.tasks.rollout import manual
    from quantgate.tasks.rollout.log import RolloutBusy

    try:
        if args.command == "status":
            return _status(args, config, manual.status)
        result = manual.act(config, args.command, args.run)
    except (RolloutBusy, NoRunRecord, ValueError, LookupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.command}: {result.message}")
    return EXIT[result.did]


def _status(args: argparse.Namespace, config: PipelineConfig, read: Any) -> int:
    """What runs (the stack of `quantgate up`), what the aliases point to, the rollout's state."""
    from quantgate.flows.ops_cli import stack_lines
    from quantgate.tasks.registry.run_record import NoRunRecord
    from quantgate.tasks.runtime.stack import live_stack

    state = config.runtime.state_dir.resolve()
    try:
        st = read(config, args.run)
    except NoRunRecord as exc:
        st = {"error": str(exc)}
    if args.json:
        st["stack"] = {name: s.address for name, s in live_stack(state).items()}
        print(json.dumps(st, indent=1))
    else:
        print("\n".join([*stack_lines(state), st["error"] if "error" in st else _status_text(st)]))
    return 0


def _status_text(st: dict[str, Any]) -> str:
    lines = [f"model {st['model']}"]
    for alias, v in st["aliases"].items():
        lines.append(f"  {alias:18} " + (f"version {v['version']} ({v['variant']})" if v["version"] else "-"))
    r = st["rollout"]
    if r is None:
        return "\n".join([*lines, "no rollout yet"])
    lines.append(f"rollout {r['id']} of {r['variant']}: {r['state']}{' (running)' if r['running'] else ''}; "
                 f"step {r['step']}/{len(r['steps'])}, weight {r['weight']}")
    for m in r["last_analysis"] or []:
        lines.append(f"  {m['metric']:10} {m['phase']:12} {m['reason']}")
    for arm, f in r["deployments"].items():
        lines.append(f"  {arm:8} {f['requests']} requests, {f['errors']} errors, {f['tokens']} tokens, "
                     f"service p50 {f['p50_s']} s, p95 {f['p95_s']} s (request log)")
    for dep, f in (r.get("ray_serve") or {}).items():
        lines.append(f"  {dep:8} {f['requests']} requests, {f['errors']} errors, latency p50 "
                     f"{f['latency_ms_p50']:.0f} ms, p95 {f['latency_ms_p95']:.0f} ms (Ray Serve's metrics)")
    lines.append(f"log: {r['log']}")
    return "\n".join(lines)
