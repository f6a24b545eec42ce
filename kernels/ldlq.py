"""BlockLDLQ: adaptive rounding that minimizes the layer's proxy loss tr(ΔW H ΔWᵀ).

Notation (QuIP#, Tseng et al., arXiv 2402.04396, §4; QuIP, Chee et al., arXiv 2307.13304):
W [m, n] weights, H [n, n] proxy Hessian, g the block width (8 for E8P). Factor H = Bᵀ B with
B = Lᵀ upper triangular (L the Cholesky factor), and write B = D̃ U with D̃ the g×g diagonal
blocks of B and U unit block-upper-triangular. For a row error δ = W − Ŵ,

    δ H δᵀ = Σ_k ‖(δ_k + Σ_{j>k} δ_j U_kjᵀ) D̃_kᵀ‖²,

so quantizing column blocks from last to first with the target W_k + Σ_{j>k} δ_j U_kjᵀ makes
the k-th term the block's own rounding error weighted by D_k = D̃_kᵀ D̃_k. Nearest rounding is
the special case U = I; the feedback is what lowers the loss (tested). This is the same
recursion as GPTQ, with blocks of g columns and a vector quantizer per block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


class HessianNotPositiveDefinite(RuntimeError):
    """Cholesky of the damped proxy Hessian failed even at the largest damping tried."""


def damped(H: torch.Tensor, sigma: float) -> torch.Tensor:
    """H / mean(diag H) + σ I in float64: scale-free, and σ keeps dead input channels invertible."""
    H = H.to(torch.float64)
    mean_diag = H.diagonal().mean().clamp_min(1e-12)
    return H / mean_diag + sigma * torch.eye(H.shape[0], dtype=torch.float64, device=H.device)


@dataclass(frozen=True)
class DampedCholesky:
    L: torch.Tensor  # [n, n] lower triangular, damped(H, sigma) = L Lᵀ
    sigma: float  # the damping that succeeded


def cholesky_with_retry(H: torch.Tensor, *, sigma: float, tries: int = 5) -> DampedCholesky:
    """Lower Cholesky factor of damped(H, σ), multiplying σ by 10 after each failure."""
    for _ in range(tries):
        L, info = torch.linalg.cholesky_ex(damped(H, sigma))
        if int(info) == 0:
            return DampedCholesky(L, sigma)
        sigma *= 10
    raise HessianNotPositiveDefinite(
        f"proxy Hessian ({H.shape[0]}×{H.shape[0]}) is not positive definite even with damping "
        f"{sigma / 10:g}; raise hessian_damp or calibrate on more tokens")


def block_ldlq(
    W: torch.Tensor, L: torch.Tensor, quantize_block: Callable[[torch.Tensor], torch.Tensor], *,
    block: int = 8,
) -> torch.Tensor:
    """Ŵ [m, n] from W [m, n] and the lower Cholesky factor L of H, last column block first.

    `quantize_block` maps a [m, block] target to its quantized value (nearest codeword per row)."""
    m, n = W.shape
    if n % block:
        raise ValueError(f"in_features={n} is not a multiple of the block width {block}")
    nb = n // block
    B = L.T.to(torch.float64)  # [n, n] upper triangular, H = Bᵀ B
    D_blocks = B.reshape(nb, block, nb, block).diagonal(dim1=0, dim2=2).permute(2, 0, 1)  # [nb, g, g]
    # U = D̃⁻¹ B row block by row block: U_ik = D̃_i⁻¹ B_ik (unit diagonal blocks).
    U = torch.linalg.solve_triangular(D_blocks, B.reshape(nb, block, n), upper=True).reshape(n, n)
    W64 = W.to(torch.float64)
    work = W64.clone()  # [m, n] targets, updated with the feedback
    W_hat = torch.empty_like(work)
    for k in range(nb - 1, -1, -1):
        cols = slice(k * block, (k + 1) * block)
        q = quantize_block(work[:, cols].to(W.dtype)).to(torch.float64)  # [m, g]
        W_hat[:, cols] = q
        if k:  # targets_i += δ_k U_ikᵀ, δ_k = W_k − Ŵ_k, for every earlier block i < k at once
            earlier = slice(0, k * block)
            work[:, earlier] += (W64[:, cols] - q) @ U[earlier, cols].T
    return W_hat.to(W.dtype)


def proxy_loss(W: torch.Tensor, W_hat: torch.Tensor, H: torch.Tensor) -> float:
    """tr((W − Ŵ) H (W − Ŵ)ᵀ) in float64."""
    d = (W - W_hat).to(torch.float64)
    return float(((d @ H.to(torch.float64)) * d).sum())
