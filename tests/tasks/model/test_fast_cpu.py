"""load_for_speed on tiny checkpoints of every format: the evaluation path's logits to bf16
tolerance, and every quantized Linear really on its fast kernel."""

from collections import Counter

import pytest
import torch
from pydantic import TypeAdapter

from quantgate.conf.methods import VariantSpec
from quantgate.kernels.bf16_cpu import FP32_MIN_TOKENS, Bf16Linear, fp32_linear_chunked, native_gemv
from quantgate.kernels.codebook_linear import AqlmLinear
from quantgate.kernels.int4_cpu import Int4CpuLinear, dequantize
from quantgate.kernels.quip_cpu import QuipInt4CpuLinear
from quantgate.tasks.model.fast_cpu import load_for_speed
from quantgate.tasks.model.load import load_causal_lm
from quantgate.tasks.quantize.run import quantize_variant

from factories import calibration_file, tiny_llama

SPEC = TypeAdapter(VariantSpec)
LINEARS = 2 * 7  # q k v o gate up down in each of 2 layers; lm_head (tied) goes dense fp16
QUICK_2BIT = {"num_samples": 8, "finetune_epochs": 0, "time_budget_s": 60}


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    return str(calibration_file(tmp_path_factory.mktemp("cal")))


@pytest.fixture(scope="module")
def model96(tmp_path_factory) -> str:
    return str(tiny_llama(tmp_path_factory.mktemp("tiny96") / "model", hidden=96))


def _quantize(spec: dict, base: str, calibration: str, out) -> str:
    return quantize_variant(SPEC.validate_python(spec), model_path=base, calibration_path=calibration,
                            out_dir=str(out / spec["name"]), max_seq_len=64, threads=1).checkpoint


def _ids() -> torch.Tensor:
    return torch.randint(0, 300, (2, 24), generator=torch.Generator().manual_seed(0))


def _logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=_ids()).logits.float()


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def _kinds(model: torch.nn.Module) -> Counter:
    return Counter(type(m).__name__ for m in model.modules() if "Linear" in type(m).__name__)


def test_baseline_stays_dense_fp32_or_bf16_on_request(tiny_model):
    model, desc = load_for_speed(tiny_model)
    assert model.dtype == torch.float32 and "float32" in desc and not model.training
    assert torch.equal(_logits(model), _logits(load_causal_lm(tiny_model)))
    assert _kinds(model) == Counter({"Linear": LINEARS + 1})
    bf16, desc = load_for_speed(tiny_model, dtype="bfloat16")
    assert bf16.dtype == torch.bfloat16 and "bf16" in desc
    assert _kinds(bf16) == Counter({"Bf16Linear": LINEARS + 1})
    assert _rel(_logits(bf16), _logits(load_causal_lm(tiny_model, "bfloat16"))) < 1e-2


def test_bf16_linear_runs_one_token_without_onednn_and_restores_the_flag():
    layer = torch.nn.Linear(64, 48, dtype=torch.bfloat16)
    plain = torch.nn.Linear(64, 48, dtype=torch.bfloat16)
    plain.load_state_dict(layer.state_dict())
    native_gemv(layer)
    assert isinstance(layer, Bf16Linear)
    for shape in ((1, 1, 64), (64,), (3, 64)):
        x = torch.randn(shape, dtype=torch.bfloat16)
        with torch.no_grad():
            torch.testing.assert_close(layer(x), plain(x), rtol=1e-2, atol=1e-2)
        assert torch.backends.mkldnn.enabled
    with pytest.raises(RuntimeError):
        layer(torch.randn(2, 32, dtype=torch.bfloat16))  # 64 numbers: the oneDNN-off path fails, restores
    assert torch.backends.mkldnn.enabled


@pytest.mark.parametrize("onednn_bf16", [True, False])
def test_bf16_linear_prefills_in_fp32_where_onednn_has_no_bf16_kernels(monkeypatch, onednn_bf16):
    """AVX2-only CPUs: torch's fallback bf16 GEMM made a 55-token prefill 5x slower than fp32."""
    monkeypatch.setattr("quantgate.kernels.bf16_cpu.ONEDNN_BF16", onednn_bf16)
    bf16_gemms = []
    plain_forward = torch.nn.Linear.forward
    monkeypatch.setattr(torch.nn.Linear, "forward",
                        lambda self, x: bf16_gemms.append(x.shape) or plain_forward(self, x))
    layer = native_gemv(torch.nn.Linear(64, 48, dtype=torch.bfloat16))
    x = torch.randn(2, 27, 64, dtype=torch.bfloat16)  # a prompt's prefill: fp32 pays on any thread count
    fp32 = torch.nn.functional.linear(x.float(), layer.weight.float(), layer.bias.float())
    with torch.no_grad():
        y = layer(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), fp32, rtol=1e-2, atol=1e-2)
    assert bf16_gemms == ([x.shape] if onednn_bf16 else [])  # the bf16 GEMM only where oneDNN has one


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_bf16_linear_keeps_small_batches_in_bf16_where_that_is_faster(monkeypatch, threads):
    """Without oneDNN's bf16, torch's bf16 fallback beats fp32 by row blocks below 4 tokens on one
    thread and 16 on two (a batch-8 decode step on two threads: 150 against 192 ms)."""
    monkeypatch.setattr("quantgate.kernels.bf16_cpu.ONEDNN_BF16", False)
    upcasts = []
    monkeypatch.setattr("quantgate.kernels.bf16_cpu.fp32_linear_chunked",
                        lambda x, w, b: upcasts.append(x.shape))
    layer = native_gemv(torch.nn.Linear(64, 48, dtype=torch.bfloat16))
    least = FP32_MIN_TOKENS[min(threads, 2)]
    was = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            for tokens in (1, 2, least - 1, least, 64):
                layer(torch.randn(tokens, 1, 64, dtype=torch.bfloat16))  # batched decode: a token a row
    finally:
        torch.set_num_threads(was)
    assert upcasts == [(least, 1, 64), (64, 1, 64)]


def test_fp32_linear_upcasts_block_by_block_to_the_whole_weights_result(monkeypatch):
    monkeypatch.setattr("quantgate.kernels.bf16_cpu.FP32_CHUNK", 64 * 5)  # 5 of 48 rows a block: a ragged end
    layer = torch.nn.Linear(64, 48, dtype=torch.bfloat16)
    x = torch.randn(3, 4, 64, dtype=torch.bfloat16)
    whole = torch.nn.functional.linear(x.float(), layer.weight.float(), layer.bias.float())
    y = fp32_linear_chunked(x, layer.weight, layer.bias)
    assert y.dtype == torch.bfloat16 and y.shape == (3, 4, 48)
    torch.testing.assert_close(y.float(), whole, rtol=2**-8, atol=1e-5)  # one bf16 rounding of the same sum


@pytest.mark.parametrize("spec, words", [
    ({"name": "r", "method": "int4_rtn", "group_size": 32}, ("int4 g32 sym", "packed-int4")),
    ({"name": "a", "method": "int4_awq", "group_size": 32, "num_samples": 4, "n_grid": 4},
     ("int4 g32 asym", "packed-int4")),
    ({"name": "r2", "method": "int2_rtn", "group_size": 32}, ("int2 g32", "stored as 4-bit")),
], ids=lambda x: x["method"] if isinstance(x, dict) else "")
def test_int_checkpoints_run_on_the_int4_kernel(spec, words, tiny_model, calibration, tmp_path):
    path = _quantize(spec, tiny_model, calibration, tmp_path)
    model, desc = load_for_speed(path)
    assert all(w in desc for w in words) and "bf16 activations" in desc, desc
    assert _kinds(model) == Counter({"Int4CpuLinear": LINEARS, "Bf16Linear": 1})  # + lm_head
    assert model.lm_head.weight is model.model.embed_tokens.weight  # still tied: one bf16 table
    assert model.lm_head.weight.dtype == torch.bfloat16 and not model.training
    with torch.no_grad():
        assert model.generate(_ids()[:1], max_new_tokens=3, do_sample=False).shape == (1, 27)
    evaluated = load_causal_lm(path)
    assert _rel(_logits(model), _logits(evaluated)) < 2e-2
    for name, m in model.named_modules():  # each layer holds the evaluated weight, not just close logits
        if isinstance(m, Int4CpuLinear):
            step = m.scales_and_zeros[:, : m.out_features, 0].float().T.repeat_interleave(m.group, 1)
            # bf16 rounding of scale (≤ 8·2^-9 of a step) and zero (≤ 1/32 of a step), nothing else
            err = (dequantize(m.weight_int4) - evaluated.get_submodule(name).weight.float()).abs()
            assert (err <= step / 16).all(), name


@pytest.mark.parametrize("spec", [{"name": "f", "method": "fp8_w8a8"},
                                  {"name": "k", "method": "kv_fp8", "num_samples": 4}],
                         ids=["fp8_w8a8", "kv_fp8"])
def test_fp8_checkpoints_run_dequantized_to_bf16(spec, tiny_model, calibration, tmp_path):
    path = _quantize(spec, tiny_model, calibration, tmp_path)
    model, desc = load_for_speed(path)
    assert "no FP8 units on this CPU: FP8 weights dequantized to bf16" in desc
    assert "activation quantization dropped" in desc
    assert ("KV cache runs bf16" in desc) == (spec["method"] == "kv_fp8")
    assert _kinds(model) == Counter({"Bf16Linear": LINEARS + 1})
    assert all(m.weight.dtype == torch.bfloat16 for m in model.modules() if isinstance(m, Bf16Linear))
    reference = load_causal_lm(path)
    for m in reference.modules():  # the same weights without activation / KV QDQ, as on this path
        m.quantization_enabled = False
    assert _rel(_logits(model), _logits(reference)) < 2e-2


def test_quip_checkpoint_runs_transcoded_to_int4(model96, calibration, tmp_path):
    path = _quantize({"name": "q", "method": "quip_sharp_2bit"} | QUICK_2BIT, model96, calibration, tmp_path)
    model, desc = load_for_speed(path)
    assert "QuIP#" in desc and "int4" in desc
    assert _kinds(model) == Counter({"QuipInt4CpuLinear": LINEARS, "Bf16Linear": 1})
    assert all(isinstance(m, QuipInt4CpuLinear) for n, m in model.named_modules() if n.endswith("proj"))
    assert _rel(_logits(model), _logits(load_causal_lm(path))) < 2e-2


def test_aqlm_decodes_to_dense_below_the_lut_crossover(model96, calibration, tmp_path, monkeypatch):
    """On this CPU the LUT GEMV never beat dense (bench/aqlm_widths.py): dense bf16 by default; layers at
    or above AQLM_LUT_FROM_WEIGHTS keep the compressed path."""
    from quantgate.tasks.model import fast_cpu

    spec = {"name": "aq", "method": "aqlm_2x8", "max_rounds": 1, "adam_steps": 5, "beam_size": 1} | QUICK_2BIT
    path = _quantize(spec, model96, calibration, tmp_path)
    reference = _logits(load_causal_lm(path))
    model, desc = load_for_speed(path)
    assert "AQLM" in desc and _kinds(model) == Counter({"Bf16Linear": LINEARS + 1})
    assert _rel(_logits(model), reference) < 2e-2
    monkeypatch.setattr(fast_cpu, "AQLM_LUT_FROM_WEIGHTS", 96 * 192)  # gate/up/down: 96x192; q/k/v/o below
    model, desc = load_for_speed(path)
    layers = [m for m in model.modules() if isinstance(m, AqlmLinear)]
    assert len(layers) == 3 * 2  # two blocks
    assert all(m.dense is None and m.codebooks.dtype == torch.float32 for m in layers)
    assert model.model.embed_tokens.weight.dtype == torch.bfloat16
    assert _rel(_logits(model), reference) < 2e-2

