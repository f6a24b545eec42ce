"""QuIP# at 2 bits: minimizes each Linear's proxy loss tr(ΔW H ΔWᵀ) with randomized Hadamard
incoherence, the E8P lattice codebook (2 bits/weight) and BlockLDLQ feedback rounding.

Tseng et al., "QuIP#: Even Better LLM Quantization with Hadamard Incoherence and Lattice
Codebooks", arXiv 2402.04396. The numerics are in `quantgate.kernels.quip_sharp`; the format
and loader in `model.codebook_format`. Past the time budget, layers get nearest rounding after
the same rotation (no LDLQ) and the record says how many. Each layer tries the input-channel
normalizations of `channel_powers` (outlier channels, see the kernel) and keeps the lowest loss.
The layers `residual` covers get a second E8P stage (4 bits per weight; the paper's residual vector
quantization, §4.4), on both paths.
"""

from __future__ import annotations

import itertools
import time
import zlib

import torch

from quantgate.conf.methods import QuipSharp2Bit
from quantgate.kernels.quip_sharp import QuipLayer, quip_quantize_layer
from quantgate.tasks.quantize.codebook.layers import LayerFunctions, LayerOutcome

NEEDS_CALIBRATION = True


def _outcome(layer: QuipLayer, channel_power: float = 0.0) -> LayerOutcome:
    residual = {} if layer.qidxs_residual is None else {
        "qidxs_residual": layer.qidxs_residual, "Wscale_residual": layer.wscale_residual}
    return LayerOutcome(
        tensors={"qidxs": layer.qidxs, "SU": layer.su, "SV": layer.sv, "Wscale": layer.wscale, **residual},
        notes={"proxy_loss": layer.proxy_loss, "nearest_loss": layer.nearest_loss,
               "scale": layer.scale, "channel_power": channel_power})


def layer_functions(spec: QuipSharp2Bit) -> LayerFunctions:
    """The full and the cheap path for one Linear, and the checkpoint's quantization_config."""

    def layer_seed(name: str) -> int:  # distinct signs per layer, reproducible from the spec's seed
        return spec.seed * 100_003 + zlib.crc32(name.encode()) % 100_000

    def two_stage(name: str) -> bool:
        return spec.residual is not None and spec.residual.covers(name)

    def full(name: str, W: torch.Tensor, H: torch.Tensor, layer_deadline: float) -> LayerOutcome:
        best: QuipLayer | None = None
        power_of = {}
        # the lowest proxy loss wins (the loss is the same whatever D is); stop trying past the deadline
        for power, scale in itertools.product(spec.channel_powers, spec.scale_grid):
            layer = quip_quantize_layer(W, H, seed=layer_seed(name), scale=scale, sigma=spec.hessian_damp,
                                        channel_power=power, residual=two_stage(name))
            power_of[id(layer)] = power
            best = layer if best is None or layer.proxy_loss < best.proxy_loss else best
            if time.monotonic() > layer_deadline:
                break
        assert best is not None
        return _outcome(best, power_of[id(best)])

    def cheap(name: str, W: torch.Tensor, H: torch.Tensor) -> LayerOutcome:
        scale = spec.scale_grid[len(spec.scale_grid) // 2]
        return _outcome(quip_quantize_layer(W, H, seed=layer_seed(name), scale=scale,
                                            sigma=spec.hessian_damp, use_ldlq=False,
                                            residual=two_stage(name)))

    config = {"quant_method": "quip_sharp", "codebook": "E8P12", "format_version": 1,
              "modules_not_quantized": list(spec.ignore)}
    return LayerFunctions(full, cheap, config)

