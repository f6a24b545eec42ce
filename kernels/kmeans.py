"""Lloyd's k-means with k-means++ seeding (Arthur & Vassilvitskii, 2007), chunked for CPU memory:
the initializer of AQLM's codebooks (residual k-means, `kernels.aqlm`)."""

from __future__ import annotations

import math
import time

import torch

CHUNK = 16384  # points per chunk of the [points, K] distance matrix


def nearest_center(points: torch.Tensor, centers: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Index of and squared distance to the nearest center, chunked over points."""
    c_sq = (centers * centers).sum(1)
    idx = torch.empty(points.shape[0], dtype=torch.long, device=points.device)
    dist = torch.empty(points.shape[0], dtype=points.dtype, device=points.device)
    for start in range(0, points.shape[0], CHUNK):
        chunk = points[start : start + CHUNK]
        # ‖x − c‖² = ‖x‖² − 2 x·c + ‖c‖²; ‖x‖² does not change the argmin.
        scores = torch.addmm(c_sq, chunk, centers.T, alpha=-2.0)
        best, arg = scores.min(1)
        idx[start : start + chunk.shape[0]] = arg
        dist[start : start + chunk.shape[0]] = (best + (chunk * chunk).sum(1)).clamp_min(0.0)
    return idx, dist


def _scatter_rows(idx: torch.Tensor, rows: torch.Tensor, k: int) -> torch.Tensor:
    """out[c] = Σ_{p: idx[p] = c} rows[p] for rows [P, d] → [k, d] (flat index_add: much faster on CPU)."""
    d = rows.shape[1]
    flat = (idx[:, None] * d + torch.arange(d, device=rows.device)).reshape(-1)
    out = torch.zeros(k * d, dtype=rows.dtype, device=rows.device)
    return out.index_add_(0, flat, rows.reshape(-1)).reshape(k, d)


def _kmeans_pp(points: torch.Tensor, k: int, gen: torch.Generator) -> torch.Tensor:
    n = points.shape[0]
    centers = torch.empty(k, points.shape[1], dtype=points.dtype, device=points.device)
    first = int(torch.randint(n, (1,), generator=gen))
    centers[0] = points[first]
    d2 = ((points - centers[0]) ** 2).sum(1)
    uniform = torch.rand(k, generator=gen, dtype=torch.float64).to(points.device)  # CPU draws: any device
    for c in range(1, k):
        cum = d2.cumsum(0, dtype=torch.float64)
        total = float(cum[-1])
        if total > 0.0 and math.isfinite(total):  # D² sampling
            pick = min(int(torch.searchsorted(cum, uniform[c] * total)), n - 1)
        else:  # fewer distinct points than centers: duplicates are harmless
            pick = int(uniform[c] * n) % n
        centers[c] = points[pick]
        d2 = torch.minimum(d2, ((points - centers[c]) ** 2).sum(1))
    return centers


def kmeans(
    points: torch.Tensor, k: int, iters: int, gen: torch.Generator, max_points: int, deadline: float | None,
    min_iters: int = 0,
) -> torch.Tensor:
    """Lloyd's k-means with k-means++ seeding, fitted on at most max_points sampled points; the first
    `min_iters` iterations run whatever the deadline says."""
    if points.shape[0] > max_points:
        sample = points[torch.randperm(points.shape[0], generator=gen)[:max_points]]
    else:
        sample = points
    centers = _kmeans_pp(sample, k, gen)
    prev = None
    for it in range(iters):
        if it >= min_iters and deadline is not None and time.monotonic() > deadline:
            break
        idx, _ = nearest_center(sample, centers)
        if prev is not None and torch.equal(idx, prev):
            break
        prev = idx
        sums = _scatter_rows(idx, sample, k)
        counts = torch.bincount(idx, minlength=k).to(sample.dtype)
        filled = counts > 0
        centers[filled] = sums[filled] / counts[filled, None]
        empty = int((~filled).sum())
        if empty:  # re-seed empty clusters at random sample points
            centers[~filled] = sample[torch.randint(sample.shape[0], (empty,), generator=gen)]
    return centers
