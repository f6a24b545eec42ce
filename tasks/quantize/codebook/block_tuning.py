"""Fine-tuning inside one decoder block: its continuous parameters, codes frozen, against the
original block's outputs (see `blockwise` for what is minimized and where it comes from)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from quantgate.kernels.codebook_linear import _CodebookLinear
from quantgate.tasks.quantize.codebook.finetune import split_signs, tunable_parameters

ACCUMULATE = 4  # sequences per Adam step


@dataclass(frozen=True)
class BlockTuning:
    epochs: int  # per group; 0: no tuning inside blocks
    lr: float  # weights, norms, Wscale, codebooks, row scales
    sign_lr: float  # QuIP#'s sign vectors S_U, S_V
    sequential: bool  # inputs from the quantized blocks before (True) or the original model (False)
    quantize_share: float  # of a group's time, for its layers' own search (the rest tunes)


def find_decoder_blocks(model: torch.nn.Module) -> tuple[str, torch.nn.ModuleList] | None:
    """The decoder blocks (`model.model.layers`, Llama layout) and their module name; None without."""
    blocks = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(blocks, torch.nn.ModuleList):
        return None
    return next(n for n, m in model.named_modules() if m is blocks), blocks


@dataclass
class BlockSequence:  # one calibration sequence at a block boundary
    quantized: torch.Tensor  # [1, T, d] hidden state through the quantized blocks so far
    original: torch.Tensor  # [1, T, d] through the original blocks
    kwargs: dict[str, Any]  # what the model passes every decoder layer (rotary embeddings, mask, ...)


def run_block(block: torch.nn.Module, x: torch.Tensor, kwargs: dict[str, Any]) -> torch.Tensor:
    out = block(x, **kwargs)
    return out[0] if isinstance(out, tuple) else out


def _relative_error(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (out.float() - target.float()).square().sum() / target.float().square().sum()


def _block_parameters(block: torch.nn.Module) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter]]:
    """(sign vectors, everything else continuous): the codebook layers' tensors and the norms as the
    end-to-end tuner takes them, plus the weights of the Linears not quantized yet."""
    params = tunable_parameters(block)
    for module in block.modules():
        if type(module) is torch.nn.Linear:
            module.weight.requires_grad_(True)
            params.append(module.weight)
    return split_signs(block, params)


@torch.no_grad()
def _set_dense(block: torch.nn.Module, dense: bool) -> None:
    """Decode the codebook layers once (the forwards that need no gradient), or drop the copies."""
    for module in block.modules():
        if isinstance(module, _CodebookLinear):
            if dense:
                module.materialize()
            else:
                module.dense = None


@torch.no_grad()
def _error(block: torch.nn.Module, seqs: Sequence[BlockSequence], targets: Sequence[torch.Tensor],
           sequential: bool) -> float:
    total = 0.0
    for seq, target in zip(seqs, targets, strict=True):
        total += float(_relative_error(run_block(block, seq.quantized if sequential else seq.original,
                                            seq.kwargs), target))
    return total / max(len(seqs), 1)


def tune_block(block: torch.nn.Module, seqs: Sequence[BlockSequence], targets: Sequence[torch.Tensor], *,
               tuning: BlockTuning, deadline: float) -> dict[str, float]:
    """Adam on the block's continuous parameters for up to `tuning.epochs` passes, ending by
    `deadline`; keeps the epoch with the lowest held-out error (the untuned block included)."""
    held = max(1, len(seqs) // 8) if len(seqs) >= 4 else 0
    val_seqs, val_targets = (seqs[:held], targets[:held]) if held else (seqs, targets)
    train = list(zip(seqs[held:], targets[held:], strict=True))
    started = time.monotonic()
    best = before = _error(block, val_seqs, val_targets, tuning.sequential)
    check_cost = time.monotonic() - started
    signs, others = _block_parameters(block)
    snapshot = [p.detach().clone() for p in (*signs, *others)]
    optimizer = torch.optim.Adam([{"params": others, "lr": tuning.lr},
                                  {"params": signs, "lr": tuning.sign_lr}])
    codebook_layers = [m for m in block.modules() if isinstance(m, _CodebookLinear)]
    steps, epochs = 0, 0
    for _ in range(tuning.epochs):
        if time.monotonic() + check_cost > deadline:
            break
        for first in range(0, len(train), ACCUMULATE):
            if time.monotonic() + check_cost > deadline:
                break
            for module in codebook_layers:  # one differentiable decode per step, shared by its sequences
                module.dense = module.tuning_weight()
            chunk = train[first : first + ACCUMULATE]
            loss = sum(_relative_error(run_block(block, seq.quantized if tuning.sequential else seq.original,
                                            seq.kwargs), target) for seq, target in chunk)
            (loss / len(chunk)).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            steps += 1
        epochs += 1
        _set_dense(block, True)
        error = _error(block, val_seqs, val_targets, tuning.sequential)
        if error < best:
            best, snapshot = error, [p.detach().clone() for p in (*signs, *others)]
    with torch.no_grad():
        for p, saved in zip((*signs, *others), snapshot, strict=True):
            p.copy_(saved)
    for p in block.parameters():
        p.requires_grad_(False)
    _set_dense(block, True)
    return {"block_error_before": before, "block_error_after": best, "block_steps": float(steps),
            "block_epochs": float(epochs)}
