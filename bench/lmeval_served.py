"""lm-eval on the HF path and through the serving engine, side by side, on the config's model: each
task's score both ways, how many items agree, and the time each took (the engine's start-up apart).

    .venv/bin/python bench/lmeval_served.py [--config conf/default.yaml] [--limit 40]
        [--tasks qg_facts_mc qg_replay] [--state-dir .quantgate/bench-lmeval]

The held-out traffic is the config's (prepared as the flow prepares it); the HF path runs in
`eval.dtype`, the engine in the same dtype. Prints one JSON line per path and a table at the end.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from quantgate.conf.load import load_config
from quantgate.tasks.engine.checkpoints import engine_spec
from quantgate.tasks.engine.refusals import scored_by, served_checkpoint
from quantgate.tasks.evaluate.lmeval import ServedModel, run_lmeval
from quantgate.tasks.model.source import resolve_model
from quantgate.tasks.traffic.prepare import prepare_traffic


def _items(samples_path: str) -> dict[tuple[str, str], dict]:
    rows = [json.loads(line) for line in Path(samples_path).read_text(encoding="utf-8").splitlines()]
    return {(r["task"], r["id"]): r["metrics"] for r in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None)
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--tasks", nargs="*", default=None)
    parser.add_argument("--state-dir", default=".quantgate/bench-lmeval")
    args = parser.parse_args()
    config = load_config(args.config)
    state = Path(args.state_dir).resolve()
    model = resolve_model(config.model.name, config.runtime.state_dir.resolve() / "models")
    traffic = prepare_traffic(config.traffic, state / "traffic")
    tasks = list(args.tasks or config.lmeval.tasks)
    engine = config.engine.model_copy(update={"dtype": config.eval.dtype})
    kw = {"tasks": tasks, "replay_path": traffic.heldout_path, "replay_size": config.lmeval.replay_size,
          "limit": args.limit}
    started = time.perf_counter()
    hf = run_lmeval(model.path, str(state / "hf"), batch_size=config.lmeval.batch_size,
                    dtype=config.eval.dtype, **kw)
    hf_s = time.perf_counter() - started
    print(json.dumps({"path": "hf", "seconds": round(hf_s, 1), "metrics": hf.metrics}), flush=True)
    spec = engine_spec(model.path, "baseline", engine)
    started = time.perf_counter()
    with served_checkpoint(spec, engine, str(state), log_name="lmeval-baseline") as server:
        up = time.perf_counter()
        served = ServedModel(server.base_url, "baseline", spec.max_model_len, engine.concurrency,
                             scored_by(engine, spec))
        en = run_lmeval(model.path, str(state / "engine"), batch_size=1, dtype=spec.dtype,
                        backend="engine", served=served, **kw)
        en_s = time.perf_counter() - up
    print(json.dumps({"path": en.scored_by, "startup_s": round(up - started, 1), "seconds": round(en_s, 1),
                      "metrics": en.metrics}), flush=True)
    a, b = _items(hf.samples_path), _items(en.samples_path)
    print(f"\n{model.path}: {len(a)} items, limit {args.limit} per task, {config.eval.dtype}")
    print("| task metric | HF path | engine | items that agree |\n|---|---:|---:|---:|")
    for key in sorted(hf.metrics):
        task, metric = key.split(".", 1)
        mine = [k for k in a if k[0] == task]
        same = sum(a[k].get(metric) == b.get(k, {}).get(metric) for k in mine)
        served_value = en.metrics.get(key, float("nan"))
        print(f"| {key} | {hf.metrics[key]:.3f} | {served_value:.3f} | {same}/{len(mine)} |")
    print(f"\ntime: HF path {hf_s:.0f} s; engine {en_s:.0f} s after a {up - started:.0f} s start-up")


if __name__ == "__main__":
    main()
