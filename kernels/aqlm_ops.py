"""AQLM weights (additive multi-codebook, e.g. 2x8): y = x Wᵀ + b, W decoded from codes.

AQLM (Egiazarian et al., arXiv 2401.06118) stores each group of 8 inputs of row i as M codes
into M codebooks of K ≤ 256 vectors of length 8, plus one scale per output row:
    W[i, 8j:8j+8] = scales[i] · Σ_k codebooks[k, codes[i, j, k], 0, :]
Tensor layout is the `aqlm` inference package's: codes [m, n/8, M] int8 (-128..127 stand for
0..255: unsigned = codes % 256), codebooks [M, K, 1, 8], scales [m, 1, 1, 1], bias [m] or None.

One signature, three paths, x [..., n] -> y [..., m] in x.dtype:
- `aqlm_decode_matmul_reference`: decode the whole fp32 weight, then matmul (the specification).
- `aqlm_decode_matmul_fast` (torch, CPU): for ≤ SMALL_BATCH tokens the look-up-table GEMV
    1. LUT[t, j, k, c] = x[t, 8j:8j+8] · codebooks[k, c, 0, :]     (one [T·G, 8] x [8, M·K] matmul)
    2. y[t, i] = scales[i] · Σ_{j,k} LUT[t, j, k, codes[i, j, k]]   (gather-sum)
  and for more tokens decode row chunks and matmul. Both run under torch.compile when it works;
  eager otherwise (QUANTGATE_COMPILE=0, or after one failed compile: then decode uses one
  F.embedding_bag, as the `aqlm` package does).
  Nothing is precomputed per weight: the flat LUT index j·M·K + k·K + (code & 0xFF) is built in
  registers from the raw int8 codes inside the compiled gather, so the per-call work is the LUT
  matmul + the gather-sum. A cached int32 index would cost 4x the codes' memory and measured no
  faster.
- `aqlm_decode_matmul_triton` (CUDA): fused in-kernel decode, see `triton_decode.py`.
`aqlm_decode_matmul` dispatches: keyword `impl` > env QUANTGATE_KERNELS > device (CUDA -> triton).

Measured (median per call, 1 thread, this shared 2-core AMD EPYC, M=2, K=256), time / dense fp32
`x @ W.T`: 576->1536: batch 1 3.9x, batch 8 2.5x; 1536->576: batch 1 5.2x, batch 8 2.0x;
4096->4096: batch 1 1.6x (decode+matmul: 2.9x), batch 8 1.5x. The gather-sum does one scalar
load per code (~1 ns each); on small layers dense fp32 runs from cache, on large ones from DRAM,
which is where the LUT pays. From 2 tokens compiled decode (L1-resident codebooks) + matmul wins.
The `aqlm` package's numba GEMV is not used: its prange over input groups races on the shared
output with more than one thread.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from quantgate.kernels.codebook_shapes import GROUP, validate_aqlm
from quantgate.kernels.decode_dispatch import Impl, compiled_or_none, resolve_impl

SMALL_BATCH = 1  # LUT GEMV for one token; from 2 tokens compiled decode+matmul is faster (measured)
CHUNK_WEIGHTS = 1 << 22  # decode at most ~4 Mi weights (16 MiB fp32) at once for many tokens


def aqlm_decode_weight(codes: torch.Tensor, codebooks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """W [m, n] float32 from codes [m, n/8, M] int8, codebooks [M, K, 1, 8], scales [m, 1, 1, 1]."""
    m, groups, num_codebooks = codes.shape
    unsigned = codes.to(torch.int64) % 256  # [m, G, M]
    vectors = codebooks[:, :, 0, :].float()  # [M, K, 8]
    parts = vectors[torch.arange(num_codebooks), unsigned]  # [m, G, M, 8]: codebook k's code
    weight = parts.sum(2) * scales.reshape(m, 1, 1).float()  # [m, G, 8]
    return weight.reshape(m, groups * GROUP)


def aqlm_decode_matmul_reference(
    x: torch.Tensor, codes: torch.Tensor, codebooks: torch.Tensor, scales: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """y [..., m] = x [..., n] @ Wᵀ + bias, computed in fp32, returned in x.dtype."""
    validate_aqlm(x, codes, codebooks, scales, bias)
    y = x.float() @ aqlm_decode_weight(codes, codebooks, scales).T
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


def _lut_gemv(x3: torch.Tensor, codes: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    # x3 [T, G, 8] fp32, codes [m, G, M] int8, vectors [M·K, 8] -> unscaled y [T, m]
    tokens, groups, _ = x3.shape
    num_codebooks = codes.shape[-1]
    size = vectors.shape[0] // num_codebooks
    lut = (x3 @ vectors.float().T).reshape(tokens, -1)  # [T, G·M·K]: LUT[t, j, k, c] flattened
    j = torch.arange(groups, dtype=torch.int32, device=codes.device)
    k = torch.arange(num_codebooks, dtype=torch.int32, device=codes.device)
    offsets = (j[:, None] * num_codebooks + k) * size  # [G, M]: where LUT[·, j, k, 0] starts
    idx = (codes.to(torch.int32) & 0xFF) + offsets  # [m, G, M]
    return lut[:, idx].sum((-1, -2))  # [T, m]


def _decode_rows(codes: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    # codes [r, G, M] int8, vectors [M·K, 8] -> unscaled W rows [r, G·8] fp32
    num_codebooks = codes.shape[-1]
    size = vectors.shape[0] // num_codebooks
    k = torch.arange(num_codebooks, dtype=torch.int32, device=codes.device)
    idx = (codes.to(torch.int32) & 0xFF) + k * size  # [r, G, M]: row of codebook k in `vectors`
    return vectors[idx].float().sum(-2).flatten(1)


def _decode_rows_eager(codes: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    # Same as _decode_rows; eager indexing + sum is ~10x slower than one embedding_bag.
    rows, groups, num_codebooks = codes.shape
    size = vectors.shape[0] // num_codebooks
    k = torch.arange(num_codebooks, dtype=torch.int32, device=codes.device)
    idx = (codes.to(torch.int32) & 0xFF) + k * size  # [r, G, M]
    return F.embedding_bag(idx.reshape(-1, num_codebooks), vectors.float(), mode="sum").reshape(rows, -1)


_LUT_GEMV = compiled_or_none(_lut_gemv)
_DECODE_ROWS = compiled_or_none(_decode_rows)


def _decode_matmul(x2: torch.Tensor, codes: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    # x2 [T, n] fp32 -> unscaled [T, m]; row chunks bound the fp32 weight held at once.
    m, groups, _ = codes.shape
    rows_per_chunk = max(1, CHUNK_WEIGHTS // (groups * GROUP))
    out = x2.new_empty(x2.shape[0], m)  # [T, m]
    for r0 in range(0, m, rows_per_chunk):
        chunk = codes[r0:r0 + rows_per_chunk]  # [r, G, M]
        w = _DECODE_ROWS(chunk, vectors)
        if w is None:
            w = _decode_rows_eager(chunk, vectors)
        out[:, r0:r0 + chunk.shape[0]] = x2 @ w.T
    return out


def aqlm_decode_matmul_fast(
    x: torch.Tensor, codes: torch.Tensor, codebooks: torch.Tensor, scales: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Same as the reference; CPU-tuned (see the module docstring for the measured choice)."""
    validate_aqlm(x, codes, codebooks, scales, bias)
    m, groups, _ = codes.shape
    n = x.shape[-1]
    vectors = codebooks.reshape(-1, GROUP)  # [M·K, 8], a view of a contiguous [M, K, 1, 8]
    x2 = x.reshape(-1, n).float()  # [T, n]
    if x2.shape[0] == 0:
        y = x2.new_zeros(0, m)
    elif x2.shape[0] <= SMALL_BATCH:
        x3 = x2.reshape(-1, groups, GROUP)
        y = _LUT_GEMV(x3, codes, vectors)
        if y is None:
            y = _lut_gemv(x3, codes, vectors)
    else:
        y = _decode_matmul(x2, codes, vectors)
    y = y * scales.reshape(1, m).float()
    if bias is not None:
        y = y + bias.float()
    return y.reshape(*x.shape[:-1], m).to(x.dtype)


def aqlm_decode_matmul(
    x: torch.Tensor, codes: torch.Tensor, codebooks: torch.Tensor, scales: torch.Tensor,
    bias: torch.Tensor | None = None, *, impl: Impl | None = None,
) -> torch.Tensor:
    """y [..., m] = x [..., n] @ Wᵀ + bias by the path `resolve_impl` picks."""
    choice = resolve_impl(impl, x)
    if choice == "triton":
        from quantgate.kernels.triton_decode import aqlm_decode_matmul_triton  # imports triton

        return aqlm_decode_matmul_triton(x, codes, codebooks, scales, bias)
    if choice == "reference":
        return aqlm_decode_matmul_reference(x, codes, codebooks, scales, bias)
    return aqlm_decode_matmul_fast(x, codes, codebooks, scales, bias)
