"""INT8 W8A8: SmoothQuant, then GPTQ. SmoothQuant divides each input channel of a Linear's
activations by s_j = max|X_j|^α / max|W_j|^(1−α) and multiplies the weight's column by it, so that
Y = (X diag(s)⁻¹)(diag(s) W) is unchanged while activation outliers move into the weights, where
per-channel INT8 holds them; GPTQ then rounds the weights to INT8 per output channel minimizing
‖(W − Ŵ) X‖² through the inverse Hessian. Activations are quantized per token at run time.

Xiao et al., "SmoothQuant: Accurate and Efficient Post-Training Quantization for Large Language
Models", arXiv 2211.10438; Frantar et al., "GPTQ", arXiv 2210.17323.
"""

from __future__ import annotations

from typing import Any

from quantgate.conf.methods import Int8W8A8

NEEDS_CALIBRATION = True


def build_recipe(spec: Int8W8A8) -> list[Any]:
    from llmcompressor.modifiers.quantization import GPTQModifier
    from llmcompressor.modifiers.smoothquant import SmoothQuantModifier

    return [SmoothQuantModifier(smoothing_strength=spec.smoothing_strength),
            GPTQModifier(targets="Linear", scheme="W8A8", ignore=list(spec.ignore),
                         dampening_frac=spec.dampening_frac)]
