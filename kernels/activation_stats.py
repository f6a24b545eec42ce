"""Per-channel input-activation statistics of Linear layers, outlier channels, and drift.

For each Linear, over all calibration tokens x ∈ R^n (n = in_features):
  mean_abs[j] = E|x_j|,  max_abs[j] = max |x_j|.
A few channels with max_abs far above the layer's median are the outliers that make
activation quantization hard (LLM.int8(), AWQ). Drift between two calibration sets is the
root-mean-square log ratio of their mean_abs profiles, averaged over layers: 0 for the
same traffic, ~0.1 means channels typically moved by ~10 %.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

EPS = 1e-6


@dataclass
class ChannelStats:
    abs_sum: torch.Tensor  # [n] float64
    abs_max: torch.Tensor  # [n] float32
    tokens: int = 0

    @classmethod
    def empty(cls, n: int) -> ChannelStats:
        return cls(torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float32))

    def update(self, x: torch.Tensor) -> None:
        flat = x.detach().reshape(-1, x.shape[-1]).abs()  # [T, n]
        self.abs_sum += flat.sum(0, dtype=torch.float64)
        self.abs_max = torch.maximum(self.abs_max, flat.amax(0).float())
        self.tokens += flat.shape[0]

    @property
    def mean_abs(self) -> torch.Tensor:  # [n]
        return (self.abs_sum / max(self.tokens, 1)).float()


@dataclass(frozen=True)
class Outliers:
    channels: list[int]  # strongest first
    ratio_to_median: list[float]  # max_abs[channel] / median(max_abs)


def top_outliers(abs_max: torch.Tensor, k: int) -> Outliers:
    median = abs_max.median().clamp_min(EPS)
    values, idx = abs_max.topk(min(k, abs_max.numel()))
    return Outliers(idx.tolist(), (values / median).tolist())


def profile_drift(a: torch.Tensor, b: torch.Tensor) -> float:
    """RMS of log(a / b) over channels; both are mean_abs profiles of one layer."""
    if a.shape != b.shape:
        raise ValueError(f"profiles differ in shape: {tuple(a.shape)} vs {tuple(b.shape)}")
    ratio = torch.log(a.double().clamp_min(EPS)) - torch.log(b.double().clamp_min(EPS))
    return float(ratio.pow(2).mean().sqrt())


def drift_score(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Mean over the layers both sets have of `profile_drift`."""
    shared = sorted(set(a) & set(b))
    if not shared:
        raise ValueError("the two calibration sets share no layer: were they made on one model?")
    return sum(profile_drift(a[n], b[n]) for n in shared) / len(shared)
