"""Quantization methods by the name the YAML uses. Adding a method: its module + one line."""

from __future__ import annotations

from types import ModuleType

from quantgate.tasks.quantize.methods import (
    aqlm_2x8,
    fp8_w8a8,
    int2_gptq,
    int2_rtn,
    int4_awq,
    int4_gptq,
    int4_rtn,
    kv_fp8,
    quip_sharp_2bit,
)

QUANTIZERS: dict[str, ModuleType] = {
    "fp8_w8a8": fp8_w8a8,
    "kv_fp8": kv_fp8,
    "int4_rtn": int4_rtn,
    "int4_gptq": int4_gptq,
    "int4_awq": int4_awq,
    "int2_rtn": int2_rtn,
    "int2_gptq": int2_gptq,
    "quip_sharp_2bit": quip_sharp_2bit,
    "aqlm_2x8": aqlm_2x8,
}


def quantizer_for(method: str) -> ModuleType:
    try:
        return QUANTIZERS[method]
    except KeyError:
        raise KeyError(f"method: unknown {method!r}; known: {', '.join(QUANTIZERS)}") from None
