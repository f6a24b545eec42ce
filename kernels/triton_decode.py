"""Triton fused decode-matmul for QuIP# E8P (arXiv 2402.04396) and AQLM (arXiv 2401.06118) weights.

Each kernel computes y [T, m] = x [T, n] @ Wᵀ without materializing W: a program owns BLOCK_M
output rows × BLOCK_T tokens, walks its share of the inputs BLOCK_K at a time, and per tile
  1. loads the codes of its [BLOCK_M, BLOCK_K] weight tile (one code per 8 inputs; the 8 lanes
     of a group load the same address, which the GPU serves as one broadcast),
  2. gathers the codebook entries into registers (E8P: one [65536, 8] row; AQLM: the sum of M
     codebook rows, scaled per output row at the end),
  3. multiply-accumulates in fp32 with the x tile: a broadcast-multiply-sum for ≤ 4 tokens
     (decode: memory-bound, no padding to the 16-row minimum of tl.dot), tl.dot otherwise.
Grid: (cdiv(m, BLOCK_M), cdiv(T, BLOCK_T), split_k); masks cover ragged m, n and T. Few
programs would idle most SMs at batch 1 (m = 576 gives 9 row blocks), so the inputs are split
across programs; each split writes fp32 partial sums [split_k, T, m] that torch adds afterwards
(deterministic, no atomics).

Semantics are those of `quip_ops.e8p_decode_matmul_reference` and
`aqlm_ops.aqlm_decode_matmul_reference`. fp32 x uses IEEE fp32 dots, as the reference does;
bf16/fp16 x is upcast in-kernel and uses TF32 tensor-core dots (10 mantissa bits: no less
precise than the x they came from). Block sizes target an H100/H200 and are not yet tuned on one.

This module imports triton: the dispatchers import it only for CUDA tensors or when forced.
Under TRITON_INTERPRET=1 (set before this import) the kernels run on CPU tensors: the
interpreter copies each argument's storage to host memory (a no-op for CPU tensors), runs every
program in numpy, and copies back. Its tl.dot multiplies bf16 as raw uint16 bits (triton
3.7.1), which is one more reason the kernels only ever dot fp32 values.
"""

from __future__ import annotations

import contextlib
import os

import torch
import triton
import triton.language as tl

from quantgate.kernels.codebook_shapes import validate_aqlm, validate_e8p

GEMV_MAX_TOKENS = 4  # up to this many tokens: broadcast-multiply-sum instead of tl.dot
BLOCK_M = 64
PROGRAMS_PER_SM = 2  # split the inputs until the grid has about this many programs per SM


@triton.jit
def _e8p_kernel(
    x_ptr, q_ptr, cb_ptr, out_ptr,  # x [T, n], qidx [m, n/8] int16, codebook [65536, 8], out [S, T, m]
    num_tokens, num_rows, num_inputs, tiles_per_split,
    BLOCK_T: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
    USE_DOT: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    pid_m, pid_t, pid_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    toks = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)  # [BLOCK_T]
    row_ok, tok_ok = rows < num_rows, toks < num_tokens
    groups = num_inputs // 8
    acc = tl.zeros((BLOCK_T, BLOCK_M), dtype=tl.float32)
    for it in range(0, tiles_per_split):
        cols = (pid_k * tiles_per_split + it) * BLOCK_K + tl.arange(0, BLOCK_K)  # [BLOCK_K]
        col_ok = cols < num_inputs
        w_ok = row_ok[:, None] & col_ok[None, :]
        q = tl.load(q_ptr + rows[:, None] * groups + cols[None, :] // 8, mask=w_ok, other=0)
        code = q.to(tl.int32) & 0xFFFF  # int16 → unsigned 16-bit index
        w = tl.load(cb_ptr + code * 8 + cols[None, :] % 8, mask=w_ok, other=0.0).to(tl.float32)
        xt = tl.load(x_ptr + toks[:, None] * num_inputs + cols[None, :],
                     mask=tok_ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)  # [BLOCK_T, BLOCK_K]
        if USE_DOT:
            acc += tl.dot(xt, tl.trans(w), input_precision=DOT_PRECISION)
        else:
            acc += tl.sum(xt[:, None, :] * w[None, :, :], axis=2)
    out = out_ptr + pid_k * num_tokens * num_rows + toks[:, None] * num_rows + rows[None, :]
    tl.store(out, acc, mask=tok_ok[:, None] & row_ok[None, :])


@triton.jit
def _aqlm_kernel(
    x_ptr, codes_ptr, cb_ptr, scales_ptr, out_ptr,  # codes [m, n/8, M] int8, codebooks [M, K, 1, 8]
    num_tokens, num_rows, num_inputs, codebook_size, tiles_per_split,
    NUM_CODEBOOKS: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
    USE_DOT: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    pid_m, pid_t, pid_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    toks = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)  # [BLOCK_T]
    row_ok, tok_ok = rows < num_rows, toks < num_tokens
    groups = num_inputs // 8
    acc = tl.zeros((BLOCK_T, BLOCK_M), dtype=tl.float32)
    for it in range(0, tiles_per_split):
        cols = (pid_k * tiles_per_split + it) * BLOCK_K + tl.arange(0, BLOCK_K)  # [BLOCK_K]
        col_ok = cols < num_inputs
        w_ok = row_ok[:, None] & col_ok[None, :]
        code_ptrs = codes_ptr + (rows[:, None] * groups + cols[None, :] // 8) * NUM_CODEBOOKS
        w = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
        for k in tl.static_range(NUM_CODEBOOKS):  # W = Σ_k codebook_k[code_k]
            code = tl.load(code_ptrs + k, mask=w_ok, other=0).to(tl.int32) & 0xFF  # int8 → 0..255
            w += tl.load(cb_ptr + (k * codebook_size + code) * 8 + cols[None, :] % 8,
                         mask=w_ok, other=0.0).to(tl.float32)
        xt = tl.load(x_ptr + toks[:, None] * num_inputs + cols[None, :],
                     mask=tok_ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)  # [BLOCK_T, BLOCK_K]
        if USE_DOT:
            acc += tl.dot(xt, tl.trans(w), input_precision=DOT_PRECISION)
        else:
            acc += tl.sum(xt[:, None, :] * w[None, :, :], axis=2)
    scale = tl.load(scales_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)  # [BLOCK_M]
    out = out_ptr + pid_k * num_tokens * num_rows + toks[:, None] * num_rows + rows[None, :]
    tl.store(out, acc * scale[None, :], mask=tok_ok[:, None] & row_ok[None, :])


def _tiling(tokens: int, m: int, n: int, device: torch.device, split_k: int | None) -> dict[str, int]:
    """Block sizes and the input split for T tokens and an [m, n] weight."""
    # Sizes checked by compiling for sm_90a with ptxas -v (no GPU run yet): no register spills.
    if tokens <= GEMV_MAX_TOKENS:
        # The [BLOCK_T, BLOCK_M, BLOCK_K] product stays at 4096 fp32 (~160 registers at 4 warps
        # with the pipelined loads; BLOCK_K = 128 at T = 1 took 247).
        block_t = triton.next_power_of_2(tokens)
        block_k, use_dot, warps = 64 // block_t, False, 4
    else:
        # 4 warps spill at BLOCK_T = 64 (255 registers); 8 warps stay under ~200.
        block_t, block_k, use_dot, warps = min(64, max(16, triton.next_power_of_2(tokens))), 64, True, 8
    k_tiles = triton.cdiv(n, block_k)
    if split_k is None:
        split_k = 1
        if device.type == "cuda":
            programs = triton.cdiv(m, BLOCK_M) * triton.cdiv(tokens, block_t)
            sms = torch.cuda.get_device_properties(device).multi_processor_count
            split_k = triton.cdiv(PROGRAMS_PER_SM * sms, programs)
    tiles_per_split = triton.cdiv(k_tiles, max(1, min(split_k, k_tiles)))
    return {"BLOCK_T": block_t, "BLOCK_K": block_k, "USE_DOT": use_dot, "num_warps": warps,
            "tiles_per_split": tiles_per_split, "split_k": triton.cdiv(k_tiles, tiles_per_split)}


def _launch(kernel: triton.JITFunction, x: torch.Tensor, m: int, split_k: int | None,
            **args: torch.Tensor | int) -> torch.Tensor:
    """Run `kernel` on x [..., n] for m output rows; returns fp32 y [T, m]."""
    if not x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError("the Triton kernels need CUDA tensors (or TRITON_INTERPRET=1 set before import)")
    x2 = x.reshape(-1, x.shape[-1]).contiguous()  # [T, n], any float dtype: upcast in-kernel
    tokens, n = x2.shape
    if tokens == 0:
        return x2.new_zeros(0, m, dtype=torch.float32)
    tiling = _tiling(tokens, m, n, x2.device, split_k)
    splits = tiling.pop("split_k")
    partial = torch.empty(splits, tokens, m, dtype=torch.float32, device=x2.device)  # [S, T, m]
    grid = (triton.cdiv(m, BLOCK_M), triton.cdiv(tokens, tiling["BLOCK_T"]), splits)
    # fp32 x: IEEE dots to match the reference; bf16/fp16 x: TF32 is as precise as x itself.
    precision = "ieee" if x.dtype == torch.float32 else "tf32"
    # Triton launches on the current CUDA device: make it x's (a no-op for interpreted CPU tensors).
    with torch.cuda.device(x2.device) if x2.is_cuda else contextlib.nullcontext():
        kernel[grid](x_ptr=x2, out_ptr=partial, num_tokens=tokens, num_rows=m, num_inputs=n,
                     BLOCK_M=BLOCK_M, DOT_PRECISION=precision, **args, **tiling)
    return partial.sum(0) if splits > 1 else partial[0]


def e8p_decode_matmul_triton(
    x: torch.Tensor, qidx: torch.Tensor, codebook: torch.Tensor, *, split_k: int | None = None
) -> torch.Tensor:
    """y [..., m] = x [..., n] @ W̃ᵀ, W̃ decoded in-kernel; `split_k` overrides the input split."""
    validate_e8p(x, qidx, codebook)
    m = qidx.shape[0]
    y = _launch(_e8p_kernel, x, m, split_k, q_ptr=qidx.contiguous(), cb_ptr=codebook.contiguous())
    return y.reshape(*x.shape[:-1], m).to(x.dtype)


def aqlm_decode_matmul_triton(
    x: torch.Tensor, codes: torch.Tensor, codebooks: torch.Tensor, scales: torch.Tensor,
    bias: torch.Tensor | None = None, *, split_k: int | None = None,
) -> torch.Tensor:
    """y [..., m] = x [..., n] @ Wᵀ + bias, W decoded in-kernel; `split_k` overrides the input split."""
    validate_aqlm(x, codes, codebooks, scales, bias)
    m, _, num_codebooks = codes.shape
    y = _launch(_aqlm_kernel, x, m, split_k, codes_ptr=codes.contiguous(), cb_ptr=codebooks.contiguous(),
                scales_ptr=scales.reshape(m).contiguous(), codebook_size=codebooks.shape[1],
                NUM_CODEBOOKS=num_codebooks)
    if bias is not None:
        y = y + bias.float()
    return y.reshape(*x.shape[:-1], m).to(x.dtype)
