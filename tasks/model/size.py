"""What a checkpoint costs: total tensor bytes, and bits per weight of its Linear layers
counting everything stored for them: packed codes, scales, zero points, shapes; for the 2-bit
formats also the per-layer codebooks (AQLM) and Hadamard sign vectors and scale (QuIP#)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from safetensors import safe_open

_DTYPE_BITS = {"F64": 64, "F32": 32, "F16": 16, "BF16": 16, "I64": 64, "I32": 32, "I16": 16,
               "I8": 8, "U8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "BOOL": 8}
_LINEAR_TENSORS = ("weight", "weight_packed", "weight_scale", "weight_zero_point", "weight_shape",
                   "weight_g_idx",
                   "qidxs", "SU", "SV", "Wscale",  # QuIP#: one 16-bit E8P index per 8 weights
                   "qidxs_residual", "Wscale_residual",  # QuIP#'s second stage, where there is one
                   "codes", "codebooks", "scales")  # AQLM: M codes per 8 weights (groups of 8)
_WEIGHTS_PER_CODE = 8  # both 2-bit formats group 8 input weights


def in_decoder_blocks(module: str) -> bool:
    """A module of the transformer blocks (`model.layers.N...`): what bits per weight count."""
    return ".layers." in f".{module}"


@dataclass(frozen=True)
class CheckpointSize:
    bytes: int  # every tensor in the checkpoint
    linear_weights: int  # weights of the transformer blocks' Linear layers
    bits_per_weight: float  # bits stored for those layers / their weights


def checkpoint_size(checkpoint: str) -> CheckpointSize:
    files = sorted(Path(checkpoint).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{checkpoint}: no *.safetensors files")
    total_bits = linear_bits = weights = 0
    for file in files:
        with safe_open(str(file), "pt") as f:
            for key in f.keys():
                s = f.get_slice(key)
                numel = 1
                for d in s.get_shape():
                    numel *= d
                bits = numel * _DTYPE_BITS[s.get_dtype()]
                total_bits += bits
                module, _, leaf = key.rpartition(".")
                if not in_decoder_blocks(module) or leaf not in _LINEAR_TENSORS:
                    continue
                if leaf == "weight" and len(s.get_shape()) != 2:
                    continue  # a norm's weight, not a Linear's
                linear_bits += bits
                if leaf == "weight":
                    weights += numel
                elif leaf == "weight_shape":
                    rows, cols = f.get_tensor(key).tolist()
                    weights += rows * cols
                elif leaf in ("qidxs", "codes"):  # [m, n/8] or [m, n/8, M]
                    rows, groups = s.get_shape()[:2]
                    weights += rows * groups * _WEIGHTS_PER_CODE
    bpw = linear_bits / weights if weights else float("nan")
    return CheckpointSize(total_bits // 8, weights, bpw)
