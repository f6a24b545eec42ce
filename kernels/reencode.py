"""Code updates under a trust limit: re-encode a target weight into 2-bit codes, changing only the
code groups that gain most.

PV-tuning (Malinovskii et al., "PV-Tuning: Beyond Straight-Through Estimation for Extreme LLM
Compression", arXiv 2405.14852) alternates updates of the continuous parameters (codebooks, scales,
sign vectors: the P step) with updates of the discrete codes (the V step): the dequantized weight Ŵ
takes a straight-through step to a target T, T is re-encoded, and only a small fraction of the code
groups (~1 %) may change per step, so the step stays where the loss's linearization holds. This module
is the V step's numerics. For every group it finds the best new code for T with the codebook and
scales fixed and the gain

    gain_g = ‖T_g − Ŵ_g‖² − ‖T_g − Ŵ'_g‖²   (≥ 0: the current code is among the candidates),

then moves the at most ⌈max_fraction · groups⌉ groups with the largest positive gain. Only the
groups whose bound gain ≤ ‖T_g − Ŵ_g‖² is among the largest (`CANDIDATES` times the groups allowed
to move) are searched: a group close to its target cannot gain much, and the search of every group
each step would cost more than the fine-tuning step itself (E8P: ~13 M groups on SmolLM2).

AQLM (M codebooks): a group's M codes are re-chosen by coordinate descent, each codebook's best entry
given the others (`sweeps` passes; never worse than the current codes). QuIP#: the target, already in
the rotated basis, rounds to its exact nearest E8P codeword.
"""

from __future__ import annotations

import math

import torch

from quantgate.kernels.e8p import e8p_encode

__all__ = ["aqlm_reencode", "e8p_reencode", "top_gains"]

_CHUNK = 16384  # groups scored at once against a codebook: [16384, 256] fp32 = 16 MiB
CANDIDATES = 8  # groups searched per group allowed to move


def _limit(groups: int, max_fraction: float) -> int:
    if not 0.0 <= max_fraction <= 1.0:
        raise ValueError(f"max_fraction={max_fraction}: expected a fraction in [0, 1]")
    return min(groups, math.ceil(max_fraction * groups))


def top_gains(gain: torch.Tensor, limit: int) -> torch.Tensor:
    """Mask of the at most `limit` entries of `gain` [N] with the largest positive gain."""
    mask = torch.zeros_like(gain, dtype=torch.bool)
    limit = min(limit, gain.numel())
    if limit > 0:
        values, index = gain.topk(limit)
        mask[index[values > 0]] = True
    return mask


def _candidates(distance: torch.Tensor, limit: int) -> torch.Tensor:
    """Indices of the groups worth a search: the largest ‖T_g − Ŵ_g‖², the bound on their gain."""
    return distance.topk(min(distance.numel(), CANDIDATES * limit)).indices


def _sum(codebooks: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """Σ_k C_k[codes[:, k]] [N, g]; codebooks [M, K, g], codes [N, M] int64."""
    acc = codebooks[0][codes[:, 0]]
    for k in range(1, codes.shape[1]):
        acc = acc + codebooks[k][codes[:, k]]
    return acc


def _best_entry(residual: torch.Tensor, codebook: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
    """argmin_x ‖r − C[x]‖² = argmin_x (‖C[x]‖² − 2 r·C[x]) per row of r [N, g], in chunks."""
    out = torch.empty(residual.shape[0], dtype=torch.int64, device=residual.device)
    for start in range(0, residual.shape[0], _CHUNK):
        rows = residual[start : start + _CHUNK]
        out[start : start + _CHUNK] = (norms[None, :] - 2 * rows @ codebook.T).argmin(1)
    return out


@torch.no_grad()
def aqlm_reencode(target: torch.Tensor, codes: torch.Tensor, codebooks: torch.Tensor, scales: torch.Tensor,
                  *, max_fraction: float, sweeps: int = 1) -> tuple[torch.Tensor, int]:
    """New codes [m, n/g, M] (the dtype of `codes`, int8 stored modulo 256) for target [m, n], and how
    many groups changed. Codebooks [M, K, 1, g] and scales [m, 1, 1, 1] stay as they are."""
    m, groups, num_cb = codes.shape
    cb = codebooks.detach()[:, :, 0, :].float()  # [M, K, g]
    g = cb.shape[-1]
    if target.shape != (m, groups * g):
        raise ValueError(f"target.shape={tuple(target.shape)}: expected {(m, groups * g)} for these codes")
    s = scales.detach().reshape(m).float()
    safe = torch.where(s.abs() > 1e-12, s, torch.ones_like(s))
    t = (target.float() / safe[:, None]).reshape(m * groups, g)  # in codebook units, row scale out
    current = codes.reshape(m * groups, num_cb).long() % cb.shape[1]
    row_weight = (safe * safe).repeat_interleave(groups)  # gains in weight units: rows compare
    now = t - _sum(cb, current)
    limit = _limit(m * groups, max_fraction)
    pick = _candidates(now.square().sum(1) * row_weight, limit)
    tp, new = t[pick], current[pick].clone()
    norms = cb.square().sum(-1)  # [M, K]
    for _ in range(sweeps):
        for c in range(num_cb):
            others = _sum(cb, new) - cb[c][new[:, c]]
            new[:, c] = _best_entry(tp - others, cb[c], norms[c])
    gain = (now[pick].square().sum(1) - (tp - _sum(cb, new)).square().sum(1)) * row_weight[pick]
    move = top_gains(gain, limit) & (new != current[pick]).any(1)
    chosen = current.clone()
    chosen[pick[move]] = new[move]
    if codes.dtype == torch.int8:  # the aqlm layout: 128..255 stored as -128..-1
        chosen = torch.where(chosen >= 128, chosen - 256, chosen)
    return chosen.reshape(m, groups, num_cb).to(codes.dtype), int(move.sum())


@torch.no_grad()
def e8p_reencode(target: torch.Tensor, qidxs: torch.Tensor, codebook: torch.Tensor, *,
                 max_fraction: float) -> tuple[torch.Tensor, int]:
    """New E8P indices [m, n/8] int16 for target [m, n] (rotated basis, codebook units), and how many
    groups changed; codebook [65536, 8] as `e8p_codebook()`."""
    m, groups = qidxs.shape
    if target.shape != (m, groups * 8):
        raise ValueError(f"target.shape={tuple(target.shape)}: expected {(m, groups * 8)} for these indices")
    t = target.float().reshape(-1, 8)
    current = (qidxs.to(torch.int32) & 0xFFFF).long().reshape(-1)
    table = codebook.float()
    now = (t - table[current]).square().sum(1)
    limit = _limit(current.numel(), max_fraction)
    pick = _candidates(now, limit)
    new = e8p_encode(t[pick])
    gain = now[pick] - (t[pick] - table[new]).square().sum(1)
    move = top_gains(gain, limit) & (new != current[pick])
    chosen = current.clone()
    chosen[pick[move]] = new[move]
    chosen = torch.where(chosen >= 32768, chosen - 65536, chosen)  # int16 storage, as checkpoints hold it
    return chosen.reshape(m, groups).to(torch.int16), int(move.sum())
