"""Group-wise int4 weights on CPU through torch's packed-int4 matmul (bf16 activations).

Kernel: `aten._weight_int4pack_mm_for_cpu(x, packed, group, scales_and_zeros)`, weights packed by
`aten._convert_weight_to_int4pack_for_cpu(codes int32 [N, K], 1)`. Verified on torch 2.13.0 CPU
(random codes, identity inputs, candidate formulas compared; exact to the last bf16 bit):
    W[n, k] = (code[n, k] − 8) · scale[k // g, n] + zero[k // g, n],   code ∈ 0..15,
computed in fp32 from the bf16 scale/zero, accumulated in fp32, rounded once to bf16 at the output.
`scales_and_zeros` is [K/g, N, 2] (…, 0 scale, …, 1 zero), in the activations' dtype. Constraints
(the kernel's own checks): g ∈ {32, 64, 128, 256}, K % g == 0, N % 16 == 0 (we pad N with zero
rows and slice the output), codes int32, x contiguous. x, scales and output share one dtype: only
bf16 is fast (fp32 is exact but ~20x slower than dense fp32; fp16 ~30x slower than bf16). The byte
layout depends on the CPU build (AVX-512 interleaves 4 lanes of 16 rows; AVX2 and scalar builds
differ), so the reference never hard-codes it: `_nibble_source` asks the packer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F

GROUPS = (32, 64, 128, 256)
N_MULTIPLE = 16
_INT4_MM = torch.ops.aten._weight_int4pack_mm_for_cpu.default


@dataclass(frozen=True)
class Int4Weight:
    packed: torch.Tensor  # uint8 [N_pad, K/2], torch's CPU int4pack layout
    scales_and_zeros: torch.Tensor  # bf16 [K/g, N_pad, 2]
    group: int
    out_features: int  # N, before padding to a multiple of 16
    in_features: int  # K
    bias: torch.Tensor | None = None  # [N]


def pack_int4(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group: int,
              bias: torch.Tensor | None = None) -> Int4Weight:
    """codes [N, K] in 0..15, scales/zeros [N, K/g]: W = (code − 8)·scale + zero, scale/zero rounded
    to bf16 (8 significant bits: a zero of −zp·scale, |zp| ≤ 8, moves by ≤ scale/32)."""
    n, k = codes.shape
    if group not in GROUPS:
        raise ValueError(f"group={group}: the CPU int4 kernel supports groups {GROUPS}")
    if k % group:
        raise ValueError(f"in_features={k} is not a multiple of group={group}")
    if scales.shape != (n, k // group) or zeros.shape != (n, k // group):
        raise ValueError(f"scales, zeros must be [{n}, {k // group}]: {scales.shape}, {zeros.shape}")
    codes = codes.to(torch.int32)
    if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) > 15):
        raise ValueError("codes must lie in 0..15")
    pad = -n % N_MULTIPLE  # padded rows: code 8, scale 0, zero 0 -> exact zeros, sliced off
    codes = F.pad(codes, (0, 0, 0, pad), value=8)
    sz = torch.stack([F.pad(scales.float(), (0, 0, 0, pad)), F.pad(zeros.float(), (0, 0, 0, pad))], -1)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.contiguous(), 1)
    return Int4Weight(packed, sz.transpose(0, 1).to(torch.bfloat16).contiguous(), group, n, k,
                      None if bias is None else bias.detach().clone())


@lru_cache(maxsize=64)
def _nibble_source(n: int, k: int) -> torch.Tensor:
    """[n·k] int64: for nibble j of the packed bytes (byte j//2, low nibble first), the flat index
    row·k + col of the code it holds. Found by packing the index itself, 4 bits at a time."""
    idx = torch.arange(n * k, dtype=torch.int64).view(n, k)
    src, shift = torch.zeros(n * k, dtype=torch.int64), 0
    while (n * k - 1) >> shift:
        p = torch.ops.aten._convert_weight_to_int4pack_for_cpu(((idx >> shift) & 15).to(torch.int32), 1)
        src |= torch.stack([p & 15, p >> 4], -1).reshape(-1).long() << shift
        shift += 4
    return src


def unpack_codes(w: Int4Weight) -> torch.Tensor:
    """The codes [N, K] (uint8, 0..15) held in w.packed."""
    n_pad, k = w.packed.shape[0], w.in_features
    nibbles = torch.stack([w.packed & 15, w.packed >> 4], -1).reshape(-1)
    codes = torch.empty(n_pad * k, dtype=torch.uint8)
    codes[_nibble_source(n_pad, k)] = nibbles
    return codes.view(n_pad, k)[: w.out_features]


def dequantize(w: Int4Weight) -> torch.Tensor:
    """W [N, K] float32 by the kernel's formula (the readable specification)."""
    n = w.out_features
    scale = w.scales_and_zeros[:, :n, 0].float().T.repeat_interleave(w.group, dim=1)  # [N, K]
    zero = w.scales_and_zeros[:, :n, 1].float().T.repeat_interleave(w.group, dim=1)
    return (unpack_codes(w).float() - 8) * scale + zero


def int4_linear_reference(x: torch.Tensor, w: Int4Weight) -> torch.Tensor:
    return F.linear(x.float(), dequantize(w), None if w.bias is None else w.bias.float()).to(x.dtype)


def int4_mm(x: torch.Tensor, packed: torch.Tensor, group: int, scales_and_zeros: torch.Tensor,
            out_features: int) -> torch.Tensor:
    """The kernel call alone: x [..., K] -> bf16 [..., N]. Few ops, since at batch 1 each costs ~3 µs."""
    x2 = x.reshape(-1, x.shape[-1])
    if x2.dtype != torch.bfloat16:
        x2 = x2.to(torch.bfloat16)
    y = _INT4_MM(x2.contiguous(), packed, group, scales_and_zeros)
    if y.shape[1] != out_features:
        y = y[:, :out_features]
    return y.reshape(*x.shape[:-1], out_features)


def int4_linear(x: torch.Tensor, w: Int4Weight) -> torch.Tensor:
    """y = x Wᵀ + b through the packed kernel: x cast to bf16, y cast back to x.dtype."""
    y = int4_mm(x, w.packed, w.group, w.scales_and_zeros, w.out_features).to(x.dtype)
    return y if w.bias is None else y + w.bias.to(x.dtype)


class Int4CpuLinear(torch.nn.Module):
    """Drop-in for nn.Linear (no .weight) holding an Int4Weight as buffers; CPU only, dtypes fixed."""

    def __init__(self, w: Int4Weight) -> None:
        super().__init__()
        self.in_features, self.out_features, self.group = w.in_features, w.out_features, w.group
        self.register_buffer("packed", w.packed)
        self.register_buffer("scales_and_zeros", w.scales_and_zeros)
        self.register_buffer("bias", None if w.bias is None else w.bias.to(torch.bfloat16))

    @property
    def weight_int4(self) -> Int4Weight:
        return Int4Weight(self.packed, self.scales_and_zeros, self.group, self.out_features,
                          self.in_features, self.bias)

    @classmethod
    def from_codes(cls, codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group: int,
                   bias: torch.Tensor | None = None) -> Int4CpuLinear:
        """codes 0..15 with W = (code − 8)·scale + zero."""
        return cls(pack_int4(codes, scales, zeros, group, bias))

    @classmethod
    def from_signed(cls, q: torch.Tensor, scales: torch.Tensor, zero_points: torch.Tensor | None,
                    group: int, bias: torch.Tensor | None = None) -> Int4CpuLinear:
        """compressed-tensors' convention W = (q − zero_point)·scale, q ∈ −8..7 (int4 and int2):
        code = q + 8 and zero = −zero_point·scale (0 when symmetric)."""
        zeros = scales.float() * (0 if zero_points is None else -zero_points.float())
        return cls(pack_int4(q.to(torch.int32) + 8, scales, zeros, group, bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = int4_mm(x, self.packed, self.group, self.scales_and_zeros, self.out_features).to(x.dtype)
        return y if self.bias is None else y + self.bias.to(x.dtype)

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        return self  # CPU-only with fixed dtypes: model.to(float32) must not widen the bf16 scales

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, group={self.group}"
