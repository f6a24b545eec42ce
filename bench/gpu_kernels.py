"""The 2-bit decode kernels over layer widths on one device: parity with the PyTorch reference, and
time against the dense matmul on the decoded weight (issue 14: at which widths does 2-bit decode pay).

    python bench/gpu_kernels.py [--device cuda|cpu] [--out gpu_kernels.json]

On CUDA the kernel path is Triton (`impl="triton"`) and the dense side is bf16 `x @ W.T` (cuBLAS), both
fed bf16 activations as in the model's decode (the 2026-12-04 run fed the kernels fp32 and the dense
side fp16: see the README); times are CUDA-event medians. On CPU (the dry run) the fast path stands
in and everything is fp32. Parity: against the reference on the same activations in fp32.
Random codes and codebooks: speed and parity depend on the shapes, not on trained values.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

from quantgate.kernels.aqlm_ops import aqlm_decode_matmul, aqlm_decode_matmul_reference, aqlm_decode_weight
from quantgate.kernels.quip_ops import e8p_decode_matmul, e8p_decode_matmul_reference, e8p_decode_weight

SHAPES = ((576, 576), (576, 1536), (1536, 576), (2048, 2048), (4096, 4096), (4096, 11008), (8192, 8192))


def median_ms(fn: Callable[[], object], reps: int, device: str) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))


@torch.no_grad()
def sweep(device: str, reps: int, shapes=SHAPES, tokens=(1, 32)) -> list[dict[str, object]]:
    impl = "triton" if device == "cuda" else "fast"
    dense_dtype = torch.bfloat16 if device == "cuda" else torch.float32
    gen = torch.Generator().manual_seed(0)
    rows = []
    for n, m in shapes:
        qidx = torch.randint(-(1 << 15), 1 << 15, (m, n // 8), dtype=torch.int16, generator=gen).to(device)
        e8p_table = torch.randn(1 << 16, 8, generator=gen).to(device)
        unsigned = torch.randint(0, 256, (m, n // 8, 2), generator=gen)
        codes = torch.where(unsigned > 127, unsigned - 256, unsigned).to(torch.int8).to(device)
        codebooks = torch.randn(2, 256, 1, 8, generator=gen).to(device)
        scales = (torch.rand(m, 1, 1, 1, generator=gen) + 0.5).to(device)
        dense = {"quip": e8p_decode_weight(qidx, e8p_table).to(dense_dtype),
                 "aqlm": aqlm_decode_weight(codes, codebooks, scales).to(dense_dtype)}
        for t in tokens:
            x = torch.randn(t, n, generator=gen).to(device, dense_dtype)
            kernels = {"quip": (partial(e8p_decode_matmul, x, qidx, e8p_table, impl=impl),
                                partial(e8p_decode_matmul_reference, x.float(), qidx, e8p_table)),
                       "aqlm": (partial(aqlm_decode_matmul, x, codes, codebooks, scales, impl=impl),
                                partial(aqlm_decode_matmul_reference, x.float(), codes, codebooks, scales))}
            for name, (fast, ref) in kernels.items():
                w = dense[name]
                kernel_ms = median_ms(fast, reps, device)
                dense_ms = median_ms(partial(torch.matmul, x, w.T), reps, device)
                rows.append({"method": name, "in": n, "out": m, "tokens": t, "impl": impl,
                             "rel_err_vs_reference": _rel(fast(), ref()),
                             "kernel_ms": round(kernel_ms, 4), "dense_ms": round(dense_ms, 4),
                             "dense_over_kernel": round(dense_ms / kernel_ms, 3)})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", type=Path, default=Path("gpu_kernels.json"))
    args = ap.parse_args()
    shapes = SHAPES if args.device == "cuda" else SHAPES[:3]  # the CPU dry run: SmolLM2's widths only
    args.out.write_text(json.dumps(sweep(args.device, args.reps, shapes), indent=1))


if __name__ == "__main__":
    main()
