"""Scored vs served: each checkpoint's held-out perplexity on the reference path (transformers + our
loaders, fp32) and through the serving engine that would serve it (vLLM's OpenAI server, its prompt
logprobs), side by side, with the engine's start-up and scoring time apart.

    .venv/bin/python bench/scored_vs_served.py [--config conf/default.yaml] [--variants int4_gptq kv_fp8]
        [--state-dir .quantgate/bench-served] [--dtype auto]

The baseline comes from the config's model; each named variant is quantized here with the config's
spec (reused when already on disk), on the config's calibration split. Prints one JSON line per
checkpoint and the table at the end; a checkpoint the engine cannot serve says why.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from quantgate.conf.load import load_config
from quantgate.tasks.engine.checkpoints import servable
from quantgate.tasks.evaluate.on_engine import evaluate_on_engine
from quantgate.tasks.evaluate.perplexity import evaluate_checkpoint
from quantgate.tasks.model.source import resolve_model
from quantgate.tasks.quantize.run import quantize_variant
from quantgate.tasks.traffic.prepare import prepare_traffic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=None)
    ap.add_argument("--variants", nargs="*", default=["int4_gptq", "kv_fp8", "fp8_w8a8"])
    ap.add_argument("--state-dir", default=".quantgate/bench-served")
    ap.add_argument("--dtype", default="auto", help="the engine's dtype (auto: by what the CPU computes in)")
    args = ap.parse_args()
    config = load_config(args.config)
    state = Path(args.state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    engine = config.engine.model_copy(update={"dtype": args.dtype})
    model = resolve_model(config.model.name, state / "models")
    traffic = prepare_traffic(config.traffic, state / "traffic")
    by_name = {v.name: v for v in config.variants}
    checkpoints = {"baseline": model.path}
    for name in args.variants:
        out = state / "variants" / name
        started = time.perf_counter()
        checkpoints[name] = quantize_variant(by_name[name], model_path=model.path,
                                             calibration_path=traffic.calibration_path, out_dir=str(out),
                                             max_seq_len=config.calibration.max_seq_len,
                                             threads=int(os.environ.get("OMP_NUM_THREADS", "2"))).checkpoint
        print(f"# {name}: quantized in {time.perf_counter() - started:.0f} s", flush=True)
    rows = []
    for name, path in checkpoints.items():
        row = {"checkpoint": name}
        ref = evaluate_checkpoint(path, traffic.heldout_path, str(state / "scores" / f"{name}-ref.json"),
                                  window=config.eval.window, batch_size=config.eval.batch_size)
        row |= {"reference_ppl": round(ref.ppl, 3), "reference_s": round(ref.seconds, 1)}
        if why := servable(path):
            row["served"] = why
        else:
            try:
                out = str(state / "scores" / f"{name}-eng.json")
                got = evaluate_on_engine(path, traffic.heldout_path, out, engine=engine, state_dir=str(state),
                                         window=config.eval.window, name=name)
                row |= {"served_ppl": round(got.ppl, 3),
                        "served_vs_reference": round(got.ppl / ref.ppl - 1, 4),
                        "engine_s": round(got.seconds, 1), "scored_by": got.scored_by}
            except Exception as exc:  # noqa: BLE001 - a checkpoint the engine cannot serve is a row
                row["served"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        print(json.dumps(row), flush=True)
        rows.append(row)
    print("\n| checkpoint | reference PPL | served PPL | served / reference − 1 | engine |")
    print("|---|---|---|---|---|")
    for r in rows:
        served = (f"{r['served_ppl']:.3f} | {r['served_vs_reference']:+.2%} | {r['scored_by']}"
                  if "served_ppl" in r else f"— | — | {r['served']}")
        print(f"| {r['checkpoint']} | {r['reference_ppl']:.3f} | {served} |")


if __name__ == "__main__":
    main()
