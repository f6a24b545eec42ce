"""QuIP# E8P weights: y = x W̃ᵀ, with W̃ decoded from 16-bit codebook indices.

QuIP# (Tseng et al., arXiv 2402.04396) stores the incoherence-rotated weight W̃ [m, n] as one
16-bit index per group of 8 inputs into the E8P codebook (2 bits per weight):
    W̃[i, 8j:8j+8] = codebook[qidx[i, j] & 0xFFFF]      (qidx is int16, read as unsigned)
The codebook arrives as an opaque [65536, 8] table built elsewhere, so no lattice structure is
visible here: every path is a gather over that table. The Hadamard rotations and the scale that
turn W̃ back into W are the caller's (REFERENCE.md, QuIP# step 7).

One signature, three paths, x [..., n] -> y [..., m] in x.dtype:
- `e8p_decode_matmul_reference`: decode the whole fp32 weight, then matmul (the specification).
- `e8p_decode_matmul_fast` (torch, CPU): ≤ SMALL_BATCH tokens: a gather-dot under torch.compile
  that never materializes W̃; more tokens: decode row chunks (compiled gather) and matmul.
  Without torch.compile (QUANTGATE_COMPILE=0, or after one failed compile) it decodes with
  F.embedding and matmuls for every batch size. Nothing is cached per weight.
- `e8p_decode_matmul_triton` (CUDA): fused in-kernel gather, see `triton_decode.py`.
`e8p_decode_matmul` dispatches: keyword `impl` > env QUANTGATE_KERNELS > device (CUDA -> triton).

Measured (median per call, 1 thread, this shared 2-core AMD EPYC), time / dense fp32 `x @ W.T`:
  576->1536: batch 1 2.5x, batch 8 2.2x;  1536->576: batch 1 3.1x, batch 8 2.2x;
  4096->4096: batch 1 1.0x, batch 8 2.0x.
Small layers' fp32 weights sit in cache, so dense is hard to beat there; the gather of 32-byte
rows from a 2 MiB table (no lattice structure to exploit) sets the cost. Eager decode+matmul at
batch 1 is 7-10x. Two threads: 1.6-2.1x at batch 1 when the other core is free; when a
co-tenant holds it, every OpenMP region (compiled kernels, and dense at batch 8) stalls 4-16 ms.

Path choice and the compile fallback live in `decode_dispatch.py`, input checks in `codebook_shapes.py`.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from quantgate.kernels.codebook_shapes import GROUP, validate_e8p
from quantgate.kernels.decode_dispatch import (  # noqa: F401 - COMPILE_ENV, KERNELS_ENV: the overrides
    COMPILE_ENV,
    KERNELS_ENV,
    Impl,
    compiled_or_none,
    resolve_impl,
)

SMALL_BATCH = 2  # up to this many tokens the fused gather-dot beats decode+matmul (measured)
CHUNK_WEIGHTS = 1 << 22  # decode at most ~4 Mi weights (16 MiB fp32) at once for many tokens


# ---- E8P ----------------------------------------------------------------------------------------


def _unsigned(qidx: torch.Tensor) -> torch.Tensor:
    return qidx.to(torch.int32) & 0xFFFF  # int16 -32768..-1 are indices 32768..65535


def e8p_decode_weight(qidx: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
    """W̃ [m, n] float32 from qidx [m, n/8] int16 and codebook [65536, 8]."""
    m, groups = qidx.shape
    rows = codebook.float()[_unsigned(qidx).long()]  # [m, n/8, 8]
    return rows.reshape(m, groups * GROUP)


def e8p_decode_matmul_reference(x: torch.Tensor, qidx: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
    """y [..., m] = x [..., n] @ W̃ᵀ, computed in fp32, returned in x.dtype."""
    validate_e8p(x, qidx, codebook)
    return (x.float() @ e8p_decode_weight(qidx, codebook).T).to(x.dtype)


def _gather_dot(x3: torch.Tensor, idx: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    # x3 [T, G, 8], idx [m, G] int32 (unsigned), table [65536, 8] -> [T, m]. Under inductor the
    # gather fuses into the reduction: each 32-byte row is read and used, W̃ never exists.
    rows = table[idx].float()  # [m, G, 8]
    return (x3.unsqueeze(1) * rows.unsqueeze(0)).sum((-1, -2))


def _gather_dot_pairs(x4: torch.Tensor, pairs: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    # x4 [T, G/2, 2, 8], pairs [m, G/2] int32 = qidx viewed two int16 at a time (little-endian:
    # low half is the even group). Inductor does not vectorize int16 loads (measured 10x slower
    # than int32), and this view avoids both an int32 copy per call and a cached one.
    even = table[pairs & 0xFFFF].float()  # [m, G/2, 8]
    odd = table[(pairs >> 16) & 0xFFFF].float()  # [m, G/2, 8]
    return ((x4[:, None, :, 0] * even[None]).sum((-1, -2))
            + (x4[:, None, :, 1] * odd[None]).sum((-1, -2)))


_GATHER_DOT = compiled_or_none(_gather_dot)
_GATHER_DOT_PAIRS = compiled_or_none(_gather_dot_pairs)


def _pairs_ok(qidx: torch.Tensor) -> bool:
    """Can qidx [m, G] be read as int32 [m, G/2] pairs (even G, contiguous rows, little-endian)?"""
    return qidx.shape[1] % 2 == 0 and qidx.is_contiguous() and sys.byteorder == "little"


def _small_batch(x2: torch.Tensor, qidx: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor | None:
    tokens, n = x2.shape
    groups = n // GROUP
    if _pairs_ok(qidx):
        pairs = qidx.view(torch.int32)  # [m, G/2]
        return _GATHER_DOT_PAIRS(x2.reshape(tokens, groups // 2, 2, GROUP), pairs, codebook)
    return _GATHER_DOT(x2.reshape(tokens, groups, GROUP), _unsigned(qidx), codebook)


def _decode_pairs(pairs: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    # pairs [r, G/2] int32 (two int16 indices, as above) -> W̃ rows [r, G·8] fp32
    rows = torch.stack([table[pairs & 0xFFFF], table[(pairs >> 16) & 0xFFFF]], dim=2)  # [r, G/2, 2, 8]
    return rows.float().flatten(1)


def _decode_rows(idx: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    # idx [r, G] int32 (unsigned) -> W̃ rows [r, G·8] fp32
    return table[idx].float().flatten(1)


_DECODE_PAIRS = compiled_or_none(_decode_pairs)
_DECODE_ROWS = compiled_or_none(_decode_rows)


def _decode_chunk(qidx: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
    # qidx [r, G] int16 -> W̃ rows [r, G·8] fp32; compiled runs ~2.2x faster than F.embedding here.
    if _pairs_ok(qidx):
        w = _DECODE_PAIRS(qidx.view(torch.int32), codebook)
        if w is not None:
            return w
    idx = _unsigned(qidx)  # [r, G]
    w = _DECODE_ROWS(idx, codebook)
    return w if w is not None else F.embedding(idx, codebook).float().flatten(1)


def _decode_matmul(x2: torch.Tensor, qidx: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
    # x2 [T, n] fp32 -> [T, m]: decode row chunks so a huge layer never holds its full fp32 W̃.
    m, groups = qidx.shape
    rows_per_chunk = max(1, CHUNK_WEIGHTS // (groups * GROUP))
    out = x2.new_empty(x2.shape[0], m)  # [T, m]
    for r0 in range(0, m, rows_per_chunk):
        chunk = qidx[r0:r0 + rows_per_chunk]  # [r, G]
        out[:, r0:r0 + chunk.shape[0]] = x2 @ _decode_chunk(chunk, codebook).T
    return out


def e8p_decode_matmul_fast(x: torch.Tensor, qidx: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
    """Same as the reference; CPU-tuned (see the module docstring for the measured choice)."""
    validate_e8p(x, qidx, codebook)
    m, n = qidx.shape[0], x.shape[-1]
    x2 = x.reshape(-1, n).float()  # [T, n]
    y = x2.new_zeros(0, m) if x2.shape[0] == 0 else None
    if y is None and x2.shape[0] <= SMALL_BATCH:
        y = _small_batch(x2, qidx, codebook)
    if y is None:
        y = _decode_matmul(x2, qidx, codebook)
    return y.reshape(*x.shape[:-1], m).to(x.dtype)


def e8p_decode_matmul(
    x: torch.Tensor, qidx: torch.Tensor, codebook: torch.Tensor, *, impl: Impl | None = None
) -> torch.Tensor:
    """y [..., m] = x [..., n] @ W̃ᵀ by the path `resolve_impl` picks."""
    choice = resolve_impl(impl, x)
    if choice == "triton":
        from quantgate.kernels.triton_decode import e8p_decode_matmul_triton  # imports triton

        return e8p_decode_matmul_triton(x, qidx, codebook)
    if choice == "reference":
        return e8p_decode_matmul_reference(x, qidx, codebook)
    return e8p_decode_matmul_fast(x, qidx, codebook)
