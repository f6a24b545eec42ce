"""Roofline planner: real arithmetic, checked against the seed's worked example and hand counts."""

import pytest
import yaml
from pydantic import ValidationError

from quantgate.conf.hardware import HardwareProfile, hardware_profile, load_profiles
from quantgate.conf.methods import KERNELS, variant_spec
from quantgate.tasks.perf.roofline import (
    ModelShape,
    baseline_footprint,
    footprint,
    plan_step,
    plan_variant,
)

LLAMA2_70B = ModelShape(layers=80, hidden=8192, intermediate=28672, heads=64, kv_heads=8, head_dim=128,
                        vocab=32000, tied_embeddings=False)
SMOLLM2_CONFIG = {"num_hidden_layers": 30, "hidden_size": 576, "intermediate_size": 1536,
                  "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
                  "tie_word_embeddings": True}
SMOLLM2 = ModelShape.from_hf_config(SMOLLM2_CONFIG)
# The seed's assumed GPU: 1000 TFLOP/s half precision, 3.3 TB/s.
SEED_GPU = HardwareProfile(name="seed-gpu", kind="gpu", description="the seed's round-number GPU",
                           mem_bandwidth_gbs=3300, tflops={"bf16": 1000, "fp16": 1000},
                           formats=dict.fromkeys(KERNELS, "weight_only"), source="seed, assumed")
SEED = {"batch": 128, "context": 8000, "num_devices": 8}


def spec(method: str, **params):
    return variant_spec({"name": method, "method": method, **params})


def test_seed_70b_example():
    base = plan_step(LLAMA2_70B, SEED_GPU, baseline_footprint(), **SEED)
    # Independent count: 80 x (q,o 8192^2; k,v 8192x1024; 3 MLP 8192x28672) + lm_head 32000x8192.
    params = 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672) + 32000 * 8192
    assert params == 68_713_185_280
    assert base.weight_bytes == 2 * params
    # The seed's "140 GB" is 70B x 2 bytes, rounded. Llama-2-70B has 68.98e9 params (HF's count,
    # = these + the 262M-row embedding + norms); a decode step does not read the embedding table,
    # so the planner reads 137.4 GB, 1.8 % under 140: allow 2.5 %.
    assert base.weight_bytes == pytest.approx(140e9, rel=0.025)
    assert params + 32000 * 8192 + 80 * 2 * 8192 + 8192 == 68_976_648_192
    assert base.kv_bytes == pytest.approx(80 * 2 * 8 * 128 * 2 * 128 * 8000, rel=1e-12)
    assert base.kv_bytes == pytest.approx(335.5e9, rel=0.001)
    assert base.bound == "memory"
    # Step from the seed's formula with the planner's weight bytes, then against the seed's 18 ms.
    assert base.step_s == pytest.approx((base.weight_bytes + 335.544e9) / 26.4e12, rel=1e-4)
    assert base.step_s == pytest.approx(18e-3, rel=0.03)
    # The seed's 2.2 ms counts the matmuls only (2 x params x batch / 8000 TFLOP/s). At context 0 the
    # attention term vanishes and the planner matches it; at 8000 tokens attention adds
    # 4 x 80 x 64 x 128 x 8000 x 128 = 2.68 PFLOP (+15 %), so the full compute is checked by hand.
    matmul_only = plan_step(LLAMA2_70B, SEED_GPU, baseline_footprint(), batch=128, context=0, num_devices=8)
    assert matmul_only.t_compute_s == pytest.approx(2.2e-3, rel=0.01)
    attention = 4 * 80 * 64 * 128 * 8000 * 128
    assert base.t_compute_s == pytest.approx((2 * params * 128 + attention) / 8e15, rel=1e-12)
    assert base.t_compute_s < 0.15 * base.t_memory_s
    # INT4 weight-only, group 128 (4.125 bits: the seed's "about 36 GB"); KV unchanged.
    p = plan_variant(spec("int4_gptq", group_size=128), LLAMA2_70B, SEED_GPU, **SEED, min_speedup=1.0)
    assert p.variant.weight_bytes == pytest.approx(36e9, rel=0.02)
    assert p.variant.kv_bytes == base.kv_bytes
    assert p.predicted_speedup == pytest.approx(1.28, abs=0.02)
    assert not p.skip and "memory-bound" in p.reason


def _first_compute_bound(fp) -> int:
    for batch in range(1, 1000):
        if plan_step(LLAMA2_70B, SEED_GPU, fp, batch=batch, context=0, num_devices=8).bound == "compute":
            return batch
    raise AssertionError("never compute-bound")


def test_ridge_and_crossover_batches():
    step = plan_step(LLAMA2_70B, SEED_GPU, baseline_footprint(), batch=1, context=0)
    assert step.ridge == pytest.approx(1000 / 3.3, rel=1e-9)
    assert step.intensity == pytest.approx(1.0)  # fp16: 2 FLOPs per 2-byte weight per sequence
    assert 290 < _first_compute_bound(baseline_footprint()) <= 310
    # 4-bit weights (0.5 bytes; the lm_head stays 16-bit): intensity ~3.96 x batch, ridge near 76.
    assert 70 < _first_compute_bound(footprint(spec("int4_rtn"), bits_per_weight=4)) <= 80


def test_smollm2_param_count_from_config():
    assert SMOLLM2.head_dim == 64 and SMOLLM2.tied_embeddings
    total, embedding, norms = 134_515_008, 49152 * 576, 30 * 2 * 576 + 576
    assert (embedding, norms) == (28_311_552, 35_136)
    assert SMOLLM2.linear_params == total - embedding - norms == 106_168_320
    assert SMOLLM2.linear_params + SMOLLM2.lm_head_params == total - norms  # tied: lm_head is the embedding
    assert SMOLLM2.kv_bytes_per_token(2) == 2 * 30 * 3 * 64 * 2


def test_footprint_nominal_bits():
    assert footprint(spec("int4_gptq", group_size=64)).weight_bits == 4.25
    assert footprint(spec("int4_awq", group_size=64)).weight_bits == 4.25 + 4 / 64  # asymmetric zero point
    assert footprint(spec("int2_rtn", group_size=64)).weight_bits == 2.25
    assert footprint(spec("aqlm_2x8"), bits_per_weight=2.31).weight_bits == 2.31
    kv = footprint(spec("kv_fp8"))
    assert (kv.weight_bits, kv.kv_bits, kv.lm_head_bits, kv.compute_format) == (8, 8, 16, "fp8")
    with pytest.raises(ValidationError, match="int3"):
        spec("int3")


def test_a100_skips_fp8_h100_keeps_it():
    a100, h100 = hardware_profile("a100-80gb"), hardware_profile("h100-sxm")
    p = plan_variant(spec("fp8_w8a8"), SMOLLM2, a100, batch=1, context=512, min_speedup=1.0)
    assert p.skip and p.support == "none" and "Ampere" in p.reason and "FP8" in p.reason
    assert p.predicted_speedup == 1.0
    p = plan_variant(spec("fp8_w8a8"), SMOLLM2, h100, batch=1, context=512, min_speedup=1.0)
    assert not p.skip and p.support == "native" and p.predicted_speedup > 1
    assert p.variant.ridge == pytest.approx(1979e12 / 3350e9)


def test_kv_fp8_on_h100():
    h100 = hardware_profile("h100-sxm")
    short = plan_variant(spec("kv_fp8"), SMOLLM2, h100, batch=1, context=256, min_speedup=1.0)
    assert 1.0 < short.predicted_speedup <= 2.0  # weights 8-bit, 16-bit lm_head, little KV
    long = plan_variant(spec("kv_fp8"), SMOLLM2, h100, batch=128, context=8000, min_speedup=1.0)
    assert long.variant.kv_bytes == long.baseline.kv_bytes / 2
    assert long.baseline.kv_bytes > 50 * long.baseline.weight_bytes
    assert long.predicted_speedup == pytest.approx(2.0, rel=0.02)
    int4 = plan_variant(spec("int4_gptq"), SMOLLM2, h100, batch=128, context=8000, min_speedup=1.0)
    assert int4.predicted_speedup < 1.01 < long.predicted_speedup


def test_min_speedup_and_cpu_profile():
    cpu = hardware_profile("cpu-epyc-2core")
    assert cpu.kind == "cpu" and cpu.mem_bandwidth_gbs == 12.5 and cpu.watts_per_busy_core == 4.0
    # This CPU widens formats: FP8 runs as bf16 (no gain over a bf16 baseline), 2-bit codes as 4-bit.
    fp8 = plan_variant(spec("fp8_w8a8"), SMOLLM2, cpu, batch=1, context=256, min_speedup=1.0)
    assert fp8.predicted_speedup == pytest.approx(1.0, abs=1e-3) and not fp8.skip
    int2 = plan_variant(spec("int2_gptq"), SMOLLM2, cpu, batch=1, context=256, min_speedup=1.0)
    int4 = plan_variant(spec("int4_gptq"), SMOLLM2, cpu, batch=1, context=256, min_speedup=1.0)
    assert int2.predicted_speedup == pytest.approx(int4.predicted_speedup, rel=0.01)
    assert int4.predicted_speedup > 2
    slow = plan_variant(spec("fp8_w8a8"), SMOLLM2, cpu, batch=1, context=256, min_speedup=1.05)
    assert slow.skip and "predicted speedup 1.00x < 1.05x" in slow.reason
    p = plan_variant(spec("int4_gptq"), SMOLLM2, hardware_profile("h100-sxm"), batch=128, context=8000,
                     min_speedup=1.1)
    assert p.skip and "predicted speedup" in p.reason and "batch 128" in p.reason


def test_profiles_load_and_validate(tmp_path):
    assert set(load_profiles()) == {"h100-sxm", "h200", "a100-80gb", "l40s", "rtx-4090", "cpu-epyc-2core"}
    raw = hardware_profile("h100-sxm").model_dump()
    del raw["formats"]["aqlm"]
    with pytest.raises(ValidationError, match="h100-sxm.*missing aqlm"):
        HardwareProfile.model_validate(raw)
    raw = hardware_profile("a100-80gb").model_dump()
    raw["formats"]["fp8"] = "native"  # no fp8 peak on Ampere
    (tmp_path / "hw.yaml").write_text(yaml.safe_dump([raw]))
    with pytest.raises(ValidationError, match="fp8 is native but tflops has no 'fp8'"):
        load_profiles(tmp_path / "hw.yaml")
    with pytest.raises(ValueError, match="unknown hardware profile 'nope'; known: a100-80gb, cpu-epyc-2core"):
        hardware_profile("nope")
