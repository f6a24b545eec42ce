"""Input checks of the codebook decode ops, shared by every path (reference, CPU fast, Triton): each
raises ValueError naming the input whose dtype, shape or range is wrong."""

from __future__ import annotations

import torch

GROUP = 8  # inputs per codebook vector (E8P) or per code (AQLM in_group_size; out_group_size is 1)
E8P_CODEBOOK_SIZE = 1 << 16
MAX_AQLM_CODEBOOK_SIZE = 256  # int8 codes address at most 256 vectors


def validate_e8p(x: torch.Tensor, qidx: torch.Tensor, codebook: torch.Tensor) -> None:
    """Raise ValueError naming the input whose dtype or shape is wrong."""
    if qidx.dtype != torch.int16 or qidx.dim() != 2:
        raise ValueError(f"qidx must be int16 [m, n/8], got {qidx.dtype} {tuple(qidx.shape)}")
    if tuple(codebook.shape) != (E8P_CODEBOOK_SIZE, GROUP) or not codebook.is_floating_point():
        raise ValueError(f"codebook must be a float [65536, 8] table, got {codebook.dtype} "
                         f"{tuple(codebook.shape)}")
    if x.shape[-1] != GROUP * qidx.shape[1]:
        raise ValueError(f"x has {x.shape[-1]} inputs but qidx covers {GROUP * qidx.shape[1]}")


def validate_aqlm(
    x: torch.Tensor, codes: torch.Tensor, codebooks: torch.Tensor, scales: torch.Tensor,
    bias: torch.Tensor | None,
) -> None:
    """Raise ValueError naming the input whose dtype, shape or code range is wrong."""
    if codes.dtype != torch.int8 or codes.dim() != 3:
        raise ValueError(f"codes must be int8 [m, n/8, M], got {codes.dtype} {tuple(codes.shape)}")
    m, groups, num_codebooks = codes.shape
    if (codebooks.dim() != 4 or codebooks.shape[0] != num_codebooks or tuple(codebooks.shape[2:]) != (1, 8)
            or not 0 < codebooks.shape[1] <= MAX_AQLM_CODEBOOK_SIZE):
        raise ValueError(f"codebooks must be [M={num_codebooks}, K≤256, 1, 8], got {tuple(codebooks.shape)}")
    if scales.numel() != m:
        raise ValueError(f"scales must hold one value per output row ({m}), got {tuple(scales.shape)}")
    if bias is not None and tuple(bias.shape) != (m,):
        raise ValueError(f"bias must be [{m}], got {tuple(bias.shape)}")
    if x.shape[-1] != GROUP * groups:
        raise ValueError(f"x has {x.shape[-1]} inputs but codes cover {GROUP * groups}")
    # A code ≥ K would read the next codebook's vectors silently; 2x8 (K = 256) cannot overflow.
    size = codebooks.shape[1]
    if size < MAX_AQLM_CODEBOOK_SIZE and codes.numel() and int((codes.to(torch.int32) & 0xFF).max()) >= size:
        raise ValueError(f"codes address vectors ≥ the codebook size {size}")
