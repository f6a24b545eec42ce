import math

import pytest
import torch

from quantgate.kernels.hadamard import (
    DENSE_FWHT_MAX,
    _use_dense,
    fwht,
    hadamard_matrix,
    random_signs,
    rht,
    rht_inverse,
    rht_matrix,
    small_factor,
    split_order,
    sylvester_scaled,
)


@pytest.mark.parametrize("n", [1, 2, 4, 12, 20, 28, 36, 44, 576, 1536, 192, 12 * 8, 36 * 4])
def test_hadamard_rows_are_exactly_orthogonal(n):
    H = hadamard_matrix(n)
    assert H.shape == (n, n) and H.dtype == torch.float64
    assert torch.equal(H.abs(), torch.ones(n, n, dtype=torch.float64))
    assert torch.equal(H @ H.T, n * torch.eye(n, dtype=torch.float64))


def test_impossible_order_names_n():
    with pytest.raises(ValueError, match="n=50"):
        hadamard_matrix(50)
    with pytest.raises(ValueError, match="n=6"):
        hadamard_matrix(6)


def test_cached_matrix_cannot_be_corrupted_by_callers():
    hadamard_matrix(12).zero_()
    assert hadamard_matrix(12).abs().min() == 1


@pytest.mark.parametrize(
    "n, expected",
    [(576, (36, 16)), (1536, (12, 128)), (192, (12, 16)),  # SmolLM2-135M: hidden, MLP, k/v
     (960, (60, 16)), (2560, (20, 128)),  # SmolLM2-360M: hidden, MLP
     (64, (1, 64)), (50, (25, 2)), (7, (7, 1)), (1, (1, 1))],
)
def test_split_order(n, expected):
    assert split_order(n) == expected


@pytest.mark.parametrize("n", [576, 1536, 192, 50, 7, 64])
def test_rht_is_exactly_orthogonal(n):
    T = rht_matrix(random_signs(n, seed=n), small_factor(n, dtype=torch.float64))
    torch.testing.assert_close(T @ T.T, torch.eye(n, dtype=torch.float64), atol=1e-10, rtol=0)


@pytest.mark.parametrize("n", [576, 50, 7, 64])
def test_rht_matches_dense_matrix_and_inverts(n):
    gen = torch.Generator().manual_seed(n)
    signs, factor = random_signs(n, seed=1), small_factor(n, dtype=torch.float64)
    x = torch.randn(2, 3, n, dtype=torch.float64, generator=gen)  # leading batch dims
    y = rht(x, signs, factor)
    torch.testing.assert_close(y, x @ rht_matrix(signs, factor).T, atol=1e-12, rtol=0)
    torch.testing.assert_close(rht_inverse(y, signs, factor), x, atol=1e-12, rtol=0)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1), atol=1e-12, rtol=0)


def test_rht_float32_default_factor_and_int8_signs():
    n = 1536
    x = torch.randn(4, n, generator=torch.Generator().manual_seed(0))
    signs = random_signs(n, seed=3)
    y = rht(x, signs.to(torch.int8), small_factor(n))
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, rht(x, signs, small_factor(n)))
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1), atol=1e-3, rtol=1e-5)
    torch.testing.assert_close(rht_inverse(y, signs, small_factor(n)), x, atol=1e-5, rtol=0)


def test_rht_bfloat16_keeps_dtype_and_is_close():
    n = 576
    x = torch.randn(3, n, generator=torch.Generator().manual_seed(1))
    signs, factor = random_signs(n, seed=2), small_factor(n)
    y = rht(x.bfloat16(), signs.bfloat16(), factor.bfloat16())
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), rht(x, signs, factor), atol=0.05, rtol=0.02)


def test_rht_rejects_bad_layouts():
    signs = random_signs(576, seed=0)
    with pytest.raises(ValueError, match="signs.shape"):
        rht(torch.zeros(2, 576), signs[:10], small_factor(576))
    with pytest.raises(ValueError, match="m=12"):
        rht(torch.zeros(2, 576), signs, small_factor(1536))  # 576 / 12 = 48: not a power of two


@pytest.mark.parametrize("n", [1, 2, 8, 64, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dense", [False, True], ids=["butterflies", "one-matmul"])
def test_fwht_matches_dense_sylvester_matrix(n, dtype, dense):
    """Both paths (the matmul by the cached H/√n is CUDA's default) against the matrix itself."""
    x = torch.randn(2, 5, n, dtype=dtype, generator=torch.Generator().manual_seed(n))
    expected = x @ hadamard_matrix(n).to(dtype) / math.sqrt(n)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(fwht(x, dense=dense), expected, atol=tol, rtol=0)
    twice = fwht(fwht(x, dense=dense), dense=dense)  # H/√n is symmetric orthogonal
    torch.testing.assert_close(twice, x, atol=tol, rtol=0)


def test_dense_path_is_cudas_default_up_to_its_bound():
    assert _use_dense(DENSE_FWHT_MAX, on_cuda=True) and not _use_dense(2 * DENSE_FWHT_MAX, on_cuda=True)
    assert not _use_dense(64, on_cuda=False)  # the CPU keeps the O(n log n) butterflies


def test_cached_matrix_filled_under_inference_mode_still_allows_backward():
    """Serving fills the cache under inference_mode; end-to-end tuning later backpropagates through
    the same transform: the cached matrix must be an ordinary tensor."""
    sylvester_scaled.cache_clear()
    with torch.inference_mode():
        fwht(torch.randn(2, 32), dense=True)
    x = torch.randn(2, 32, requires_grad=True)
    fwht(x, dense=True).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach(), atol=1e-5, rtol=1e-5)  # orthogonal: |Hx|² = |x|²


def test_fwht_paths_agree_in_bfloat16_and_keep_the_dtype():
    x = torch.randn(3, 512, generator=torch.Generator().manual_seed(1)).bfloat16()
    dense, butterflies = fwht(x, dense=True), fwht(x, dense=False)
    assert dense.dtype == butterflies.dtype == torch.bfloat16
    torch.testing.assert_close(dense.float(), butterflies.float(), atol=0.02, rtol=0.02)


def test_fwht_bfloat16():
    x = torch.randn(4, 128, generator=torch.Generator().manual_seed(0))
    y = fwht(x.bfloat16())
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), fwht(x), atol=0.02, rtol=0.02)


def test_fwht_is_fast_without_a_dense_matrix():
    n = 2**20  # a dense H would be 8 TB
    k = 0b1011_0110_0101_1100_1001
    e_k = torch.zeros(1, n, dtype=torch.float64)
    e_k[0, k] = 1.0
    row = fwht(e_k)[0] * math.sqrt(n)  # row k of H: (−1)^popcount(k & j)
    j = torch.arange(n)
    bits = k & j
    parity = torch.zeros(n, dtype=torch.int64)
    for b in range(20):
        parity ^= (bits >> b) & 1
    torch.testing.assert_close(row, (1 - 2 * parity).double(), atol=1e-9, rtol=0)


def test_fwht_rejects_non_power_of_two():
    with pytest.raises(ValueError, match="12"):
        fwht(torch.zeros(3, 12))


def test_small_factor_random_fallback_is_deterministic_and_orthogonal():
    F = small_factor(50, seed=7, dtype=torch.float64)  # m = 25: no Hadamard matrix of order 25
    assert F.shape == (25, 25)
    torch.testing.assert_close(F @ F.T, torch.eye(25, dtype=torch.float64), atol=1e-12, rtol=0)
    assert torch.equal(F, small_factor(50, seed=7, dtype=torch.float64))
    assert not torch.equal(F, small_factor(50, seed=8, dtype=torch.float64))
    assert small_factor(50, seed=7).dtype == torch.float32


def test_small_factor_is_scaled_hadamard_when_one_exists():
    torch.testing.assert_close(small_factor(576, dtype=torch.float64), hadamard_matrix(36) / 6.0)
    assert torch.equal(small_factor(64), torch.ones(1, 1))


def test_random_signs():
    s = random_signs(1000, seed=5)
    assert s.dtype == torch.float32 and s.shape == (1000,)
    assert set(s.tolist()) == {-1.0, 1.0}
    assert torch.equal(s, random_signs(1000, seed=5))
    assert not torch.equal(s, random_signs(1000, seed=6))
