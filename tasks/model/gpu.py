"""Load a checkpoint for speed on a GPU, in bf16, and say how it runs.

Our 2-bit formats keep their codes and decode inside the Triton kernels. What transformers loads
from compressed-tensors is dequantized at load (bf16 matmuls): vLLM's FP8 and Marlin INT4 kernels
are what serve those formats fast, and they are not used on this path."""

from __future__ import annotations

import torch

from quantgate.tasks.model.codebook_format import load_codebook_model
from quantgate.tasks.model.formats import checkpoint_format
from quantgate.tasks.model.load import load_causal_lm


def load_for_gpu(path: str) -> tuple[torch.nn.Module, str]:
    kind = checkpoint_format(path).kind
    if kind in ("quip_sharp", "aqlm"):
        return (load_codebook_model(path, torch.bfloat16, materialize=False),
                f"{kind}: codes decoded in the fused Triton kernel, bf16")
    how = ("bf16" if kind == "dense"
           else f"{kind} dequantized to bf16 at load (no low-bit kernel on this path)")
    return load_causal_lm(path, "bfloat16"), how
