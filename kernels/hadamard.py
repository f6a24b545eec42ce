"""Hadamard matrices and the randomized Hadamard transform (RHT) of QuIP#.

QuIP# (Tseng, Chee, Sun, Kuleshov, De Sa, "QuIP#: Even Better LLM Quantization with Hadamard
Incoherence and Lattice Codebooks", arXiv 2402.04396) makes a weight matrix incoherent by
multiplying it with T = (F ⊗ H_p/√p) · diag(S): S random signs, H_p a Sylvester Hadamard matrix
of power-of-two order p (applied in O(n log n) by the fast Walsh–Hadamard transform) and F a small
m×m orthonormal factor for the odd part of n = m·p (a scaled Hadamard matrix when one of order m
can be built, as for SmolLM2's 576 = 36·16 and 1536 = 12·128).

Hadamard matrices are built at run time: Sylvester doubling for powers of two and the two Paley
constructions over a prime field GF(q) (Paley I: order q+1 for q ≡ 3 mod 4; Paley II: order
2(q+1) for q ≡ 1 mod 4), then Kronecker products with H_2 for any further factors of two.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch

_H2 = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=torch.float64)
# Paley II doubles each conference-matrix entry with these 2×2 blocks (entries 0 and ±1).
_PALEY2_ZERO = torch.tensor([[1.0, -1.0], [-1.0, -1.0]], dtype=torch.float64)


def _is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _is_prime(q: int) -> bool:
    if q < 2:
        return False
    return all(q % d for d in range(2, math.isqrt(q) + 1))


def _paley_kind(b: int) -> str | None:
    """'I' or 'II' if a Paley construction over a prime field gives order b, else None."""
    if _is_prime(b - 1) and (b - 1) % 4 == 3:
        return "I"
    if b % 2 == 0 and _is_prime(b // 2 - 1) and (b // 2 - 1) % 4 == 1:
        return "II"
    return None


def _construction(n: int) -> tuple[int, int] | None:
    """(base, doublings) with n = base · 2^doublings and base ∈ {1, 2} or a Paley order, taking
    the smallest base (so powers of two are pure Sylvester and match `fwht`); None if none."""
    if n < 1:
        return None
    doublings = (n & -n).bit_length() - 1  # exponent of the largest power of two dividing n
    base = n >> doublings
    while True:
        if base <= 2 or _paley_kind(base) is not None:
            return base, doublings
        if doublings == 0:
            return None
        base, doublings = base * 2, doublings - 1


def _quadratic_character(q: int) -> torch.Tensor:
    """χ over GF(q), q prime: [q] int64 with χ(0) = 0, +1 on nonzero squares, −1 elsewhere."""
    chi = -torch.ones(q, dtype=torch.int64)
    chi[0] = 0
    squares = torch.arange(1, q, dtype=torch.int64).pow(2) % q
    chi[squares] = 1
    return chi


def _conference_core(q: int) -> torch.Tensor:
    """The (q+1)×(q+1) Paley conference matrix [[0, 1ᵀ], [±1, Q]] with Jacobsthal Q[i, j] = χ(j − i).

    Q is antisymmetric for q ≡ 3 (mod 4) and symmetric for q ≡ 1 (mod 4) (χ(−1) = ∓1), so the
    first column is −1 resp. +1 to make C skew resp. symmetric; either way C Cᵀ = q I.
    """
    idx = torch.arange(q)
    jacobsthal = _quadratic_character(q)[(idx[None, :] - idx[:, None]) % q]  # [q, q]
    C = torch.zeros(q + 1, q + 1, dtype=torch.float64)
    C[0, 1:] = 1.0
    C[1:, 0] = -1.0 if q % 4 == 3 else 1.0
    C[1:, 1:] = jacobsthal.double()
    return C


def _paley(b: int) -> torch.Tensor:
    kind = _paley_kind(b)
    if kind == "I":  # H = I + C, C skew with C Cᵀ = q I  ⇒  H Hᵀ = (q+1) I
        return torch.eye(b, dtype=torch.float64) + _conference_core(b - 1)
    if kind == "II":  # C symmetric: each 0 -> [[1,-1],[-1,-1]], each ±1 -> ±H_2
        C = _conference_core(b // 2 - 1)
        return torch.kron(C, _H2) + torch.kron(torch.eye(C.shape[0], dtype=torch.float64), _PALEY2_ZERO)
    raise ValueError(f"order {b}: not a Paley order")


@lru_cache(maxsize=64)
def _hadamard_cached(n: int) -> torch.Tensor:
    found = _construction(n)
    if found is None:
        raise ValueError(
            f"n={n}: no Hadamard order of the form 2^k · m with m ∈ {{1, 2}} or a Paley order "
            "(q+1 for prime q ≡ 3 mod 4, 2(q+1) for prime q ≡ 1 mod 4)"
        )
    base, doublings = found
    H = torch.ones(1, 1, dtype=torch.float64) if base == 1 else _H2 if base == 2 else _paley(base)
    return _sylvester_doublings(H, doublings)


def _sylvester_doublings(H: torch.Tensor, doublings: int) -> torch.Tensor:
    for _ in range(doublings):
        H = torch.kron(_H2.to(H.device, H.dtype), H)  # Sylvester: [[H, H], [H, -H]], exact in any dtype
    return H


def hadamard_matrix(n: int) -> torch.Tensor:
    """n×n matrix of ±1 (float64) with H Hᵀ = n I exactly; ValueError if no construction applies."""
    return _hadamard_cached(n).clone()  # callers may write into it; the cache must stay intact


def split_order(n: int) -> tuple[int, int]:
    """(m, p) with n = m·p, p a power of two and m the smallest with a buildable m×m Hadamard
    matrix; if there is none, m is the odd part of n (e.g. 50 -> (25, 2))."""
    if n < 1:
        raise ValueError(f"n={n}: the transform length must be positive")
    doublings = (n & -n).bit_length() - 1
    odd = n >> doublings
    for j in range(doublings + 1):
        m = odd << j
        if _construction(m) is not None:
            return m, n // m
    return odd, 1 << doublings


@lru_cache(maxsize=64)
def _small_factor_cached(n: int, seed: int) -> torch.Tensor:
    m, _ = split_order(n)
    if _construction(m) is not None:
        return _hadamard_cached(m) / math.sqrt(m)  # [m, m]
    # No Hadamard matrix of order m: any orthogonal matrix keeps the transform exact. QR of a
    # Gaussian, with R's diagonal made positive, is Haar-distributed and unique, so a seed fixes it.
    gen = torch.Generator().manual_seed(seed)
    Q, R = torch.linalg.qr(torch.randn(m, m, dtype=torch.float64, generator=gen))
    sign = torch.where(torch.diagonal(R) < 0, -1.0, 1.0).to(torch.float64)  # [m]
    return Q * sign[None, :]


def small_factor(n: int, seed: int = 0, *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The m×m orthonormal factor F of the RHT of length n, m = split_order(n)[0]: H_m/√m when a
    Hadamard matrix of order m exists, else a seeded random orthogonal matrix. Built in float64;
    pass dtype=torch.float64 where orthogonality must hold to ~1e-15 rather than ~1e-7."""
    return _small_factor_cached(n, seed).to(dtype, copy=True)


def _work_dtype(x: torch.Tensor) -> torch.dtype:
    # Half-precision sums lose bits at every butterfly stage: compute in float32, cast back.
    return x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32


# Up to this order the Sylvester matrix is applied as one matmul on CUDA (H_4096 is 64 MiB in fp32):
# on a GPU the log2(n) butterfly stages are ~3 kernel launches each, and at decode sizes the launches,
# not the arithmetic, are the cost. 0 turns the dense path off (bench/gpu_layers.py times both).
DENSE_FWHT_MAX = 4096


@lru_cache(maxsize=16)
def sylvester_scaled(n: int, device: torch.device | str = "cpu",
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """H_n/√n for a power of two n (the matrix `fwht` applies; symmetric), built by Sylvester
    doubling in `dtype` on `device`: ±1 is exact in any dtype, and no float64 copy is kept. Cached,
    so treat it as read-only; built outside inference mode, or a cache filled under
    `torch.inference_mode()` (serving) would break every later backward (end-to-end tuning)."""
    with torch.inference_mode(False):
        ones = torch.ones(1, 1, dtype=dtype, device=device)
        return _sylvester_doublings(ones, n.bit_length() - 1) * (1.0 / math.sqrt(n))


def _use_dense(n: int, on_cuda: bool) -> bool:
    return on_cuda and n <= DENSE_FWHT_MAX


def fwht(x: torch.Tensor, *, dense: bool | None = None) -> torch.Tensor:
    """Orthonormal fast Walsh–Hadamard transform along the last dim: x @ H_n / √n with H_n the
    Sylvester matrix (= hadamard_matrix(n)), in O(n log n) with log2(n) vectorized butterflies, or
    as one matmul by the cached H_n/√n (`dense`; by default on CUDA up to DENSE_FWHT_MAX)."""
    n = x.shape[-1]
    if not _is_power_of_two(n):
        raise ValueError(f"x.shape[-1]={n}: fwht needs a power-of-two length")
    if dense is None:
        dense = _use_dense(n, x.is_cuda)
    if dense:  # float32 here is IEEE unless someone enables TF32 matmuls globally (we do not)
        work = _work_dtype(x)
        return (x.to(work) @ sylvester_scaled(n, x.device, work)).to(x.dtype)
    y = x.to(_work_dtype(x)).reshape(-1, n)  # [B, n]
    h = 1
    while h < n:
        # Index i = block·2h + half·h + r: one butterfly on the bit of weight h of every index.
        pairs = y.view(y.shape[0], n // (2 * h), 2, h)
        lo, hi = pairs[:, :, 0, :], pairs[:, :, 1, :]
        y = torch.stack((lo + hi, lo - hi), dim=2).view(y.shape[0], n)
        h *= 2
    return (y * (1.0 / math.sqrt(n))).reshape(x.shape).to(x.dtype)


def _layout(n: int, signs: torch.Tensor, factor: torch.Tensor) -> tuple[int, int]:
    if signs.shape != (n,):
        raise ValueError(f"signs.shape={tuple(signs.shape)}: expected ({n},) for x.shape[-1]={n}")
    if factor.dim() != 2 or factor.shape[0] != factor.shape[1]:
        raise ValueError(f"factor.shape={tuple(factor.shape)}: expected a square matrix")
    m = factor.shape[0]
    if n % m or not _is_power_of_two(n // m):
        raise ValueError(f"factor of order m={m} does not split n={n} as m · 2^k")
    return m, n // m


def rht(x: torch.Tensor, signs: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """y = (F ⊗ H_p/√p)(signs ⊙ x) along the last dim; index i = a·p + b, a over m, b over p."""
    n = x.shape[-1]
    m, p = _layout(n, signs, factor)
    dtype = _work_dtype(x)
    y = (x.to(dtype) * signs.to(x.device, dtype)).reshape(*x.shape[:-1], m, p)  # [..., m, p]
    y = fwht(y)  # H_p/√p on b
    if m > 1:
        y = torch.matmul(factor.to(x.device, dtype), y)  # F on a
    return y.reshape(x.shape).to(x.dtype)


def rht_inverse(y: torch.Tensor, signs: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """x with rht(x) = y: the transform is orthogonal, so apply Fᵀ, H_p/√p (symmetric), signs."""
    n = y.shape[-1]
    m, p = _layout(n, signs, factor)
    dtype = _work_dtype(y)
    x = y.to(dtype).reshape(*y.shape[:-1], m, p)  # [..., m, p]
    if m > 1:
        x = torch.matmul(factor.to(y.device, dtype).T, x)
    x = fwht(x).reshape(y.shape) * signs.to(y.device, dtype)
    return x.to(y.dtype)


def rht_matrix(signs: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Dense T [n, n] float64 with rht(x) == x @ T.T (reference and tests only: O(n²) memory)."""
    n = signs.shape[0]
    eye = torch.eye(n, dtype=torch.float64)  # row i = e_i, so rht(eye)[i] = T e_i = column i of T
    return rht(eye, signs.to(torch.float64), factor.to(torch.float64)).T.contiguous()


def random_signs(n: int, seed: int) -> torch.Tensor:
    """[n] float32 of ±1 drawn from a torch.Generator seeded with `seed`."""
    if n < 0:
        raise ValueError(f"n={n}: the number of signs must be non-negative")
    gen = torch.Generator().manual_seed(seed)
    bits = torch.randint(0, 2, (n,), generator=gen)
    return (1 - 2 * bits).to(torch.float32)
