"""Loading checkpoints the same way everywhere: baseline and every variant, same dtype."""

from __future__ import annotations

import os
from typing import Any

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def set_threads(num_cpus: float) -> None:
    """Match torch's intra-op threads to the CPUs this task was given."""
    n = max(1, int(num_cpus))
    torch.set_num_threads(n)
    os.environ["OMP_NUM_THREADS"] = str(n)


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def load_causal_lm(path: str, dtype: str = "float32") -> torch.nn.Module:
    """Any checkpoint transformers reads (plain or compressed-tensors), in eval mode.

    Compressed-tensors weights are dequantized at load (`dequantize=True`) rather than by the
    hook that waits for the first forward of the top-level model: evaluation runs the decoder
    on its own. Activation and KV-cache quantization stay in place either way. Our 2-bit
    codebook formats (QuIP#, AQLM) are rebuilt by `load_codebook_model`, decoded once likewise."""
    from transformers import AutoConfig, AutoModelForCausalLM, CompressedTensorsConfig

    from quantgate.tasks.quantize.codebook.checkpoint import CODEBOOK_METHODS, load_codebook_model

    kwargs = {}
    quant = getattr(AutoConfig.from_pretrained(path), "quantization_config", None) or {}
    if isinstance(quant, dict) and quant.get("quant_method") in CODEBOOK_METHODS:
        return load_codebook_model(path, DTYPES[dtype])
    if isinstance(quant, dict) and quant.get("quant_method") == "compressed-tensors":
        kwargs["quantization_config"] = CompressedTensorsConfig(dequantize=True)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype], **kwargs)
    model.eval()
    return model
