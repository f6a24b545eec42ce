import pytest
from safetensors.torch import save_file

from quantgate.tasks.model.size import checkpoint_size


def test_dense_checkpoint_is_32_bits_per_weight(tiny_model):
    s = checkpoint_size(tiny_model)
    assert s.bits_per_weight == 32.0
    # per layer (hidden 64, 2 of 4 heads for K/V, MLP 128): q, o 64x64; k, v 32x64; 3 MLP 128x64
    assert s.linear_weights == 2 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 128 * 64)


def test_packed_int4_counts_codes_scales_and_shapes(tmp_path):
    import torch

    save_file({
        "model.layers.0.mlp.up_proj.weight_packed": torch.zeros(128, 8, dtype=torch.int32),
        "model.layers.0.mlp.up_proj.weight_scale": torch.zeros(128, 1, dtype=torch.float32),
        "model.layers.0.mlp.up_proj.weight_shape": torch.tensor([128, 64]),
        "model.layers.0.input_layernorm.weight": torch.zeros(64),
        "model.embed_tokens.weight": torch.zeros(10, 64),
    }, str(tmp_path / "model.safetensors"))
    s = checkpoint_size(str(tmp_path))
    assert s.linear_weights == 128 * 64
    # 4 bits of code + one fp32 scale per 64 weights + the 128-bit shape tensor
    assert s.bits_per_weight == pytest.approx(4 + 32 / 64 + 128 / (128 * 64))


def test_no_safetensors_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        checkpoint_size(str(tmp_path))
