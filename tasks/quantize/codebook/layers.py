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


@dataclass
class BudgetClock:
    """Splits what is left of the budget between units of work (layers, or a block's groups) in
    proportion to their weights, after setting aside what the units left will spend whatever their
    share (forwards, Hessians, input normalization, searches past their share: measured so far, per
    weight), so the last layers are not the ones the budget cuts. Both layer loops run on it."""

    deadline: float
    weights_left: int
    fixed_seconds: float = 0.0
    weights_done: int = 0

    spent: dict[str, float] = field(default_factory=dict)  # where the loop's time went, for the record

    def add(self, what: str, since: float, fixed: bool = False, overrun_from: float | None = None) -> float:
        """Count the time since `since` as `what` (`fixed`: also spent whatever the units' shares are);
        returns now. `overrun_from`: the end of the work's share; time past it counts as fixed (a
        floor of search rounds the method runs whatever the time, AQLM's `min_rounds`, will overrun
        in the units left too, so the budget's end does not cut the last layers). The block-wise loop
        measures it from the search's own end, not the group's: what the search takes from the
        group's tuning is set aside too."""
        now = time.monotonic()
        self.spent[what] = self.spent.get(what, 0.0) + now - since
        if fixed:
            self.fixed_seconds += now - since
        elif overrun_from is not None:
            self.fixed_seconds += max(0.0, now - overrun_from)
        return now

    def share(self, size: int) -> float:
        """Seconds for the next `size` weights."""
        rate = self.fixed_seconds / self.weights_done if self.weights_done else 0.0
        spare = self.deadline - time.monotonic() - rate * (self.weights_left - size)
        return max(0.0, spare) * size / max(self.weights_left, 1)

    def done(self, size: int) -> None:
        self.weights_left -= size
        self.weights_done += size

    def record(self) -> dict[str, float]:
        return {k: round(v, 1) for k, v in self.spent.items()}


def quantize_layers(
    model: torch.nn.Module, hessians: dict[str, torch.Tensor], *, deadline: float, fns: LayerFunctions,
) -> CodebookResult:
    """Run `full(name, W, H, layer_deadline)` layer by layer; once the budget is spent the rest get
    `cheap` (still a valid 2-bit layer), so a run out of time still saves a whole model. Each layer's
    deadline is its weight share of what is left, after what earlier layers overran theirs by."""
    layers: dict[str, dict[str, torch.Tensor]] = {}
    per_layer: dict[str, dict[str, float]] = {}
    names = list(hessians)
    sizes = {name: model.get_submodule(name).weight.numel() for name in names}
    clock = BudgetClock(deadline, sum(sizes.values()))
    cheap_layers = []
    for name in names:
        W = model.get_submodule(name).weight.detach().float()
        H = hessians[name]
        started = time.monotonic()
        if started < deadline:
            share_end = started + clock.share(sizes[name])
            outcome = fns.full(name, W, H, share_end)
            clock.add("search", started, overrun_from=share_end)
        else:
            outcome = fns.cheap(name, W, H)
            cheap_layers.append(name)
            clock.add("cut", started)
        clock.done(sizes[name])
        layers[name] = outcome.tensors
        per_layer[name] = outcome.notes
    notes = summarize_layers(per_layer, cheap_layers)
    notes["layer_loop_seconds"] = clock.record()
    return CodebookResult(layers, fns.quantization_config, notes)


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
