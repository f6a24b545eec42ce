"""Code updates under a trust limit (PV-tuning's V step): at most the allowed share of groups moves,
the ones that gain most, each toward the target; the layers' basis transforms are exact."""

import math

import pytest
import torch

from quantgate.kernels.aqlm_ops import aqlm_decode_weight
from quantgate.kernels.codebook_linear import AqlmLinear, QuipLinear
from quantgate.kernels.e8p import e8p_codebook
from quantgate.kernels.reencode import aqlm_reencode, e8p_reencode, top_gains


def test_top_gains_keeps_the_largest_positive_ones_only():
    gain = torch.tensor([0.5, -1.0, 3.0, 0.0, 2.0, 0.1, 0.0, -2.0, 1.0, 0.2])
    assert top_gains(gain, 3).nonzero().flatten().tolist() == [2, 4, 8]
    assert top_gains(gain, 10).nonzero().flatten().tolist() == [0, 2, 4, 5, 8, 9]  # never 0 or below
    assert not top_gains(gain, 0).any()
    with pytest.raises(ValueError, match="max_fraction"):
        aqlm_reencode(torch.zeros(24, 64), *_aqlm(), max_fraction=1.5)


def _aqlm(m=24, n=64, num_cb=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(-128, 128, (m, n // 8, num_cb), generator=g, dtype=torch.int8)
    codebooks = torch.randn(num_cb, 256, 1, 8, generator=g) / num_cb
    scales = torch.rand(m, 1, 1, 1, generator=g) + 0.5
    return codes, codebooks, scales


def _group_errors(w, target):
    return (w - target).square().reshape(w.shape[0], -1, 8).sum(-1).flatten()


@pytest.mark.parametrize("fraction", [0.02, 0.25, 1.0])
def test_aqlm_moves_at_most_the_allowed_groups_each_toward_the_target(fraction):
    codes, codebooks, scales = _aqlm()
    w = aqlm_decode_weight(codes, codebooks, scales)
    target = w + 0.3 * torch.randn(w.shape, generator=torch.Generator().manual_seed(1)) * w.std()
    new, changed = aqlm_reencode(target, codes, codebooks, scales, max_fraction=fraction)
    groups = codes.shape[0] * codes.shape[1]
    moved = (new != codes).any(-1).flatten()
    assert new.dtype == torch.int8 and int(moved.sum()) == changed
    assert 0 < changed <= math.ceil(fraction * groups)
    before = _group_errors(w, target)
    after = _group_errors(aqlm_decode_weight(new, codebooks, scales), target)
    assert (after[moved] < before[moved]).all() and torch.equal(after[~moved], before[~moved])


def test_aqlm_leaves_a_target_it_already_encodes_and_finds_one_codebook_exactly():
    codes, codebooks, scales = _aqlm()
    w = aqlm_decode_weight(codes, codebooks, scales)
    assert aqlm_reencode(w, codes, codebooks, scales, max_fraction=1.0)[1] == 0
    one, cb, sc = _aqlm(num_cb=1)
    other, _, _ = _aqlm(num_cb=1, seed=5)  # another code set, same codebook: exact nearest recovers it
    new, changed = aqlm_reencode(aqlm_decode_weight(other, cb, sc), one, cb, sc, max_fraction=1.0)
    assert torch.equal(new, other) and changed == int((other != one).any(-1).sum())


def test_e8p_moves_the_best_groups_to_their_nearest_codewords():
    table = e8p_codebook()
    g = torch.Generator().manual_seed(2)
    qidxs = torch.randint(-32768, 32768, (16, 12), generator=g, dtype=torch.int16)
    w = table[(qidxs.int() & 0xFFFF).long()].reshape(16, 96)
    target = w + 0.4 * torch.randn(w.shape, generator=g)
    new, changed = e8p_reencode(target, qidxs, table, max_fraction=0.1)
    moved = (new != qidxs).flatten()
    assert new.dtype == torch.int16 and 0 < changed == int(moved.sum()) <= math.ceil(0.1 * 16 * 12)
    after = table[(new.int() & 0xFFFF).long()].reshape(16, 96)
    assert (_group_errors(after, target)[moved] < _group_errors(w, target)[moved]).all()


def test_layers_reencode_in_their_own_basis_with_tuned_signs_and_scales():
    """A target that another set of codes decodes to is found exactly (with fraction 1): the QuIP#
    layer's transform to its rotated basis inverts its decode, real-valued signs and Wscale included."""
    torch.manual_seed(3)
    quip = QuipLinear(96, 48)
    quip.qidxs.copy_(torch.randint(-32768, 32768, quip.qidxs.shape, dtype=torch.int16))
    def relaxed(n):  # real-valued signs, as end-to-end tuning leaves them
        return (torch.randn(n).sign() * (0.5 + torch.rand(n))).half()

    quip.SU.copy_(relaxed(96))
    quip.SV.copy_(relaxed(48))
    quip.Wscale.fill_(0.37)
    goal = torch.randint(-32768, 32768, quip.qidxs.shape, dtype=torch.int16)
    twin = QuipLinear(96, 48)
    twin.load_state_dict(quip.state_dict())
    twin.qidxs.copy_(goal)
    assert quip.update_codes(quip.decode_weight(), 1.0) == 0
    differ = int((goal != quip.qidxs).sum())
    assert quip.update_codes(twin.decode_weight(), 1.0) == differ > 0
    assert torch.equal(quip.qidxs, goal)

    aqlm = AqlmLinear(64, 24, num_codebooks=1)
    codes, codebooks, scales = _aqlm(num_cb=1)
    aqlm.codebooks.data.copy_(codebooks)
    aqlm.scales.data.copy_(scales)
    aqlm.codes.data.copy_(codes)
    other, _, _ = _aqlm(num_cb=1, seed=7)
    aqlm.update_codes(aqlm_decode_weight(other, codebooks, scales), 1.0)
    assert torch.equal(aqlm.codes, other)

    # A rotated AQLM layer (incoherence) re-encodes in its rotated basis, its S_V carrying an
    # absorbed output scale: the target another set of codes decodes to gives back those codes.
    rotated = AqlmLinear(64, 24, num_codebooks=1, rotated=True)
    rotated.load_state_dict(aqlm.state_dict() | {"SU": relaxed(64).sign(), "SV": relaxed(24)})
    twin = AqlmLinear(64, 24, num_codebooks=1, rotated=True)
    twin.load_state_dict(rotated.state_dict())
    twin.codes.data.copy_(codes)
    assert not torch.equal(rotated.codes, codes)
    assert rotated.update_codes(rotated.decode_weight(), 1.0) == 0
    assert rotated.update_codes(twin.decode_weight(), 1.0) > 0
    assert torch.equal(rotated.codes, codes)
