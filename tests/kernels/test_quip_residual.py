"""QuIP#'s residual stage: a second E8P pass on what the first left (4 bits per weight), its codes and
scale stored beside the first's, and a QuipLinear that decodes, multiplies, tunes and re-encodes both."""

import math

import pytest
import torch

from quantgate.kernels.codebook_linear import QuipLinear
from quantgate.kernels.ldlq import damped
from quantgate.kernels.quip_cpu import QuipInt4CpuLinear
from quantgate.kernels.quip_sharp import quip_quantize_layer
from quantgate.tasks.quantize.codebook.finetune import tunable_parameters

M, N = 48, 96  # not powers of two: the rotation's Kronecker factors are exercised too


def _problem(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(4 * N, N, generator=g) @ torch.randn(N, N, generator=g) * 0.3
    X += torch.randn(4 * N, N, generator=g)
    return torch.randn(M, N, generator=g) * 0.05, (X.T @ X / X.shape[0]).double()


def _module(layer, residual: bool) -> QuipLinear:
    module = QuipLinear(N, M, residual=residual)
    tensors = {"qidxs": layer.qidxs, "SU": layer.su, "SV": layer.sv, "Wscale": layer.wscale}
    if residual:
        tensors |= {"qidxs_residual": layer.qidxs_residual, "Wscale_residual": layer.wscale_residual}
    module.load_state_dict(tensors, strict=True)
    return module


def _loss(W: torch.Tensor, W_hat: torch.Tensor, H: torch.Tensor) -> float:
    """The proxy loss relative to tr(W H Wᵀ), on the damped H the quantizer used."""
    Hd = damped(H, 0.01)
    d = (W - W_hat).double()
    return float(((d @ Hd) * d).sum() / ((W.double() @ Hd) * W.double()).sum())


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("ldlq", [True, False], ids=["ldlq", "nearest"])
def test_the_second_stage_cuts_the_proxy_loss_several_fold(seed, ldlq):
    W, H = _problem(seed)
    one = quip_quantize_layer(W, H, seed=seed, scale=1.0, use_ldlq=ldlq)
    two = quip_quantize_layer(W, H, seed=seed, scale=1.0, use_ldlq=ldlq, residual=True)
    assert one.qidxs_residual is None and two.qidxs_residual.shape == (M, N // 8)
    assert torch.equal(one.qidxs, two.qidxs)  # the first stage is the 2-bit layer, unchanged
    assert two.proxy_loss < 0.25 * one.proxy_loss, (two.proxy_loss, one.proxy_loss)
    if ldlq:
        assert two.proxy_loss < two.nearest_loss  # feedback helps in the second stage too
    # what is stored is what was measured: the decoded weight's own loss in the original basis
    for layer, residual in ((one, False), (two, True)):
        decoded = _module(layer, residual).decode_weight()
        assert _loss(W, decoded, H) == pytest.approx(layer.proxy_loss, rel=2e-3)


def test_a_two_stage_layer_multiplies_tunes_and_reencodes_both_stages_consistently():
    W, H = _problem(2)
    module = _module(quip_quantize_layer(W, H, seed=2, scale=1.0, residual=True), residual=True)
    dense = module.decode_weight()
    x = torch.randn(3, 5, N, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(module(x), x @ dense.T, rtol=1e-4, atol=1e-5)  # compressed forward
    torch.testing.assert_close(module.tuning_weight(), dense, rtol=1e-4, atol=1e-6)
    module.Wscale_residual.mul_(0)  # the second stage really is in the weight
    assert (module.decode_weight() - dense).norm() > 0.05 * dense.norm()

    module = _module(quip_quantize_layer(W, H, seed=2, scale=1.0, residual=True), residual=True)
    residual_codes = module.qidxs_residual.clone()
    assert module.update_codes(dense, max_fraction=1.0) == 0  # its own weight: nothing to move
    target = 1.5 * W  # far enough that first-stage codewords must move; at most 5 % of them do
    changed = module.update_codes(target, max_fraction=0.05)
    assert 0 < changed <= math.ceil(0.05 * M * N / 8)
    assert torch.equal(module.qidxs_residual, residual_codes)  # the second stage is held
    assert (module.decode_weight() - target).norm() < (dense - target).norm()


def test_tuning_reaches_both_scales_and_a_moved_second_stage_rebuilds_the_cached_base():
    W, H = _problem(4)
    module = _module(quip_quantize_layer(W, H, seed=4, scale=1.0, residual=True), residual=True)
    params = tunable_parameters(module)
    assert any(p is module.Wscale_residual for p in params) and any(p is module.Wscale for p in params)
    x = torch.randn(6, N, generator=torch.Generator().manual_seed(5))
    module(x).square().sum().backward()  # the tuning forward: differentiable in the scales
    assert module.Wscale.grad.abs() > 0 and module.Wscale_residual.grad.abs() > 0
    with torch.no_grad():
        before = module.tuning_weight().clone()
        module.qidxs_residual[0, 0] = module.qidxs_residual[0, 0] ^ 0x0F  # another codeword, in place
        torch.testing.assert_close(module.tuning_weight(), module.decode_weight(), rtol=1e-4, atol=1e-6)
        assert not torch.allclose(module.tuning_weight(), before)


def test_the_int4_speed_path_runs_both_stages():
    """Each stage alone is on the int4 grid: two packed matmuls, the second scaled in fp32."""
    W, H = _problem(3)
    layer = quip_quantize_layer(W, H, seed=3, scale=1.0, residual=True)
    two, one = _module(layer, residual=True), _module(layer, residual=False)
    x = torch.randn(4, N, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        want, first_only = two(x), one(x)
        got = QuipInt4CpuLinear(two)(x)
    assert (got - want).norm() < 0.01 * want.norm()  # bf16 inside the int4 matmul
    assert (first_only - want).norm() > 10 * (got - want).norm()  # the second stage is really there
