"""Parity of the E8P (QuIP#) and AQLM decode-matmul paths against their PyTorch references."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from quantgate.kernels import aqlm_ops, quip_ops
from quantgate.kernels.aqlm_ops import (
    aqlm_decode_matmul,
    aqlm_decode_matmul_fast,
    aqlm_decode_matmul_reference,
    aqlm_decode_weight,
)
from quantgate.kernels.quip_ops import (
    e8p_decode_matmul,
    e8p_decode_matmul_fast,
    e8p_decode_matmul_reference,
    e8p_decode_weight,
)

SHAPES = [(13, 5), (200, 24), (576, 72)]  # (m, n/8): ragged, not powers of two
LEADS = [(), (3,), (2, 5)]  # 1 token (small-batch path) and 3, 10 tokens (decode path)
DTYPES = [torch.float32, torch.bfloat16]


def tol(dtype: torch.dtype) -> dict[str, float]:
    return {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 5e-2}


def e8p_case(m: int, groups: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    qidx = torch.randint(-(1 << 15), 1 << 15, (m, groups), dtype=torch.int16, generator=g)
    return qidx, torch.randn(1 << 16, 8, generator=g)


def aqlm_case(m: int, groups: int, num_codebooks: int = 2, size: int = 256, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    unsigned = torch.randint(0, size, (m, groups, num_codebooks), generator=g)
    codes = torch.where(unsigned > 127, unsigned - 256, unsigned).to(torch.int8)  # aqlm's packing
    codebooks = torch.randn(num_codebooks, size, 1, 8, generator=g)
    scales = torch.rand(m, 1, 1, 1, generator=g) + 0.5
    return codes, codebooks, scales, torch.randn(m, generator=g)


@pytest.fixture
def eager(monkeypatch):
    """The fast paths without torch.compile: fast to test, and what runs where compile fails."""
    monkeypatch.setenv(quip_ops.COMPILE_ENV, "0")


# ---- E8P ----------------------------------------------------------------------------------------


def test_e8p_negative_int16_indices_read_the_upper_half_of_the_table(eager):
    codebook = torch.arange(65536 * 8, dtype=torch.float32).reshape(65536, 8)
    qidx = torch.tensor([[-1, -32768, 0, 32767]], dtype=torch.int16)
    w = e8p_decode_weight(qidx, codebook)  # [1, 32]
    for j, index in enumerate([65535, 32768, 0, 32767]):
        torch.testing.assert_close(w[0, 8 * j:8 * j + 8], codebook[index])
    x = torch.randn(32)
    torch.testing.assert_close(e8p_decode_matmul_fast(x, qidx, codebook), w @ x)


@pytest.mark.parametrize("m,groups", SHAPES)
@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_e8p_fast_matches_reference(eager, m, groups, lead, dtype):
    qidx, codebook = e8p_case(m, groups)
    x = torch.randn(*lead, 8 * groups).to(dtype)
    fast = e8p_decode_matmul_fast(x, qidx, codebook)
    assert fast.shape == (*lead, m) and fast.dtype == dtype
    torch.testing.assert_close(fast, e8p_decode_matmul_reference(x, qidx, codebook), **tol(dtype))


def test_e8p_reference_is_a_plain_matmul_with_an_fp16_table(eager):
    qidx, codebook = e8p_case(7, 3)
    codebook = codebook.half()
    x = torch.randn(2, 24)
    w = torch.stack([torch.cat([codebook[int(q) % 65536].float() for q in row]) for row in qidx])
    torch.testing.assert_close(e8p_decode_matmul_reference(x, qidx, codebook), x @ w.T)
    torch.testing.assert_close(e8p_decode_matmul_fast(x[:1], qidx, codebook), x[:1] @ w.T)


# ---- AQLM ---------------------------------------------------------------------------------------


def test_aqlm_reference_matches_a_hand_loop():
    codes, codebooks, scales, bias = aqlm_case(3, 2, num_codebooks=2)
    w = torch.zeros(3, 16)
    for i in range(3):
        for j in range(2):
            for k in range(2):
                w[i, 8 * j:8 * j + 8] += codebooks[k, int(codes[i, j, k]) % 256, 0]
            w[i, 8 * j:8 * j + 8] *= scales[i, 0, 0, 0]
    torch.testing.assert_close(aqlm_decode_weight(codes, codebooks, scales), w)
    x = torch.randn(4, 16)
    y = aqlm_decode_matmul_reference(x, codes, codebooks, scales, bias)
    torch.testing.assert_close(y, x @ w.T + bias)


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("num_codebooks,size", [(2, 256), (1, 16), (3, 200)])
def test_aqlm_reference_matches_the_aqlm_package(num_codebooks, size):
    utils = pytest.importorskip("aqlm.utils", reason="the aqlm package is an optional cross-check")
    codes, codebooks, scales, _ = aqlm_case(37, 11, num_codebooks, size)
    theirs = utils._dequantize_weight(codes.to(torch.int64) % 256, codebooks, scales)
    torch.testing.assert_close(aqlm_decode_weight(codes, codebooks, scales), theirs)


@pytest.mark.parametrize("m,groups", SHAPES)
@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_aqlm_fast_matches_reference(eager, m, groups, lead, dtype):
    codes, codebooks, scales, bias = aqlm_case(m, groups)
    x = torch.randn(*lead, 8 * groups).to(dtype)
    for b in (None, bias):
        fast = aqlm_decode_matmul_fast(x, codes, codebooks, scales, b)
        assert fast.shape == (*lead, m) and fast.dtype == dtype
        torch.testing.assert_close(fast, aqlm_decode_matmul_reference(x, codes, codebooks, scales, b),
                                   **tol(dtype))


@pytest.mark.parametrize("num_codebooks,size", [(1, 16), (3, 200)])
@pytest.mark.parametrize("tokens", [1, 5])
def test_aqlm_fast_handles_other_codebook_counts_and_sizes(eager, num_codebooks, size, tokens):
    codes, codebooks, scales, bias = aqlm_case(29, 7, num_codebooks, size)
    x = torch.randn(tokens, 56)
    torch.testing.assert_close(aqlm_decode_matmul_fast(x, codes, codebooks, scales, bias),
                               aqlm_decode_matmul_reference(x, codes, codebooks, scales, bias))


def test_aqlm_code_beyond_codebook_size_is_rejected():
    codes, codebooks, scales, _ = aqlm_case(4, 2, 2, 16)
    codes[1, 1, 0] = 16
    with pytest.raises(ValueError, match="codebook size 16"):
        aqlm_decode_matmul_fast(torch.randn(16), codes, codebooks, scales)


# ---- torch.compile paths, dispatch -------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")  # inductor's
def test_compiled_small_batch_paths_match_reference(monkeypatch):
    monkeypatch.delenv(quip_ops.COMPILE_ENV, raising=False)
    close = {"rtol": 1e-4, "atol": 1e-4}
    # Even n/8: E8P reads int16 pairs as int32; odd n/8: an int32 copy. 1 and 2 tokens.
    for (m, groups), token_counts in [((200, 24), (1, 2)), ((13, 5), (1,))]:
        qidx, codebook = e8p_case(m, groups)
        codes, codebooks, scales, bias = aqlm_case(m, groups)
        for tokens in token_counts:
            x = torch.randn(tokens, 8 * groups)
            torch.testing.assert_close(e8p_decode_matmul_fast(x, qidx, codebook),
                                       e8p_decode_matmul_reference(x, qidx, codebook), **close)
            if groups % 2 == 0:
                args = (x, codes, codebooks, scales, bias)
                fast, ref = aqlm_decode_matmul_fast(*args), aqlm_decode_matmul_reference(*args)
                torch.testing.assert_close(fast, ref, **close)
    if any(c.failed for c in (quip_ops._GATHER_DOT_PAIRS, quip_ops._GATHER_DOT, aqlm_ops._LUT_GEMV)):
        pytest.skip("torch.compile failed here (no C++ toolchain?): only the eager fallback was tested")


def test_compile_failure_falls_back_to_eager(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no compiler")

    monkeypatch.delenv(quip_ops.COMPILE_ENV, raising=False)
    wrapped = quip_ops.compiled_or_none(lambda t: t + 1)
    monkeypatch.setattr(torch, "compile", lambda fn: broken)
    with pytest.warns(UserWarning, match="using eager"):
        assert wrapped(torch.ones(1)) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once, then silently eager
        assert wrapped(torch.ones(1)) is None


def test_dispatch_override_keyword_then_env(monkeypatch):
    qidx, codebook = e8p_case(5, 2)
    x = torch.randn(16)
    monkeypatch.setenv(quip_ops.KERNELS_ENV, "reference")
    calls = []
    monkeypatch.setattr(quip_ops, "e8p_decode_matmul_reference", lambda *a: calls.append("ref") or a[0])
    monkeypatch.setattr(quip_ops, "e8p_decode_matmul_fast", lambda *a: calls.append("fast") or a[0])
    e8p_decode_matmul(x, qidx, codebook)
    e8p_decode_matmul(x, qidx, codebook, impl="fast")
    assert calls == ["ref", "fast"]
    monkeypatch.setenv(quip_ops.KERNELS_ENV, "fastest")
    with pytest.raises(ValueError, match="QUANTGATE_KERNELS"):
        e8p_decode_matmul(x, qidx, codebook)
    monkeypatch.delenv(quip_ops.KERNELS_ENV)
    assert quip_ops.resolve_impl(None, x) == "fast"
    codes, codebooks, scales, bias = aqlm_case(5, 2)
    torch.testing.assert_close(aqlm_decode_matmul(x, codes, codebooks, scales, bias, impl="reference"),
                               aqlm_decode_matmul_reference(x, codes, codebooks, scales, bias))


def test_cpu_path_never_imports_triton():
    code = ("import sys, torch; from quantgate.kernels import aqlm_ops, quip_ops; "
            "quip_ops.e8p_decode_matmul(torch.randn(8), torch.zeros(3, 1, dtype=torch.int16), "
            "torch.randn(65536, 8)); print('triton' in sys.modules)")
    env = {**os.environ, quip_ops.COMPILE_ENV: "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---- Triton, interpreted on CPU -----------------------------------------------------------------

TRITON_SCRIPT = textwrap.dedent("""
    import json, torch
    from quantgate.kernels import aqlm_ops, quip_ops, triton_decode as td
    from test_decode_ops import aqlm_case, e8p_case, tol
    results = []
    def check(name, got, ref):
        ok = got.shape == ref.shape and torch.allclose(got.float(), ref.float(), **tol(ref.dtype))
        results.append([name, ok])
    for (m, groups) in [(13, 5), (70, 24)]:
        qidx, codebook = e8p_case(m, groups)
        for num_codebooks, size in [(2, 256), (3, 200)]:
            codes, codebooks, scales, bias = aqlm_case(m, groups, num_codebooks, size)
            for lead in [(), (3,), (17,), (2, 0)]:  # GEMV, masked GEMV, tl.dot, no tokens
                for dtype, split_k in [(torch.float32, None), (torch.float32, 2), (torch.bfloat16, None)]:
                    x = torch.randn(*lead, 8 * groups).to(dtype)
                    case = f"{m}x{groups} M={num_codebooks} K={size} lead={lead} {dtype} split={split_k}"
                    args = (x, codes, codebooks, scales, bias)
                    got = td.aqlm_decode_matmul_triton(*args, split_k=split_k)
                    check("aqlm " + case, got, aqlm_ops.aqlm_decode_matmul_reference(*args))
                    if num_codebooks == 2:
                        args = (x, qidx, codebook.half())  # fp16 table, as QuIP# checkpoints store it
                        got = td.e8p_decode_matmul_triton(*args, split_k=split_k)
                        check("e8p " + case, got, quip_ops.e8p_decode_matmul_reference(*args))
        x = torch.randn(2, 8 * groups)  # through the dispatchers' lazy import
        check(f"e8p dispatch {m}x{groups}", quip_ops.e8p_decode_matmul(x, qidx, codebook, impl="triton"),
              quip_ops.e8p_decode_matmul_reference(x, qidx, codebook))
        args = (x, codes, codebooks, scales)
        got = aqlm_ops.aqlm_decode_matmul(*args, impl="triton")
        check(f"aqlm dispatch {m}x{groups}", got, aqlm_ops.aqlm_decode_matmul_reference(*args))
    print("RESULTS " + json.dumps(results))
""")



@pytest.fixture(scope="module")
def triton_results() -> dict[str, bool]:
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed: the GPU kernels cannot be checked here")
    path = os.pathsep.join(p for p in (os.path.dirname(__file__), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": path}
    out = subprocess.run([sys.executable, "-c", TRITON_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(s for s in out.stdout.splitlines() if s.startswith("RESULTS "))
    return dict(json.loads(line.removeprefix("RESULTS ")))


@pytest.mark.parametrize("fmt", ["e8p", "aqlm"])
def test_triton_kernels_match_reference_under_interpreter(triton_results, fmt):
    cases = {name: ok for name, ok in triton_results.items() if name.startswith(fmt)}
    assert len(cases) >= 16
    assert [name for name, ok in cases.items() if not ok] == []
