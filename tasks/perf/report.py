"""The run's performance evidence as files and report text: the roofline plan, the bench table with
the planner's prediction next to each measurement, and the Pareto plot."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from quantgate.conf.methods import VariantSpec
from quantgate.tasks.perf.bench import BenchReport, bench_table, write_report
from quantgate.tasks.perf.pareto import ParetoPoint, plot_pareto
from quantgate.tasks.perf.plan import RunPlan, model_shape, predicted_speedups


def predicted_for(model_path: str, hardware: str, bench: BenchReport | None,
                  specs: list[VariantSpec]) -> dict[str, dict[int, float]]:
    """The planner on the machine that ran the bench, with the bits per weight each variant holds in
    memory while it runs (not on disk: QuIP# and INT2 run as 4-bit codes here, FP8 as bf16)."""
    if bench is None or bench.backend == "engine":  # the roofline models our loaders' precisions
        return {}
    measured = [s for s in specs if s.name in bench.models]
    context = bench.prompt_tokens + bench.new_tokens // 2
    return predicted_speedups(model_path, hardware, measured, runtime_bits(model_path, bench),
                              batch_sizes=bench.batch_sizes, context=context)


def runtime_bits(model_path: str, bench: BenchReport) -> dict[str, float]:
    """Bits per quantized weight a model holds in memory: its resident bytes less the bf16 embedding
    and lm_head (one table when tied; norms are negligible), over the Linear weights."""
    shape = model_shape(model_path)
    tables = 1 if shape.tied_embeddings else 2
    return {n: (m.resident_bytes - 2 * tables * shape.lm_head_params) * 8 / shape.linear_params
            for n, m in bench.models.items() if not n.startswith("baseline")}


def performance_files(run_dir: Path, plan: RunPlan, bench: BenchReport | None, points: list[ParetoPoint],
                      predicted: dict[str, dict[int, float]], *, threshold: float) -> dict[str, str]:
    """roofline_plan.json always; bench.json and pareto.png (the variants' `points` beside the
    baselines') when the bench ran."""
    files = {"plan": run_dir / "roofline_plan.json"}
    files["plan"].write_text(json.dumps({n: asdict(p) for n, p in plan.plans.items()}, indent=1))
    if bench is not None:
        files["bench"] = run_dir / "bench.json"
        write_report(bench, files["bench"], predicted=predicted)
        b = bench.gate_batch
        references = [ParetoPoint(n, 1.0, bench.models[n].speeds[b].j_per_token,
                                  bench.models[n].speeds[b].decode_tok_s, False, reference=True)
                      for n in ("baseline", "baseline_bf16") if n in bench.models]
        files["pareto"] = plot_pareto(references + points, run_dir / "pareto.png", threshold=threshold,
                                      batch=b, energy_method=bench.energy_method, machine=bench.machine)
    return {k: str(v) for k, v in files.items()}


def performance_section(plan: RunPlan, bench: BenchReport | None, hardware: str,
                        predicted: dict[str, dict[int, float]]) -> str:
    lines = ["## Speed and energy", "", *plan.lines, ""]
    if bench is None:
        lines.append("Bench: not run (disabled or failed): the gate ranked on its other objectives.")
        return "\n".join(lines) + "\n"
    if bench.backend == "engine":
        how = (f"Bench on the serving engine ({bench.machine}): each checkpoint served in turn on "
               f"{bench.threads} core(s), vLLM's serving benchmark at {list(bench.batch_sizes)} clients, "
               f"{bench.repeats} held-out prompts per client (mean {bench.prompt_tokens} tokens), "
               f"{bench.new_tokens} new tokens each; latencies are p50 / p95, J/token over the steady "
               f"state. Energy: `{bench.energy_method}` ({bench.energy_detail}).")
    else:
        how = (f"Bench on {bench.machine}: {bench.prompt_tokens}-token prompts from held-out traffic, "
               f"{bench.new_tokens} new tokens, median of {bench.repeats} interleaved rounds. Energy: "
               f"`{bench.energy_method}` ({bench.energy_detail}). Predicted × is the roofline on "
               f"`{hardware}` with each variant's measured bits/weight.")
    lines += [how,
              *[f"- meter: {n}" for n in bench.meter_notes], "", bench_table(bench, predicted), "",
              "Pareto plot (quality vs J/token and vs tokens/s): `pareto.png` in the parent run's artifacts.",
              ""]
    return "\n".join(lines)


def artifact_links(tracking_uri: str, experiment_id: str, run_id: str, files: dict[str, str], *,
                   mlflow_ui_port: int) -> str:
    if "pareto" not in files:
        return ""
    ui = f"http://127.0.0.1:{mlflow_ui_port}/#/experiments/{experiment_id}/runs/{run_id}/artifacts"
    return (f"\n[Pareto plot in MLflow]({ui}) (run `quantgate ui` first; tracking {tracking_uri}, "
            f"artifact `pareto.png` of run {run_id}; local copy {files['pareto']})\n")
