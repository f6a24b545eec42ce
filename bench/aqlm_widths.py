"""AQLM 2x8 decode at batch 1 on CPU against dense fp32, over layer widths: where (if anywhere) the
look-up-table GEMV beats the dense matmul (issue 14: measure 576 -> 4096).

Both sides run interleaved in one process (this machine is shared: ratios, not absolute times):
the LUT GEMV (`aqlm_decode_matmul_fast`, one token), and `x @ W.T` on the decoded fp32 weight.

    .venv/bin/python bench/aqlm_widths.py --threads 1 --reps 200
"""

from __future__ import annotations

import argparse
import json

import torch
from gpu_kernels import median_ms  # bench/ is on sys.path: this script runs from there

from quantgate.kernels.aqlm_ops import aqlm_decode_matmul_fast, aqlm_decode_weight

SHAPES = ((576, 576), (576, 1536), (1536, 576), (1024, 1024), (2048, 2048), (2048, 5632), (4096, 4096),
          (4096, 11008), (8192, 8192))  # (in, out): SmolLM2's, then Llama-1B/7B-like, one past 4096


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=100)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    for n, m in SHAPES:
        codes = torch.randint(-128, 128, (m, n // 8, 2), dtype=torch.int8, generator=gen)
        codebooks = torch.randn(2, 256, 1, 8, generator=gen)
        scales = torch.rand(m, 1, 1, 1, generator=gen) + 0.5
        weight = aqlm_decode_weight(codes, codebooks, scales)
        x = torch.randn(1, n, generator=gen)
        torch.testing.assert_close(aqlm_decode_matmul_fast(x, codes, codebooks, scales), x @ weight.T,
                                   rtol=1e-3, atol=1e-3)
        lut = median_ms(lambda x=x, c=codes, b=codebooks, s=scales: aqlm_decode_matmul_fast(x, c, b, s),
                        args.reps, "cpu")
        dense = median_ms(lambda x=x, w=weight: x @ w.T, args.reps, "cpu")
        print(json.dumps({"in": n, "out": m, "lut_us": round(lut * 1e3, 1), "dense_us": round(dense * 1e3, 1),
                          "lut_over_dense": round(lut / dense, 2), "threads": args.threads}), flush=True)


if __name__ == "__main__":
    main()
