import itertools
import time

import pytest
import torch

from quantgate.kernels.aqlm import (
    AqlmCodes,
    AqlmResult,
    aqlm_quantize,
    beam_search_codes,
    layer_objective,
    reconstruct,
    residual_kmeans_init,
    update_codebooks_scales,
)


def _problem(m: int, n: int, seed: int = 0, tokens: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian W and a correlated (non-diagonal) proxy Hessian H = XᵀX + small diagonal."""
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(n, n, generator=g) / n**0.5
    x = torch.randn(tokens, n, generator=g) @ mix
    h = x.T @ x + 1e-3 * torch.eye(n)
    w = torch.randn(m, n, generator=g) * 0.02
    return w, h


def _f(w: torch.Tensor, q: AqlmCodes, h: torch.Tensor) -> float:
    return layer_objective(w, reconstruct(q), h)


def _random_codes(w: torch.Tensor, num_cb: int, nbits: int, group: int, seed: int) -> AqlmCodes:
    g = torch.Generator().manual_seed(seed)
    m, n = w.shape
    k = 2**nbits
    scales = w.pow(2).mean(1).sqrt().reshape(m, 1, 1, 1)
    codebooks = torch.randn(num_cb, k, 1, group, generator=g) * 0.7
    codes = torch.randint(k, (m, n // group, num_cb), generator=g)
    return AqlmCodes(codes=codes, codebooks=codebooks, scales=scales)


def _assert_valid(q: AqlmCodes, m: int, n: int, num_cb: int, k: int, group: int = 8) -> None:
    assert q.codes.shape == (m, n // group, num_cb) and q.codes.dtype == torch.int64
    assert q.codebooks.shape == (num_cb, k, 1, group) and q.codebooks.dtype == torch.float32
    assert q.scales.shape == (m, 1, 1, 1) and q.scales.dtype == torch.float32
    assert int(q.codes.min()) >= 0 and int(q.codes.max()) < k
    assert torch.isfinite(reconstruct(q)).all()


# --------------------------------------------------------------------------------------------- basics


def test_reconstruct_matches_hand_loop_and_is_differentiable():
    g = torch.Generator().manual_seed(1)
    m, n, group, num_cb, k = 3, 16, 8, 2, 4
    codes = torch.randint(k, (m, n // group, num_cb), generator=g)
    codebooks = torch.randn(num_cb, k, 1, group, generator=g, requires_grad=True)
    scales = torch.rand(m, 1, 1, 1, generator=g).add(0.5).requires_grad_(True)
    q = AqlmCodes(codes=codes, codebooks=codebooks, scales=scales)
    w_hat = reconstruct(q)

    expected = torch.zeros(m, n)
    for i in range(m):
        for j in range(n // group):
            vec = sum(codebooks[c, codes[i, j, c], 0, :] for c in range(num_cb))
            expected[i, j * group : (j + 1) * group] = scales[i, 0, 0, 0] * vec
    assert w_hat.shape == (m, n) and w_hat.dtype == torch.float32
    torch.testing.assert_close(w_hat, expected.detach())

    w_hat.sum().backward()
    assert codebooks.grad is not None and scales.grad is not None
    assert codebooks.grad.abs().sum() > 0 and scales.grad.abs().sum() > 0


def test_layer_objective_is_output_error():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(40, 16, generator=g)
    w = torch.randn(5, 16, generator=g)
    w_hat = w + 0.1 * torch.randn(5, 16, generator=g)
    direct = float(((w_hat.double() - w.double()) @ x.double().T).pow(2).sum())
    assert layer_objective(w, w_hat, x.T @ x) == pytest.approx(direct, rel=1e-5)
    assert layer_objective(w, w, x.T @ x) == 0.0


def test_aqlm_codes_rejects_inconsistent_shapes():
    with pytest.raises(ValueError, match="inconsistent"):
        AqlmCodes(torch.zeros(4, 2, 2, dtype=torch.long), torch.zeros(3, 16, 1, 8), torch.ones(4, 1, 1, 1))


# ------------------------------------------------------------------------------------------------ init


def test_residual_kmeans_second_codebook_lowers_l2_error():
    w, _ = _problem(64, 128, seed=3)
    one = residual_kmeans_init(w, num_codebooks=1, nbits=4, seed=0)
    two = residual_kmeans_init(w, num_codebooks=2, nbits=4, seed=0)
    _assert_valid(one, 64, 128, 1, 16)
    _assert_valid(two, 64, 128, 2, 16)
    err1 = float((reconstruct(one) - w).pow(2).sum())
    err2 = float((reconstruct(two) - w).pow(2).sum())
    assert err2 < 0.8 * err1
    # scales are the row RMS; same seed → same result
    torch.testing.assert_close(two.scales.reshape(-1), w.pow(2).mean(1).sqrt())
    again = residual_kmeans_init(w, num_codebooks=2, nbits=4, seed=0)
    assert torch.equal(again.codes, two.codes) and torch.equal(again.codebooks, two.codebooks)


def test_residual_kmeans_handles_more_centers_than_distinct_groups():
    w = torch.ones(4, 16)  # 8 identical groups, 256 centers
    q = residual_kmeans_init(w, num_codebooks=2, nbits=8)
    _assert_valid(q, 4, 16, 2, 256)
    torch.testing.assert_close(reconstruct(q), w)


def test_bad_group_raises_with_values():
    w, h = torch.zeros(4, 60), torch.eye(60)
    with pytest.raises(ValueError, match=r"in_features=60.*group=8"):
        residual_kmeans_init(w, num_codebooks=2, nbits=4)
    with pytest.raises(ValueError, match=r"in_features=60.*group=8"):
        aqlm_quantize(w, h, nbits=4)
    with pytest.raises(ValueError, match="H must be"):
        aqlm_quantize(torch.zeros(4, 64), torch.eye(32), nbits=4)


# ----------------------------------------------------------------------------------------- beam search


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_search_never_increases_objective(seed):
    w, h = _problem(32, 64, seed=seed)
    starts = [
        _random_codes(w, 2, 4, 8, seed),
        residual_kmeans_init(w, num_codebooks=2, nbits=4, seed=seed, iters=5),
    ]
    for q in starts:
        f0 = _f(w, q, h)
        for beam in (1, 2, 4):
            out = beam_search_codes(w, h, q, beam_size=beam)
            _assert_valid(out, 32, 64, 2, 16)
            assert _f(w, out, h) <= f0 * (1 + 1e-9)
            assert out.codebooks is q.codebooks and out.scales is q.scales
        # a second pass from the first's result is never worse either (fixed point allowed)
        once = beam_search_codes(w, h, q, beam_size=2)
        assert _f(w, beam_search_codes(w, h, once, beam_size=2), h) <= _f(w, once, h) * (1 + 1e-9)


def test_beam_search_lowers_objective_from_random_codes():
    w, h = _problem(32, 64, seed=4)
    q = _random_codes(w, 2, 4, 8, seed=4)
    f0 = _f(w, q, h)
    f1 = _f(w, beam_search_codes(w, h, q, beam_size=1), h)
    f4 = _f(w, beam_search_codes(w, h, q, beam_size=4), h)
    assert f1 < 0.5 * f0 and f4 < 0.5 * f0


def test_beam_search_with_full_beam_is_exact_sequential_coordinate_descent():
    """beam_size = K with M = 2 enumerates all K² code pairs of a group, so one pass must equal brute force
    over each group in turn (which also checks the rank-g updates of R = (Ŵ − W) H between groups)."""
    w, h = _problem(6, 24, seed=5)
    q = _random_codes(w, 2, 3, 8, seed=5)  # K = 8
    out = beam_search_codes(w, h, q, beam_size=8)

    codes = q.codes.clone()
    pairs = list(itertools.product(range(8), repeat=2))
    for j in range(3):
        for i in range(6):
            best, best_f = None, None
            for pair in pairs:
                codes[i, j] = torch.tensor(pair)
                f = layer_objective(w[i : i + 1], reconstruct(AqlmCodes(codes[i : i + 1], q.codebooks,
                                                                         q.scales[i : i + 1])), h)
                if best_f is None or f < best_f:
                    best, best_f = pair, f
            codes[i, j] = torch.tensor(best)
    brute = AqlmCodes(codes, q.codebooks, q.scales)
    assert _f(w, out, h) == pytest.approx(_f(w, brute, h), rel=1e-6)


def test_beam_search_uses_h():
    """With a strongly non-diagonal H, the H-aware choice beats plain nearest-codeword (H = I) codes."""
    w, h = _problem(32, 64, seed=6)
    q = residual_kmeans_init(w, num_codebooks=2, nbits=4, seed=0, iters=5)
    nearest = beam_search_codes(w, torch.eye(64), q, beam_size=4)
    aware = beam_search_codes(w, h, q, beam_size=4)
    assert _f(w, aware, h) < 0.9 * _f(w, nearest, h)


# ------------------------------------------------------------------------------------ codebook update


def test_update_codebooks_scales_lowers_and_never_raises():
    w, h = _problem(48, 64, seed=7)
    q = beam_search_codes(w, h, residual_kmeans_init(w, num_codebooks=2, nbits=4, iters=5), beam_size=2)
    f0 = _f(w, q, h)
    out = update_codebooks_scales(w, h, q, steps=30)
    f1 = _f(w, out, h)
    assert f1 < 0.995 * f0
    assert torch.equal(out.codes, q.codes)
    _assert_valid(out, 48, 64, 2, 16)
    # a wild learning rate must not make things worse (best-seen point is returned)
    assert _f(w, update_codebooks_scales(w, h, out, steps=10, lr=10.0), h) <= f1 * (1 + 1e-9)
    assert update_codebooks_scales(w, h, out, steps=0) is out


# ----------------------------------------------------------------------------------------- the driver


def test_aqlm_quantize_history_decreases():
    w, h = _problem(32, 64, seed=8)
    res = aqlm_quantize(w, h, nbits=4, beam_size=2, max_rounds=4, adam_steps=10, rel_tol=0.0)
    assert isinstance(res, AqlmResult)
    assert res.rounds == 4 and res.stopped_by == "max_rounds"
    hist = res.objective_history
    assert len(hist) == 5 and 0.0 < hist[-1] < hist[0] < 1.0
    assert all(b <= a * (1 + 1e-9) for a, b in zip(hist, hist[1:], strict=False))
    assert hist[-1] == pytest.approx(_f(w, res.q, h) / res.w_energy, rel=1e-9)
    _assert_valid(res.q, 32, 64, 2, 16)


def test_aqlm_quantize_converges_with_loose_tolerance():
    w, h = _problem(32, 64, seed=9)
    res = aqlm_quantize(w, h, nbits=4, beam_size=1, max_rounds=20, adam_steps=5, rel_tol=0.5)
    assert res.stopped_by == "converged" and res.rounds < 20


@pytest.mark.timeout(60)  # 50 rounds of 100 Adam steps would run far longer: the deadline must stop it
def test_aqlm_quantize_deadline_in_the_past_returns_at_once():
    w, h = _problem(64, 128, seed=10)
    res = aqlm_quantize(w, h, max_rounds=50, adam_steps=100, deadline=time.monotonic() - 1.0)
    assert res.stopped_by == "deadline" and res.rounds == 0
    assert len(res.objective_history) == 1
    _assert_valid(res.q, 64, 128, 2, 256)


@pytest.mark.timeout(60)
def test_aqlm_quantize_min_rounds_run_whole_past_the_deadline_and_no_more():
    w, h = _problem(64, 128, seed=10)
    past = time.monotonic() - 1.0
    floor = aqlm_quantize(w, h, max_rounds=50, adam_steps=10, deadline=past, min_rounds=1)
    none = aqlm_quantize(w, h, max_rounds=50, adam_steps=10, deadline=past)
    assert floor.stopped_by == "deadline" and floor.rounds == 1 and none.rounds == 0
    # the same (deadline-shortened) init, then one whole Hessian-aware round on top of it
    assert floor.objective_history[0] == none.objective_history[0]
    assert floor.objective_history[1] < 0.97 * floor.objective_history[0]
    _assert_valid(floor.q, 64, 128, 2, 256)


def test_aqlm_2x8_beats_per_row_2bit_rtn():
    w, h = _problem(128, 128, seed=11, tokens=512)
    res = aqlm_quantize(w, h, num_codebooks=2, nbits=8, beam_size=2, max_rounds=2, adam_steps=10)
    lo, hi = w.min(1, keepdim=True).values, w.max(1, keepdim=True).values
    step = (hi - lo) / 3
    rtn = ((w - lo) / step).round().clamp(0, 3) * step + lo
    assert _f(w, res.q, h) < 0.5 * layer_objective(w, rtn, h)
