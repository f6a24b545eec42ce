"""Codes that move during end-to-end fine-tuning: PV-tuning's V step (arXiv 2405.14852).

Minimizes the fine-tuning loss over the discrete codes too. Each layer keeps a latent weight
Ŵ + Δ beside its codes (the straight-through estimator's latent weight: the gradient with respect to
the decoded Ŵ is applied to it as if Ŵ were a free weight). Each step Δ takes an Adam step

    Δ ← Δ − lr · rms(Ŵ) · m̂ / (√v̂ + ε),

the target T = Ŵ + Δ is re-encoded with the codebook, scales and signs fixed, and only the code
groups that gain most take their new codes: at most `max_fraction` of a layer's groups per step
(PV-tuning's ~1 %; `_CodebookLinear.update_codes`, kernels/reencode). What a move realizes leaves Δ,
so Δ holds the pressure a group has not yet acted on: an Adam step is a small fraction of the
distance between neighbouring codewords, and a group moves once the pressure on it has lasted. The
continuous parameters' own Adam step (the P step) runs beside it. The rate is relative to the
layer's RMS so one rate serves every layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from quantgate.kernels.codebook_linear import _CodebookLinear


@dataclass
class CodeUpdates:
    layers: Sequence[_CodebookLinear]
    lr: float  # of the layer's weight RMS, per step
    max_fraction: float  # of a layer's code groups that may change per step
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-12
    changed: int = 0  # code groups moved so far, all layers
    steps: int = 0
    _state: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def track(self) -> None:
        """Keep the gradient of each layer's differentiable decode (`module.dense`, set per step)."""
        for layer in self.layers:
            if layer.dense is not None and layer.dense.requires_grad:
                layer.dense.retain_grad()

    @torch.no_grad()
    def step(self) -> int:
        """After backward: move the codes of every layer whose decode got a gradient."""
        self.steps += 1
        b1, b2 = self.betas
        moved = 0
        for layer in self.layers:
            dense = layer.dense
            if dense is None or dense.grad is None:
                continue
            grad = dense.grad.float()
            if id(layer) not in self._state:
                self._state[id(layer)] = tuple(torch.zeros_like(grad) for _ in range(3))
            m, v, delta = self._state[id(layer)]
            m.mul_(b1).add_(grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
            direction = (m / (1 - b1**self.steps)) / ((v / (1 - b2**self.steps)).sqrt() + self.eps)
            w = layer.decode_weight()  # after the P step: the codebooks and scales a move is made with
            delta.sub_(direction, alpha=self.lr * float(w.square().mean().sqrt()))
            changed = layer.update_codes(w + delta, self.max_fraction)
            if changed:
                delta.sub_(layer.decode_weight() - w)  # realized: no longer pending
            moved += changed
        self.changed += moved
        return moved
