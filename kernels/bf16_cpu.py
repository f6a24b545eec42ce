"""bf16 Linear for single-token decode on CPU: torch's native bf16 GEMV with oneDNN switched off.

For one token, oneDNN's bf16 GEMV reads weights at about half of DRAM speed on the project's CPU
(AMD EPYC, AVX-512 bf16), while torch's native kernel reads them at DRAM speed: per layer from
DRAM, against fp32, 2.6-2.9x for native against 1.2-1.5x for oneDNN (SmolLM2's lm_head 4.2 ms
against 6.7 ms, fp32 10 ms). For more tokens oneDNN's GEMM wins, so only single-token calls switch.
Under torch.compile it is a plain Linear: turn oneDNN off around a compiled batch-1 decode instead.

Where oneDNN has no bf16 kernels (AVX2-only CPUs: AMD EPYC Milan, `torch.ops.mkldnn.
_is_mkldnn_bf16_supported()` false), torch's fallback bf16 GEMM is slow: a 55-token prefill through
a 576 -> 1536 layer took 9.9 ms against 1.3 ms in fp32 (1 thread), so prefill in bf16 made a
dequantized FP8 canary's first token 5x later than the fp32 champion's. There, calls of 4 tokens
and more on one thread, 16 on two (`fp32_pays`: a prompt's prefill, larger batched decode) compute
in fp32 on the weight upcast a block of rows at a time (1.5 ms) and round the output to bf16; fewer
tokens stay in bf16, and so does the single-token GEMV (1.4x fp32's decode speed on that CPU: it
reads half the bytes).

The reference is `torch.nn.Linear.forward` itself: the same op, only the backend differs.
"""

from __future__ import annotations

import torch


def _onednn_has_bf16() -> bool:
    # the op is private and absent from builds without oneDNN: there, no bf16 GEMM is fast either
    try:
        return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


ONEDNN_BF16 = _onednn_has_bf16()
"""oneDNN has bf16 kernels on this CPU (AVX-512 or AMX): multi-token bf16 calls are fast there."""


class Bf16Linear(torch.nn.Linear):
    """nn.Linear whose single-token calls (batch-1 decode) run with oneDNN switched off, and whose
    multi-token calls run in fp32 where oneDNN has no bf16 kernels and there are tokens enough."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():  # a plain Linear: no graph break per layer
            return super().forward(x)
        if x.numel() != self.in_features:
            if ONEDNN_BF16 or x.dtype != torch.bfloat16 or not fp32_pays(x.numel() // self.in_features):
                return super().forward(x)
            return fp32_linear_chunked(x, self.weight, self.bias)
        was = torch._C._get_mkldnn_enabled()
        torch._C._set_mkldnn_enabled(False)
        try:
            return super().forward(x)
        finally:
            torch._C._set_mkldnn_enabled(was)


FP32_MIN_TOKENS = {1: 4, 2: 16}
"""Where oneDNN has no bf16 kernels, the fewest tokens from which a call runs in fp32 by row blocks
rather than torch's fallback bf16 GEMM, by thread count. On the AVX2 EPYC, the FP8 variant of
SmolLM2, one decode step, the paths called in turn (`bench/bf16_cpu_paths.py`): one thread, batch 2
bf16 73 ms against fp32 80, batch 8 264 against 140; two threads, batch 8 150 against 192, batch 16
293 against 214. Per layer on one thread, fp32 wins every shape from 4 tokens. The bf16 fallback
spreads over two threads where the small fp32 blocks do not. More threads take two threads' value
(not measured; likely low for batched decode there): a prompt's prefill stays fp32, which takes a
third of bf16's time at 55 tokens on two threads."""


def fp32_pays(tokens: int) -> bool:
    """A multi-token bf16 call of `tokens` rows runs faster in fp32 by row blocks than in torch's
    fallback bf16 GEMM, at this thread count."""
    return tokens >= FP32_MIN_TOKENS[min(torch.get_num_threads(), 2)]


FP32_CHUNK = 1 << 20
"""Weight elements upcast at a time (4 MB in fp32): the chunk stays in cache and the allocator reuses
it, where upcasting SmolLM2's whole 28M-weight lm_head page-faults 113 MB in on every call."""


def fp32_linear_chunked(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`linear(x, weight, bias)` computed in fp32 on the weight upcast a block of output rows at a time,
    rounded once to x's dtype. On the AVX2 EPYC (1 thread), a 576 -> 49152 lm_head at 8 tokens: 21 ms,
    against 52 ms in bf16 and 124 ms upcasting the whole weight; a 576 -> 1536 layer at 8 tokens is
    0.56 ms against 2.1 ms in bf16."""
    xf = x.float()
    out = torch.empty(*x.shape[:-1], weight.shape[0], dtype=torch.float32)
    rows = max(1, FP32_CHUNK // weight.shape[1])
    for i in range(0, weight.shape[0], rows):
        out[..., i:i + rows] = xf @ weight[i:i + rows].float().T
    if bias is not None:
        out += bias.float()
    return out.to(x.dtype)


def native_gemv(model: torch.nn.Module) -> torch.nn.Module:
    """Every plain bf16 nn.Linear of `model` becomes a Bf16Linear, in place (weights and ties kept)."""
    for m in model.modules():
        if type(m) is torch.nn.Linear and m.weight.dtype == torch.bfloat16:
            m.__class__ = Bf16Linear
    return model
