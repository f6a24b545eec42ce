"""What FP8 activation QDQ costs an evaluation: compressed-tensors' own forward against our fast path.

    python bench/fp8_eval_path.py [--model smollm2-135m-instruct] [--threads 1] [--rounds 2]

Quantizes the baseline to `fp8_w8a8` and `kv_fp8` (calibrated on the demo traffic), loads each
twice through the evaluation loader (`tasks.model.load.load_causal_lm`: once with compressed-tensors'
QDQ, once with `kernels.fp8_act`), checks the logits are identical, and times, interleaved in one
process, a 4 x 512 forward (perplexity-sized) and a batch-16 decode step (what lm-eval's generation
runs) against the fp32 baseline. Ratios are side by side in one run; the machine is shared.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def _calibration(d: Path) -> str:
    from quantgate.tasks.traffic.load import load_traffic, write_requests
    from quantgate.tasks.traffic.sampling import stratified_split

    traffic = load_traffic(REPO / "conf/traffic/demo.jsonl", max_line_bytes=65536, length_buckets=(200, 800))
    split = stratified_split(traffic.requests, calibration_size=32, heldout_size=32, seed=0)
    write_requests(d / "cal.jsonl", split.calibration)
    return str(d / "cal.jsonl")


def _checkpoints(model: str, d: Path) -> dict[str, str]:
    from pydantic import TypeAdapter

    from quantgate.conf.methods import VariantSpec
    from quantgate.tasks.model.source import resolve_model
    from quantgate.tasks.quantize.run import quantize_variant

    base = resolve_model(model, d / "models").path
    cal, spec = _calibration(d), TypeAdapter(VariantSpec)
    out = {"baseline": base}
    for s in ({"name": "fp8_w8a8", "method": "fp8_w8a8"},
              {"name": "kv_fp8", "method": "kv_fp8", "num_samples": 32}):
        out[s["name"]] = quantize_variant(spec.validate_python(s), model_path=base, calibration_path=cal,
                                          out_dir=str(d / s["name"]), max_seq_len=256, threads=1).checkpoint
    return out


def _time(model: torch.nn.Module, ids: torch.Tensor) -> tuple[float, float]:
    with torch.no_grad():
        t = time.perf_counter()
        model(input_ids=ids)
        forward = time.perf_counter() - t
        prompt = ids[:, :32].repeat(4, 1)  # 16 sequences of 32 tokens, then single-token steps
        cache = model(input_ids=prompt, use_cache=True).past_key_values
        t = time.perf_counter()
        for _ in range(10):
            cache = model(input_ids=prompt[:, -1:], past_key_values=cache, use_cache=True).past_key_values
        return forward, (time.perf_counter() - t) / 10


def main() -> None:
    from quantgate.tasks.model import load

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        paths = _checkpoints(args.model, Path(tmp))
        swap, models = load.fast_fp8_inputs, {"baseline": load.load_causal_lm(paths["baseline"])}
        for name in ("fp8_w8a8", "kv_fp8"):
            models[f"{name} fast"] = load.load_causal_lm(paths[name])
            load.fast_fp8_inputs = lambda model: 0  # compressed-tensors' own QDQ
            models[f"{name} compressed-tensors"] = load.load_causal_lm(paths[name])
            load.fast_fp8_inputs = swap
        ids = torch.randint(0, 49152, (4, 512), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            for name in ("fp8_w8a8", "kv_fp8"):
                same = torch.equal(models[f"{name} fast"](input_ids=ids[:1, :128]).logits,
                                   models[f"{name} compressed-tensors"](input_ids=ids[:1, :128]).logits)
                print(f"{name}: fast path logits identical to compressed-tensors': {same}")
        totals = {k: [0.0, 0.0] for k in models}
        for _ in range(args.rounds):
            for k, m in models.items():
                f, d = _time(m, ids)
                totals[k][0] += f
                totals[k][1] += d
    base = totals["baseline"]
    print(f"\n{args.threads} thread(s), {args.rounds} interleaved rounds")
    print("| model | forward 4 x 512 s | × baseline | decode step bs 16 ms | × baseline |")
    print("|---|---|---|---|---|")
    for k, (f, d) in totals.items():
        n = args.rounds
        print(f"| {k} | {f / n:.2f} | {f / base[0]:.2f} | {d / n * 1000:.0f} | {d / base[1]:.2f} |")


if __name__ == "__main__":
    main()
