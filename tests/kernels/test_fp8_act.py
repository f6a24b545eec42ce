"""FP8 per-token activation QDQ: the fast path against the reference and against compressed-tensors."""

import pytest
import torch
from compressed_tensors.quantization import QuantizationArgs, QuantizationStatus
from compressed_tensors.quantization.lifecycle.forward import forward_quantize

from quantgate.kernels.fp8_act import E4M3_MAX, Fp8InputQdq, fp8_token_qdq, fp8_token_qdq_reference

FP8_DYNAMIC = QuantizationArgs(num_bits=8, type="float", strategy="token", dynamic=True, symmetric=True)


class _Decompressed(torch.nn.Module):  # what forward_quantize reads from a module
    quantization_status = QuantizationStatus.DECOMPRESSED


def _activations(shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen) * 2
    x[..., 3] *= 300  # a massive-activation channel, as in SmolLM2's MLP inputs
    x[..., 7] = 1e-6  # far below the per-token scale: flushes to zero or a subnormal
    x.reshape(-1, shape[-1])[0] = 0  # an all-zero token: its scale becomes eps, not 0
    return x.to(dtype)


@pytest.mark.parametrize("shape", [(2, 33, 64), (4, 1, 576), (1, 1, 1536), (5, 96)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fast_path_is_the_reference_bit_for_bit_and_matches_compressed_tensors(shape, dtype):
    x = _activations(shape, dtype)
    ref = fp8_token_qdq_reference(x)
    assert ref.dtype == dtype and ref.shape == x.shape
    assert torch.equal(fp8_token_qdq(x), ref)
    if len(shape) == 3:  # compressed-tensors' token strategy keeps dims 0 and 1
        assert torch.equal(forward_quantize(_Decompressed(), x, "input", FP8_DYNAMIC), ref)


def test_qdq_is_a_real_fp8_rounding_per_token():
    x = _activations((3, 8, 64))
    q = fp8_token_qdq(x)
    scale = x.abs().amax(-1, keepdim=True) / E4M3_MAX
    codes = (q / scale.clamp_min(torch.finfo(torch.float32).eps))[1:]  # skip the all-zero token
    grid = codes.to(torch.float8_e4m3fn).float()  # (code · s) / s is the code to within fp32 rounding
    assert torch.allclose(codes, grid, rtol=1e-6, atol=0)  # on the E4M3 grid
    assert len(torch.unique(grid)) <= 256
    assert torch.allclose(q.abs().amax(-1), x.abs().amax(-1), rtol=1e-6, atol=0)  # max: 448 · scale
    assert not torch.equal(q, x)
    assert torch.equal(q.reshape(-1, 64)[0], torch.zeros(64))  # the zero token stays zero


def test_memo_reuses_only_the_same_unchanged_tensor():
    memo = Fp8InputQdq()
    x = _activations((2, 4, 64))
    first = memo(x)
    assert memo(x) is first  # q, k, v reading one hidden state: quantized once
    y = x.clone()
    assert memo(y) is not first and torch.equal(memo(y), first)  # equal values, another tensor
    x2 = _activations((2, 4, 64), seed=1)
    out = memo(x2)
    x2.mul_(2)  # changed in place: the version counter moves, the memo must not answer
    assert not torch.equal(memo(x2), out)
    assert torch.equal(memo(x2), fp8_token_qdq(x2))
