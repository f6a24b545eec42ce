"""INT2 GPTQ (control for the 2-bit methods): Hessian-aware rounding (minimizes tr(ΔW H ΔWᵀ))
on a scalar 2-bit grid, no rotation, no codebook: what QuIP# and AQLM must beat. Same recipe
as `int4_gptq` with `num_bits=2` from the spec (Frantar et al., arXiv 2210.17323).
"""

from __future__ import annotations

from quantgate.tasks.quantize.methods.int4_gptq import NEEDS_CALIBRATION, build_recipe

__all__ = ["NEEDS_CALIBRATION", "build_recipe"]
