"""INT4 GPTQ: W4A16 weights chosen column by column to minimize the layer's output error
‖(W − Ŵ) X‖² = tr(ΔW H ΔWᵀ), H = X Xᵀ from the calibration activations, by propagating each
column's rounding error onto the not-yet-quantized columns through the inverse Hessian.

Frantar et al., "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
Transformers", arXiv 2210.17323.
"""

from __future__ import annotations

from typing import Any

from quantgate.conf.methods import Int4Gptq
from quantgate.tasks.quantize.wna16 import w4a16_groups

NEEDS_CALIBRATION = True


def build_recipe(spec: Int4Gptq) -> list[Any]:
    from llmcompressor.modifiers.gptq import GPTQModifier

    return [GPTQModifier(config_groups=w4a16_groups(spec, actorder=spec.actorder),
                         ignore=list(spec.ignore), dampening_frac=spec.dampening_frac)]
