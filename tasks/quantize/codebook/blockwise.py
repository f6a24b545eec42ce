"""Quantize a model decoder block by decoder block, fine-tuning inside each block as it goes.

Minimizes, for each block in turn, the relative squared error ‖B̂(X̂) − B(X)‖² / ‖B(X)‖² between
the partly quantized block B̂ run on its inputs X̂ and the original block B run on the original
model's hidden states X (so a block also learns to undo what earlier blocks got wrong). Within a
block, the Linears are quantized a group at a time in forward order (layers that read one tensor
form a group: q/k/v, o, gate/up, down); each group's Hessian comes from the inputs the block sees
with the groups before it already quantized and tuned, and after each group the block's continuous
parameters are tuned with the codes frozen: the not yet quantized weights, the norms, and the
quantized layers' sign vectors and scale (QuIP#) or codebooks and row scales (AQLM). The held-out
sequences pick the best epoch; tuning can only help on them.

QuIP# (arXiv 2402.04396) §5 and its reference code fine-tune inside each decoder block this way
(Adam, lr 5e-5, sign vectors 5e-4); "sequential" inputs (X̂ from the already quantized blocks, not
the unquantized model's) are GPTQ's and AQLM's (arXiv 2401.06118) §3.3 order of work.
With `sequential=False` each block reads the original hidden states (the step table's control).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from quantgate.kernels.hessian import HessianCollector
from quantgate.tasks.model.codebook_format import codebook_layer
from quantgate.tasks.quantize.codebook.absorb import check_unchanged, normalize_group_inputs
from quantgate.tasks.quantize.codebook.block_tuning import (
    BlockSequence,
    BlockTuning,
    find_decoder_blocks,
    run_block,
    tune_block,
)
from quantgate.tasks.quantize.codebook.layers import (
    BudgetClock,
    CodebookResult,
    LayerFunctions,
    summarize_layers,
    weight_share,
)


@dataclass
class _Progress:
    layers: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    notes: dict[str, dict[str, float]] = field(default_factory=dict)
    cut: list[str] = field(default_factory=list)


def decoder_blocks(model: torch.nn.Module) -> tuple[str, torch.nn.ModuleList]:
    found = find_decoder_blocks(model)
    if found is None:
        raise ValueError(f"{type(model).__name__}: no model.layers list of decoder blocks; block-wise "
                         "quantization needs one (set block_epochs: 0 and sequential: false)")
    return found


class _Stop(Exception):
    pass


@torch.no_grad()
def capture_block_inputs(model: torch.nn.Module, batches: Sequence[torch.Tensor]) -> list[BlockSequence]:
    """The first decoder block's inputs, one per sequence (the embedding forward only)."""
    captured: list[BlockSequence] = []

    def hook(_module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        hidden = args[0] if args else kwargs.pop("hidden_states")
        captured.append(BlockSequence(hidden, hidden, dict(kwargs)))
        raise _Stop

    _, blocks = decoder_blocks(model)
    handle = blocks[0].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        for ids in batches:
            try:
                model(input_ids=ids.to(model.device), use_cache=False)
            except _Stop:
                pass
    finally:
        handle.remove()
    return captured


def _groups(block: torch.nn.Module, targets: dict[str, torch.nn.Module], seq: BlockSequence
            ) -> list[list[str]]:
    """Target Linears of the block in forward order, grouped by the tensor they read."""
    collector = HessianCollector().attach(targets)
    try:
        with torch.no_grad():
            run_block(block, seq.original, seq.kwargs)
    finally:
        collector.detach()
    by_input: dict[int, list[str]] = {}
    for name, acc in collector.accumulators.items():
        by_input.setdefault(id(acc), []).append(name)
    return list(by_input.values())


@torch.no_grad()
def _group_hessians(block: torch.nn.Module, modules: dict[str, torch.nn.Module],
                    seqs: Sequence[BlockSequence], sequential: bool) -> dict[str, torch.Tensor]:
    """The group's Hessians from every sequence's block forward, each forward stopped once all the
    group's layers have seen their input: the rest of the block cannot change it (q/k/v's Hessian
    costs a norm, not the block)."""
    collector = HessianCollector().attach(modules)
    seen: set[str] = set()

    def stop_when_all_seen(name: str):
        def hook(_module: torch.nn.Module, _args: tuple) -> None:
            seen.add(name)
            if len(seen) == len(modules):
                raise _Stop

        return hook

    # registered after the collector's hooks, so they run after them
    stops = [module.register_forward_pre_hook(stop_when_all_seen(name)) for name, module in modules.items()]
    try:
        for seq in seqs:
            seen.clear()
            try:
                run_block(block, seq.quantized if sequential else seq.original, seq.kwargs)
            except _Stop:
                pass
            collector.next_batch()
    finally:
        collector.detach()
        for handle in stops:
            handle.remove()
    return collector.hessians()


def quantize_blockwise(
    model: torch.nn.Module, batches: Sequence[torch.Tensor], targets: dict[str, torch.nn.Linear], *,
    deadline: float, tuning: BlockTuning, fns: LayerFunctions,
) -> CodebookResult:
    """Swap every target Linear of `model` for its codebook module, block by block, within `deadline`
    (past it, layers get `cheap` and no tuning, and are listed as cut)."""
    seqs = capture_block_inputs(model, batches)
    progress = _Progress()
    prefix, blocks = decoder_blocks(model)
    clock = BudgetClock(deadline, sum(m.weight.numel() for m in targets.values()))
    for index, block in enumerate(blocks):
        own = {n.removeprefix(f"{prefix}.{index}."): m for n, m in targets.items()
               if n.startswith(f"{prefix}.{index}.")}
        if time.monotonic() > deadline:  # the rest is cut: no Hessian, tuning or forward is worth its time
            started = time.monotonic()
            _cut_block(block, f"{prefix}.{index}", own, fns, progress)
            clock.add("cut", started)
            continue
        started = time.monotonic()
        with torch.no_grad():  # the original block's outputs: this block's targets, the next one's inputs
            targets_out = [run_block(block, s.original, s.kwargs) for s in seqs]
        started = clock.add("forwards", started, fixed=True)
        for group in _groups(block, own, seqs[0]) if own else []:
            started = clock.add("forwards", started, fixed=True)
            hessians = _group_hessians(block, {n: own[n] for n in group}, seqs, tuning.sequential)
            started = clock.add("hessians", started, fixed=True)
            hessians = _normalized(block, group, hessians, fns.input_power, seqs[0])
            size = sum(own[n].weight.numel() for n in group)
            now = clock.add("normalization", started, fixed=True)
            group_end = now + clock.share(size)
            tune = tuning.epochs > 0 and now < deadline
            quant_end = now + (group_end - now) * (tuning.quantize_share if tune else 1.0)
            left = size
            for name in group:  # each layer its weight share of the group's search time
                layer_end = weight_share(quant_end, own[name].weight.numel(), left)
                left -= own[name].weight.numel()
                _quantize_one(block, f"{prefix}.{index}.{name}", name, own[name], hessians[name],
                              layer_end, deadline, fns, progress)
            started = clock.add("search", now, overrun_from=quant_end)
            if tune:
                report = tune_block(block, seqs, targets_out, tuning=tuning, deadline=group_end)
                for name in group:
                    progress.notes[f"{prefix}.{index}.{name}"] |= report
            started = clock.add("block_tuning", started)
            clock.done(size)
        _store(block, f"{prefix}.{index}", own, progress)
        with torch.no_grad():
            for seq, out in zip(seqs, targets_out, strict=True):
                seq.quantized = run_block(block, seq.quantized, seq.kwargs) if tuning.sequential else out
                seq.original = out
        clock.add("forwards", started, fixed=True)
    notes = summarize_layers(progress.notes, progress.cut)
    notes["block_loop_seconds"] = clock.record()
    return CodebookResult(progress.layers, fns.quantization_config, notes)


@torch.no_grad()
def _normalized(block: torch.nn.Module, group: list[str], hessians: dict[str, torch.Tensor], power: float,
                seq: BlockSequence) -> dict[str, torch.Tensor]:
    """`normalize_group_inputs`, held to leaving the block's output on one sequence as it was."""
    if not power:
        return hessians
    before = run_block(block, seq.original, seq.kwargs)
    hessians = normalize_group_inputs(block, group, hessians, power)
    after = run_block(block, seq.original, seq.kwargs)
    check_unchanged(before, after, f"the decoder block's output ({group})")
    return hessians


def _cut_block(block: torch.nn.Module, prefix: str, own: dict[str, torch.nn.Module], fns: LayerFunctions,
               progress: _Progress) -> None:
    """A block reached past the budget: every layer on the cheap path, which rounds without H (QuIP#:
    nearest after the rotation; AQLM: k-means), so an identity stands in for it and the loss notes,
    which would be measured against it, are left out."""
    for name, linear in own.items():
        n = linear.in_features
        identity = torch.eye(n, dtype=torch.float64, device=linear.weight.device)
        _quantize_one(block, f"{prefix}.{name}", name, linear, identity, 0.0, 0.0, fns, progress)
        notes = progress.notes[f"{prefix}.{name}"]
        for key in [k for k in notes if k.endswith("_loss")]:
            del notes[key]
    _store(block, prefix, own, progress)


def _quantize_one(block: torch.nn.Module, full_name: str, name: str, linear: torch.nn.Linear,
                  H: torch.Tensor, quant_end: float, deadline: float, fns: LayerFunctions,
                  progress: _Progress) -> None:
    W = linear.weight.detach().float()
    started = time.monotonic()
    if started < deadline:
        outcome = fns.full(full_name, W, H, min(quant_end, deadline))
    else:
        outcome = fns.cheap(full_name, W, H)
        progress.cut.append(full_name)
    module = codebook_layer(linear, fns.quantization_config, outcome.tensors).to(linear.weight.device)
    module.materialize()  # dense decode for the forwards; tuning clears it
    block.set_submodule(name, module)
    progress.layers[full_name] = outcome.tensors
    progress.notes[full_name] = dict(outcome.notes) | {"seconds": time.monotonic() - started}


def _store(block: torch.nn.Module, prefix: str, own: dict[str, torch.nn.Module], progress: _Progress) -> None:
    """The block's final (tuned) codebook tensors, in the dtypes the format stores."""
    for name in own:
        module = block.get_submodule(name)
        stored = progress.layers[f"{prefix}.{name}"]
        state = module.state_dict()
        progress.layers[f"{prefix}.{name}"] = {k: state[k].detach().to(v.dtype).contiguous()
                                               for k, v in stored.items()}
