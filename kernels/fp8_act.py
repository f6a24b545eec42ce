"""FP8 (E4M3) dynamic per-token activation quantize-dequantize, for evaluating W8A8 checkpoints.

What is computed is compressed-tensors' QDQ for the scheme llm-compressor's FP8 W8A8 presets
write (`input_activations`: float, 8 bits, strategy token, dynamic, symmetric): per token (the
last dimension), scale = max|x| / 448 (a zero scale becomes float eps), x / scale clamped to
±448, rounded to E4M3, times the scale. `fp8_token_qdq_reference` is that formula as written.

Why a fast path: compressed-tensors runs it as a dozen separate passes over each activation
(amin, amax, zero-point add and subtract, two casts, ...) in every Linear's forward, so q, k and v
each quantize the same input again, as do gate and up. On one CPU core that made an FP8 variant's
evaluation 1.6-1.8x the baseline's (47 % of an FP8 forward in matmuls, the rest in the QDQ).
`fp8_token_qdq` computes the same numbers bit for bit (parity tests) in two vectorized reductions
and in-place elementwise steps; `Fp8InputQdq` quantizes a tensor that several Linears
read in a row (same object, not modified in between) once.
"""

from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max


def fp8_token_qdq_reference(x: torch.Tensor) -> torch.Tensor:
    """The readable reference: symmetric per-token scale, round to E4M3, scale back."""
    scale = x.abs().amax(dim=-1, keepdim=True) / E4M3_MAX
    eps = torch.tensor(torch.finfo(scale.dtype).eps, dtype=scale.dtype)  # compressed-tensors' choice
    scale = torch.where(scale == 0, eps, scale)
    q = torch.clamp(x / scale, -E4M3_MAX, E4M3_MAX).to(E4M3)
    return q.to(x.dtype) * scale


def fp8_token_qdq(x: torch.Tensor) -> torch.Tensor:
    """Same signature and bits as the reference; ~1.6x faster on large inputs, ~2x per call on
    decode-sized ones (fewer passes, fewer allocations)."""
    # max|x| as max(amax, −amin): two vectorized reductions, no |x| temporary (~20x faster here
    # than vector_norm(ord=inf), which is a scalar loop on CPU)
    scale = torch.maximum(x.amax(dim=-1, keepdim=True), x.amin(dim=-1, keepdim=True).neg_()).div_(E4M3_MAX)
    scale.masked_fill_(scale == 0, torch.finfo(scale.dtype).eps)
    q = torch.div(x, scale).clamp_(-E4M3_MAX, E4M3_MAX)
    return q.to(E4M3).to(x.dtype).mul_(scale)


class Fp8InputQdq:
    """Memo of the last quantized input, shared by the Linears of one model.

    Holds a reference to the last input and checks identity and version counter (bumped by any
    in-place change), so a hit is exactly the tensor that was quantized: q/k/v read one normed
    hidden state, gate/up another. Not for autograd (evaluation runs under no_grad)."""

    def __init__(self) -> None:
        self._x: torch.Tensor | None = None
        self._version = -1
        self._q: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x is self._x and x._version == self._version and self._q is not None:
            return self._q
        q = fp8_token_qdq(x)
        self._x, self._version, self._q = x, x._version, q
        return q
