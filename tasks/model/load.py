"""Loading checkpoints for evaluation, the same way for the baseline and every variant, one dtype:
every format decoded to dense weights (quality, not speed; `fast_cpu.py` and `gpu.py` load for
speed), activation and KV-cache quantization kept where the format has them."""

from __future__ import annotations

from typing import Any

import torch

from quantgate.tasks.model.formats import checkpoint_format

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def load_causal_lm(path: str, dtype: str = "float32") -> torch.nn.Module:
    """Any checkpoint transformers reads (plain or compressed-tensors), in eval mode.

    Compressed-tensors weights are dequantized at load (`dequantize=True`) rather than by the
    hook that waits for the first forward of the top-level model: evaluation runs the decoder
    on its own. Activation and KV-cache quantization stay in place either way. Our 2-bit
    codebook formats (QuIP#, AQLM) are rebuilt by `load_codebook_model`, decoded once likewise."""
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    from quantgate.tasks.model.codebook_format import load_codebook_model

    kind = checkpoint_format(path).kind
    if kind in ("quip_sharp", "aqlm"):
        return load_codebook_model(path, DTYPES[dtype])
    kwargs = {"quantization_config": CompressedTensorsConfig(dequantize=True)} if kind != "dense" else {}
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype], **kwargs)
    model.eval()
    return model
