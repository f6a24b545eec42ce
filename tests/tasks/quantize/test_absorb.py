"""Input-channel normalization through an absorber (`codebook.absorb`): exact in the function it
computes, in the block-wise loop with a reader kept out of the group and in the all-at-once loop."""

import torch

from quantgate.tasks.model.load import load_causal_lm
from quantgate.tasks.quantize.codebook.absorb import normalize_all_inputs, normalize_group_inputs
from quantgate.tasks.quantize.codebook.blockwise import capture_block_inputs
from quantgate.tasks.quantize.codebook.layers import calibration_hessians

IDS = torch.tensor([[5, 9, 13, 21, 40, 77, 3, 64, 12]])


def _run(block: torch.nn.Module, seq) -> torch.Tensor:
    with torch.no_grad():
        out = block(seq.original, **seq.kwargs)
    return out[0] if isinstance(out, tuple) else out


def test_a_reader_kept_out_of_the_group_is_rescaled_with_it(model96):
    """`ignore: [layers.0.self_attn.k_proj]`: q and v are normalized, k reads the same input, dense."""
    model = load_causal_lm(model96)
    block = model.model.layers[0]
    seq = capture_block_inputs(model, [IDS])[0]
    before = _run(block, seq)
    n = block.self_attn.q_proj.in_features
    H = torch.diag(torch.rand(n, generator=torch.Generator().manual_seed(0), dtype=torch.float64) ** 4 + 0.01)
    k_weight = block.self_attn.k_proj.weight.detach().clone()
    normalize_group_inputs(block, ["self_attn.q_proj", "self_attn.v_proj"],
                           dict.fromkeys(["self_attn.q_proj", "self_attn.v_proj"], H), power=1.0)
    assert not torch.equal(block.self_attn.k_proj.weight, k_weight)
    torch.testing.assert_close(_run(block, seq), before, rtol=2e-4, atol=2e-5)


def test_all_at_once_normalization_keeps_the_model_and_evens_each_group_out(model96):
    model = load_causal_lm(model96)
    with torch.no_grad():
        before = model(input_ids=IDS).logits
    hessians = calibration_hessians(model, [IDS, IDS.flip(1)], ignore=("lm_head",))
    scaled = normalize_all_inputs(model, hessians, power=1.0)
    with torch.no_grad():
        after = model(input_ids=IDS).logits
    torch.testing.assert_close(after, before, rtol=2e-4, atol=2e-4)
    assert scaled.keys() == hessians.keys()
    for block in range(len(model.model.layers)):
        q, k, v, o = (f"model.layers.{block}.self_attn.{p}_proj" for p in "qkvo")
        assert scaled[q] is scaled[k] is scaled[v]  # still one Hessian per input tensor
        for name in (q, f"model.layers.{block}.mlp.gate_proj", f"model.layers.{block}.mlp.down_proj"):
            diag = scaled[name].diagonal()
            assert torch.allclose(diag, diag.mean().expand_as(diag))  # every channel at the mean energy
        assert scaled[o] is hessians[o]  # o_proj has no absorber: untouched
    assert normalize_all_inputs(model, hessians, power=0.0) is hessians
