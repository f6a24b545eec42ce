"""FP8 KV cache alone: the weights stay as they are; keys and values are stored as E4M3 with one
static scale per layer (k_scale, v_scale), the absmax of the post-RoPE keys/values over the traffic
sample divided by E4M3's largest value (448). Minimizes nothing beyond covering the observed range;
calibrated scales cost ~0.6 % PPL on Llama-3.1-70B where uncalibrated ones cost ~5.7 % (REFERENCE.md).
The engine serves it as `--kv-cache-dtype fp8`, reading the scales from the checkpoint.

Kwon et al., "Efficient Memory Management for LLM Serving with PagedAttention" (vLLM FP8 KV),
arXiv 2309.06180; Micikevicius et al., "FP8 Formats for Deep Learning", arXiv 2209.05433.
"""

from __future__ import annotations

from typing import Any

from quantgate.conf.methods import Fp8KvCache
from quantgate.tasks.quantize.methods.kv_fp8 import KV_CACHE_SCHEME

NEEDS_CALIBRATION = True


def build_recipe(spec: Fp8KvCache) -> list[Any]:
    from llmcompressor.modifiers.quantization import QuantizationModifier

    del spec  # no weight scheme: the KV cache is the whole format
    return [QuantizationModifier(kv_cache_scheme=KV_CACHE_SCHEME)]
