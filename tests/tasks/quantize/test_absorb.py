"""Input-channel normalization through an absorber (`codebook.absorb`): exact in the function it
computes, in the block-wise loop with a reader kept out of the group and in the all-at-once loop."""

import pytest
import torch

from quantgate.tasks.model.load import load_causal_lm
from quantgate.tasks.quantize.codebook.absorb import (
    NotAbsorbable,
    normalize_all_inputs,
    normalize_group_inputs,
)
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


@pytest.mark.parametrize("ignore", [(), ("layers.0.self_attn.k_proj", "layers.1.mlp.gate_proj")])
def test_all_at_once_normalization_keeps_the_model_and_returns_the_new_inputs_hessians(model96, ignore):
    """The returned Hessians are those of the rescaled model's real inputs (collected again), the
    logits do not move, every normalized group is evened out; lm_head and o_proj are left alone."""
    model = load_causal_lm(model96)
    batches = [IDS, IDS.flip(1)]
    with torch.no_grad():
        before = model(input_ids=IDS).logits
    hessians = calibration_hessians(model, batches, ignore=ignore)
    scaled = normalize_all_inputs(model, hessians, power=1.0, probe=IDS)
    with torch.no_grad():
        after = model(input_ids=IDS).logits
    torch.testing.assert_close(after, before, rtol=2e-4, atol=2e-4)
    again = calibration_hessians(model, batches, ignore=ignore)
    assert scaled.keys() == hessians.keys() == again.keys()
    for name, H in scaled.items():
        torch.testing.assert_close(H, again[name], rtol=1e-3, atol=1e-5 * float(H.diagonal().mean()))
    for block in range(len(model.model.layers)):
        for readers in (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"), ("down_proj",)):
            names = [n for r in readers if (n := f"model.layers.{block}.{_part(r)}.{r}") in scaled]
            assert len({id(scaled[n]) for n in names}) == 1  # still one Hessian per input tensor
            diag = scaled[names[0]].diagonal()
            assert torch.allclose(diag, diag.mean().expand_as(diag))  # every channel at the mean energy
        o_proj = f"model.layers.{block}.self_attn.o_proj"
        assert scaled[o_proj] is hessians[o_proj]
    if "lm_head" in hessians:
        assert scaled["lm_head"] is hessians["lm_head"]
    assert normalize_all_inputs(model, hessians, power=0.0, probe=IDS) is hessians


def _part(layer: str) -> str:
    return "mlp" if layer in ("gate_proj", "up_proj", "down_proj") else "self_attn"


class OffsetRMSNorm(torch.nn.Module):
    """Gemma's norm, x̂ ⊙ (1 + w): a weight that does not scale the output."""

    def __init__(self, norm: torch.nn.Module) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(norm.weight.detach() - 1.0)
        self.eps = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


def test_a_norm_that_cannot_absorb_the_scale_is_refused_not_used(model96):
    model = load_causal_lm(model96)
    model.model.layers[1].input_layernorm = OffsetRMSNorm(model.model.layers[1].input_layernorm)
    hessians = calibration_hessians(model, [IDS], ignore=("lm_head",))
    with pytest.raises(NotAbsorbable, match="logits changed"):
        normalize_all_inputs(model, hessians, power=1.0, probe=IDS)
