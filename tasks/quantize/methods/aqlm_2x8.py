"""AQLM 2x8: each group of 8 input weights of a row is scale_i × (C₁[b₁] + C₂[b₂]) with two
256-entry codebooks per layer, chosen to minimize the layer's output error
tr(ΔW XᵀX ΔWᵀ): residual k-means init, then rounds of beam search on codes (codebooks fixed),
each after `adam_steps` of Adam on codebooks and scales (codes fixed; the paper's alternation, 0 by
default: block and end-to-end tuning fit them to the outputs). ~2 bits per weight plus codebooks.

Egiazarian et al., "Extreme Compression of Large Language Models via Additive
Quantization", arXiv 2401.06118. Numerics in `quantgate.kernels.aqlm`; the checkpoint is in
the `aqlm` package's layout (transformers quantization_config "aqlm") when `incoherence` is off.

`incoherence` (on by default; quant_method "aqlm_rht"): the layer is first rotated by QuIP#'s
randomized Hadamard transforms (Tseng et al., arXiv 2402.04396; the proxy loss is invariant under
them) and AQLM quantizes W̃ = T_m W T_nᵀ against H̃ = T_n H T_nᵀ, as HIGGS (Malinovskii et al.,
"Pushing the Limits of Large Language Model Quantization via the Linearity Theorem") pairs
Hadamard rotations with vector grids. The signs are stored beside the codes and decode applies
the transforms.
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
from quantgate.kernels.hadamard import random_signs
from quantgate.kernels.ldlq import damped
from quantgate.kernels.quip_sharp import rotate_hessian, rotate_weight
from quantgate.tasks.quantize.codebook.layers import LayerFunctions, LayerOutcome

NEEDS_CALIBRATION = True
NUM_CODEBOOKS, NBITS, GROUP = 2, 8, 8


def _int8_codes(codes: torch.Tensor) -> torch.Tensor:
    """0..255 -> int8 as the aqlm package stores them (128..255 wrap to negative)."""
    return codes.to(torch.int16).to(torch.int8)


def _outcome(W: torch.Tensor, H: torch.Tensor, q: AqlmCodes, notes: dict[str, float],
             energy: float | None = None, signs: dict[str, torch.Tensor] | None = None) -> LayerOutcome:
    """`energy`: tr(W H Wᵀ) when the caller has it (`aqlm_quantize` does), else computed here.
    W and H in the codes' basis (rotated or not: the relative loss is the same in both)."""
    with torch.no_grad():
        if energy is None:
            energy = layer_objective(W, torch.zeros_like(W), H)
        rel = layer_objective(W, reconstruct(q), H) / energy
    return LayerOutcome(
        # fp16 codebooks and scales, as the AQLM paper counts them and its checkpoints store them
        # (fp32 cost SmolLM2 0.15 bits per weight: a layer's codebooks are 131,072 bits at fp32).
        tensors={"codes": _int8_codes(q.codes), "codebooks": q.codebooks.half().contiguous(),
                 "scales": q.scales.half().contiguous(), **(signs or {})},
        notes={"proxy_loss": rel, **notes})


def layer_functions(spec: Aqlm2x8) -> LayerFunctions:
    """The full and the cheap path for one Linear, and the checkpoint's quantization_config."""

    Signs = dict[str, torch.Tensor]

    def rotated(W: torch.Tensor, H: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Signs]:
        """(W̃, H̃, the sign vectors to store) with `incoherence`; else W and H as they are."""
        if not spec.incoherence:
            return W, H, {}
        su = random_signs(W.shape[1], spec.seed).to(W.device)
        sv = random_signs(W.shape[0], spec.seed + 1).to(W.device)
        return (rotate_weight(W.float(), su, sv), rotate_hessian(H.double(), su).float(),
                {"SU": su.half(), "SV": sv.half()})

    def full(name: str, W: torch.Tensor, H: torch.Tensor, layer_deadline: float) -> LayerOutcome:
        W, Hd, signs = rotated(W, damped(H, spec.hessian_damp).float())
        res = aqlm_quantize(W, Hd, num_codebooks=NUM_CODEBOOKS, nbits=NBITS, group=GROUP,
                            beam_size=spec.beam_size, max_rounds=spec.max_rounds,
                            adam_steps=spec.adam_steps, deadline=layer_deadline, seed=spec.seed,
                            min_rounds=spec.min_rounds)
        return _outcome(W, Hd, res.q, {"rounds": float(res.rounds),
                                       "stopped_by_deadline": float(res.stopped_by == "deadline")},
                        energy=res.w_energy, signs=signs)

    def cheap(name: str, W: torch.Tensor, H: torch.Tensor) -> LayerOutcome:
        W, Hd, signs = rotated(W, damped(H, spec.hessian_damp).float())
        q = residual_kmeans_init(W, num_codebooks=NUM_CODEBOOKS, nbits=NBITS, group=GROUP, iters=3,
                                 seed=spec.seed)
        return _outcome(W, Hd, q, {"rounds": 0.0, "stopped_by_deadline": 1.0}, signs=signs)

    # Module names (not `.weight` keys): transformers matches this list against module names.
    config = {"quant_method": "aqlm_rht" if spec.incoherence else "aqlm", "in_group_size": GROUP,
              "out_group_size": 1, "num_codebooks": NUM_CODEBOOKS, "nbits_per_codebook": NBITS,
              "linear_weights_not_to_quantize": list(spec.ignore)}
    return LayerFunctions(full, cheap, config, input_power=spec.input_channel_power)

