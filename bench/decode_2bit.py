"""Decode speed of the 2-bit formats against the fp32 baseline: batch 1, one process, greedy.

    .venv/bin/python bench/decode_2bit.py --baseline DIR --variant NAME=DIR [--variant ...]
        [--tokens 32] [--repeats 3] [--threads 2] [--out bench-decode-2bit.json]

Each model generates `--tokens` new tokens after a fixed 16-token prompt with the KV cache on,
through its compressed forward (`materialize=False`: codes decoded inside the matmul), one
warm-up then `--repeats` timed runs, models interleaved so drift on this shared machine hits all
alike. Reports median ms/token and each variant's speed as a ratio to the baseline measured in
the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from quantgate.tasks.model.load import load_causal_lm
from quantgate.tasks.quantize.codebook.checkpoint import CODEBOOK_METHODS, load_codebook_model


def _load(path: str) -> torch.nn.Module:
    config = json.loads((Path(path) / "config.json").read_text())
    if config.get("quantization_config", {}).get("quant_method") in CODEBOOK_METHODS:
        return load_codebook_model(path, materialize=False)
    return load_causal_lm(path)


@torch.no_grad()
def _ms_per_token(model: torch.nn.Module, tokens: int) -> float:
    ids = torch.arange(100, 116).unsqueeze(0)  # [1, 16]
    start = time.perf_counter()
    model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens,
                   min_new_tokens=tokens, do_sample=False, pad_token_id=0)
    return (time.perf_counter() - start) * 1000 / tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True)
    ap.add_argument("--variant", action="append", default=[], help="NAME=checkpoint dir")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench-decode-2bit.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    paths = {"baseline": args.baseline} | dict(v.split("=", 1) for v in args.variant)
    models = {name: _load(path) for name, path in paths.items()}
    for model in models.values():
        _ms_per_token(model, 4)  # warm-up: first-call allocation, lazy preparations
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(args.repeats):
        for name, model in models.items():
            times[name].append(_ms_per_token(model, args.tokens))
    medians = {name: statistics.median(t) for name, t in times.items()}
    result = {"batch": 1, "new_tokens": args.tokens, "threads": args.threads, "repeats": args.repeats,
              "ms_per_token": medians, "all_ms_per_token": times,
              "speed_vs_baseline": {n: medians["baseline"] / m for n, m in medians.items()},
              "machine": f"{torch.get_num_threads()} torch threads, CPU"}
    Path(args.out).write_text(json.dumps(result, indent=1))
    for name in models:
        print(f"{name:>18}: {medians[name]:8.1f} ms/token  ×{result['speed_vs_baseline'][name]:.2f}")


if __name__ == "__main__":
    main()
