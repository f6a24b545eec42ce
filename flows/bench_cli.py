"""`quantgate bench`: the speed/energy benchmark on its own, over the checkpoints a run left.

Measures the baseline and every variant checkpoint of a finished run (read from the run's record:
the newest run, or `--run <flow run id>`), writes the JSON and logs one MLflow run per model under a
`bench` parent run. `bench.backend` (or `--backend`): engine, each checkpoint served by the engine in
turn and measured with vLLM's serving benchmark; reference, our loaders in one process (ratios
measured side by side). No Ray or Prefect server.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from quantgate.conf.schema import PipelineConfig


def add_parser(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="speed, memory and energy of the baseline and each variant")
    bench.add_argument("--config", type=Path)
    bench.add_argument("--run", help="flow run id whose checkpoints to measure (default: the newest run)")
    bench.add_argument("--variants", help="comma-separated variant names (default: all quantized)")
    bench.add_argument("--checkpoint", action="append", default=[], metavar="NAME=DIR",
                       help="bench this checkpoint instead of looking one up (repeatable)")
    bench.add_argument("--backend", choices=("engine", "reference"), help="default: bench.backend")
    bench.add_argument("--batch", help="batch sizes (reference) or clients (engine), e.g. 1,8 "
                       "(default: bench.batch_sizes)")
    bench.add_argument("--repeats", type=int, help="timed rounds (default: bench.repeats)")
    bench.add_argument("--threads", type=int, help="torch threads (default: bench.num_cpus)")
    bench.add_argument("--compile", action="store_true", help="decode through torch.compile (static cache)")
    bench.add_argument("--out", type=Path, help="JSON path (default: <state>/bench/cli-<time>.json)")
    bench.add_argument("--no-mlflow", action="store_true", help="JSON only")


def run_bench_cli(args: argparse.Namespace, config: PipelineConfig, state: Path) -> int:
    from quantgate.tasks.perf.bench import bench_table, run_bench
    from quantgate.tasks.perf.engine_bench import run_engine_bench
    from quantgate.tasks.registry.publish import publish_bench
    from quantgate.tasks.registry.run_record import NoRunRecord, read_run_record
    from quantgate.tasks.registry.tracking import tracking_uri
    from quantgate.tasks.runtime.threads import set_threads

    conf = config.bench
    updates = {}
    if args.batch:
        sizes = tuple(int(b) for b in args.batch.split(","))
        updates |= {"batch_sizes": sizes, "gate_batch": sizes[0]}
    if args.backend:
        updates["backend"] = args.backend
    if args.repeats:
        updates["repeats"] = args.repeats
    if args.threads:
        updates["num_cpus"] = args.threads
    if args.compile:
        updates |= {"compile": True, "warmup": max(conf.warmup, 1)}
    conf = conf.model_validate({**conf.model_dump(), **updates})
    set_threads(conf.num_cpus)
    try:
        record = read_run_record(state, args.run)
    except NoRunRecord as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    paths, heldout = {"baseline": record["model"]["path"], **record["checkpoints"]}, record["heldout_path"]
    if args.checkpoint:
        paths |= dict(c.split("=", 1) for c in args.checkpoint)
    if getattr(args, "variants", None):
        wanted = {v.strip() for v in args.variants.split(",")} | {"baseline"}
        paths = {n: p for n, p in paths.items() if n in wanted}
    out = args.out or state / "bench" / f"cli-{time.strftime('%Y%m%d-%H%M%S')}.json"
    if conf.backend == "engine":
        print(f"bench: {', '.join(paths)}; on the engine, one at a time, clients {list(conf.batch_sizes)}; "
              f"{conf.requests_per_client} requests per client", flush=True)
        report = run_engine_bench(conf, paths, heldout_path=heldout, out_path=str(out), engine=config.engine,
                                  state_dir=str(state))
        for name, seconds in report.startup_s.items():
            print(f"  {name}: engine up in {seconds:.0f} s (in no figure)")
    else:
        print(f"bench: {', '.join(paths)}; batch sizes {list(conf.batch_sizes)}; {conf.repeats} rounds")
        report = run_bench(conf, paths, heldout_path=heldout, out_path=str(out))
    print(bench_table(report))
    print(f"energy: {report.energy_method} ({report.energy_detail})")
    for note in report.meter_notes:
        print(f"  meter: {note}")
    print(f"JSON: {out}")
    if not args.no_mlflow:
        uri = tracking_uri(config.runtime.mlflow_tracking_uri, state)
        run_id = publish_bench(uri, config.runtime.experiment or config.model.name, state / "mlartifacts",
                               report, str(out))
        print(f"MLflow: {uri} run {run_id}")
    return 0
