"""Input-channel normalization for formats that cannot store an input scale (AQLM's): the scale is
moved into whatever produces the layer's input.

A Linear W reading x computes the same function as W D reading D⁻¹ x, D = diag(d), and has the
same proxy loss: tr(ΔW H ΔWᵀ) = tr(ΔW' H' ΔW'ᵀ) with W' = W D and H' = D⁻¹ H D⁻¹. Quantizing W'
against H' evens out the massive-activation channels that dominate H (SmolLM2's down_proj inputs),
so the codebooks are not spent on one column's precision. D⁻¹ must be applied exactly by the
producer of x: in a Llama block an RMSNorm's weight (q/k/v read input_layernorm, gate/up read
post_attention_layernorm) or, for down_proj, which reads silu(gate x) ⊙ (up x), the output rows of
up_proj (AQLM's row scales, QuIP#'s S_V, a dense weight's rows). o_proj reads the attention output,
whose channels are v_proj rows shared by the query heads of a group: not normalized. QuIP# needs
none of this (its S_U holds the scale, see `kernels.quip_sharp`).
"""

from __future__ import annotations

import torch

from quantgate.kernels.codebook_linear import AqlmLinear, QuipLinear, _CodebookLinear
from quantgate.kernels.hessian import channel_scales
from quantgate.tasks.quantize.codebook.block_tuning import find_decoder_blocks

READERS = {"input_layernorm": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
           "post_attention_layernorm": ("mlp.gate_proj", "mlp.up_proj"), "mlp.up_proj": ("mlp.down_proj",)}
"""Absorber (Llama naming: the module whose output channels are a group's input) -> every Linear that
reads that output; a reader kept out of the group (`ignore`) takes D too."""
EXACT_TOLERANCE = 1e-2
"""Relative change of an output past which a rescale counts as not exact: fp rounding (QuIP#'s fp16
S_V) stays near 1e-3; a norm that is not y = w ⊙ x̂ (Gemma's (1 + w)) or a wrong absorber is O(1)."""


class NotAbsorbable(ValueError):
    """The model's layout cannot take the input scale exactly (not a Llama-style block)."""


@torch.no_grad()
def scale_output_channels(module: torch.nn.Module, factor: torch.Tensor) -> None:
    """Multiply `module`'s output channel j by factor[j], exactly, in its own parameters."""
    if isinstance(module, AqlmLinear) and not module.rotated:
        module.scales.mul_(factor.view(-1, 1, 1, 1).to(module.scales.dtype))
    elif isinstance(module, QuipLinear | AqlmLinear):  # rotated: output j is S_V[j] × (its row)
        module.SV.copy_((module.SV.double() * factor).to(module.SV.dtype))
    elif isinstance(module, torch.nn.Linear):
        module.weight.mul_(factor[:, None].to(module.weight.dtype))
    elif type(module).__name__.endswith("RMSNorm"):
        module.weight.mul_(factor.to(module.weight.dtype))
    else:
        raise NotAbsorbable(f"{type(module).__name__} cannot absorb an output-channel scale")
    if getattr(module, "bias", None) is not None:
        module.bias.mul_(factor.to(module.bias.dtype))
    if isinstance(module, _CodebookLinear) and module.dense is not None:
        module.materialize()


@torch.no_grad()
def normalize_group_inputs(block: torch.nn.Module, group: list[str], hessians: dict[str, torch.Tensor],
                           power: float) -> dict[str, torch.Tensor]:
    """Rescale the group's input channels by (H_jj / mean H_jj)^(power/2) through its absorber; returns
    the Hessians of the rescaled inputs. Unchanged when power is 0 or the group has no absorber. A
    dense reader of the same input kept out of the group (`ignore`) is rescaled with it, so the block
    computes what it did."""
    absorber = next((key for key, readers in READERS.items() if set(group) & set(readers)), None)
    if not power or absorber is None:
        return hessians
    if strays := set(group) - set(READERS[absorber]):
        raise NotAbsorbable(f"{sorted(strays)} and the readers of {absorber} share an input in no "
                            "Llama block")
    if len({id(hessians[name]) for name in group}) != 1:
        raise NotAbsorbable(f"{group} read one input but came with different Hessians")
    modules = {name: _submodule(block, name) for name in (absorber, *READERS[absorber])}
    H = hessians[group[0]]  # the group reads one tensor: one Hessian
    d = channel_scales(H, power)
    scale_output_channels(modules[absorber], 1.0 / d)
    for name in READERS[absorber]:
        if name not in group and not isinstance(modules[name], torch.nn.Linear):
            raise NotAbsorbable(f"{name} reads the input of {group} but is neither in the group nor dense")
        weight = modules[name].weight
        weight.mul_(d[None, :].to(weight.dtype))
    scaled = H / d[:, None] / d[None, :]
    return dict.fromkeys(group, scaled)


def _submodule(block: torch.nn.Module, name: str) -> torch.nn.Module:
    try:
        return block.get_submodule(name)
    except AttributeError:
        raise NotAbsorbable(f"the decoder block has no {name}: not a Llama-style block") from None


def check_unchanged(before: torch.Tensor, after: torch.Tensor, what: str) -> None:
    """Raise NotAbsorbable when a rescale changed `what` (an output computed before and after it)."""
    change = float((after - before).float().norm() / before.float().norm().clamp_min(1e-30))
    if not change <= EXACT_TOLERANCE:
        raise NotAbsorbable(f"{what} changed by {change:.2g} (relative) when its input channels were "
                            "rescaled: this architecture's norms or layers do not absorb the scale exactly")


@torch.no_grad()
def normalize_all_inputs(model: torch.nn.Module, hessians: dict[str, torch.Tensor], power: float,
                         probe: torch.Tensor) -> dict[str, torch.Tensor]:
    """`normalize_group_inputs` for the all-at-once loop: every group of the still unquantized
    decoder blocks (`model.model.layers`), from the calibration Hessians of the targets (`hessians`,
    by full name). The model's logits on `probe` (input ids) must not change."""
    found = find_decoder_blocks(model)
    if not power or found is None:
        return hessians
    prefix, blocks = found
    before = model(input_ids=probe).logits
    out = dict(hessians)
    for index, block in enumerate(blocks):
        for readers in READERS.values():
            group = [name for name in readers if f"{prefix}.{index}.{name}" in hessians]
            if not group:
                continue
            own = {n: hessians[f"{prefix}.{index}.{n}"] for n in group}
            scaled = normalize_group_inputs(block, group, own, power)
            out |= {f"{prefix}.{index}.{n}": H for n, H in scaled.items()}
    check_unchanged(before, model(input_ids=probe).logits, "the model's logits")
    return out
