"""Prefect tasks for performance: the roofline plan before quantizing, the bench after evaluating."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from prefect import task

from quantgate.conf.methods import VariantSpec
from quantgate.conf.schema import BenchConf, PlanConf
from quantgate.tasks.model.source import ModelRef
from quantgate.tasks.perf.bench import BenchReport, bench_code_digest, run_bench
from quantgate.tasks.perf.plan import RunPlan, plan_run
from quantgate.tasks.runtime.caching import CACHED
from quantgate.tasks.runtime.resources import cluster_gpus
from quantgate.tasks.runtime.threads import set_threads


@task(name="plan", task_run_name="plan-{conf.target}")
def plan_task(*, conf: PlanConf, model: ModelRef, variants: tuple[VariantSpec, ...]) -> RunPlan:
    return plan_run(conf, model.path, list(variants), gpus=cluster_gpus())


def bench_path(state_dir: str, conf: BenchConf, paths: dict[str, str], heldout_path: str) -> str:
    """Content-addressed: the same settings, checkpoints, prompts and bench code -> the same file."""
    key = json.dumps([conf.model_dump(mode="json"), paths, heldout_path, bench_code_digest()], sort_keys=True)
    return str(Path(state_dir) / "bench" / f"bench-{hashlib.sha256(key.encode()).hexdigest()[:12]}.json")


@task(name="bench", task_run_name="bench", tags=["bench"], **CACHED)
def bench_task(*, conf: BenchConf, paths: dict[str, str], heldout_path: str, state_dir: str) -> BenchReport:
    set_threads(conf.num_cpus)
    return run_bench(conf, paths, heldout_path=heldout_path,
                     out_path=bench_path(state_dir, conf, paths, heldout_path))
