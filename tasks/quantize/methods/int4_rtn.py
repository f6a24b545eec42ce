"""INT4 round-to-nearest (control): W4A16, one absmax scale per group of `group_size` inputs.
Minimizes each weight's own rounding error and nothing else: the floor every calibrated
method must beat. (Baseline in Frantar et al., GPTQ, arXiv 2210.17323.)
"""

from __future__ import annotations

from typing import Any

from quantgate.conf.methods import Int4Rtn
from quantgate.tasks.quantize.wna16 import w4a16_groups

NEEDS_CALIBRATION = False


def build_recipe(spec: Int4Rtn) -> list[Any]:
    from llmcompressor.modifiers.quantization import QuantizationModifier

    return [QuantizationModifier(config_groups=w4a16_groups(spec), ignore=list(spec.ignore))]
