"""quip_sharp_2bit's `residual`: the chosen Linears get a second E8P stage (4 bits per weight), which the
checkpoint stores, the size counts, the loader rebuilds and the speed path keeps on its own kernel."""

import pytest
import torch
from pydantic import TypeAdapter, ValidationError
from safetensors import safe_open

from quantgate.conf.methods import ResidualStage, VariantSpec
from quantgate.kernels.codebook_linear import QuipLinear
from quantgate.kernels.quip_cpu import QuipInt4CpuLinear
from quantgate.tasks.model.codebook_format import load_codebook_model
from quantgate.tasks.model.fast_cpu import load_for_speed
from quantgate.tasks.model.size import checkpoint_size
from quantgate.tasks.quantize.run import QuantizeError, quantize_variant

SPEC = TypeAdapter(VariantSpec)
QUIP = {"name": "q", "method": "quip_sharp_2bit", "num_samples": 8}
SHAPES = [(96, 96), (48, 96), (48, 96), (96, 96), (192, 96), (192, 96), (96, 192)]  # q k v o g u d
WEIGHTS = 2 * sum(m * n for m, n in SHAPES)


def _quantize(spec: dict, model: str, calibration: str, out) -> str:
    return quantize_variant(SPEC.validate_python(QUIP | spec), model_path=model, calibration_path=calibration,
                            out_dir=str(out / spec["name"]), max_seq_len=64, threads=1).checkpoint


def test_covers_names_the_projections_of_the_chosen_blocks():
    stage = ResidualStage(projections=("down_proj", "up_proj"), first_block=15, last_block=20)
    assert stage.covers("model.layers.15.mlp.down_proj") and stage.covers("model.layers.20.mlp.up_proj")
    assert not stage.covers("model.layers.14.mlp.down_proj")
    assert not stage.covers("model.layers.21.mlp.up_proj")
    assert not stage.covers("model.layers.15.mlp.gate_proj") and not stage.covers("lm_head")
    assert ResidualStage(projections=("down_proj",)).covers("model.layers.29.mlp.down_proj")
    with pytest.raises(ValidationError, match="projections"):
        ResidualStage(projections=())
    with pytest.raises(ValidationError, match="before first_block"):
        ResidualStage(projections=("down_proj",), first_block=20, last_block=15)
    with pytest.raises(ValidationError, match="extra"):
        SPEC.validate_python(QUIP | {"residual": {"projections": ["down_proj"], "blocks": "15-29"}})


def test_the_chosen_layers_are_stored_at_four_bits_and_priced_so(model96, calibration, tmp_path):
    late = _quantize({"name": "late", "residual": {"projections": ["down_proj"], "first_block": 1}},
                     model96, calibration, tmp_path)
    with safe_open(f"{late}/model.safetensors", "pt") as f:
        second = sorted(k.removesuffix(".qidxs_residual") for k in f.keys() if k.endswith(".qidxs_residual"))
    assert second == ["model.layers.1.mlp.down_proj"]
    plain_bits = 2 * sum(2 * m * n + 16 * (m + n) + 32 for m, n in SHAPES)  # codes, SU, SV, Wscale
    extra = 2 * 96 * 192 + 32  # the down_proj's second codes and scale
    assert checkpoint_size(late).bits_per_weight == pytest.approx((plain_bits + extra) / WEIGHTS)

    packed = load_codebook_model(late, materialize=False)
    layers = {n: m for n, m in packed.named_modules() if isinstance(m, QuipLinear)}
    assert [n for n, m in layers.items() if m.residual] == ["model.layers.1.mlp.down_proj"]
    ids = torch.randint(0, 300, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        dense = load_codebook_model(late)(input_ids=ids).logits
        torch.testing.assert_close(packed(input_ids=ids).logits, dense, rtol=1e-4, atol=1e-4)
        fast, desc = load_for_speed(late)
        fast_layers = {n: m for n, m in fast.named_modules() if isinstance(m, QuipLinear | QuipInt4CpuLinear)}
        assert all(isinstance(m, QuipInt4CpuLinear) for m in fast_layers.values()) and len(fast_layers) == 14
        assert [n for n, m in fast_layers.items() if m.packed_residual is not None] == [
            "model.layers.1.mlp.down_proj"] and "1 two-stage" in desc, desc
        assert float((fast(input_ids=ids).logits.float() - dense).norm() / dense.norm()) < 0.02  # bf16


def test_four_bits_everywhere_is_far_closer_to_the_model_than_two(model96, calibration, tmp_path):
    """The same run with every Linear two-stage: the logit error falls several-fold (tuning on both)."""
    from quantgate.tasks.model.load import load_causal_lm

    ids = torch.randint(0, 300, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        base = load_causal_lm(model96)(input_ids=ids).logits
    errors = {}
    every = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    for name, extra in (("two", {}), ("four", {"residual": {"projections": every}})):
        path = _quantize({"name": name, **extra}, model96, calibration, tmp_path)
        with torch.no_grad():
            logits = load_codebook_model(path)(input_ids=ids).logits
        errors[name] = float((logits - base).norm() / base.norm())
    assert errors["four"] < 0.5 * errors["two"], errors
    assert checkpoint_size(str(tmp_path / "four")).bits_per_weight > 4.0


def test_a_residual_that_covers_no_layer_names_the_key(model96, calibration, tmp_path):
    with pytest.raises(QuantizeError, match=r"variants\[q\]\.residual covers none.*down_prj.*down_proj"):
        _quantize({"name": "q", "residual": {"projections": ["down_prj"]}}, model96, calibration, tmp_path)
