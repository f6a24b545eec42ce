"""A dequantized FP8 variant's multi-token bf16 Linears on CPU: torch's bf16 GEMM against fp32 on
the weight upcast a block of rows at a time, per layer by token count, then on the whole model.

Per layer: each of the variant's Linear shapes at 2 to 64 tokens, which path is faster and which
one `kernels/bf16_cpu.Bf16Linear` picks at this thread count. Whole model: prefill of a 55-token
prompt (logits at its last position, as serving takes them) and one decode step after 32-token
prompts at batch 2 and 8, through `load_for_speed`, three ways: torch's bf16 GEMM (oneDNN's where it
has bf16 kernels, torch's fallback where it has none: AVX2-only CPUs), fp32 on the whole weight
upcast per call, and fp32 by row blocks; and the fp32 baseline. The ways alternate call by call
(medians of `--repeats` after 3 warm-ups), so a shared machine's drift lands on all of them alike.
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


def interleaved_ms(ways: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median ms per way, the ways called in turn: a load change hits every way, not one."""
    times: dict[str, list[float]] = {w: [] for w in ways}
    for r in range(3 + repeats):
        for way, fn in ways.items():
            t0 = time.perf_counter()
            fn()
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


def per_layer(model: torch.nn.Module, repeats: int) -> None:
    shapes = {(m.in_features, m.out_features): m.weight
              for m in model.modules() if isinstance(m, bf16_cpu.Bf16Linear)}
    print("per layer: bf16 GEMM and fp32 by row blocks (ms), bf16's time over fp32's, Bf16Linear's pick")
    for (k, n), weight in sorted(shapes.items()):
        for tokens in (2, 4, 8, 12, 16, 64):
            x = torch.randn(tokens, k, dtype=torch.bfloat16)
            ms = interleaved_ms({"bf16": partial(torch.nn.functional.linear, x, weight),
                                 "fp32": partial(bf16_cpu.fp32_linear_chunked, x, weight, None)}, repeats)
            faster = min(ms, key=ms.get)
            pick = "fp32" if bf16_cpu.fp32_pays(tokens) else "bf16"
            print(f"  {k:5d} -> {n:5d} {tokens:3d} tokens  bf16 {ms['bf16']:8.3f}  fp32 {ms['fp32']:8.3f}  "
                  f"x{ms['bf16'] / ms['fp32']:4.2f}  faster {faster}  picks {pick}"
                  f"{'' if pick == faster else '  <- the other'}", flush=True)


def _call(model, what: str) -> Callable[[], object]:
    """One prefill of the 55-token prompt, or one decode step after 32-token prompts at a batch."""
    gen = torch.Generator().manual_seed(0)
    if what.startswith("prefill"):
        prompt = torch.randint(100, 40000, (1, 55), generator=gen)
        return lambda: model(input_ids=prompt, use_cache=True, logits_to_keep=1)
    prompts = torch.randint(100, 40000, (int(what.rsplit(" ", 1)[1]), 32), generator=gen)
    out = model(input_ids=prompts, use_cache=True, logits_to_keep=1)
    nxt = out.logits[:, -1:].argmax(-1)
    return lambda: model(input_ids=nxt, past_key_values=copy.deepcopy(out.past_key_values),
                         use_cache=True, logits_to_keep=1)


def _with(use_bf16_gemm: bool, fp32_path, fn):
    """`fn` with every multi-token call of the variant on the path named."""
    def run():
        saved = bf16_cpu.ONEDNN_BF16, bf16_cpu.fp32_linear_chunked, bf16_cpu.fp32_pays
        bf16_cpu.ONEDNN_BF16, bf16_cpu.fp32_linear_chunked = use_bf16_gemm, fp32_path
        bf16_cpu.fp32_pays = lambda tokens: True
        try:
            return fn()
        finally:
            bf16_cpu.ONEDNN_BF16, bf16_cpu.fp32_linear_chunked, bf16_cpu.fp32_pays = saved
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state-dir", type=Path, default=Path(".quantgate"))
    ap.add_argument("--variant", default="fp8_w8a8", help="a variant whose Linears run in bf16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"oneDNN has bf16 kernels here: {bf16_cpu.ONEDNN_BF16}; {args.threads} thread(s)")
    base, _ = load_for_speed(str(_one(args.state_dir, "models/*")))
    variant, _ = load_for_speed(str(_one(args.state_dir, f"variants/{args.variant}-*")))
    chunked, v = bf16_cpu.fp32_linear_chunked, args.variant
    with torch.inference_mode():
        per_layer(variant, args.repeats)
        for what in ("prefill 55 tokens", "decode step, batch 2", "decode step, batch 8"):
            step = _call(variant, what)
            ms = interleaved_ms({"baseline fp32": _call(base, what),
                                 f"{v}, bf16 GEMM": _with(True, chunked, step),
                                 f"{v}, fp32 whole upcast": _with(False, _whole_upcast, step),
                                 f"{v}, fp32 by row blocks": _with(False, chunked, step),
                                 f"{v}, as Bf16Linear picks": step}, args.repeats)
            print(f"{what}: " + ", ".join(f"{w} {t:.1f} ms" for w, t in ms.items()), flush=True)


if __name__ == "__main__":
    main()
