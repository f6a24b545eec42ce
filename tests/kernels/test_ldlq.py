import pytest
import torch

from quantgate.kernels.ldlq import (
    HessianNotPositiveDefinite,
    block_ldlq,
    cholesky_with_retry,
    damped,
    proxy_loss,
)


def _hessian(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(3 * n, n, generator=g) @ torch.randn(n, n, generator=g) * 0.3
    X += torch.randn(3 * n, n, generator=g)
    return (X.T @ X / X.shape[0]).double()


def _half_grid(t: torch.Tensor) -> torch.Tensor:
    return torch.round(t * 2) / 2


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("block", [1, 8])
def test_ldlq_beats_nearest_rounding_on_the_proxy_loss(seed, block):
    H = _hessian(96, seed)
    W = torch.randn(40, 96, generator=torch.Generator().manual_seed(seed + 10))
    L = cholesky_with_retry(H, sigma=0.01).L
    Hd = L @ L.T
    nearest = proxy_loss(W, _half_grid(W), Hd)
    ldlq = proxy_loss(W, block_ldlq(W, L, _half_grid, block=block), Hd)
    assert ldlq < 0.85 * nearest, (ldlq, nearest)


def test_loss_is_the_sum_of_block_errors_weighted_by_d():
    """The LDL identity the algorithm rests on: tr(ΔW H ΔWᵀ) = Σ_k e_k D_k e_kᵀ, e_k the error of
    block k against its fed-back target. Recomputed here by a plain loop, independently."""
    n, g = 48, 8
    H = _hessian(n, 3)
    W = torch.randn(5, n, dtype=torch.float64)
    L = cholesky_with_retry(H, sigma=0.01).L
    W_hat = block_ldlq(W, L, _half_grid, block=g)
    B = L.T
    total = 0.0
    for k in range(n // g):
        c = slice(k * g, (k + 1) * g)
        Dk = B[c, c]
        target = W[:, c].clone()
        for j in range(k + 1, n // g):
            cj = slice(j * g, (j + 1) * g)
            target += (W[:, cj] - W_hat[:, cj]) @ torch.linalg.solve_triangular(Dk, B[c, cj], upper=True).T
        assert torch.equal(W_hat[:, c], _half_grid(target))
        e = target - W_hat[:, c]
        total += float(((e @ Dk.T) ** 2).sum())
    assert proxy_loss(W, W_hat, L @ L.T) == pytest.approx(total, rel=1e-9)


def test_damping_is_scale_free_and_rescues_a_singular_hessian():
    H = _hessian(16, 4)
    torch.testing.assert_close(damped(H, 0.01), damped(1000 * H, 0.01))
    X = torch.randn(4, 16, dtype=torch.float64)  # rank 4 < 16
    chol = cholesky_with_retry(X.T @ X, sigma=1e-6)
    assert torch.isfinite(chol.L).all() and chol.sigma >= 1e-6


def test_indefinite_hessian_raises_a_named_error():
    H = -torch.eye(8, dtype=torch.float64)
    H[0, 0] = 100.0  # positive mean diagonal, but far from positive definite
    with pytest.raises(HessianNotPositiveDefinite, match="hessian_damp"):
        cholesky_with_retry(H, sigma=1e-3, tries=2)


def test_width_not_a_multiple_of_the_block_is_refused():
    with pytest.raises(ValueError, match="in_features=12"):
        block_ldlq(torch.zeros(2, 12), torch.eye(12, dtype=torch.float64), _half_grid, block=8)
