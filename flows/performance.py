"""The flow's performance steps: the bench as one Ray task, then the plan, bench table and Pareto
plot as files for MLflow and sections of the gate report. Ordering and files only: the measuring,
planning and plotting live in quantgate.tasks."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from prefect.futures import PrefectFuture
from prefect_ray.context import remote_options

from quantgate.conf.schema import PipelineConfig
from quantgate.flows.cli import MLFLOW_UI_PORT
from quantgate.tasks.gate.decide import GateDecision, VariantScores
from quantgate.tasks.perf.bench import BenchReport, bench_code_digest, bench_table, write_report
from quantgate.tasks.perf.pareto import ParetoPoint, plot_pareto, quality_of
from quantgate.tasks.perf.plan import model_shape, plan_lines, predicted_speedups
from quantgate.tasks.perf.roofline import VariantPlan
from quantgate.tasks.stages import bench_task


def run_bench_step(config: PipelineConfig, state: Path, paths: dict[str, str], heldout: str
                   ) -> PrefectFuture[Any]:
    conf = config.bench
    key = json.dumps([conf.model_dump(mode="json"), paths, heldout, bench_code_digest()], sort_keys=True)
    out = state / "bench" / f"bench-{hashlib.sha256(key.encode()).hexdigest()[:12]}.json"
    with remote_options(num_cpus=conf.num_cpus, num_gpus=1 if conf.device == "cuda" else 0):
        return bench_task.submit(conf=conf, paths=paths, heldout_path=heldout, out_path=str(out))


def predicted_for(config: PipelineConfig, model_path: str, bench: BenchReport | None,
                  scores: list[VariantScores]) -> dict[str, dict[int, float]]:
    """The planner on the machine that ran the bench, with the bits per weight each variant holds in
    memory while it runs (not on disk: QuIP# and INT2 run as 4-bit codes here, FP8 as bf16)."""
    if bench is None:
        return {}
    methods = {s.name: s.method for s in scores if s.name in bench.models}
    bits = runtime_bits(model_path, bench)
    context = bench.prompt_tokens + bench.new_tokens // 2
    return predicted_speedups(model_path, config.bench.hardware, methods, bits,
                              batch_sizes=bench.batch_sizes, context=context)


def runtime_bits(model_path: str, bench: BenchReport) -> dict[str, float]:
    """Bits per quantized weight a model holds in memory: its resident bytes less the bf16 embedding
    and lm_head (one table when tied; norms are negligible), over the Linear weights."""
    shape = model_shape(model_path)
    tables = 1 if shape.tied_embeddings else 2
    return {n: (m.resident_bytes - 2 * tables * shape.lm_head_params) * 8 / shape.linear_params
            for n, m in bench.models.items() if not n.startswith("baseline")}


def performance_files(config: PipelineConfig, run_dir: Path,
                      plans: dict[str, VariantPlan], bench: BenchReport | None,
                      scores: list[VariantScores], decision: GateDecision,
                      predicted: dict[str, dict[int, float]]) -> dict[str, str]:
    files = {"plan": run_dir / "roofline_plan.json"}
    files["plan"].write_text(json.dumps({n: asdict(p) for n, p in plans.items()}, indent=1))
    if bench is not None:
        files["bench"] = run_dir / "bench.json"
        write_report(bench, files["bench"], predicted=predicted)
        b = bench.gate_batch
        points = [ParetoPoint(n, 1.0, bench.models[n].speeds[b].j_per_token,
                              bench.models[n].speeds[b].decode_tok_s, False, reference=True)
                  for n in ("baseline", "baseline_bf16") if n in bench.models]
        points += [ParetoPoint(s.name, quality_of(decision.verdicts[s.name]),
                               s.perf.get("energy.j_per_token", math.nan),
                               s.perf.get("perf.decode_tok_s", math.nan), decision.verdicts[s.name].passed)
                   for s in scores if s.eval is not None and s.perf]
        files["pareto"] = plot_pareto(points, run_dir / "pareto.png", threshold=config.gate.recovery,
                                      batch=b, energy_method=bench.energy_method, machine=bench.machine)
    return {k: str(v) for k, v in files.items()}


def performance_section(config: PipelineConfig, plans: dict[str, VariantPlan], bench: BenchReport | None,
                        predicted: dict[str, dict[int, float]]) -> str:
    controls = {s.name for s in config.variants if s.control}
    lines = ["## Speed and energy", "", *plan_lines(plans, config.plan, controls), ""]
    if bench is None:
        lines.append("Bench: not run (disabled or failed): the gate ranked on its other objectives.")
        return "\n".join(lines) + "\n"
    lines += [f"Bench on {bench.machine}: {bench.prompt_tokens}-token prompts from held-out traffic, "
              f"{bench.new_tokens} new tokens, median of {bench.repeats} interleaved rounds. Energy: "
              f"`{bench.energy_method}` ({bench.energy_detail}). Predicted × is the roofline on "
              f"`{config.bench.hardware}` with each variant's measured bits/weight.",
              *[f"- meter: {n}" for n in bench.meter_notes], "", bench_table(bench, predicted), "",
              "Pareto plot (quality vs J/token and vs tokens/s): `pareto.png` in the parent run's artifacts.",
              ""]
    return "\n".join(lines)


def artifact_links(tracking_uri: str, experiment_id: str, run_id: str, files: dict[str, str]) -> str:
    if "pareto" not in files:
        return ""
    ui = f"http://127.0.0.1:{MLFLOW_UI_PORT}/#/experiments/{experiment_id}/runs/{run_id}/artifacts"
    return (f"\n[Pareto plot in MLflow]({ui}) (run `quantgate ui` first; tracking {tracking_uri}, "
            f"artifact `pareto.png` of run {run_id}; local copy {files['pareto']})\n")
