"""QuIP# (E8P) layers through the packed-int4 CPU kernel: a lossless transcode.

Every E8P codeword coordinate is a signed entry of the absolute table, ±{1/2, 3/2, 5/2}
(`e8p._ODD`), plus a shift of ±1/4, so it lies in {±0.25, ±0.75, …, ±2.75}, a subset of the int4
grid {0.25 + 0.5k : k = −8..7}. With code = 2v + 7.5 ∈ 2..13 the kernel's formula
(code − 8)·scale + zero gives v exactly for scale 0.5 and zero 0.25, both exact in bf16
(`test_every_e8p_coordinate_is_on_the_int4_grid` checks all 65536 codewords). Wscale stays out of
the int4 weight (0.5·Wscale rounded to bf16 would scale the whole layer by up to 1 ± 2^-9): it
multiplies the output in fp32, folded into the output signs SV.

    y = Wscale · T_mᵀ (W̃ · T_n x) + b,    T = (F ⊗ H_p/√p)·diag(S)   (as in QuipLinear)

The RHT runs as two small matmuls on x viewed [.., m, p]: T x = F (S⊙x) H_p/√p (H symmetric),
instead of log2(p) butterfly passes: fewer ops, which is what costs at batch 1.
"""

from __future__ import annotations

import torch

from quantgate.kernels.codebook_linear import QuipLinear
from quantgate.kernels.hadamard import sylvester_scaled
from quantgate.kernels.int4_cpu import GROUPS, int4_mm, pack_int4
from quantgate.kernels.quip_ops import e8p_decode_weight

E8P_SCALE, E8P_ZERO = 0.5, 0.25  # v = (code − 8)·0.5 + 0.25


def e8p_int4_codes(qidxs: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
    """W̃ [m, n] as int4 codes (uint8): code = 2v + 7.5; ValueError if a value is off the grid."""
    codes = e8p_decode_weight(qidxs, codebook).double() * 2 + 7.5
    if codes.numel() and (not torch.equal(codes, codes.round()) or codes.min() < 0 or codes.max() > 15):
        raise ValueError("codebook values are not on the int4 grid 0.25 + 0.5k, k = −8..7")
    return codes.to(torch.uint8)


def _hadamard(p: int) -> torch.Tensor:
    return sylvester_scaled(p).clone()  # a buffer of ours: never the shared cached tensor


def _rotate(x: torch.Tensor, f: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """x [T, m, p] -> f @ x[t] @ h for every t, as two 2-D GEMMs (a broadcast matmul would run T
    small ones); 1×1 factors skipped. Returns [T·m, p]-contiguous [T, m, p] or a strided view."""
    t, m, p = x.shape
    if h.shape[0] > 1:
        x = (x.reshape(t * m, p) @ h).view(t, m, p)
    if f.shape[0] > 1:
        x = (f @ x.transpose(0, 1).reshape(m, t * p)).view(m, t, p).transpose(0, 1)
    return x


class QuipInt4CpuLinear(torch.nn.Module):
    """Same function as a QuipLinear, W̃ held as int4 (4 bits per weight in memory against the
    checkpoint's 2) and multiplied by torch's packed-int4 kernel in bf16; rotations, signs, Wscale
    in fp32. A two-stage (residual) layer holds each stage as int4 (each alone is on the grid, their
    sum is not) and adds the second's product, times Wscale_residual / Wscale in fp32. CPU only,
    dtypes fixed: model.to(...) leaves it as built."""

    def __init__(self, layer: QuipLinear) -> None:
        super().__init__()
        m, n = layer.out_features, layer.in_features
        group = next((g for g in reversed(GROUPS) if n % g == 0), None)
        if group is None:
            raise ValueError(f"in_features={n}: the int4 kernel needs a multiple of 32")
        self.in_features, self.out_features, self.group = n, m, group
        full = torch.full((m, n // group), 1.0)
        stages = [pack_int4(e8p_int4_codes(q, layer.codebook), full * E8P_SCALE, full * E8P_ZERO, group)
                  for q, _ in layer.stages()]
        self.register_buffer("packed", stages[0].packed)
        self.register_buffer("scales_and_zeros", stages[0].scales_and_zeros)
        self.register_buffer("packed_residual", stages[1].packed if layer.residual else None)
        ratio = layer.Wscale_residual.double() / layer.Wscale.double() if layer.residual else None
        self.register_buffer("residual_ratio", None if ratio is None else ratio.float())
        f_in, f_out = layer.factor_in.double(), layer.factor_out.double()
        self.register_buffer("f_in", f_in.float())
        self.register_buffer("h_in", _hadamard(n // f_in.shape[0]))
        self.register_buffer("su", layer.SU.float().reshape(f_in.shape[0], -1).clone())  # [m_in, p_in]
        self.register_buffer("f_out_t", f_out.T.float().contiguous())
        self.register_buffer("h_out", _hadamard(m // f_out.shape[0]))
        sv = (layer.SV.double() * layer.Wscale.double()).float()
        self.register_buffer("sv_scaled", sv.reshape(f_out.shape[0], -1))  # [m_out, p_out]
        self.register_buffer("bias", None if layer.bias is None else layer.bias.detach().float().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, m = self.in_features, self.out_features
        x3 = x.reshape(-1, *self.su.shape).float() * self.su  # [T, m_in, p_in]
        x_rot = _rotate(x3, self.f_in, self.h_in).reshape(-1, n)
        y_rot = int4_mm(x_rot, self.packed, self.group, self.scales_and_zeros, m).float()  # [T, m]
        if self.packed_residual is not None:
            second = int4_mm(x_rot, self.packed_residual, self.group, self.scales_and_zeros, m)
            y_rot = y_rot + second.float() * self.residual_ratio
        y = _rotate(y_rot.view(-1, *self.sv_scaled.shape), self.f_out_t, self.h_out) * self.sv_scaled
        y = y.reshape(*x.shape[:-1], m)
        return (y if self.bias is None else y + self.bias).to(x.dtype)

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        return self

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, group={self.group}"
