"""AQLM: additive quantization of one Linear layer, driven by the layer-output objective.

Egiazarian et al., "Extreme Compression of Large Language Models via Additive Quantization"
(arXiv 2401.06118). Row i of W [m, n] is cut into n/g groups of g consecutive inputs; group j of
row i is approximated as

    Ŵ[i, j*g:(j+1)*g] = scale_i · Σ_{k<M} C_k[b_{i,j,k}]

with M codebooks C_k of K = 2^nbits vectors of length g ("2x8": M=2, K=256, g=8 → 2 bits per
weight plus codebooks and scales). The objective is the layer output error on calibration inputs

    f = tr((Ŵ − W) H (Ŵ − W)ᵀ),   H = XᵀX (n × n, symmetric PSD),

which separates over rows: f = Σ_i Δ_i H Δ_iᵀ. The algorithm alternates

* ``update_codebooks_scales``: codes frozen, Adam on codebooks and scales (f is quadratic in the
  codebooks; the gradient is 2(Ŵ − W)H scattered back through the codes), keeping the best point;
* ``beam_search_codes``: codebooks and scales frozen, one pass over the input groups j; for each
  group, every row picks new codes by beam search over the codebooks using the exact change of f

      δf(v → v') = 2 (v' − v)·R[i, J] + (v' − v) H_JJ (v' − v)ᵀ,   R = (Ŵ − W) H,

  R is kept current with a rank-g update after each group. A row's codes change only where the
  exactly recomputed δf (float64) is negative, so a pass never increases f.

Tensor layout matches the ``aqlm`` inference package (out_group_size 1): codes [m, n/g, M],
codebooks [M, K, 1, g], scales [m, 1, 1, 1].
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from quantgate.kernels.kmeans import kmeans, nearest_center

__all__ = [
    "AqlmCodes",
    "AqlmResult",
    "aqlm_quantize",
    "beam_search_codes",
    "layer_objective",
    "reconstruct",
    "residual_kmeans_init",
    "update_codebooks_scales",
]

INIT_MIN_ITERS = 3
"""k-means iterations the init runs even past the deadline (as many as the cheap path): stopped at its
k-means++ seeding a layer's loss is ~0.8 of its energy (v_proj layers of SmolLM2 at a 300 s budget),
after 3 iterations ~0.1, for 0.1-0.2 s a layer."""
_INIT_MAX_POINTS = 16384  # groups sampled to fit each k-means codebook (64 per center for K = 256)


@dataclass(frozen=True)
class AqlmCodes:
    codes: torch.Tensor  # [m, n/g, M] int64, values in [0, K)
    codebooks: torch.Tensor  # [M, K, 1, g] float32
    scales: torch.Tensor  # [m, 1, 1, 1] float32

    def __post_init__(self) -> None:
        if self.codes.dim() != 3 or self.codebooks.dim() != 4 or self.scales.dim() != 4:
            raise ValueError(
                f"AqlmCodes expects codes [m, n/g, M], codebooks [M, K, 1, g], scales [m, 1, 1, 1]; got "
                f"{tuple(self.codes.shape)}, {tuple(self.codebooks.shape)}, {tuple(self.scales.shape)}"
            )
        m, _, num_cb = self.codes.shape
        if self.codebooks.shape[0] != num_cb or self.codebooks.shape[2] != 1 or self.scales.shape[0] != m:
            raise ValueError(
                f"inconsistent AqlmCodes shapes: codes {tuple(self.codes.shape)}, codebooks "
                f"{tuple(self.codebooks.shape)}, scales {tuple(self.scales.shape)}"
            )

    @property
    def group(self) -> int:
        return int(self.codebooks.shape[-1])

    @property
    def codebook_size(self) -> int:
        return int(self.codebooks.shape[1])


@dataclass(frozen=True)
class AqlmResult:
    q: AqlmCodes
    # f / tr(W H Wᵀ) after init, then after each completed round (dimensionless; 1.0 = Ŵ = 0).
    objective_history: tuple[float, ...]
    rounds: int
    stopped_by: str  # "converged" | "max_rounds" | "deadline"
    w_energy: float = float("nan")  # tr(W H Wᵀ): multiply the history by it for the absolute f


# ---------------------------------------------------------------------------------------------- basics


def _sum_codewords(codebooks: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """Σ_k C_k[codes[..., k]] → [..., g]; codebooks [M, K, g]. Summation order fixed (k = 0, 1, ...)."""
    acc = codebooks[0][codes[..., 0]]
    for k in range(1, codes.shape[-1]):
        acc = acc + codebooks[k][codes[..., k]]
    return acc


def reconstruct(q: AqlmCodes) -> torch.Tensor:
    """Ŵ [m, n] float32; differentiable w.r.t. q.codebooks and q.scales."""
    m, groups, _ = q.codes.shape
    vecs = _sum_codewords(q.codebooks[:, :, 0, :], q.codes)  # [m, n/g, g]
    return (vecs * q.scales.reshape(m, 1, 1)).reshape(m, groups * q.group)


def layer_objective(W: torch.Tensor, W_hat: torch.Tensor, H: torch.Tensor) -> float:
    """tr((Ŵ − W) H (Ŵ − W)ᵀ), accumulated in float64."""
    delta = W_hat.detach().double() - W.detach().double()
    return float(((delta @ H.detach().double()) * delta).sum())


def _check_inputs(W: torch.Tensor, H: torch.Tensor | None, group: int) -> None:
    if W.dim() != 2:
        raise ValueError(f"W must be [out_features, in_features], got shape {tuple(W.shape)}")
    n = W.shape[1]
    if group <= 0 or n % group != 0:
        raise ValueError(f"in_features={n} is not divisible by group={group}")
    if H is not None and tuple(H.shape) != (n, n):
        raise ValueError(f"H must be [in_features, in_features] = [{n}, {n}], got {tuple(H.shape)}")


def _check_codes(W: torch.Tensor, q: AqlmCodes) -> None:
    m, n = W.shape
    if q.codes.shape[0] != m or q.codes.shape[1] * q.group != n:
        raise ValueError(
            f"codes {tuple(q.codes.shape)} with group {q.group} do not describe W of shape {(m, n)}"
        )


def _symmetric(H: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    H = H.detach().to(dtype)
    return (H + H.T) * 0.5


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() > deadline


def _residual_kmeans(
    W: torch.Tensor,
    num_codebooks: int,
    nbits: int,
    group: int,
    iters: int,
    seed: int,
    max_points: int,
    deadline: float | None,
) -> AqlmCodes:
    _check_inputs(W, None, group)
    if num_codebooks < 1 or not 1 <= nbits <= 16:
        raise ValueError(f"need num_codebooks >= 1 and 1 <= nbits <= 16, got {num_codebooks}, {nbits}")
    W = W.detach().float()
    m, n = W.shape
    k = 2**nbits
    gen = torch.Generator().manual_seed(seed)
    scales = W.pow(2).mean(1).sqrt().clamp_min(1e-12)  # row RMS
    residual = (W / scales[:, None]).reshape(m * (n // group), group)
    codebooks = torch.zeros(num_codebooks, k, group, device=W.device)
    codes = torch.zeros(m * (n // group), num_codebooks, dtype=torch.long, device=W.device)
    for c in range(num_codebooks):
        codebooks[c] = kmeans(residual, k, iters, gen, max_points, deadline,
                              min_iters=min(iters, INIT_MIN_ITERS))
        codes[:, c], _ = nearest_center(residual, codebooks[c])
        residual = residual - codebooks[c][codes[:, c]]
    return AqlmCodes(
        codes=codes.reshape(m, n // group, num_codebooks),
        codebooks=codebooks.reshape(num_codebooks, k, 1, group).contiguous(),
        scales=scales.reshape(m, 1, 1, 1).contiguous(),
    )


def residual_kmeans_init(
    W: torch.Tensor,
    *,
    num_codebooks: int,
    nbits: int,
    group: int = 8,
    iters: int = 20,
    seed: int = 0,
    max_points: int = _INIT_MAX_POINTS,
) -> AqlmCodes:
    """Scales = row RMS of W; codebook c is k-means (2^nbits centers, plain L2, k-means++ seeding with a
    generator seeded by ``seed``) on what codebooks 0..c−1 leave of the groups of W / scale. Centers are
    fitted on at most ``max_points`` randomly sampled groups; every group is then assigned to its nearest
    center."""
    return _residual_kmeans(W, num_codebooks, nbits, group, iters, seed, max_points, None)


# ------------------------------------------------------------------------------------------ beam search


def _beam_search(
    W: torch.Tensor, H: torch.Tensor, q: AqlmCodes, beam_size: int, deadline: float | None
) -> AqlmCodes:
    _check_inputs(W, H, q.group)
    _check_codes(W, q)
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    m, n = W.shape
    g, num_cb, k_size = q.group, q.codes.shape[2], q.codebook_size
    beam_size = min(beam_size, k_size)
    groups = n // g

    h64 = _symmetric(H, torch.float64)
    cb = q.codebooks.detach()[:, :, 0, :].float()  # [M, K, g]
    cb_t = cb.transpose(1, 2).contiguous()  # [M, g, K]
    s = q.scales.detach().reshape(m).float()
    s_col = s[:, None, None]  # [m, 1, 1]
    s2_col = s_col * s_col
    codes = q.codes.detach().clone()
    w_hat = reconstruct(AqlmCodes(codes, cb[:, :, None, :], s.reshape(m, 1, 1, 1)))  # float32 [m, n]
    resid = (w_hat.double() - W.detach().double()) @ h64  # R = (Ŵ − W) H, float64 [m, n]
    rows = torch.arange(m, device=W.device)[:, None]

    for j in range(groups):
        if _past(deadline):
            break
        sl = slice(j * g, (j + 1) * g)
        h_jj64 = h64[sl, sl]
        h_jj = h_jj64.float()
        r64 = resid[:, sl]
        v32 = w_hat[:, sl]
        v64 = v32.double()
        # f(v') = const + 2 v'·t + v' H_JJ v'ᵀ with t = r − v H_JJ (v = current value of the group).
        t = (r64 - v64 @ h_jj64).float()  # [m, g]
        cb_h = cb @ h_jj  # [M, K, g]: C_k H_JJ
        quad = (cb_h * cb).sum(-1)  # [M, K]: C_k[x] H_JJ C_k[x]ᵀ

        # One sweep over the codebooks in order, starting from the current codes as the only beam entry.
        # At step c all beam entries still hold the current codes for codebooks >= c and differ somewhere
        # below c, so expanding codebook c never produces the same combination twice (no dedup needed).
        # Replacing code c by itself keeps each entry's score, so the best score never rises above the
        # current combination's.
        beam = codes[:, j, :].unsqueeze(1)  # [m, B, M]
        beam_sum = _sum_codewords(cb, beam)  # [m, B, g], unscaled Σ_k C_k[b_k]
        for c in range(num_cb):
            n_beam = beam.shape[1]
            partial = beam_sum - cb[c][beam[:, :, c]]  # [m, B, g]: what the other codebooks give
            p_h = partial @ h_jj
            # score(s(P + C_c[x])) = 2s P·t + s² P H Pᵀ + (2s t + 2s² P H)·C_c[x] + s² q_c[x]
            base = 2 * s[:, None] * (partial * t[:, None, :]).sum(-1)
            base += s[:, None] ** 2 * (p_h * partial).sum(-1)
            lin = 2 * s_col * (t[:, None, :] + s_col * p_h)  # [m, B, g]
            cand = (lin.reshape(m * n_beam, g) @ cb_t[c]).reshape(m, n_beam, k_size)
            cand += base[:, :, None] + s2_col * quad[c]  # [m, B, K]
            flat_cand = cand.reshape(m, n_beam * k_size)
            if c == num_cb - 1:  # last codebook: only the best combination is needed
                flat = flat_cand.argmin(1, keepdim=True)
            else:
                keep = min(beam_size, n_beam * k_size)
                _, flat = flat_cand.topk(keep, dim=1, largest=False, sorted=True)
            src, new_code = flat // k_size, flat % k_size
            beam = beam[rows, src].clone()  # [m, keep, M]
            beam[:, :, c] = new_code
            beam_sum = partial[rows, src] + cb[c][new_code]

        best = beam[:, 0, :]  # [m, M], lowest score
        v_new = _sum_codewords(cb, best) * s[:, None]  # same arithmetic as reconstruct
        u = v_new.double() - v64
        delta_f = 2 * (u * r64).sum(1) + ((u @ h_jj64) * u).sum(1)
        accept = delta_f < 0
        if not bool(accept.any()):
            continue
        u = u * accept[:, None]
        codes[:, j, :] = torch.where(accept[:, None], best, codes[:, j, :])
        w_hat[:, sl] = torch.where(accept[:, None], v_new, v32)
        resid += u @ h64[sl, :]  # rank-g update of R = (Ŵ − W) H

    return AqlmCodes(codes=codes, codebooks=q.codebooks, scales=q.scales)


def beam_search_codes(W: torch.Tensor, H: torch.Tensor, q: AqlmCodes, *, beam_size: int = 4) -> AqlmCodes:
    """One pass over the input groups: each row's M codes for group j are re-chosen by beam search
    (width ``beam_size``) on the exact objective with every other group fixed. Codebooks and scales are
    kept. Never increases f = tr((Ŵ − W) H (Ŵ − W)ᵀ)."""
    return _beam_search(W, H, q, beam_size, None)


# ------------------------------------------------------------------------------- codebook/scale update


def _adam(
    W: torch.Tensor, H: torch.Tensor, q: AqlmCodes, steps: int, lr: float, deadline: float | None
) -> AqlmCodes:
    _check_inputs(W, H, q.group)
    _check_codes(W, q)
    if steps <= 0:  # before any copy of H: a round with no Adam steps costs nothing here
        return q
    m, n = W.shape
    g, num_cb, k_size = q.group, q.codes.shape[2], q.codebook_size
    w32 = W.detach().float()
    h32 = _symmetric(H, torch.float32)
    codes = q.codes.detach()
    # flat scatter targets code * g + d, one row per codebook: grad_cb[c] = Σ over groups coded x of grad_v
    g_range = torch.arange(g, device=codes.device)
    flat_idx = (codes.reshape(-1, num_cb).T[:, :, None] * g + g_range).reshape(num_cb, -1)
    cb = q.codebooks.detach()[:, :, 0, :].float().clone()  # [M, K, g]
    s = q.scales.detach().reshape(m).float().clone()
    f_in = layer_objective(W, reconstruct(q), H)
    if not f_in > 0.0:
        return q

    # Adam is scale-free in the gradient, so lr is a relative step: codebooks move by ~lr · RMS(codebooks)
    # and scales by ~lr · RMS(scales) per step. The loss is normalised by f_in, so eps = 1e-8 is negligible.
    lr_cb = lr * float(cb.pow(2).mean().sqrt().clamp_min(1e-12))
    lr_s = lr * float(s.pow(2).mean().sqrt().clamp_min(1e-12))
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    m_cb, v_cb = torch.zeros_like(cb), torch.zeros_like(cb)
    m_s, v_s = torch.zeros_like(s), torch.zeros_like(s)
    best_f, best_cb, best_s = f_in, cb.clone(), s.clone()

    for step in range(steps + 1):
        vecs = _sum_codewords(cb, codes)  # [m, G, g]
        w_hat = (vecs * s[:, None, None]).reshape(m, n)
        delta = w_hat - w32
        d_h = delta @ h32
        f = float((delta * d_h).sum(dtype=torch.float64))
        if step > 0 and f < best_f:
            best_f, best_cb, best_s = f, cb.clone(), s.clone()
        if step == steps or _past(deadline):
            break
        grad_w = (d_h * (2.0 / f_in)).reshape(m, -1, g)  # ∂(f / f_in)/∂Ŵ
        grad_s = (grad_w * vecs).sum((1, 2))
        grad_v = (grad_w * s[:, None, None]).reshape(-1)
        grad_cb = torch.zeros(num_cb, k_size * g, device=cb.device)
        for c in range(num_cb):
            grad_cb[c].index_add_(0, flat_idx[c], grad_v)
        grad_cb = grad_cb.reshape(num_cb, k_size, g)
        t = step + 1
        corr1, corr2 = 1 - beta1**t, 1 - beta2**t
        for p, grad, mom, var, rate in ((cb, grad_cb, m_cb, v_cb, lr_cb), (s, grad_s, m_s, v_s, lr_s)):
            mom.mul_(beta1).add_(grad, alpha=1 - beta1)
            var.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            p.sub_(rate * (mom / corr1) / ((var / corr2).sqrt() + eps))

    if best_f >= f_in:
        return q
    out = AqlmCodes(
        codes=q.codes,
        codebooks=best_cb.reshape(num_cb, k_size, 1, g).contiguous(),
        scales=best_s.reshape(m, 1, 1, 1).contiguous(),
    )
    # float32 evaluation picked the best point; confirm in float64 so f never gets worse.
    return out if layer_objective(W, reconstruct(out), H) <= f_in else q


def update_codebooks_scales(
    W: torch.Tensor, H: torch.Tensor, q: AqlmCodes, *, steps: int, lr: float = 3e-3
) -> AqlmCodes:
    """Codes frozen; ``steps`` Adam steps on codebooks and scales minimising f. ``lr`` is relative to
    the RMS of each tensor (codebooks and scales separately). Returns the best point seen, so f never
    gets worse than for ``q``."""
    return _adam(W, H, q, steps, lr, None)


# ------------------------------------------------------------------------------------------ driver


def aqlm_quantize(
    W: torch.Tensor,
    H: torch.Tensor,
    *,
    num_codebooks: int = 2,
    nbits: int = 8,
    group: int = 8,
    beam_size: int = 4,
    max_rounds: int = 10,
    adam_steps: int = 50,
    lr: float = 3e-3,
    rel_tol: float = 0.01,
    deadline: float | None = None,
    seed: int = 0,
    init_iters: int = 10,
    min_rounds: int = 0,
) -> AqlmResult:
    """Residual k-means init, then rounds of (Adam on codebooks/scales, one beam-search pass over the
    codes). Stops when a round improves f by less than ``rel_tol`` (relative), after ``max_rounds``, or
    once ``time.monotonic()`` passes ``deadline`` (the best codes so far are returned; every step only
    ever lowers f, so the latest state is the best). The first ``min_rounds`` rounds run whole even past
    the deadline: a layer whose share of the budget is shorter than one round still gets its
    Hessian-aware search (the k-means init does not see H)."""
    _check_inputs(W, H, group)
    W = W.detach().float()
    H = H.detach().float()
    energy = layer_objective(W, torch.zeros_like(W), H)
    norm = energy if energy > 0.0 else 1.0

    q = _residual_kmeans(W, num_codebooks, nbits, group, init_iters, seed, _INIT_MAX_POINTS, deadline)
    f = layer_objective(W, reconstruct(q), H)
    history = [f / norm]
    rounds = 0
    stopped_by = "max_rounds"
    while rounds < max_rounds:
        floor = rounds < min_rounds
        if _past(deadline) and not floor:
            stopped_by = "deadline"
            break
        round_deadline = None if floor else deadline
        q = _adam(W, H, q, adam_steps, lr, round_deadline)
        q = _beam_search(W, H, q, beam_size, round_deadline)
        rounds += 1
        f_new = layer_objective(W, reconstruct(q), H)
        history.append(f_new / norm)
        improved = (f - f_new) / f if f > 0.0 else 0.0
        f = f_new
        if _past(deadline) and rounds >= min_rounds:
            stopped_by = "deadline"
            break
        if improved < rel_tol:
            stopped_by = "converged"
            break
    return AqlmResult(
        q=q, objective_history=tuple(history), rounds=rounds, stopped_by=stopped_by, w_energy=energy
    )
