"""Checkpoints of the 2-bit codebook formats, and the loader that rebuilds a working model.

Layout (a directory transformers' AutoConfig reads):
  config.json          the base model's config plus `quantization_config`:
                       QuIP#: {"quant_method": "quip_sharp", "codebook": "E8P12", "format_version": 1,
                               "modules_not_quantized": [...]}
                       AQLM:  the `aqlm` package's keys ("quant_method": "aqlm", in_group_size,
                               out_group_size, num_codebooks, nbits_per_codebook,
                               linear_weights_not_to_quantize), so transformers + aqlm load it too;
                               with incoherence processing ("quant_method": "aqlm_rht", `.SU`/`.SV`
                               as QuIP#'s beside the codes) ours only: aqlm would misread the codes.
  model.safetensors    every unquantized tensor as in the base model (a decoder block's Linear kept
                       unquantized: in fp16), and per quantized Linear
                       `<name>.qidxs` [m, n/8] int16, `.SU` [n] f16, `.SV` [m] f16, `.Wscale` []
                       f32 (QuIP#: signs of the randomized Hadamard transforms, whose Hadamard
                       factors are rebuilt from the shape by `kernels.hadamard.small_factor`),
                       plus `.qidxs_residual` and `.Wscale_residual` on a two-stage (4-bit) layer;
                       or `<name>.codes` [m, n/8, M] int8, `.codebooks` [M, 256, 1, 8] f16,
                       `.scales` [m, 1, 1, 1] f16 (AQLM; f32 before 2026-12-04, still loaded).
  tokenizer files, generation_config.json
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from quantgate.kernels.codebook_linear import AqlmLinear, QuipLinear
from quantgate.tasks.model.size import in_decoder_blocks


def target_linears(model: torch.nn.Module, ignore: tuple[str, ...]) -> dict[str, torch.nn.Linear]:
    """The Linear layers a method quantizes: every Linear whose name matches no `ignore` entry."""
    return {name: m for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and not any(i in name for i in ignore)}


def save_codebook_checkpoint(model: torch.nn.Module, tokenizer: Any, *,
                             layers: dict[str, dict[str, torch.Tensor]],
                             quantization_config: dict[str, Any], out: Path) -> None:
    """Linears of the decoder blocks that the method kept unquantized (mixed precision: the spec's
    `ignore`) are stored in fp16, the precision a 2-bit model's kept layers are priced at."""
    out.mkdir(parents=True, exist_ok=True)
    state: dict[str, torch.Tensor] = {}
    replaced = {f"{name}.weight" for name in layers} | {f"{name}.bias" for name in layers}
    kept = {f"{name}.weight" for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and name not in layers and in_decoder_blocks(name)}
    tied = getattr(model.config, "tie_word_embeddings", False)
    for key, value in model.state_dict().items():
        if key in replaced or (tied and key == "lm_head.weight"):
            continue
        value = value.half() if key in kept else value
        state[key] = value.detach().cpu().contiguous()
    for name, tensors in layers.items():
        bias = model.get_submodule(name).bias
        if bias is not None:
            state[f"{name}.bias"] = bias.detach().cpu().contiguous()
        for leaf, value in tensors.items():
            state[f"{name}.{leaf}"] = value.detach().cpu().contiguous()
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config["quantization_config"] = quantization_config
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _codebook_module(linear: torch.nn.Linear, qc: dict[str, Any], tensors: Iterable[str]) -> torch.nn.Module:
    """The empty module for `linear`, shaped by the config and by the names of its stored `tensors`."""
    bias = linear.bias is not None
    if qc["quant_method"] == "quip_sharp":
        return QuipLinear(linear.in_features, linear.out_features, bias, residual="qidxs_residual" in tensors)
    if qc.get("out_group_size", 1) != 1:
        raise ValueError(f"quantization_config.out_group_size={qc['out_group_size']}: only 1 is supported")
    return AqlmLinear(linear.in_features, linear.out_features, bias, num_codebooks=qc["num_codebooks"],
                      nbits=qc["nbits_per_codebook"], group=qc["in_group_size"],
                      rotated=qc["quant_method"] == "aqlm_rht")


def codebook_layer(linear: torch.nn.Linear, qc: dict[str, Any], tensors: dict[str, torch.Tensor]
                   ) -> torch.nn.Module:
    """The codebook module that replaces `linear`, holding `tensors` (its checkpoint entries)."""
    module = _codebook_module(linear, qc, tensors)
    bias = {} if linear.bias is None else {"bias": linear.bias.detach()}
    module.load_state_dict(tensors | bias, strict=True)
    return module


def load_codebook_model(path: str, dtype: torch.dtype = torch.float32, *, materialize: bool = True
                        ) -> torch.nn.Module:
    """Rebuild the model from config, swap in the codebook Linears, load the tensors strictly.

    `materialize=True` decodes every layer once to a dense weight (evaluation throughput);
    False keeps the compressed forward (speed benchmarks, parity checks)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    qc = dict(config.quantization_config)
    del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    skip = qc.get("modules_not_quantized") or qc.get("linear_weights_not_to_quantize") or []
    skip = [s.removesuffix(".weight") for s in skip]
    state = load_file(str(Path(path) / "model.safetensors"))
    for name, linear in target_linears(model, tuple(skip)).items():
        own = [key.removeprefix(f"{name}.") for key in state if key.startswith(f"{name}.")]
        model.set_submodule(name, _codebook_module(linear, qc, own))
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise ValueError(f"{path}: checkpoint does not match its config "
                         f"(missing {sorted(set(missing) - tied)[:5]}, unexpected {unexpected[:5]})")
    model.tie_weights()
    model.to(dtype)
    for module in model.modules():
        if materialize and isinstance(module, QuipLinear | AqlmLinear):
            module.materialize()
    return model.eval()
