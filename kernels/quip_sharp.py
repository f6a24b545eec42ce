"""QuIP# for one Linear layer: incoherence processing, E8P lattice codebook, BlockLDLQ.

Minimizes the layer's proxy loss tr((W − Ŵ) H (W − Ŵ)ᵀ), H = E[x xᵀ] of its inputs, at 2 bits
per weight. Tseng, Chee, Sun, Kuleshov, De Sa, "QuIP#: Even Better LLM Quantization with
Hadamard Incoherence and Lattice Codebooks", arXiv 2402.04396.

Notation: W [m, n], S_U [n] and S_V [m] random signs, T_n = (F ⊗ H_p/√p)·diag(S_U) the
randomized Hadamard transform of `kernels.hadamard` (T_m likewise with S_V).
  1. W̃ = T_m W T_nᵀ and H̃ = T_n H T_nᵀ: the rotation spreads outlier rows/columns so every
     entry of W̃ is roughly Gaussian and H̃ has no dominant direction (incoherence).
  2. W̃ is divided by `wscale` = RMS(W̃)/s, so its entries have RMS s, where the E8P
     codebook's grid fits a Gaussian best.
  3. BlockLDLQ rounds W̃ / wscale 8 columns at a time to E8P codewords, feeding each block's
     error back through H̃'s LDL factor.
Inference: y = wscale · T_mᵀ (decode(Qidx) · T_n x) — the rotation is never undone on W.
The loss is invariant under the rotation, so it is measured in either basis.

Outlier input channels (`channel_power` p > 0): a channel whose inputs are 100× the others (the
massive activations of SmolLM2's down_proj inputs) still dominates H̃ after the rotation. W is
quantized as W D with D = diag((H_jj / mean H_jj)^(p/2)) against D⁻¹ H D⁻¹ (the same loss, an
evened-out Hessian); D⁻¹ folds into S_U, so the stored format and the forward are unchanged (the
EXL3 observation: normalize input channels before the rotation, not after).

Residual stage (`residual=True`, QuIP#'s residual vector quantization, §4.4 of the paper): what the
first stage leaves, R = W̃/wscale − Ŵ₁, is rescaled to the codebook's RMS and rounded again, with
BlockLDLQ against the same H̃: Ŵ = Ŵ₁ + rscale · Ŵ₂. The second pass minimizes tr((R − rscale·Ŵ₂)
H̃ (…)ᵀ), which is the whole layer's proxy loss, so it is exact greedy two-stage rounding (the
paper rounds both stages inside one LDLQ pass). 32 bits per 8 weights: 4 bits per weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from quantgate.kernels.e8p import e8p_encode, e8p_quantize
from quantgate.kernels.hadamard import random_signs, rht, small_factor
from quantgate.kernels.hessian import channel_scales
from quantgate.kernels.ldlq import block_ldlq, cholesky_with_retry, proxy_loss

GROUP = 8  # E8P quantizes 8 weights per 16-bit code


@dataclass(frozen=True)
class QuipLayer:
    qidxs: torch.Tensor  # [m, n/8] int16, E8P indices of W̃ / wscale
    su: torch.Tensor  # [n] float16, ±1 (real-valued once fine-tuned)
    sv: torch.Tensor  # [m] float16, ±1
    wscale: torch.Tensor  # [] float32
    scale: float  # the target RMS s used
    proxy_loss: float  # tr(ΔW H ΔWᵀ) / tr(W H Wᵀ) on the damped, normalized H
    nearest_loss: float  # the same for plain nearest rounding (what LDLQ must beat)
    qidxs_residual: torch.Tensor | None = None  # [m, n/8] int16, the second stage's E8P indices
    wscale_residual: torch.Tensor | None = None  # [] float32, wscale · rscale


def _as_int16(idx: torch.Tensor) -> torch.Tensor:
    return idx.to(torch.int32).to(torch.int16)  # wraps 32768..65535 to negative int16, bits kept


def rotate_weight(W: torch.Tensor, su: torch.Tensor, sv: torch.Tensor) -> torch.Tensor:
    """W̃ = T_m W T_nᵀ [m, n]."""
    m, n = W.shape
    right = rht(W, su, small_factor(n))  # rows: W T_nᵀ
    return rht(right.T.contiguous(), sv, small_factor(m)).T.contiguous()  # T_m (W T_nᵀ)


def rotate_hessian(H: torch.Tensor, su: torch.Tensor) -> torch.Tensor:
    """H̃ = T_n H T_nᵀ [n, n] (H symmetric)."""
    factor = small_factor(H.shape[0], dtype=torch.float64).to(H.dtype)
    return rht(rht(H, su.to(H.dtype), factor).T.contiguous(), su.to(H.dtype), factor)


def quip_quantize_layer(
    W: torch.Tensor, H: torch.Tensor, *, seed: int, scale: float = 0.9, sigma: float = 0.01,
    use_ldlq: bool = True, channel_power: float = 0.0, residual: bool = False,
) -> QuipLayer:
    """Quantize W [m, n] with proxy Hessian H [n, n]; `use_ldlq=False` is plain nearest rounding
    (the cheap path used when the time budget runs out); `residual`: two E8P stages (4 bits)."""
    m, n = W.shape
    if n % GROUP:
        raise ValueError(f"in_features={n} is not a multiple of {GROUP} (E8P groups)")
    d = channel_scales(H, channel_power).to(W.device)
    W, H = W.double() * d, H.to(torch.float64) / d[:, None] / d[None, :]
    su = random_signs(n, seed).to(W.device)
    sv = random_signs(m, seed + 1).to(W.device)
    W_tilde = rotate_weight(W.float(), su, sv)  # [m, n]
    wscale = W_tilde.square().mean().sqrt() / scale
    L = cholesky_with_retry(rotate_hessian(H.to(torch.float64), su), sigma=sigma).L  # H̃ ≈ L Lᵀ
    H_tilde = L @ L.T
    target = W_tilde / wscale

    def nearest(block: torch.Tensor) -> torch.Tensor:  # [rows, 8k] -> nearest codewords, 8 at a time
        return e8p_quantize(block.reshape(block.shape[0], -1, GROUP)).reshape(block.shape)

    def rounded(x: torch.Tensor, ldlq: bool) -> torch.Tensor:
        return block_ldlq(x, L, nearest, block=GROUP) if ldlq else nearest(x)

    def encode(x: torch.Tensor) -> torch.Tensor:  # exact: x holds codewords already
        return _as_int16(e8p_encode(x.reshape(m, n // GROUP, GROUP)))

    def two_stage(first: torch.Tensor, ldlq: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(Ŵ₁ + rscale·Ŵ₂, Ŵ₂, rscale): the second stage at the RMS the first was rounded at."""
        rscale = (target - first).square().mean().sqrt().clamp_min(1e-12) / scale
        second = rounded((target - first) / rscale, ldlq)
        return first + rscale * second, second, rscale

    W_hat = rounded(target, use_ldlq)
    W_nearest = nearest(target)
    qidxs = encode(W_hat)
    second = rscale = None
    if residual:
        W_hat, second, rscale = two_stage(W_hat, use_ldlq)
        W_nearest = two_stage(W_nearest, False)[0]
    norm = proxy_loss(target, torch.zeros_like(target), H_tilde)
    return QuipLayer(
        qidxs=qidxs, su=(su / d).half(), sv=sv.half(), wscale=wscale.float(), scale=scale,
        proxy_loss=proxy_loss(target, W_hat, H_tilde) / norm,
        nearest_loss=proxy_loss(target, W_nearest, H_tilde) / norm,
        qidxs_residual=None if second is None else encode(second),
        wscale_residual=None if rscale is None else (wscale * rscale).float(),
    )
