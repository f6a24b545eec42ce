"""Serving benchmark on the engine (not a test): per checkpoint, vLLM's OpenAI server on a core of its
own, and vLLM's own serving benchmark against it at each concurrency, closed loop, every request
decoding exactly `--output-tokens` tokens; J/token over the steady state (tasks/perf/serving_bench.py).

    .venv/bin/python bench/engine_serving.py --model CKPT [--model CKPT ...] [--concurrency 1,4,16,32]
        [--output-tokens 16] [--prompts HELDOUT.jsonl] [--requests-per-client 8] [--config PATH]
        [--dtype auto] [--out PATH]

Prompts: `--prompts` (a held-out JSONL as a run writes it), else the held-out requests of the config's
traffic, prepared as a run prepares them; rendered with each checkpoint's chat template, those the
engine's context or vLLM's dataset reader would refuse left out and counted. `--dtype auto`: float32
on an AVX2 CPU. The engine's start-up is printed on its own line and is in no latency.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from pathlib import Path

from quantgate.conf.hardware import hardware_profile
from quantgate.conf.load import load_config
from quantgate.tasks.engine.checkpoints import engine_spec
from quantgate.tasks.engine.environment import find_engine, platform_name
from quantgate.tasks.engine.server import engine_server
from quantgate.tasks.perf.engine_bench import served_prompts
from quantgate.tasks.perf.serving_bench import (
    MAX_PROMPT_TOKENS,
    LevelResult,
    serving_meter,
    serving_sweep,
)
from quantgate.tasks.traffic.load import read_requests
from quantgate.tasks.traffic.prepare import prepare_traffic


def _labels(models: list[str]) -> list[str]:
    """Folder names; parent/name where two share a name (each variant's `model` folder, say)."""
    names = [Path(m).name for m in models]
    return [n if names.count(n) == 1 else "/".join(Path(m).parts[-2:]) for m, n in zip(models, names,
                                                                                      strict=True)]


def table(label: str, levels: list[LevelResult]) -> str:
    head = ("clients", "ok/sent", "req/s", "out tok/s", "TTFT p50/p95/p99 ms", "TPOT p50/p95 ms",
            "ITL p95 ms", "E2E p50/p95/p99 s", "J/token (method)", "energy window")
    lines = [f"\n{label}\n", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for lv in levels:
        ms, e = lv.latency_ms, lv.energy
        lines.append(
            f"| {lv.clients} | {lv.completed}/{lv.sent} | {lv.req_s:.2f} | {lv.out_tok_s:.1f} | "
            f"{ms['ttft_p50']:.0f} / {ms['ttft_p95']:.0f} / {ms['ttft_p99']:.0f} | "
            f"{ms['tpot_p50']:.1f} / {ms['tpot_p95']:.1f} | {ms['itl_p95']:.1f} | "
            f"{ms['e2el_p50'] / 1e3:.2f} / {ms['e2el_p95'] / 1e3:.2f} / {ms['e2el_p99'] / 1e3:.2f} | "
            f"{e.j_per_token:.3g} ({e.method}) | {e.window}: {e.tokens:.0f} tokens, {e.seconds:.1f} s, "
            f"{e.full_samples}/{e.samples} samples full |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", required=True, help="a checkpoint folder; repeat for more")
    ap.add_argument("--concurrency", default="1,4,16,32")
    ap.add_argument("--output-tokens", type=int, default=16)
    ap.add_argument("--prompts", type=Path, help="held-out JSONL (default: the config's held-out traffic)")
    ap.add_argument("--requests-per-client", type=int, default=8, help="requests per level = this × clients")
    ap.add_argument("--config", type=Path)
    ap.add_argument("--dtype", default="auto", help="the engine's dtype (auto: by what the CPU computes in)")
    ap.add_argument("--out", type=Path, help="JSON (default: <state>/bench-engine-serving/results.json)")
    args = ap.parse_args()
    config = load_config(args.config)
    state = Path(config.runtime.state_dir).resolve()
    bench_dir = state / "bench-engine-serving"
    heldout = args.prompts or Path(prepare_traffic(config.traffic, state / "traffic").heldout_path)
    requests = read_requests(heldout)
    engine = config.engine.model_copy(update={"dtype": args.dtype})
    profile = hardware_profile(config.bench.hardware)
    concurrency = [int(c) for c in args.concurrency.split(",")]
    python = find_engine(engine.python).python
    machine = f"{platform_name()}, {os.cpu_count()} cores"
    print(f"[bench] {machine}, load average {os.getloadavg()[0]:.2f}; {len(requests)} prompts from {heldout}",
          flush=True)
    runs = []
    for path, label in zip(args.model, _labels(args.model), strict=True):
        spec = engine_spec(path, label, engine)
        prompts, left_out = served_prompts(path, requests,
                                     min(spec.max_model_len - args.output_tokens, MAX_PROMPT_TOKENS))
        if not prompts:
            raise SystemExit(f"{label}: no held-out prompt fits {spec.max_model_len} tokens of context")
        with engine_server(spec, state_dir=bench_dir, log_name=label.replace("/", "-"),
                           timeout_s=engine.start_timeout_s) as server:
            print(f"[bench] {label}: engine up in {server.startup_s:.1f} s ({spec.dtype}, cores "
                  f"{list(server.cpus)}); start-up is in no latency below", flush=True)
            meter, notes = serving_meter(server.process.pid, watts_per_busy_core=profile.watts_per_busy_core
                                         or 0.0, base_watts=profile.base_watts or 0.0)
            levels = serving_sweep(server.base_url, spec.served_name, tokenizer=path, prompts=prompts,
                                   concurrency=concurrency, output_tokens=args.output_tokens,
                                   max_num_seqs=spec.max_num_seqs, meter=meter,
                                   out_dir=bench_dir / label.replace("/", "-"), python=python,
                                   requests_per_client=args.requests_per_client, engine_cpus=server.cpus)
            startup_s, cpus = server.startup_s, list(server.cpus)
        print(table(f"{label} ({len(prompts)} prompts, {left_out} left out for length; {meter.detail})",
                    levels), flush=True)
        runs.append({"model": path, "label": label, "dtype": spec.dtype, "startup_s": startup_s,
                     "engine_cpus": cpus, "prompts": len(prompts), "prompts_left_out": left_out,
                     "meter_notes": notes, "levels": [asdict(lv) for lv in levels]})
    out = args.out or bench_dir / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine, "load_avg_after": os.getloadavg(), "prompts": str(heldout),
                               "output_tokens": args.output_tokens, "concurrency": concurrency,
                               "requests_per_client": args.requests_per_client, "runs": runs}, indent=1))
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
