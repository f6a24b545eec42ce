"""Proxy Hessians of Linear layers: H = Σ x xᵀ over calibration tokens, per distinct input.

For a Linear y = W x, the output error of a perturbed weight over the calibration set is
Σ_t ‖ΔW x_t‖² = tr(ΔW H ΔWᵀ) with H = Σ_t x_t x_tᵀ — the objective GPTQ, QuIP# and AQLM
minimize. Layers that read the same tensor (q/k/v, gate/up) share one accumulator, found by
the input's identity within a forward pass, so shared inputs cost one n×n update. Identity is
the tensor itself, held by a weak reference: an address alone is not, since a freed input's
memory is handed to the next tensor of its size (an attention output after the q/k/v input),
which would then be counted in another layer's Hessian.
Accumulation is float64: H sums ~10⁴ rank-one terms whose small eigenvalues matter to the
Cholesky factorization downstream.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch


@dataclass
class HessianAccumulator:
    sum_xxt: torch.Tensor  # [n, n] float64
    tokens: int = 0

    def update(self, x: torch.Tensor) -> None:
        flat = x.detach().reshape(-1, x.shape[-1]).to(torch.float64)  # [T, n]
        self.sum_xxt.addmm_(flat.T, flat)
        self.tokens += flat.shape[0]

    def mean(self) -> torch.Tensor:  # [n, n] E[x xᵀ], float64
        return self.sum_xxt / max(self.tokens, 1)


@dataclass
class HessianCollector:
    """Forward pre-hooks on the chosen Linears; `hessians[name]` after the calibration forwards."""

    accumulators: dict[str, HessianAccumulator] = field(default_factory=dict)
    _handles: list = field(default_factory=list)
    _seen: dict[tuple, tuple[weakref.ref, HessianAccumulator]] = field(default_factory=dict)

    def attach(self, modules: dict[str, torch.nn.Linear]) -> HessianCollector:
        for name, module in modules.items():
            self._handles.append(module.register_forward_pre_hook(self._hook(name)))
        return self

    def _hook(self, name: str):
        def hook(_module: torch.nn.Module, args: tuple) -> None:
            x = args[0]
            key = (x.data_ptr(), tuple(x.shape), x._version)
            seen = self._seen.get(key)
            if seen is not None and seen[0]() is not None:  # the same live tensor: q/k/v (gate/up)
                self.accumulators.setdefault(name, seen[1])  # read one hidden state: one update
                return
            acc = self.accumulators.get(name)
            if acc is None:
                acc = HessianAccumulator(torch.zeros(x.shape[-1], x.shape[-1], dtype=torch.float64,
                                                        device=x.device))
                self.accumulators[name] = acc
            acc.update(x)
            self._seen[key] = (weakref.ref(x), acc)

        return hook

    def next_batch(self) -> None:
        """Forget input identities between forwards (a freed buffer's address can be reused)."""
        self._seen.clear()

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def hessians(self) -> dict[str, torch.Tensor]:
        """name -> E[x xᵀ] [n, n] float64; sharing layers get the same tensor object."""
        means: dict[int, torch.Tensor] = {}
        return {name: means.setdefault(id(acc), acc.mean()) for name, acc in self.accumulators.items()}


def channel_scales(H: torch.Tensor, power: float) -> torch.Tensor:
    """[n] float64 (H_jj / mean H_jj)^(power/2): input-channel scales that even out H's diagonal
    (power 1: every channel to the mean energy; 0: all ones). Used by the 2-bit methods on the
    massive-activation channels, see `kernels.quip_sharp` and `tasks.quantize.codebook.absorb`."""
    diag = H.diagonal().to(torch.float64).clamp_min(0)
    return (diag / diag.mean()).clamp_min(1e-6) ** (power / 2)
