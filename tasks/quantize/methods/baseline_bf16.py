"""Near-null control: the baseline's weights rounded to bfloat16 (round to nearest even, 8 bits of
mantissa). Minimizes nothing and needs no calibration; its relative weight error is ≤ 2^-9. It is
scored through exactly the path every variant takes, as the run's own false-alarm check: a gate
that rejects it is miscalibrated.

Kalamkar et al., "A Study of BFLOAT16 for Deep Learning Training", arXiv 1905.12322.
"""

from __future__ import annotations

import torch

from quantgate.conf.methods import BaselineBf16

NEEDS_CALIBRATION = False


def convert(spec: BaselineBf16, model: torch.nn.Module) -> torch.nn.Module:
    """The model in bf16, saved as a dense checkpoint (loaders upcast it to the eval dtype)."""
    del spec  # nothing to choose
    return model.to(torch.bfloat16)
