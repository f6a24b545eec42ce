"""Load any checkpoint for speed on CPU: the fastest faithful path per format, and what it is.

Evaluation (`modeling.load_causal_lm`) decodes every format to dense fp32: quality, not speed.
- compressed-tensors int (W4A16, W2A16; group-wise, sym or asym): codes, scales, zero points read
  from the safetensors into torch's CPU int4 matmul (`Int4CpuLinear`); 2-bit codes are a subset of
  the 4-bit grid with the same scale (stored at 4 bits). Lossless but for bf16 scales/zeros.
- compressed-tensors INT8 W8A8 and the FP8 KV cache alone: dense bf16 (INT8 weights dequantized once).
- compressed-tensors FP8 (fp8_w8a8, kv_fp8): no FP8 units here (`torch._scaled_mm` ~0.1 GFLOP/s):
  weights dequantized once to bf16; activation and KV-cache quantization (QDQ only, on CPU) dropped.
- QuIP#: E8P transcoded losslessly to int4 (`QuipInt4CpuLinear`). AQLM: decoded once to dense bf16
  below `AQLM_LUT_FROM_WEIGHTS`, its compressed CPU path (LUT GEMV) from there.
- Unquantized: dense fp32 (the baseline), or bf16 on request.
Quantized paths run embeddings, norms and the tied lm_head in bf16. Every dense bf16 Linear is a
`kernels.bf16_cpu.Bf16Linear` (native bf16 GEMV with oneDNN off for one token).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from quantgate.kernels.bf16_cpu import native_gemv
from quantgate.kernels.codebook_linear import AqlmLinear, QuipLinear
from quantgate.kernels.int4_cpu import GROUPS, Int4CpuLinear
from quantgate.kernels.quip_cpu import QuipInt4CpuLinear
from quantgate.tasks.model.formats import checkpoint_format
from quantgate.tasks.model.load import load_causal_lm


def _finish(model: torch.nn.Module, modules: dict[str, torch.nn.Module], desc: str) -> tuple[Any, str]:
    """The model to bf16 but for `modules` (they keep their own dtypes: AQLM's fp32 codebooks),
    which are put in place; its remaining dense Linears (lm_head) on the native GEMV."""
    for name in modules:
        model.set_submodule(name, torch.nn.Identity())
    model.to(torch.bfloat16)
    for name, module in modules.items():
        model.set_submodule(name, module)
    return native_gemv(model).eval(), f"{desc}; bf16 activations; embeddings, norms, lm_head bf16"


def _int_linear(prefix: str, state: dict[str, torch.Tensor], args: dict[str, Any]) -> torch.nn.Module:
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32

    bits, shape = args["num_bits"], torch.Size(state[f"{prefix}.weight_shape"].tolist())
    scale = state[f"{prefix}.weight_scale"].float()  # [N, K/g]
    group = shape[1] // scale.shape[1]
    if args["strategy"] != "group" or bits > 4 or group not in GROUPS:
        raise ValueError(f"{prefix}: {bits}-bit {args['strategy']} group {group}: no int4 CPU kernel for it")
    if f"{prefix}.weight_g_idx" in state:
        raise ValueError(f"{prefix}: activation-ordered groups (g_idx) are not supported")
    q = unpack_from_int32(state[f"{prefix}.weight_packed"], bits, shape)  # int8 [N, K], −2^(b−1)..
    zp = None if args["symmetric"] else unpack_from_int32(
        state[f"{prefix}.weight_zero_point"], bits, scale.shape, packed_dim=0)
    return Int4CpuLinear.from_signed(q, scale, zp, group, state.get(f"{prefix}.bias"))


def _compressed_tensors(path: str, config: Any, qc: dict[str, Any]) -> tuple[torch.nn.Module, str]:
    from transformers import AutoModelForCausalLM

    groups = [g["weights"] for g in qc.get("config_groups", {}).values() if g.get("weights")]
    if len(groups) > 1:
        raise ValueError(f"{path}: expected one compressed-tensors weight config group, got {len(groups)}")
    # no weight group: the FP8 KV cache alone, on unquantized weights
    args = groups[0] if groups else {"type": "none", "num_bits": 16}
    state = {k: v for f in sorted(Path(path).glob("*.safetensors")) for k, v in load_file(str(f)).items()}
    prefixes = sorted(k.removesuffix(".weight_scale") for k in state if k.endswith(".weight_scale"))
    modules: dict[str, torch.nn.Module] = {}
    if args["type"] == "none":
        desc = "unquantized weights, dense bf16 matmul; KV cache runs bf16 (FP8 KV scales unused)"
    elif args["type"] == "int" and args["num_bits"] == 8:  # INT8 W8A8: per-channel int8 weights
        state |= {f"{p}.weight": state.pop(f"{p}.weight").float() * state.pop(f"{p}.weight_scale").float()
                  for p in prefixes}  # [N, K] · [N, 1]
        desc = ("INT8 weights dequantized to bf16, dense bf16 matmul (torch has no INT8 W8A8 GEMM here: "
                "the engine's oneDNN kernel is what serves it); activation quantization dropped on this path")
    elif args["type"] == "float":  # dense weights, loaded below like the unquantized tensors
        state |= {f"{p}.weight": state.pop(f"{p}.weight").float() * state.pop(f"{p}.weight_scale").float()
                  for p in prefixes}  # [N, K] · [N, 1]
        desc = ("no FP8 units on this CPU: FP8 weights dequantized to bf16, dense bf16 matmul; FP8 "
                "activation quantization dropped on this path")
        desc += "; KV cache runs bf16 (FP8 KV scales unused)" if qc.get("kv_cache_scheme") else ""
    else:
        modules = {p: _int_linear(p, state, args) for p in prefixes}
        desc = (f"int{args['num_bits']} g{args['group_size']} {'sym' if args['symmetric'] else 'asym'} via "
                f"packed-int4 CPU matmul{' (2-bit codes stored as 4-bit)' if args['num_bits'] < 4 else ''}")
    del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    owned = tuple(f"{p}." for p in modules)
    dropped = (".k_scale", ".v_scale", ".input_scale", ".output_scale")
    rest = {k: v for k, v in state.items() if not k.startswith(owned) and not k.endswith(dropped)}
    missing, unexpected = model.load_state_dict(rest, strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    missing = [k for k in missing if not k.startswith(owned) and k not in tied]
    if missing or unexpected:
        raise ValueError(f"{path}: checkpoint does not match its config (missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]})")
    model.tie_weights()
    return _finish(model, modules, desc)


AQLM_LUT_FROM_WEIGHTS: int | None = None
"""Weights (out × in) from which an AQLM layer keeps its LUT GEMV on CPU; None: never. Measured by
`bench/aqlm_widths.py` (2026-12-03, the 2-core EPYC, 1 thread, one token): the LUT GEMV is 7.5× a dense
fp32 GEMV at 576×576, 2.8–3.5× from 576×1536 to 4096×4096, 1.9× at 4096×11008 and 2.2× at 8192×8192.
No crossover up to 67 M weights: on this CPU an AQLM layer decodes faster as a dense matrix."""


def _dense_bf16(module: AqlmLinear) -> torch.nn.Linear:
    dense = torch.nn.Linear(module.in_features, module.out_features, bias=module.bias is not None)
    with torch.no_grad():
        dense.weight.copy_(module.decode_weight())
        if module.bias is not None:
            dense.bias.copy_(module.bias)
    return dense


def _codebook(path: str, method: str) -> tuple[torch.nn.Module, str]:
    from quantgate.tasks.model.codebook_format import load_codebook_model

    model = load_codebook_model(path, torch.float32, materialize=False)  # fp32 signs, scales, codebooks
    if method == "quip_sharp":
        swapped = {n: QuipInt4CpuLinear(m) for n, m in model.named_modules() if isinstance(m, QuipLinear)}
        desc = ("QuIP# E8P codes transcoded losslessly to int4 (scale 0.5, zero 0.25), packed-int4 CPU "
                "matmul in bf16, RHT and Wscale in fp32")
        two_stage = sum(m.packed_residual is not None for m in swapped.values())
        if two_stage:
            desc += f"; {two_stage} two-stage (4-bit) layers: one int4 matmul per stage"
    else:
        layers = {n: m for n, m in model.named_modules() if isinstance(m, AqlmLinear)}
        lut_from = AQLM_LUT_FROM_WEIGHTS
        swapped = {n: m for n, m in layers.items() if lut_from is not None and m.weight_count() >= lut_from}
        for name in layers.keys() - swapped.keys():
            model.set_submodule(name, _dense_bf16(layers[name]))  # to bf16 and the native GEMV below
        desc = (f"AQLM: {len(layers) - len(swapped)} layers decoded once to dense bf16 (the LUT GEMV is "
                f"slower at their widths here), {len(swapped)} on the LUT GEMV (fp32 inside, fp32 codebooks)")
    return _finish(model, swapped, desc)


def load_for_speed(path: str, dtype: str = "float32") -> tuple[torch.nn.Module, str]:
    """(model in eval mode, one line on the path taken). `dtype` applies to unquantized checkpoints
    only (the fp32 baseline, or "bfloat16" for a plain bf16 one); quantized ones pick their path."""
    from transformers import AutoConfig

    fmt = checkpoint_format(path)
    if fmt.kind in ("quip_sharp", "aqlm"):
        return _codebook(path, fmt.kind)
    if fmt.kind == "compressed-tensors":
        return _compressed_tensors(path, AutoConfig.from_pretrained(path), fmt.quantization_config)
    if dtype == "bfloat16":
        return native_gemv(load_causal_lm(path, dtype)), "dense bf16 (unquantized checkpoint)"
    return load_causal_lm(path, dtype), f"dense {dtype} (unquantized checkpoint)"

