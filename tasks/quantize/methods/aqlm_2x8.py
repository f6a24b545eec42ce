"""AQLM 2x8: each group of 8 input weights of a row is scale_i × (C₁[b₁] + C₂[b₂]) with two
256-entry codebooks per layer, chosen to minimize the layer's output error
tr(ΔW XᵀX ΔWᵀ): residual k-means init, then rounds of Adam on codebooks and scales (codes
fixed) and beam search on codes (codebooks fixed). ~2 bits per weight plus codebooks.

Egiazarian et al., "Extreme Compression of Large Language Models via Additive
Quantization", arXiv 2401.06118. Numerics in `quantgate.kernels.aqlm`; the checkpoint is in
the `aqlm` package's layout (transformers quantization_config "aqlm").
"""

from __future__ import annotations

import torch

from quantgate.conf.methods import Aqlm2x8
from quantgate.kernels.aqlm import (
    AqlmCodes,
    aqlm_quantize,
    layer_objective,
    reconstruct,
    residual_kmeans_init,
)
from quantgate.kernels.ldlq import damped
from quantgate.tasks.quantize.codebook.layers import LayerFunctions, LayerOutcome

NEEDS_CALIBRATION = True
NUM_CODEBOOKS, NBITS, GROUP = 2, 8, 8


def _int8_codes(codes: torch.Tensor) -> torch.Tensor:
    """0..255 -> int8 as the aqlm package stores them (128..255 wrap to negative)."""
    return codes.to(torch.int16).to(torch.int8)


def _outcome(W: torch.Tensor, H: torch.Tensor, q: AqlmCodes, notes: dict[str, float],
             energy: float | None = None) -> LayerOutcome:
    """`energy`: tr(W H Wᵀ) when the caller has it (`aqlm_quantize` does), else computed here."""
    with torch.no_grad():
        if energy is None:
            energy = layer_objective(W, torch.zeros_like(W), H)
        rel = layer_objective(W, reconstruct(q), H) / energy
    return LayerOutcome(
        # fp16 codebooks and scales, as the AQLM paper counts them and its checkpoints store them
        # (fp32 cost SmolLM2 0.15 bits per weight: a layer's codebooks are 131,072 bits at fp32).
        tensors={"codes": _int8_codes(q.codes), "codebooks": q.codebooks.half().contiguous(),
                 "scales": q.scales.half().contiguous()},
        notes={"proxy_loss": rel, **notes})


def layer_functions(spec: Aqlm2x8) -> LayerFunctions:
    """The full and the cheap path for one Linear, and the checkpoint's quantization_config."""

    def full(name: str, W: torch.Tensor, H: torch.Tensor, layer_deadline: float) -> LayerOutcome:
        Hd = damped(H, spec.hessian_damp).float()
        res = aqlm_quantize(W, Hd, num_codebooks=NUM_CODEBOOKS, nbits=NBITS, group=GROUP,
                            beam_size=spec.beam_size, max_rounds=spec.max_rounds,
                            adam_steps=spec.adam_steps, deadline=layer_deadline, seed=spec.seed,
                            min_rounds=spec.min_rounds)
        return _outcome(W, Hd, res.q, {"rounds": float(res.rounds),
                                       "stopped_by_deadline": float(res.stopped_by == "deadline")},
                        energy=res.w_energy)

    def cheap(name: str, W: torch.Tensor, H: torch.Tensor) -> LayerOutcome:
        q = residual_kmeans_init(W, num_codebooks=NUM_CODEBOOKS, nbits=NBITS, group=GROUP, iters=3,
                                 seed=spec.seed)
        Hd = damped(H, spec.hessian_damp).float()
        return _outcome(W, Hd, q, {"rounds": 0.0, "stopped_by_deadline": 1.0})

    # Module names (not `.weight` keys): transformers matches this list against module names.
    config = {"quant_method": "aqlm", "in_group_size": GROUP, "out_group_size": 1,
              "num_codebooks": NUM_CODEBOOKS, "nbits_per_codebook": NBITS,
              "linear_weights_not_to_quantize": list(spec.ignore)}
    return LayerFunctions(full, cheap, config, input_power=spec.input_channel_power)

