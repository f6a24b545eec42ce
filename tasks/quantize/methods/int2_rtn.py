"""INT2 round-to-nearest (control for the 2-bit methods): W2A16, one absmax scale per group.
Minimizes each weight's own rounding error; at 2 bits this collapses a small model, which is
the point of the control. Same recipe as `int4_rtn` with `num_bits=2` from the spec.
"""

from __future__ import annotations

from quantgate.tasks.quantize.methods.int4_rtn import NEEDS_CALIBRATION, build_recipe

__all__ = ["NEEDS_CALIBRATION", "build_recipe"]
