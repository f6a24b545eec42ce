"""QuIP# at 2 bits: minimizes each Linear's proxy loss tr(ΔW H ΔWᵀ) with randomized Hadamard
incoherence, the E8P lattice codebook (2 bits/weight) and BlockLDLQ feedback rounding.

Tseng et al., "QuIP#: Even Better LLM Quantization with Hadamard Incoherence and Lattice
Codebooks", arXiv 2402.04396. The numerics are in `quantgate.kernels.quip_sharp`; the format
and loader in `model.codebook_format`. Past the time budget, layers get nearest rounding after
the same rotation (no LDLQ) and the record says how many.
"""

from __future__ import annotations

import time
import zlib

import torch

from quantgate.conf.methods import QuipSharp2Bit
from quantgate.kernels.quip_sharp import QuipLayer, quip_quantize_layer
from quantgate.tasks.quantize.codebook.layers import CodebookResult, LayerOutcome, quantize_layers

NEEDS_CALIBRATION = True


def _outcome(layer: QuipLayer) -> LayerOutcome:
    return LayerOutcome(
        tensors={"qidxs": layer.qidxs, "SU": layer.su, "SV": layer.sv, "Wscale": layer.wscale},
        notes={"proxy_loss": layer.proxy_loss, "nearest_loss": layer.nearest_loss,
               "scale": layer.scale})


def quantize_model(spec: QuipSharp2Bit, *, model: torch.nn.Module, hessians: dict[str, torch.Tensor],
                   deadline: float) -> CodebookResult:
    def layer_seed(name: str) -> int:  # distinct signs per layer, reproducible from the spec's seed
        return spec.seed * 100_003 + zlib.crc32(name.encode()) % 100_000

    def full(name: str, W: torch.Tensor, H: torch.Tensor, layer_deadline: float) -> LayerOutcome:
        best: QuipLayer | None = None
        for scale in spec.scale_grid:  # the lowest proxy loss wins; stop trying past the deadline
            layer = quip_quantize_layer(W, H, seed=layer_seed(name), scale=scale, sigma=spec.hessian_damp)
            best = layer if best is None or layer.proxy_loss < best.proxy_loss else best
            if time.monotonic() > layer_deadline:
                break
        assert best is not None
        return _outcome(best)

    def cheap(name: str, W: torch.Tensor, H: torch.Tensor) -> LayerOutcome:
        scale = spec.scale_grid[len(spec.scale_grid) // 2]
        return _outcome(quip_quantize_layer(W, H, seed=layer_seed(name), scale=scale,
                                            sigma=spec.hessian_damp, use_ldlq=False))

    config = {"quant_method": "quip_sharp", "codebook": "E8P12", "format_version": 1,
              "modules_not_quantized": list(spec.ignore)}
    return quantize_layers(model, hessians, deadline=deadline, full=full, cheap=cheap,
                           quantization_config=config)
