"""Packed-int4 CPU kernel against its readable reference, and QuIP# transcoded onto it."""

import pytest
import torch

from quantgate.kernels.codebook_linear import QuipLinear
from quantgate.kernels.e8p import e8p_codebook
from quantgate.kernels.int4_cpu import (
    Int4CpuLinear,
    Int4Weight,
    dequantize,
    int4_linear,
    int4_linear_reference,
    int4_mm,
    pack_int4,
    unpack_codes,
)
from quantgate.kernels.quip_cpu import QuipInt4CpuLinear
from quantgate.kernels.quip_ops import e8p_decode_weight


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def _random(n: int, k: int, group: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=gen)
    scales = torch.rand(n, k // group, generator=gen) * 0.02 + 0.005
    zeros = torch.randn(n, k // group, generator=gen) * 0.02
    return codes, scales, zeros


def _by_formula(codes, scales, zeros, group):
    """W = (code − 8)·scale + zero with scale/zero rounded to bf16 (what the kernel reads)."""
    s = scales.bfloat16().float().repeat_interleave(group, 1)
    z = zeros.bfloat16().float().repeat_interleave(group, 1)
    return (codes.float() - 8) * s + z


@pytest.mark.parametrize("n, k, group", [(96, 576, 64), (100, 576, 32), (1536, 576, 64), (576, 1536, 32),
                                         (40, 1536, 64)])
def test_the_kernel_computes_the_documented_formula_exactly(n, k, group):
    codes, scales, zeros = _random(n, k, group)
    w = pack_int4(codes, scales, zeros, group)
    assert torch.equal(unpack_codes(w), codes)
    expected = _by_formula(codes, scales, zeros, group)
    assert torch.equal(dequantize(w), expected)
    # Identity inputs read the weight back: one bf16 rounding of the fp32 value, nothing else.
    read = int4_mm(torch.eye(k, dtype=torch.bfloat16), w.packed, group, w.scales_and_zeros, n).T
    assert torch.equal(read, expected.bfloat16())


@pytest.mark.parametrize("n, k, group", [(96, 576, 64), (100, 576, 32), (1536, 576, 64), (40, 1536, 32)])
@pytest.mark.parametrize("batch", [1, 8])
def test_fast_path_matches_the_reference(n, k, group, batch):
    codes, scales, zeros = _random(n, k, group, seed=batch)
    w = pack_int4(codes, scales, zeros, group, bias=torch.randn(n))
    x = torch.randn(batch, 3, k)
    y = int4_linear(x, w)
    assert y.shape == (batch, 3, n) and y.dtype == torch.float32
    assert _rel(y, int4_linear_reference(x, w)) < 1e-2
    layer = Int4CpuLinear(w).to(torch.float32)  # must stay usable: its scales stay bf16
    assert torch.equal(layer(x.bfloat16()), int4_linear(x.bfloat16(), w))


def test_from_signed_follows_compressed_tensors_convention():
    gen = torch.Generator().manual_seed(3)
    q = torch.randint(-8, 8, (48, 128), dtype=torch.int8, generator=gen)
    zp = torch.randint(-8, 8, (48, 4), dtype=torch.int8, generator=gen)
    scale = torch.rand(48, 4, generator=gen).bfloat16().float()  # exact in bf16: only zero rounds
    layer = Int4CpuLinear.from_signed(q, scale, zp, 32)
    expected = (q.float() - zp.float().repeat_interleave(32, 1)) * scale.repeat_interleave(32, 1)
    # zero = −zp·scale rounds to bf16 (8 significant bits, |zp| ≤ 8): off by ≤ scale/32, 1/32 of a step
    torch.testing.assert_close(dequantize(layer.weight_int4), expected, rtol=0, atol=float(scale.max()) / 32)
    sym = Int4CpuLinear.from_signed(q, scale, None, 32)
    assert torch.equal(dequantize(sym.weight_int4), q.float() * scale.repeat_interleave(32, 1))


def test_kernel_constraints_fail_with_a_clear_message():
    codes, scales, zeros = _random(32, 96, 16)
    with pytest.raises(ValueError, match="supports groups"):
        pack_int4(codes, scales, zeros, 16)
    with pytest.raises(ValueError, match="not a multiple of group"):
        pack_int4(codes[:, :80], scales[:, :5], zeros[:, :5], 32)
    with pytest.raises(ValueError, match="0..15"):
        pack_int4(codes.int() + 1, *_random(32, 96, 32)[1:], 32)


def test_every_e8p_coordinate_is_on_the_int4_grid():
    """±{1/2, 3/2, 5/2} ± 1/4 ⊂ {0.25 + 0.5k : k = −8..7}: codes 2v + 7.5 are integers in 0..15."""
    codes = e8p_codebook().double() * 2 + 7.5  # [65536, 8]
    assert torch.equal(codes, codes.round())
    assert codes.min() >= 0 and codes.max() <= 15
    assert ((codes - 8) * 0.5 + 0.25).equal(e8p_codebook().double())


def _quip(n: int, m: int, *, real_signs: bool, seed: int) -> QuipLinear:
    gen = torch.Generator().manual_seed(seed)
    layer = QuipLinear(n, m, bias=True)
    layer.qidxs.copy_(torch.randint(-32768, 32768, (m, n // 8), generator=gen).to(torch.int16))
    su = torch.randint(0, 2, (n,), generator=gen) * 2.0 - 1
    sv = torch.randint(0, 2, (m,), generator=gen) * 2.0 - 1
    if real_signs:  # end-to-end fine-tuning turns the signs into real-valued scales
        su, sv = su * (1 + 0.2 * torch.rand(n, generator=gen)), sv * (1 + 0.2 * torch.rand(m, generator=gen))
    layer.SU.copy_(su.half())
    layer.SV.copy_(sv.half())
    layer.Wscale.fill_(0.0123457)  # far from a bf16 value: must not be rounded into the int4 scale
    layer.bias.copy_(torch.randn(m, generator=gen) * 0.1)
    return layer


@pytest.mark.parametrize("n, m", [(96, 192), (192, 96), (576, 1536), (1536, 576)])
@pytest.mark.parametrize("batch", [1, 8])
def test_quip_through_int4_matches_quip_reference(n, m, batch):
    layer = _quip(n, m, real_signs=batch == 8, seed=n + m)
    fast = QuipInt4CpuLinear(layer)
    assert fast.group in (32, 64, 128, 256) and n % fast.group == 0
    layer.materialize()  # reference forward: the decoded dense fp32 weight
    x = torch.randn(batch, n)
    with torch.no_grad():
        ref = layer(x)
        assert _rel(fast(x), ref) < 1e-2
        y = fast(x.bfloat16())
        assert y.dtype == torch.bfloat16 and _rel(y, ref) < 1e-2
        assert fast(x[:, None]).shape == (batch, 1, m)


def test_quip_transcode_is_lossless_on_the_rotated_weight():
    layer = _quip(96, 192, real_signs=False, seed=0)
    fast = QuipInt4CpuLinear(layer)
    held = Int4Weight(fast.packed, fast.scales_and_zeros, fast.group, out_features=192, in_features=96)
    assert torch.equal(dequantize(held), e8p_decode_weight(layer.qidxs, layer.codebook))
