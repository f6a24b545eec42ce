"""The evaluation loader's FP8 activation path gives compressed-tensors' own logits, bit for bit."""

import pytest
import torch
from pydantic import TypeAdapter

from quantgate.conf.methods import VariantSpec
from quantgate.tasks.model import load
from quantgate.tasks.quantize.run import quantize_variant

from factories import calibration_file

SPEC = TypeAdapter(VariantSpec)


@pytest.fixture(scope="module")
def checkpoints(tiny_model, tmp_path_factory):
    d = tmp_path_factory.mktemp("fp8")
    kw = {"model_path": tiny_model, "calibration_path": str(calibration_file(d)), "max_seq_len": 64,
          "threads": 1}
    specs = ({"name": "f", "method": "fp8_w8a8"}, {"name": "k", "method": "kv_fp8", "num_samples": 4})
    return {s["method"]: quantize_variant(SPEC.validate_python(s), out_dir=str(d / s["name"]), **kw)
            .checkpoint
            for s in specs}


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("method", ["fp8_w8a8", "kv_fp8"])
def test_fast_fp8_inputs_match_compressed_tensors(checkpoints, method, monkeypatch):
    ids = torch.randint(0, 300, (3, 40), generator=torch.Generator().manual_seed(0))
    fast, swap = load.load_causal_lm(checkpoints[method]), load.fast_fp8_inputs
    monkeypatch.setattr(load, "fast_fp8_inputs", lambda model: 0)  # compressed-tensors' own forward
    own = load.load_causal_lm(checkpoints[method])
    assert torch.equal(_logits(fast, ids), _logits(own, ids))
    linears = [m for m in own.modules() if getattr(m, "quantization_scheme", None) is not None
               and isinstance(m, torch.nn.Linear)]
    assert swap(own) == len(linears) == 7 * 2  # every Linear of both decoder layers
    assert torch.equal(_logits(own, ids), _logits(fast, ids))


def test_switching_quantization_off_leaves_weight_only_fp8(checkpoints):
    ids = torch.randint(0, 300, (2, 24), generator=torch.Generator().manual_seed(1))
    model = load.load_causal_lm(checkpoints["fp8_w8a8"])
    on = _logits(model, ids)
    for m in model.modules():
        m.quantization_enabled = False
    assert not torch.equal(_logits(model, ids), on)  # the activation QDQ was really applied


def test_dense_and_int_checkpoints_are_left_alone(tiny_model):
    assert load.fast_fp8_inputs(load.load_causal_lm(tiny_model)) == 0
