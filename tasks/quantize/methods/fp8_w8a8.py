"""FP8 W8A8: E4M3 weights with one static scale per output channel, E4M3 activations with
one dynamic scale per token. Minimizes nothing: scales are absmax (no calibration needed);
the format's 3 mantissa bits keep relative error ≤ 2^-4 per value.

Micikevicius et al., "FP8 Formats for Deep Learning", arXiv 2209.05433.
"""

from __future__ import annotations

from typing import Any

from quantgate.conf.methods import Fp8W8A8

NEEDS_CALIBRATION = False


def build_recipe(spec: Fp8W8A8) -> list[Any]:
    from llmcompressor.modifiers.quantization import QuantizationModifier

    return [QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=list(spec.ignore))]
