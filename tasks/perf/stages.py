"""Prefect tasks for performance: the roofline plan before quantizing, the bench after evaluating."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from prefect import task

from quantgate.conf.engine import EngineConf
from quantgate.conf.methods import VariantSpec
from quantgate.conf.schema import BenchConf, PlanConf
from quantgate.tasks.evaluate.on_engine import scorer_key
from quantgate.tasks.model.source import ModelRef
from quantgate.tasks.perf import engine_bench, serving_bench
from quantgate.tasks.perf.bench import BenchReport, bench_code_digest, run_bench
from quantgate.tasks.perf.engine_bench import run_engine_bench
from quantgate.tasks.perf.plan import RunPlan, plan_run
from quantgate.tasks.runtime.caching import CACHED
from quantgate.tasks.runtime.digest import source_digest
from quantgate.tasks.runtime.resources import cluster_gpus
from quantgate.tasks.runtime.threads import set_threads


@task(name="plan", task_run_name="plan-{conf.target}")
def plan_task(*, conf: PlanConf, model: ModelRef, variants: tuple[VariantSpec, ...],
              refused: dict[str, str] | None = None) -> RunPlan:
    """`refused`: variant -> why the serving engine refuses its format here (`engine/stages.py`)."""
    return plan_run(conf, model.path, list(variants), gpus=cluster_gpus(), refused=refused)


def bench_path(state_dir: str, conf: BenchConf, paths: dict[str, str], heldout_path: str,
               engine: EngineConf | None = None) -> str:
    """Content-addressed: the same settings, checkpoints, prompts and bench code (and engine, for the
    engine's bench) -> the same file."""
    code = (scorer_key(engine) + source_digest(engine_bench, serving_bench)
            if conf.backend == "engine" and engine else bench_code_digest())
    key = json.dumps([conf.model_dump(mode="json"), paths, heldout_path, code], sort_keys=True)
    return str(Path(state_dir) / "bench" / f"bench-{hashlib.sha256(key.encode()).hexdigest()[:12]}.json")


@task(name="bench", task_run_name="bench-{conf.backend}", tags=["bench"], **CACHED)
def bench_task(*, conf: BenchConf, paths: dict[str, str], heldout_path: str, state_dir: str,
               engine: EngineConf) -> BenchReport:
    out_path = bench_path(state_dir, conf, paths, heldout_path, engine)
    if conf.backend == "engine":
        return run_engine_bench(conf, paths, heldout_path=heldout_path, out_path=out_path, engine=engine,
                                state_dir=state_dir)
    set_threads(conf.num_cpus)
    return run_bench(conf, paths, heldout_path=heldout_path, out_path=out_path)
