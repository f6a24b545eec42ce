"""One benchmark run: pick the energy meter, load every model its fastest way, measure, write JSON.

The result names its energy method and batch sizes next to every figure; ratios are to the
baseline measured in the same run (and to its bf16 copy where `bench.bf16_baseline`).
MLflow metric names (DESIGN.md): `perf.decode_tok_s`, `perf.ttft_ms`, `perf.tpot_ms`,
`energy.j_per_token` at `bench.gate_batch`, and every figure per batch as `<name>.bs<batch>`.
"""

from __future__ import annotations

import json
import math
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from quantgate.conf.schema import BenchConf
from quantgate.tasks.perf.timing import ModelBench, bench_models, from_json, heldout_prompt_tokens

BASELINE, BASELINE_BF16 = "baseline", "baseline_bf16"
FIGURES = ("decode_tok_s", "prefill_tok_s", "ttft_ms", "tpot_ms", "j_per_token", "peak_bytes", "req_s",
           "ttft_p95_ms", "tpot_p95_ms", "e2e_p95_ms")


@dataclass(frozen=True)
class BenchReport:
    models: dict[str, ModelBench]
    batch_sizes: tuple[int, ...]
    gate_batch: int
    energy_method: str
    energy_detail: str
    machine: str
    threads: int
    prompt_tokens: int
    new_tokens: int
    repeats: int  # rounds (reference) or requests per client (engine)
    meter_notes: list[str] = field(default_factory=list)
    # reference: our loaders in one process, `batch` rows per forward; engine: vLLM's OpenAI server
    # per checkpoint, `batch` clients in flight (engine_bench.py)
    backend: str = "reference"
    not_benched: dict[str, str] = field(default_factory=dict)  # variant -> why it has no figures
    startup_s: dict[str, float] = field(default_factory=dict)  # engine start-ups, kept out of every figure

    @property
    def level_word(self) -> str:
        return "clients" if self.backend == "engine" else "batch"

    def ratio(self, name: str, batch: int, *, to: str = BASELINE) -> float:
        """Decode speed of `name` over `to`'s, same run, same batch (>1: faster)."""
        if to not in self.models or name not in self.models:
            return float("nan")
        return self.models[name].speeds[batch].decode_tok_s / self.models[to].speeds[batch].decode_tok_s

    def metrics(self, name: str) -> dict[str, float]:
        if name not in self.models:
            return {}
        m, out = self.models[name], {}
        for b, s in m.speeds.items():
            for fig in FIGURES:
                group = "energy" if fig == "j_per_token" else "mem" if fig == "peak_bytes" else "perf"
                value = getattr(s, fig)
                if value is not None and math.isfinite(value):  # a figure this backend measures
                    out[f"{group}.{fig}.bs{b}"] = float(value)
            for key, to in (("baseline", BASELINE), ("bf16", BASELINE_BF16)):
                if math.isfinite(ratio := self.ratio(name, b, to=to)):  # no bf16 copy: no ratio to it
                    out[f"perf.speedup_vs_{key}.bs{b}"] = ratio
        g = m.speeds[self.gate_batch]
        out |= {"perf.decode_tok_s": g.decode_tok_s, "perf.ttft_ms": g.ttft_ms, "perf.tpot_ms": g.tpot_ms,
                "energy.j_per_token": g.j_per_token, "mem.peak_bytes": float(g.peak_bytes),
                "mem.resident_bytes": float(m.resident_bytes), "perf.batch": float(self.gate_batch)}
        if g.req_s is not None:
            out["perf.requests_per_s"] = g.req_s
        return out


def bench_code_digest() -> str:
    import sys

    from quantgate.kernels import aqlm_ops, codebook_linear, hadamard, int4_cpu, quip_cpu, quip_ops
    from quantgate.tasks.model import fast_cpu
    from quantgate.tasks.perf import energy
    from quantgate.tasks.perf import timing as bench
    from quantgate.tasks.runtime.digest import source_digest

    return source_digest(sys.modules[__name__], bench, energy, fast_cpu, int4_cpu, quip_cpu, codebook_linear,
                         quip_ops, aqlm_ops, hadamard, packages=("torch",))


def machine_words(device: str) -> str:
    if device == "cuda":
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return (f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} torch threads, "
            f"torch {torch.__version__}")


def run_bench(conf: BenchConf, paths: dict[str, str], *, heldout_path: str, out_path: str) -> BenchReport:
    """`paths` holds "baseline" (the unquantized checkpoint) and each variant's checkpoint."""
    from quantgate.conf.hardware import hardware_profile
    from quantgate.tasks.model.fast_cpu import load_for_speed
    from quantgate.tasks.model.gpu import load_for_gpu
    from quantgate.tasks.model.size import checkpoint_size
    from quantgate.tasks.perf.energy import select_meter

    if BASELINE not in paths:
        raise ValueError("bench: the baseline checkpoint is required (ratios are to it)")
    profile = hardware_profile(conf.hardware)
    meter, notes = select_meter(conf.energy, watts_per_busy_core=profile.watts_per_busy_core or 0.0,
                                base_watts=profile.base_watts or 0.0)
    all_paths = dict(paths)
    if conf.bf16_baseline and conf.device == "cpu":
        all_paths = {BASELINE: paths[BASELINE], BASELINE_BF16: paths[BASELINE], **paths}

    def load(name: str, path: str) -> tuple[torch.nn.Module, str]:
        if conf.device == "cuda":
            return load_for_gpu(path)
        return load_for_speed(path, dtype="bfloat16") if name == BASELINE_BF16 else load_for_speed(path)

    models = bench_models(
        all_paths, loader=load,
        token_stream=heldout_prompt_tokens(paths[BASELINE], heldout_path),
        batch_sizes=conf.batch_sizes, prompt_tokens=conf.prompt_tokens, new_tokens=conf.new_tokens,
        warmup=conf.warmup, repeats=conf.repeats, meter=meter, device=conf.device,
        disk_bytes=lambda p: checkpoint_size(p).bytes, compile_decode=conf.compile)
    report = BenchReport(models, tuple(conf.batch_sizes), conf.gate_batch, meter.method, meter.detail,
                         machine_words(conf.device), torch.get_num_threads(), conf.prompt_tokens,
                         conf.new_tokens, conf.repeats, notes)
    write_report(report, Path(out_path))
    return report


def write_report(report: BenchReport, path: Path,
                 predicted: dict[str, dict[int, float]] | None = None) -> None:
    """The report as JSON; `predicted`: the planner's speedups for the same models and batches."""
    data = asdict(report)
    data["models"] = {n: {**asdict(m), "speeds": {str(b): asdict(s) for b, s in m.speeds.items()}}
                      for n, m in report.models.items()}
    data["speedup_vs_baseline"] = {n: {str(b): report.ratio(n, b) for b in report.batch_sizes}
                               for n in report.models}
    if predicted is not None:
        data["predicted_speedup_vs_baseline"] = {n: {str(b): v for b, v in per.items()}
                                                 for n, per in predicted.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def read_report(path: str) -> BenchReport:
    data = json.loads(Path(path).read_text())
    data.pop("speedup_vs_baseline", None)
    data.pop("predicted_speedup_vs_baseline", None)
    data["models"] = from_json(data["models"])
    data["batch_sizes"] = tuple(data["batch_sizes"])
    return BenchReport(**data)


def bench_table(report: BenchReport, predicted: dict[str, dict[int, float]] | None = None) -> str:
    """Markdown: one row per model and batch; speed ratios to the baseline (fp32 on CPU, bf16 on
    GPU) and to the bf16 baseline; J/token; memory. The path column is the path's first clause (the
    JSON holds it whole)."""
    if report.backend == "engine":
        return served_table(report)
    head = ("model", "batch", "path", "decode tok/s", "× baseline", "× bf16", "predicted ×", "TTFT ms",
            "TPOT ms", "prefill tok/s", f"J/token ({report.energy_method})", "peak MB", "weights MB (disk)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in report.models.items():
        for b, s in m.speeds.items():
            pred = (predicted or {}).get(name, {}).get(b)
            lines.append("| " + " | ".join((
                name, str(b), m.path.split(";")[0], f"{s.decode_tok_s:.1f}", f"{report.ratio(name, b):.2f}",
                f"{report.ratio(name, b, to=BASELINE_BF16):.2f}", "-" if pred is None else f"{pred:.2f}",
                f"{s.ttft_ms:.1f}", f"{s.tpot_ms:.1f}", f"{s.prefill_tok_s:.0f}", f"{s.j_per_token:.4f}",
                f"{s.peak_bytes / 1e6:.0f}", f"{m.disk_bytes / 1e6:.1f}")) + " |")
    return "\n".join(lines)


def served_table(report: BenchReport) -> str:
    """Markdown for the engine's bench: one row per model and concurrency, vLLM's figures, ratios to
    the baseline served alike; a row per checkpoint the engine does not serve, with why."""
    head = ("model", "clients", "req/s", "out tok/s", "× baseline", "TTFT p50/p95 ms", "TPOT p50/p95 ms",
            "E2E p95 s", f"J/token ({report.energy_method})", "engine RSS MB", "weights MB (disk)",
            "served by")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in report.models.items():
        for b, s in m.speeds.items():
            lines.append("| " + " | ".join((
                name, str(b), f"{s.req_s:.2f}", f"{s.decode_tok_s:.1f}", f"{report.ratio(name, b):.2f}",
                f"{s.ttft_ms:.0f} / {s.ttft_p95_ms:.0f}", f"{s.tpot_ms:.1f} / {s.tpot_p95_ms:.1f}",
                f"{s.e2e_p95_ms / 1e3:.2f}", f"{s.j_per_token:.4f}", f"{s.peak_bytes / 1e6:.0f}",
                f"{m.disk_bytes / 1e6:.1f}", m.path)) + " |")
    lines += [f"| {name} | - | " + " | ".join(["-"] * (len(head) - 3)) + f" | no serving bench: {why} |"
              for name, why in report.not_benched.items()]
    return "\n".join(lines)
