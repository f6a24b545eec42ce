"""Linear layers stored as 2-bit codes: QuIP# (E8P) and AQLM (additive codebooks).

Both hold their codes as buffers named as in their checkpoints, so a state dict loads
straight in. `forward` runs the compressed path (decode fused with the matmul: Triton on
GPU, a vectorized CPU op otherwise). `materialize()` decodes the weight once into a dense
fp32 copy for throughput work such as perplexity and lm-eval over thousands of prompts:
the numbers are the same (tested), only the memory saving is given up.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from quantgate.kernels.aqlm_ops import aqlm_decode_matmul, aqlm_decode_weight
from quantgate.kernels.e8p import e8p_codebook
from quantgate.kernels.hadamard import rht, rht_inverse, small_factor
from quantgate.kernels.quip_ops import e8p_decode_matmul, e8p_decode_weight
from quantgate.kernels.reencode import aqlm_reencode, e8p_reencode


def _to_code_basis(w: torch.Tensor, su: torch.Tensor, sv: torch.Tensor, factor_in: torch.Tensor,
                   factor_out: torch.Tensor) -> torch.Tensor:
    """T_m W T_nᵀ with the sign vectors inverted: the inverse of the rotated layers' decode. Signs
    are real-valued once tuned or once an output scale is absorbed into S_V; kept away from 0 so a
    relaxed sign cannot blow the target up."""
    def inverse(s: torch.Tensor) -> torch.Tensor:
        s = s.float()
        return 1.0 / torch.where(s.abs() > 1e-3, s, torch.where(s < 0, -1e-3, 1e-3))

    x = rht(w.float(), inverse(su), factor_in)
    return rht(x.T.contiguous(), inverse(sv), factor_out).T.contiguous()


def _from_code_basis(w: torch.Tensor, su: torch.Tensor, sv: torch.Tensor, factor_in: torch.Tensor,
                     factor_out: torch.Tensor) -> torch.Tensor:
    """W = diag(S_V) T_mᵀ W̃ T_n diag(S_U) [m, n] from the codes' basis: the rotated layers' decode."""
    w = rht_inverse(w, su.float(), factor_in)  # W̃ T_n
    return rht_inverse(w.T.contiguous(), sv.float(), factor_out).T.contiguous()


def _rotated_matmul(x: torch.Tensor, su: torch.Tensor, sv: torch.Tensor, factor_in: torch.Tensor,
                    factor_out: torch.Tensor, matmul: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """T_mᵀ matmul(T_n x): a rotated layer's compressed forward around its codes' own matmul."""
    x_rot = rht(x, su.to(x.dtype), factor_in.to(x.dtype))  # (.., n)
    return rht_inverse(matmul(x_rot), sv.to(x.dtype), factor_out.to(x.dtype))  # (.., m)


class _CodebookLinear(torch.nn.Module):
    dense: torch.Tensor | None

    def __init__(self, in_features: int, out_features: int, bias: bool) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.bias = torch.nn.Parameter(torch.zeros(out_features), requires_grad=False) if bias else None
        self.dense = None

    def decode_weight(self) -> torch.Tensor:  # [m, n] float32
        raise NotImplementedError

    def tuning_weight(self) -> torch.Tensor:
        """The decoded weight as a differentiable function of the continuous parameters (codes fixed)."""
        return self.decode_weight()

    def _tuning(self) -> bool:
        """Fine-tuning its continuous parameters: the forward must be differentiable in them, and
        the dense decode is also the fast path for the tuner's no-grad validation forwards."""
        return any(p.requires_grad for p in self.parameters())

    def materialize(self) -> None:
        self.dense = self.decode_weight()

    def weight_count(self) -> int:
        return self.in_features * self.out_features

    def code_tensor(self) -> torch.Tensor:
        """The integer codes as stored (QuIP#'s E8P indices, AQLM's codes): what `update_codes` changes."""
        raise NotImplementedError

    def update_codes(self, target: torch.Tensor, max_fraction: float) -> int:
        """Re-encode toward `target` [m, n] (weight space), the continuous parameters fixed; at most
        `max_fraction` of the code groups change, those that gain most (kernels/reencode). Returns
        how many changed."""
        raise NotImplementedError


class QuipLinear(_CodebookLinear):
    """y = T_mᵀ (W̃ · T_n x) + b, T the randomized Hadamard transforms, W̃ = Wscale · decode(qidxs)
    (+ Wscale_residual · decode(qidxs_residual) with `residual`: the 4-bit two-stage layers)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False, *,
                 residual: bool = False) -> None:
        super().__init__(in_features, out_features, bias)
        self.residual = residual
        codes = torch.zeros(out_features, in_features // 8, dtype=torch.int16)
        self.register_buffer("qidxs", codes)
        # fp16, not int8: end-to-end fine-tuning turns the signs into real-valued scales.
        self.register_buffer("SU", torch.ones(in_features, dtype=torch.float16))
        self.register_buffer("SV", torch.ones(out_features, dtype=torch.float16))
        self.register_buffer("Wscale", torch.ones((), dtype=torch.float32))
        if residual:
            self.register_buffer("qidxs_residual", codes.clone())
            self.register_buffer("Wscale_residual", torch.ones((), dtype=torch.float32))
        # Rebuilt, not stored: deterministic functions of the layer's shape.
        self.register_buffer("factor_in", small_factor(in_features), persistent=False)
        self.register_buffer("factor_out", small_factor(out_features), persistent=False)
        self.register_buffer("codebook", e8p_codebook(), persistent=False)

    def stages(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(codes, scale) of each E8P stage, the first one first."""
        first = [(self.qidxs, self.Wscale)]
        return first + [(self.qidxs_residual, self.Wscale_residual)] if self.residual else first

    def _code_basis_weight(self) -> torch.Tensor:  # W̃ [m, n] float32
        return sum(e8p_decode_weight(q, self.codebook) * s.float() for q, s in self.stages())

    def decode_weight(self) -> torch.Tensor:
        return _from_code_basis(self._code_basis_weight(), self.SU, self.SV, self.factor_in, self.factor_out)

    def tuning_weight(self) -> torch.Tensor:
        """diag(S_V) (Σ Wscale_k B_k) diag(S_U) with B_k = H_mᵀ decode(codes_k) H_n, the same weight as
        `decode_weight` (the signs are the last step of each inverse transform and the two act on
        different axes), for a fraction of the cost: the B_k depend on the codes only and are cached."""
        key = tuple((q.data_ptr(), q._version, q.device) for q, _ in self.stages())
        if getattr(self, "_base_key", None) != key:
            with torch.no_grad():
                ones_in, ones_out = self.SU.new_ones(self.in_features), self.SV.new_ones(self.out_features)
                self._bases = [_from_code_basis(e8p_decode_weight(q, self.codebook), ones_in, ones_out,
                                                self.factor_in, self.factor_out) for q, _ in self.stages()]
            self._base_key = key
        base = sum(s.float() * b for (_, s), b in zip(self.stages(), self._bases, strict=True))
        return self.SV.float()[:, None] * base * self.SU.float()[None, :]

    def code_tensor(self) -> torch.Tensor:
        """The first stage's codes: code updates move those, the residual's held as they are."""
        return self.qidxs

    @torch.no_grad()
    def update_codes(self, target: torch.Tensor, max_fraction: float) -> int:
        x = _to_code_basis(target, self.SU, self.SV, self.factor_in, self.factor_out)
        for q, s in self.stages()[1:]:  # the first stage's target: what the residual does not hold
            x = x - e8p_decode_weight(q, self.codebook) * s.float()
        new, changed = e8p_reencode(x / self.Wscale.float(), self.qidxs, self.codebook,
                                    max_fraction=max_fraction)
        if changed:
            self.qidxs.copy_(new)  # bumps its version: the cached tuning base is rebuilt
        return changed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dense is not None:
            return F.linear(x, self.dense.to(x.dtype), self.bias)
        if self._tuning():
            return F.linear(x, self.tuning_weight().to(x.dtype), self.bias)

        def codes_matmul(x_rot: torch.Tensor) -> torch.Tensor:  # the stages summed in fp32
            y = sum(e8p_decode_matmul(x_rot, q, self.codebook).float() * s.float() for q, s in self.stages())
            return y.to(x_rot.dtype)

        y = _rotated_matmul(x, self.SU, self.SV, self.factor_in, self.factor_out, codes_matmul)
        return y if self.bias is None else y + self.bias


class AqlmLinear(_CodebookLinear):
    """The `aqlm` package's QuantizedLinear layout: codes [m, n/g, M] int8, codebooks
    [M, 2^B, 1, g], scales [m, 1, 1, 1]. Our own module so the CPU path is correct and fast
    (aqlm 1.1.7's numba GEMV races across threads).

    `rotated`: the codes hold W̃ = T_m W T_nᵀ, QuIP#'s randomized Hadamard transforms (incoherence
    processing before AQLM), so y = T_mᵀ (decode · T_n x) + b with the sign vectors SU [n], SV [m]
    stored beside (fp16, 16 bits per row and column). Checkpoints say "quant_method": "aqlm_rht":
    the `aqlm` package cannot run them."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False, *,
                 num_codebooks: int = 2, nbits: int = 8, group: int = 8, rotated: bool = False) -> None:
        super().__init__(in_features, out_features, bias)
        if nbits > 8:
            raise ValueError(f"nbits_per_codebook={nbits}: only codebooks of ≤ 256 entries (int8 codes)")
        frozen = {"requires_grad": False}
        self.codebooks = torch.nn.Parameter(torch.zeros(num_codebooks, 2**nbits, 1, group), **frozen)
        codes = torch.zeros(out_features, in_features // group, num_codebooks, dtype=torch.int8)
        self.codes = torch.nn.Parameter(codes, **frozen)
        self.scales = torch.nn.Parameter(torch.ones(out_features, 1, 1, 1), **frozen)
        self.rotated = rotated
        if rotated:
            self.register_buffer("SU", torch.ones(in_features, dtype=torch.float16))
            self.register_buffer("SV", torch.ones(out_features, dtype=torch.float16))
            self.register_buffer("factor_in", small_factor(in_features), persistent=False)
            self.register_buffer("factor_out", small_factor(out_features), persistent=False)

    def decode_weight(self) -> torch.Tensor:
        w = aqlm_decode_weight(self.codes, self.codebooks, self.scales)
        return _from_code_basis(w, self.SU, self.SV, self.factor_in, self.factor_out) if self.rotated else w

    def code_tensor(self) -> torch.Tensor:
        return self.codes

    @torch.no_grad()
    def update_codes(self, target: torch.Tensor, max_fraction: float) -> int:
        if self.rotated:
            target = _to_code_basis(target, self.SU, self.SV, self.factor_in, self.factor_out)
        new, changed = aqlm_reencode(target, self.codes, self.codebooks, self.scales,
                                     max_fraction=max_fraction)
        if changed:
            self.codes.copy_(new)
        return changed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dense is not None:
            return F.linear(x, self.dense.to(x.dtype), self.bias)
        if self._tuning():
            return F.linear(x, self.decode_weight().to(x.dtype), self.bias)
        if not self.rotated:
            return aqlm_decode_matmul(x, self.codes, self.codebooks, self.scales, self.bias)

        def codes_matmul(x_rot: torch.Tensor) -> torch.Tensor:
            return aqlm_decode_matmul(x_rot, self.codes, self.codebooks, self.scales, None)

        y = _rotated_matmul(x, self.SU, self.SV, self.factor_in, self.factor_out, codes_matmul)
        return y if self.bias is None else y + self.bias.to(y.dtype)
