"""E8P: the 2-bit, 8-dimensional lattice codebook of QuIP# (2^16 codewords, 16 bits per 8 weights).

Tseng, Chee, Sun, Kuleshov, De Sa, "QuIP#: Even Better LLM Quantization with Hadamard Incoherence
and Lattice Codebooks", arXiv 2402.04396. E8 = D8 ∪ (D8 + ½), D8 the integer vectors with
even sum. The codebook is a ball-shaped piece of the shifted lattice E8 + ¼ (which equals E8 − ¼,
since ½·1 ∈ E8), stored compactly:
  * a table of 256 "absolute" vectors a with positive half-integer coordinates: the 227 with
    ‖a‖² ≤ 10 and 29 of the 224 with ‖a‖² = 12 (`_norm12_rows` says which and why);
  * 128 sign patterns per row: coordinates 0..6 free, coordinate 7's sign fixed by parity so
    the signed vector has an even coordinate sum, i.e. lies in D8 + ½ (flipping any one sign
    changes the sum by 2·a_i, an odd integer, so exactly one choice of sign 7 works);
  * a shift of +¼ or −¼ on every coordinate.
Index layout (a GPU kernel and checkpoints depend on it), idx ∈ [0, 65536):
  bits 0–7 table row, bit 8+i set ⇒ coordinate i (0..6) negative, bit 15 set ⇒ shift −¼.
Checkpoints hold idx as int16: decode masks with 0xFFFF after widening, so negatives work.

Encoding is exact nearest-codeword search in two stages: round to the nearest point of E8 + ¼
(Conway & Sloane's D8 decoder, O(8) per vector), which is the answer whenever that lattice point is
in the codebook; the vectors whose nearest lattice point lies outside the ball (15–30 % of a
Gaussian at the scales QuIP# uses) are scored against all 256 rows × 2 shifts with one matmul,
the best of a row's 256 signed/shifted versions being closed-form (align signs with the input,
flip the cheapest coordinate if the parity is wrong). Never against all 65536 codewords.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import torch

DIM = 8
NUM_CODES = 1 << 16
SHIFT = 0.25
_ROWS = 256
_CHUNK = 8192  # rows per lattice-rounding step
_SCORE_CHUNK = 1024  # rows per exact-scoring step: its [1024, 256] temporaries (1 MB) stay in cache
_ODD = (1, 3, 5)  # 2·|coordinate| of table rows: (7/2)² + 7·(1/2)² > 12, so 7/2 never fits
_POW3 = tuple(3**i for i in range(DIM))  # key of a row: Σ k_i 3^i with |a_i| = k_i + ½, k_i ∈ {0,1,2}


def _norm12_rows() -> list[tuple[int, ...]]:
    """The 29 rows of squared norm 12, as doubled coordinates (odd integers), sorted.

    224 positive half-integer vectors have ‖a‖² = 12: the 56 permutations of (3/2)^5 (1/2)^3 and
    the 168 of (5/2)(3/2)^2(1/2)^5. We take rows of the first kind only: at the best scale each
    adds ~1.1e-4 to the Gaussian MSE reduction versus ~0.85e-4 for the second kind, which reaches
    out along single axes where the norm-10 rows (5/2)(3/2)(1/2)^6 already sit (measured on 2e5
    samples). A row of the first kind is fixed by the set T of its three 1/2 positions, and all
    56 are equivalent under coordinate permutations, so only the set matters: rows whose T share
    two positions are lattice neighbours (distance √2) and their gains overlap most (pairwise
    overlap ~1.1e-5, versus ~2.6e-6 sharing one position). We take the 28 T with an even number
    of positions in {4, 5, 6, 7}, a balanced set with 98 such neighbour pairs among the 29 rows
    (a random 29 of the 56 has ~111) and the same 28 rows QuIP#'s reference table uses, and as
    29th the lexicographically smallest remaining row: given the 28, every one of the other 28
    adds the same reduction within sampling noise. All such choices land within 1e-4 of each
    other in MSE; the rule matters only because it must never change (indices depend on it).
    """
    triples = list(itertools.combinations(range(DIM), 3))
    rows = sorted(tuple(1 if i in T else 3 for i in range(DIM)) for T in triples)  # [56]
    even = [r for r in rows if sum(r[i] == 1 for i in range(4, DIM)) % 2 == 0]  # [28]
    odd = [r for r in rows if r not in even]
    return sorted(even + odd[:1])


@lru_cache(maxsize=1)
def _abs_table_cached() -> torch.Tensor:
    ball = [v for v in itertools.product(_ODD, repeat=DIM) if sum(o * o for o in v) <= 40]  # ‖a‖² ≤ 10
    ball.sort(key=lambda v: (sum(o * o for o in v), v))  # by norm, then lexicographic
    rows = ball + _norm12_rows()
    if len(rows) != _ROWS:
        raise AssertionError(f"E8P table has {len(rows)} rows, expected {_ROWS}")
    return torch.tensor(rows, dtype=torch.float32) / 2  # [256, 8]


def abs_table() -> torch.Tensor:
    """[256, 8] float32: the absolute vectors, by squared norm then lexicographic order."""
    return _abs_table_cached().clone()


@lru_cache(maxsize=1)
def _tables() -> dict[str, torch.Tensor]:
    """Everything the encoder and decoder look up, derived once from the table."""
    A = _abs_table_cached()  # [256, 8]
    row_parity = A.sum(-1).round().long() % 2  # [256] coordinate sum mod 2 (an integer)
    keys = ((A - 0.5).round().long() * torch.tensor(_POW3)).sum(-1)  # [256]
    lut = torch.full((3**DIM,), -1, dtype=torch.int64)  # key -> row, −1 if not in the table
    lut[keys] = torch.arange(_ROWS)
    codebook = _decode_bits(torch.arange(NUM_CODES), A, row_parity)  # [65536, 8]
    return {"A": A, "At": A.T.contiguous(), "norm": A.square().sum(-1), "parity": row_parity,
            "odd": row_parity.bool(), "lut": lut, "codebook": codebook}


def _decode_bits(idx: torch.Tensor, A: torch.Tensor, row_parity: torch.Tensor) -> torch.Tensor:
    """Decode int64 indices [N] in [0, 65536) straight from the bit layout -> [N, 8]."""
    row = idx & 0xFF
    neg = (idx[:, None] >> torch.arange(8, 15)) & 1  # [N, 7] sign bits of coordinates 0..6
    # An even signed sum needs #negatives ≡ Σ a (mod 2): that fixes coordinate 7.
    neg7 = (neg.sum(-1) + row_parity[row]) % 2  # [N]
    signs = 1.0 - 2.0 * torch.cat((neg, neg7[:, None]), dim=-1).float()  # [N, 8]
    shift = torch.where((idx >> 15) & 1 == 1, -SHIFT, SHIFT)  # [N]
    return A[row] * signs + shift[:, None]


def e8p_codebook() -> torch.Tensor:
    """[65536, 8] float32: row idx is the codeword of index idx."""
    return _tables()["codebook"].clone()


def _as_index(idx: torch.Tensor) -> torch.Tensor:
    if idx.dtype.is_floating_point or idx.dtype == torch.bool:
        raise ValueError(f"idx.dtype={idx.dtype}: E8P indices must be an integer tensor")
    return idx.to(torch.int64) & 0xFFFF  # int16 holds 32768.. as negatives: keep the 16 bits


def e8p_decode(idx: torch.Tensor) -> torch.Tensor:
    """[...] int16/int32/int64 -> [..., 8] float32 codewords."""
    idx = _as_index(idx)
    return _tables()["codebook"].to(idx.device)[idx]


def _index_of(row: torch.Tensor, negative: torch.Tensor, minus: torch.Tensor) -> torch.Tensor:
    """Index from table row [N], the final signed vector's negative coordinates [N, 8] (bool) and
    whether the shift is −¼ [N]; coordinate 7's sign is implied, so its bit does not exist."""
    sign_bits = (negative[:, :7].long() << torch.arange(8, 15)).sum(-1)  # [N]
    return row | sign_bits | (minus.long() << 15)


def _encode_lattice(x: torch.Tensor, t: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Nearest point of E8 + ¼ for x [N, 8]; -> (index [N], found [N] bool: that point is a codeword).

    Conway & Sloane: the nearest point of D8 rounds every coordinate and, if the sum comes out
    odd, re-rounds the worst-rounded coordinate the other way; D8 + ½ is D8 shifted by ½·1.
    """
    z = x - SHIFT  # the codebook is (E8 points) + ¼

    def nearest_d8(v: torch.Tensor) -> torch.Tensor:  # [N, 8] -> [N, 8] integer-valued
        f = torch.round(v)
        err = v - f  # [N, 8] in [−½, ½]
        worst = err.abs().argmax(-1, keepdim=True)  # [N, 1]
        step = torch.where(err.gather(-1, worst) >= 0, 1.0, -1.0).to(v.dtype)
        odd = (f.sum(-1, keepdim=True) % 2) != 0  # [N, 1]
        return f.scatter_add(-1, worst, torch.where(odd, step, torch.zeros_like(step)))

    p_int = nearest_d8(z)  # [N, 8] point of D8
    p_half = nearest_d8(z - 0.5) + 0.5  # point of D8 + ½
    use_int = (z - p_int).square().sum(-1) < (z - p_half).square().sum(-1)  # [N]
    # A D8 point v is the codeword (v + ½) − ¼: signed vector v + ½, shift −¼.
    signed = torch.where(use_int[:, None], p_int + 0.5, p_half)  # [N, 8] in D8 + ½
    k = (signed.abs() - 0.5).round().long()  # [N, 8] |coordinate| = k + ½
    in_range = (k <= 2).all(-1)
    row = t["lut"][(k.clamp(max=2) * torch.tensor(_POW3)).sum(-1)]  # [N]
    found = in_range & (row >= 0)
    return _index_of(row.clamp(min=0), signed < 0, use_int), found


def _encode_scored(x: torch.Tensor, t: dict[str, torch.Tensor]) -> torch.Tensor:
    """Exact nearest codeword for x [N, 8] by scoring every (row, shift); -> index [N].

    For y = x − s and row a, the best signed version maximizes Σ ±a_i y_i: signs of y if their
    parity suits a, else that with the cheapest coordinate flipped, adding 4·min_i a_i|y_i| to
    ‖x − s − signed‖² = ‖x‖² − 2sΣx + 8s² + ‖a‖² − 2·Σ a_i|y_i|  (‖x‖², 8s²: same for all).
    The flip costs at least 4·½·min_i |y_i|, since every a_i ≥ ½, and that bound is what we
    minimize: it is tight at the minimizer, so the minimum is exact. Were it loose there, the
    winner a would have a_j ≥ 3/2 at j = argmin |y_i|; lowering a_j by 1 gives a row a' of the
    table (‖a'‖² ≤ 10) whose parity matches y's signs and whose cost is the bound minus
    2a_j − 1 > 0, contradicting minimality. This saves the [N, 256, 8] minimum over coordinates.
    """
    A, At = t["A"].to(x.dtype), t["At"].to(x.dtype)  # [256, 8], [8, 256]
    n = x.shape[0]
    shifts = torch.tensor([SHIFT, -SHIFT], dtype=x.dtype)  # [2], by the value of bit 15
    y = x[:, None, :] - shifts[None, :, None]  # [N, 2, 8]
    u = y.abs()
    cost = torch.matmul(u, At).mul_(-2.0).add_(t["norm"].to(x.dtype))  # [N, 2, 256] ‖a‖² − 2·score
    cost.add_((-2.0 * shifts * x.sum(-1, keepdim=True))[..., None])  # −2sΣx differs between shifts
    neg_parity = ((y < 0).sum(-1) % 2).bool()  # [N, 2]
    mismatch = (neg_parity[..., None] ^ t["odd"]).to(x.dtype)  # [N, 2, 256] 1 where a flip is due
    cost.addcmul_(mismatch, 2.0 * u.amin(-1, keepdim=True))  # + 4 · ½ min_i |y_i|
    best = cost.view(n, 2 * _ROWS).argmin(-1)  # [N]
    best_row, best_minus = best % _ROWS, best >= _ROWS

    # Rebuild the winning signed vector to read its sign bits.
    y = x - torch.where(best_minus, -SHIFT, SHIFT).to(x.dtype)[:, None]  # [N, 8]
    negative = y < 0
    a = A[best_row]  # [N, 8]
    wrong_parity = (negative.sum(-1) % 2) != t["parity"][best_row]  # [N]
    cheapest = (a * y.abs()).argmin(-1)  # [N] any of 0..7, coordinate 7 included
    flip = torch.nn.functional.one_hot(cheapest, DIM).bool() & wrong_parity[:, None]
    return _index_of(best_row, negative ^ flip, best_minus)


def e8p_encode(x: torch.Tensor) -> torch.Tensor:
    """[..., 8] float -> [...] int64: the index of a nearest E8P codeword (ties: any of them)."""
    if x.shape[-1] != DIM:
        raise ValueError(f"x.shape={tuple(x.shape)}: E8P encodes groups of {DIM} along the last dim")
    t = _tables()
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    flat = x.detach().reshape(-1, DIM).to("cpu", dtype)  # [N, 8]; the tables live on the CPU
    out = torch.empty(flat.shape[0], dtype=torch.int64)
    found = torch.empty(flat.shape[0], dtype=torch.bool)
    for start in range(0, flat.shape[0], _CHUNK):
        span = slice(start, start + _CHUNK)
        out[span], found[span] = _encode_lattice(flat[span], t)
    missing = (~found).nonzero().squeeze(-1)  # nearest lattice point outside the ball: score exactly
    for start in range(0, missing.shape[0], _SCORE_CHUNK):
        rows = missing[start : start + _SCORE_CHUNK]
        out[rows] = _encode_scored(flat[rows], t)
    return out.reshape(x.shape[:-1]).to(x.device)


def e8p_quantize(x: torch.Tensor) -> torch.Tensor:
    """[..., 8] -> [..., 8] float32: the nearest E8P codeword, e8p_decode(e8p_encode(x))."""
    return e8p_decode(e8p_encode(x))
