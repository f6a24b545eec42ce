"""Engine start-up and decode by CPU executor: vLLM's worker in a process of its own ("mp", the CPU
build's default) or inside the engine core ("uni", what quantgate starts), alternated so that a
shared machine's load falls on both alike.

    .venv/bin/python bench/engine_startup.py [--model PATH] [--rounds 2] [--requests 6] [--cpu 1]

`--model`: a checkpoint folder (default: the demo's SmolLM2, converted by the catalogue). Each round
starts one server per executor on the same core, times its start-up (process start to the first
token), then `--requests` sequential 128-token completions, then times its stop (the process group
gone). Prints one JSON line per server and a table at the end.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from tempfile import mkdtemp

import httpx

from quantgate.tasks.engine.server import EngineServer, EngineSpec


def measure(model: str, executor: str, cpu: int, requests: int, log_dir: Path) -> dict:
    spec = EngineSpec(model=model, served_name="m", dtype="float32", max_model_len=512, executor=executor)
    server = EngineServer.start(spec, log_path=log_dir / f"{executor}-{time.time_ns()}.log", cpus=(cpu,),
                                timeout_s=600)
    try:
        seconds = []
        for _ in range(requests):
            started = time.perf_counter()
            r = httpx.post(f"{server.base_url}/v1/completions", timeout=300, json={
                "model": "m", "prompt": "hello there " * 20, "max_tokens": 128, "temperature": 0,
                "ignore_eos": True})
            r.raise_for_status()
            seconds.append(time.perf_counter() - started)
    finally:
        stopping = time.perf_counter()
        server.stop()  # the whole process group gone: 0.5 s here, 10 s before the supervisor's fix
        stop_s = time.perf_counter() - stopping
    return {"executor": executor, "startup_s": round(server.startup_s, 1),
            "request_s": sorted(round(s, 3) for s in seconds), "stop_s": round(stop_s, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--cpu", type=int, default=1)
    args = parser.parse_args()
    model = args.model
    if model is None:
        from quantgate.conf.load import load_config
        from quantgate.tasks.model.source import resolve_model

        config = load_config()
        model = resolve_model(config.model.name, config.runtime.state_dir.resolve() / "models").path
    log_dir = Path(mkdtemp(prefix="engine-startup-"))
    rows = []
    for _ in range(args.rounds):
        for executor in ("mp", "uni"):
            rows.append(measure(model, executor, args.cpu, args.requests, log_dir))
            print(json.dumps(rows[-1]), flush=True)
    print("\n| executor | start-up s | stop s | best 3 requests, s |\n|---|---:|---:|---|")
    for executor in ("mp", "uni"):
        mine = [r for r in rows if r["executor"] == executor]
        print(f"| {executor} | {', '.join(str(r['startup_s']) for r in mine)} | "
              f"{', '.join(str(r['stop_s']) for r in mine)} | "
              f"{' · '.join(' '.join(f'{s:.2f}' for s in r['request_s'][:3]) for r in mine)} |")
    print(f"\nengine logs: {log_dir}")


if __name__ == "__main__":
    main()
