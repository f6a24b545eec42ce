"""bf16 Linear for single-token decode on CPU: torch's native bf16 GEMV with oneDNN switched off.

For one token, oneDNN's bf16 GEMV reads weights at about half of DRAM speed on the project's CPU
(AMD EPYC, AVX-512 bf16), while torch's native kernel reads them at DRAM speed: per layer from
DRAM, against fp32, 2.6-2.9x for native against 1.2-1.5x for oneDNN (SmolLM2's lm_head 4.2 ms
against 6.7 ms, fp32 10 ms). For more tokens oneDNN's GEMM wins, so only single-token calls switch.
Under torch.compile it is a plain Linear: turn oneDNN off around a compiled batch-1 decode instead.

The reference is `torch.nn.Linear.forward` itself: the same op, only the backend differs.
"""

from __future__ import annotations

import torch


class Bf16Linear(torch.nn.Linear):
    """nn.Linear whose single-token calls (batch-1 decode) run with oneDNN switched off."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() != self.in_features or torch.compiler.is_compiling():  # no graph break per layer
            return super().forward(x)
        was = torch._C._get_mkldnn_enabled()
        torch._C._set_mkldnn_enabled(False)
        try:
            return super().forward(x)
        finally:
            torch._C._set_mkldnn_enabled(was)


def native_gemv(model: torch.nn.Module) -> torch.nn.Module:
    """Every plain bf16 nn.Linear of `model` becomes a Bf16Linear, in place (weights and ties kept)."""
    for m in model.modules():
        if type(m) is torch.nn.Linear and m.weight.dtype == torch.bfloat16:
            m.__class__ = Bf16Linear
    return model
