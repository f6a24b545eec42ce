"""INT4 AWQ: W4A16 weights after per-input-channel scales s that minimize the output error
‖Q(W·diag(s)) diag(s)⁻¹ X − W X‖ on calibration activations, searched on a grid of
s = mean|x|^α (salient channels, those with large activations, get finer steps).

Lin et al., "AWQ: Activation-aware Weight Quantization for LLM Compression and
Acceleration", arXiv 2306.00978.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from quantgate.conf.methods import Int4Awq
from quantgate.tasks.quantize.wna16 import w4a16_groups

NEEDS_CALIBRATION = True


def build_recipe(spec: Int4Awq) -> list[Any]:
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from llmcompressor.modifiers.transform.awq import AWQModifier

    return [AWQModifier(n_grid=spec.n_grid),
            QuantizationModifier(config_groups=w4a16_groups(spec), ignore=list(spec.ignore))]


@contextlib.contextmanager
def runtime_patches() -> Iterator[None]:
    """AWQ's activation cache pins CPU memory, which raises "Cannot access accelerator
    device" on a machine without one (STACK.md); pinning only speeds host-to-GPU copies,
    so without an accelerator it is skipped."""
    import torch
    from llmcompressor.pipelines.cache import IntermediatesCache

    if torch.cuda.is_available():
        yield
        return
    original = IntermediatesCache.pin_memory
    IntermediatesCache.pin_memory = lambda self, *a, **k: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        IntermediatesCache.pin_memory = original  # type: ignore[method-assign]
