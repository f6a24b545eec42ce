"""The flow's bench on the serving engine: each servable checkpoint served by vLLM's OpenAI server in
turn, on the cores an engine gets, and measured with vLLM's own serving benchmark (`serving_bench.py`)
at each concurrency in `bench.batch_sizes` (clients in flight; vLLM batches them).

The figures land in the same report as the reference path's, one `Speed` per concurrency: output
tokens/s as `decode_tok_s`, TTFT and TPOT at p50, requests/s, J/token over the steady state, the
engine's resident memory after the sweep. Ratios are to the baseline served by the same engine in
the same run. A checkpoint no production engine serves (QuIP#, AQLM), or one this engine refused
(its reason remembered from the evaluation's start-up, `engine/support.py`), gets no serving figures
and is listed with the reason: the gate then ranks it after every measured variant, and the canary
never serves it. The engine's start-up is timed apart and is in no figure.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quantgate.conf.engine import EngineConf
from quantgate.conf.schema import BenchConf
from quantgate.tasks.engine.checkpoints import engine_spec, servable
from quantgate.tasks.engine.environment import find_engine, platform_name
from quantgate.tasks.engine.kernels import kernels_in_log
from quantgate.tasks.engine.server import EngineStartError
from quantgate.tasks.perf.serving_bench import MAX_PROMPT_TOKENS, MIN_PROMPT_TOKENS, LevelResult
from quantgate.tasks.perf.timing import ModelBench, Speed
from quantgate.tasks.traffic.load import Request
from quantgate.tasks.traffic.tokens import render_chat

if TYPE_CHECKING:
    from quantgate.tasks.perf.bench import BenchReport


def served_prompts(checkpoint: str, requests: Sequence[Request], max_tokens: int) -> tuple[list[str], int]:
    """Each request's prompt as the server sees it (the checkpoint's chat template, generation prompt
    added), and how many were left out: longer than `max_tokens` or shorter than vLLM's benchmark
    accepts (it would send copies of others in their place)."""
    from quantgate.tasks.model.load import load_tokenizer

    tok = load_tokenizer(checkpoint)
    texts = [render_chat(tok, r.messages, add_generation_prompt=True) for r in requests]
    kept = [t for t in texts if MIN_PROMPT_TOKENS <= len(tok(t).input_ids) <= max_tokens]
    return kept, len(texts) - len(kept)


def mean_prompt_tokens(checkpoint: str, prompts: Sequence[str]) -> int:
    from quantgate.tasks.model.load import load_tokenizer

    tok = load_tokenizer(checkpoint)
    return round(sum(len(tok(t).input_ids) for t in prompts) / max(len(prompts), 1))


def process_tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and its descendants (an engine server: API server, engine core)."""
    import psutil

    total = 0
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        for p in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
    return total


def level_speed(level: LevelResult, rss: int) -> Speed:
    """One concurrency level as the report's `Speed` (prefill is not separable on a busy engine)."""
    ms = level.latency_ms
    return Speed(batch=level.clients, prefill_tok_s=float("nan"), ttft_ms=ms["ttft_p50"],
                 tpot_ms=ms["tpot_p50"], decode_tok_s=level.out_tok_s, j_per_token=level.energy.j_per_token,
                 peak_bytes=rss, req_s=level.req_s, ttft_p95_ms=ms["ttft_p95"], tpot_p95_ms=ms["tpot_p95"],
                 e2e_p95_ms=ms["e2el_p95"])


def why_not_served(checkpoint: str, engine: EngineConf, *, is_baseline: bool) -> str:
    """Why this checkpoint gets no serving figures ("" when the engine serves it)."""
    from quantgate.tasks.engine.refusals import known_refusal

    if why := servable(checkpoint):
        return why
    return "" if is_baseline else known_refusal(checkpoint, engine)


def bench_served(name: str, checkpoint: str, *, conf: BenchConf, engine: EngineConf, requests: list[Request],
                 state_dir: str, out_dir: Path, watts_per_busy_core: float, base_watts: float
                 ) -> tuple[ModelBench, dict[str, Any]]:
    """One checkpoint: its engine up (refused on a fallback kernel), the sweep, the engine stopped.
    Returns the report's entry and what else a reader wants: start-up, kernels, meter, prompts."""
    from quantgate.tasks.engine.refusals import scored_by, served_checkpoint
    from quantgate.tasks.model.size import checkpoint_size
    from quantgate.tasks.perf.energy import select_meter
    from quantgate.tasks.perf.serving_bench import serving_meter, serving_sweep

    spec = engine_spec(checkpoint, name, engine)
    prompts, left_out = served_prompts(checkpoint, requests,
                                       min(spec.max_model_len - conf.new_tokens, MAX_PROMPT_TOKENS))
    if not prompts:
        raise ValueError(f"bench: no held-out prompt of {name} fits {spec.max_model_len - conf.new_tokens} "
                         "tokens (engine.max_model_len less bench.new_tokens)")
    with served_checkpoint(spec, engine, state_dir, log_name=f"bench-{name}") as server:
        if engine.device == "cuda":  # the GPU's own counter (NVML) where the meters name it first
            meter, notes = select_meter(conf.energy, watts_per_busy_core=watts_per_busy_core,
                                        base_watts=base_watts)
        else:  # RAPL, else the estimate over the engine's processes (not this one's)
            meter, notes = serving_meter(server.process.pid, watts_per_busy_core=watts_per_busy_core,
                                         base_watts=base_watts)
        levels = serving_sweep(server.base_url, spec.served_name, tokenizer=checkpoint, prompts=prompts,
                               concurrency=conf.batch_sizes, output_tokens=conf.new_tokens,
                               max_num_seqs=spec.max_num_seqs, meter=meter, out_dir=out_dir / name,
                               python=find_engine(engine.python).python,
                               requests_per_client=conf.requests_per_client, engine_cpus=server.cpus)
        rss = process_tree_rss(server.process.pid)
        kernels = sorted({k.kernel for k in kernels_in_log(server.log_path.read_text(errors="replace"))})
        startup_s, cpus = server.startup_s, server.cpus
    how = (f"vLLM OpenAI server ({scored_by(engine, spec)}, {len(cpus) or 'all'} core(s)"
           + (f"; {', '.join(kernels)}" if kernels else "") + ")")
    disk = checkpoint_size(checkpoint).bytes
    # The engine holds the checkpoint's tensors as stored (INT8 stays INT8, W4A16 packed): disk bytes
    # stand for what a decode step can at most read.
    bench = ModelBench(name, how, disk, disk, {lv.clients: level_speed(lv, rss) for lv in levels})
    return bench, {"startup_s": startup_s, "prompts": len(prompts), "prompts_left_out": left_out,
                   "prompt_tokens_mean": mean_prompt_tokens(checkpoint, prompts),
                   "meter": meter.method, "meter_detail": meter.detail, "meter_notes": notes,
                   "energy_windows": {lv.clients: lv.energy.window for lv in levels},
                   "failed_requests": {lv.clients: lv.failed for lv in levels if lv.failed}}


def engine_machine(engine: EngineConf) -> str:
    return f"{platform_name()}, {os.cpu_count()} cores, {find_engine(engine.python).version}"


def bench_all_served(paths: dict[str, str], *, conf: BenchConf, engine: EngineConf, requests: list[Request],
                     state_dir: str, out_dir: Path, watts_per_busy_core: float, base_watts: float
                     ) -> tuple[dict[str, ModelBench], dict[str, str], dict[str, Any]]:
    """Every checkpoint in turn, the baseline first: (benches, not served with why, details)."""
    from quantgate.tasks.engine.refusals import learn_refusal

    benches, not_served, details = {}, {}, {}
    for name, checkpoint in paths.items():
        if why := why_not_served(checkpoint, engine, is_baseline=name == "baseline"):
            not_served[name] = why
            continue
        try:
            benches[name], details[name] = bench_served(
                name, checkpoint, conf=conf, engine=engine, requests=requests, state_dir=state_dir,
                out_dir=out_dir, watts_per_busy_core=watts_per_busy_core, base_watts=base_watts)
        except EngineStartError as exc:
            if name == "baseline":  # nothing to compare with
                raise
            learn_refusal(checkpoint, engine, exc)
            not_served[name] = f"not served on {engine.kind} here: {exc.reason}"
    return benches, not_served, details


def run_engine_bench(conf: BenchConf, paths: dict[str, str], *, heldout_path: str, out_path: str,
                     engine: EngineConf, state_dir: str) -> BenchReport:
    """`paths` holds "baseline" (served first: every ratio is to it) and each variant's checkpoint."""
    import json

    from quantgate.conf.hardware import hardware_profile
    from quantgate.tasks.perf.bench import BenchReport, write_report
    from quantgate.tasks.traffic.load import read_requests

    if "baseline" not in paths:
        raise ValueError("bench: the baseline checkpoint is required (ratios are to it)")
    profile = hardware_profile(conf.hardware)
    out = Path(out_path)
    benches, not_served, details = bench_all_served(
        {"baseline": paths["baseline"], **paths}, conf=conf, engine=engine,
        requests=read_requests(Path(heldout_path)), state_dir=state_dir, out_dir=out.with_suffix(""),
        watts_per_busy_core=profile.watts_per_busy_core or 0.0, base_watts=profile.base_watts or 0.0)
    base = details["baseline"]
    report = BenchReport(benches, tuple(conf.batch_sizes), conf.gate_batch, base["meter"],
                         base["meter_detail"], engine_machine(engine), engine.threads,
                         base["prompt_tokens_mean"], conf.new_tokens, conf.requests_per_client,
                         list(base["meter_notes"]), backend="engine", not_benched=not_served,
                         startup_s={n: d["startup_s"] for n, d in details.items()})
    write_report(report, out)
    out.with_suffix(".details.json").write_text(json.dumps(details, indent=1))
    return report
