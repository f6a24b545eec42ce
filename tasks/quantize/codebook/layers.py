"""What our own (non-llm-compressor) methods share: Hessians from the calibration set, a
layer loop under a wall-clock budget, and the result the runner saves."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from quantgate.kernels.hessian import HessianCollector
from quantgate.tasks.model.codebook_format import target_linears


@dataclass(frozen=True)
class CodebookResult:
    layers: dict[str, dict[str, torch.Tensor]]  # Linear name -> its stored tensors
    quantization_config: dict[str, Any]
    notes: dict[str, Any] = field(default_factory=dict)  # for the variant record: losses, budget use


@torch.no_grad()
def calibration_hessians(model: torch.nn.Module, batches: Iterable[torch.Tensor], *,
                         ignore: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """E[x xᵀ] [n, n] float64 for every target Linear, from the unquantized model's forwards."""
    collector = HessianCollector().attach(target_linears(model, ignore))
    try:
        for input_ids in batches:
            model(input_ids=input_ids)
            collector.next_batch()
    finally:
        collector.detach()
    return collector.hessians()


@dataclass(frozen=True)
class LayerOutcome:
    tensors: dict[str, torch.Tensor]
    notes: dict[str, float]


@dataclass(frozen=True)
class LayerFunctions:
    """What a codebook method gives the layer loops: `full(name, W, H, layer_deadline)`, `cheap(name,
    W, H)` (the path past the budget) and the checkpoint's quantization_config."""

    full: Callable[[str, torch.Tensor, torch.Tensor, float], LayerOutcome]
    cheap: Callable[[str, torch.Tensor, torch.Tensor], LayerOutcome]
    quantization_config: dict[str, Any]
    input_power: float = 0.0  # input-channel normalization through an absorber (`absorb`)


def weight_share(end: float, size: int, left: int) -> float:
    """The deadline of work on `size` of the `left` weights still to do before `end`: its share of the
    time left in proportion to its weight count, so the large MLP layers get the time their size
    needs and one slow layer cannot starve the rest."""
    now = time.monotonic()
    return now + max(0.0, end - now) * size / max(left, 1)


def quantize_layers(
    model: torch.nn.Module, hessians: dict[str, torch.Tensor], *, deadline: float, fns: LayerFunctions,
) -> CodebookResult:
    """Run `full(name, W, H, layer_deadline)` layer by layer; once the budget is spent the rest get
    `cheap` (still a valid 2-bit layer), so a run out of time still saves a whole model. Each layer's
    deadline is its `weight_share` of what is left."""
    layers: dict[str, dict[str, torch.Tensor]] = {}
    per_layer: dict[str, dict[str, float]] = {}
    names = list(hessians)
    sizes = {name: model.get_submodule(name).weight.numel() for name in names}
    left = sum(sizes.values())
    cheap_layers = []
    for name in names:
        W = model.get_submodule(name).weight.detach().float()
        H = hessians[name]
        if time.monotonic() < deadline:
            outcome = fns.full(name, W, H, weight_share(deadline, sizes[name], left))
        else:
            outcome = fns.cheap(name, W, H)
            cheap_layers.append(name)
        left -= sizes[name]
        layers[name] = outcome.tensors
        per_layer[name] = outcome.notes
    return CodebookResult(layers, fns.quantization_config, summarize_layers(per_layer, cheap_layers))


def summarize_layers(per_layer: dict[str, dict[str, float]], cut: list[str]) -> dict[str, Any]:
    """The variant record's notes: per-layer notes, their means, and the layers the budget cut short
    (named: a result with cut layers depends on how loaded the machine was)."""
    notes: dict[str, Any] = {
        "layers": len(per_layer), "cheap_layers": len(cut), "cut_layers": list(cut),
        "budget": "exhausted: later layers got the cheap path" if cut else "within budget",
        "per_layer": per_layer}
    for key in next(iter(per_layer.values()), {}):
        values = [v[key] for v in per_layer.values() if key in v]
        notes[f"mean_{key}"] = sum(values) / len(values)
    return notes
