"""A dequantized FP8 variant's multi-token bf16 Linears on CPU: torch's bf16 GEMM against fp32 on
the weight upcast a block of rows at a time, per layer by token count, then on the whole model.

Per layer: each of the variant's Linear shapes at 2 to 64 tokens, a call through every layer of that
shape in turn (cold weights, as in the model), which path is faster and which one
`kernels/bf16_cpu.Bf16Linear` picks at this thread count. Whole model: prefill of a 55-token prompt
(logits at its last position, as serving takes them) and one decode step after 32-token prompts at
batch 2, 8, 16 and 32, through `load_for_speed`, five ways: the fp32 baseline; the variant with
torch's bf16 GEMM (oneDNN's where it has bf16 kernels, torch's fallback where it has none: AVX2-only
CPUs), with fp32 on the whole weight upcast per call, with fp32 by row blocks, and as `Bf16Linear`
picks. The ways alternate call by call (medians of `--repeats` after 3 warm-ups), so a shared
machine's drift lands on all of them alike; a decode step's KV cache is copied outside the timer.
Run it on a finished demo's state (one process, nothing beside it: ratios, not absolute times):

    .venv/bin/python bench/bf16_cpu_paths.py --state-dir .quantgate --threads 1
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

from quantgate.kernels import bf16_cpu
from quantgate.tasks.model.fast_cpu import load_for_speed


def interleaved_ms(ways: dict[str, Callable[[], Callable[[], object]]], repeats: int) -> dict[str, float]:
    """Median ms per way, the ways called in turn: a load change hits every way, not one. Each way
    makes a fresh call (its setup untimed) and the call is timed."""
    times: dict[str, list[float]] = {w: [] for w in ways}
    for r in range(3 + repeats):
        for way, fresh in ways.items():
            call = fresh()
            t0 = time.perf_counter()
            call()
            if r >= 3:
                times[way].append((time.perf_counter() - t0) * 1e3)
    return {w: sorted(t)[len(t) // 2] for w, t in times.items()}


def _whole_upcast(x, weight, bias):
    bias = None if bias is None else bias.float()
    return torch.nn.functional.linear(x.float(), weight.float(), bias).to(x.dtype)


def _one(state: Path, pattern: str) -> Path:
    found = sorted(state.glob(pattern))
    if not found:
        raise SystemExit(f"--state-dir {state}: no {pattern} (run `make demo` first, or point at its state)")
    return found[-1]


def _through(fn, x, weights) -> Callable[[], Callable[[], object]]:
    """Fresh calls (the same one) of `fn` on `x` through every weight in turn."""
    def call():
        return [fn(x, w, None) for w in weights]
    return lambda: call


def per_layer(model: torch.nn.Module, repeats: int) -> None:
    shapes: dict[tuple[int, int], list[torch.Tensor]] = {}
    for m in model.modules():
        if isinstance(m, bf16_cpu.Bf16Linear):
            shapes.setdefault((m.in_features, m.out_features), []).append(m.weight)
    print("per layer (ms a call, through every layer of the shape in turn): bf16 GEMM, fp32 by row "
          "blocks, bf16's time over fp32's, the faster, Bf16Linear's pick")
    for (k, n), weights in sorted(shapes.items()):
        for tokens in (2, 4, 8, 12, 16, 32, 64):
            x = torch.randn(tokens, k, dtype=torch.bfloat16)
            ms = interleaved_ms({"bf16": _through(torch.nn.functional.linear, x, weights),
                                 "fp32": _through(bf16_cpu.fp32_linear_chunked, x, weights)}, repeats)
            bf16, fp32 = ms["bf16"] / len(weights), ms["fp32"] / len(weights)
            faster = "bf16" if bf16 < fp32 else "fp32"
            pick = "fp32" if not bf16_cpu.ONEDNN_BF16 and bf16_cpu.fp32_pays(tokens) else "bf16"
            print(f"  {k:5d} -> {n:5d} ({len(weights):2d} layers) {tokens:3d} tokens  bf16 {bf16:8.3f}  "
                  f"fp32 {fp32:8.3f}  ×{bf16 / fp32:4.2f}  faster {faster}  picks {pick}"
                  f"{'' if pick == faster else '  <- the other'}", flush=True)


def _fresh(model, batch: int | None) -> Callable[[], Callable[[], object]]:
    """Fresh calls of one prefill of the 55-token prompt (batch None), or of one decode step after
    32-token prompts at a batch (each on its own copy of the prompts' KV cache)."""
    gen = torch.Generator().manual_seed(0)
    if batch is None:
        prompt = torch.randint(100, 40000, (1, 55), generator=gen)
        return lambda: partial(model, input_ids=prompt, use_cache=True, logits_to_keep=1)
    prompts = torch.randint(100, 40000, (batch, 32), generator=gen)
    out = model(input_ids=prompts, use_cache=True, logits_to_keep=1)
    nxt = out.logits[:, -1:].argmax(-1)
    return lambda: partial(model, input_ids=nxt, past_key_values=copy.deepcopy(out.past_key_values),
                           use_cache=True, logits_to_keep=1)


def _with(use_bf16_gemm: bool, fp32_path, fresh):
    """Fresh calls of `fresh`'s, every multi-token call of the variant on the path named."""
    def run(call):
        saved = bf16_cpu.ONEDNN_BF16, bf16_cpu.fp32_linear_chunked, bf16_cpu.fp32_pays
        bf16_cpu.ONEDNN_BF16, bf16_cpu.fp32_linear_chunked = use_bf16_gemm, fp32_path
        bf16_cpu.fp32_pays = lambda tokens: True
        try:
            return call()
        finally:
            bf16_cpu.ONEDNN_BF16, bf16_cpu.fp32_linear_chunked, bf16_cpu.fp32_pays = saved
    return lambda: partial(run, fresh())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state-dir", type=Path, default=Path(".quantgate"))
    ap.add_argument("--variant", default="fp8_w8a8", help="a variant whose Linears run in bf16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"oneDNN has bf16 kernels here: {bf16_cpu.ONEDNN_BF16}; {args.threads} thread(s); "
          f"{args.variant} against the fp32 baseline")
    base, _ = load_for_speed(str(_one(args.state_dir, "models/*")))
    variant, _ = load_for_speed(str(_one(args.state_dir, f"variants/{args.variant}-*")))
    chunked = bf16_cpu.fp32_linear_chunked
    with torch.inference_mode():
        per_layer(variant, args.repeats)
        for batch in (None, 2, 8, 16, 32):
            what = "prefill 55 tokens" if batch is None else f"decode step, batch {batch}"
            fresh = _fresh(variant, batch)
            ms = interleaved_ms({"baseline fp32": _fresh(base, batch),
                                 "bf16 GEMM": _with(True, chunked, fresh),
                                 "fp32 whole upcast": _with(False, _whole_upcast, fresh),
                                 "fp32 by row blocks": _with(False, chunked, fresh),
                                 "as Bf16Linear picks": fresh}, args.repeats)
            print(f"{what}: " + "; ".join(f"{w} {t:.1f} ms" for w, t in ms.items()), flush=True)

if __name__ == "__main__":
    main()
