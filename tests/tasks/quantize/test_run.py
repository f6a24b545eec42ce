"""Each method through llm-compressor on a tiny Llama: a checkpoint transformers reloads."""

from pathlib import Path

import pytest
import torch
from pydantic import TypeAdapter

from quantgate.conf.methods import VariantSpec
from quantgate.tasks.evaluate.perplexity import count_kv_quantized_layers
from quantgate.tasks.model.load import load_causal_lm
from quantgate.tasks.model.size import checkpoint_size
from quantgate.tasks.quantize.run import QuantizeError, quantize_variant

from factories import calibration_file

SPEC = TypeAdapter(VariantSpec)


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    return str(calibration_file(tmp_path_factory.mktemp("cal")))


def _logits(path, ids):
    with torch.no_grad():
        return load_causal_lm(path)(input_ids=ids).logits


@pytest.mark.parametrize("spec, max_bpw", [
    ({"name": "f", "method": "fp8_w8a8"}, 9.0),
    ({"name": "k", "method": "kv_fp8", "num_samples": 4}, 9.0),
    ({"name": "r", "method": "int4_rtn", "group_size": 32}, 6.0),
    ({"name": "g", "method": "int4_gptq", "group_size": 32, "num_samples": 4}, 6.0),
    ({"name": "a", "method": "int4_awq", "group_size": 32, "num_samples": 4, "n_grid": 4}, 6.0),
], ids=lambda x: x["method"] if isinstance(x, dict) else "")
def test_method_writes_a_reloadable_checkpoint_close_to_baseline(
    spec, max_bpw, tiny_model, calibration, tmp_path
):
    out = tmp_path / spec["name"]
    res = quantize_variant(SPEC.validate_python(spec), model_path=tiny_model,
                           calibration_path=calibration, out_dir=str(out), max_seq_len=64, threads=1)
    assert not res.reused and (out / "DONE").is_file()
    ids = torch.randint(0, 300, (1, 24))
    base, quant = _logits(tiny_model, ids), _logits(str(out), ids)
    assert not torch.equal(base, quant)  # something was quantized
    rel = (quant - base).norm() / base.norm()
    assert rel < 0.2, rel
    assert checkpoint_size(str(out)).bits_per_weight < max_bpw
    again = quantize_variant(SPEC.validate_python(spec), model_path=tiny_model,
                             calibration_path=calibration, out_dir=str(out), max_seq_len=64, threads=1)
    assert again.reused and again.checkpoint == res.checkpoint


def test_kv_fp8_really_quantizes_the_kv_cache(tiny_model, calibration, tmp_path):
    kw = {"model_path": tiny_model, "calibration_path": calibration, "max_seq_len": 64, "threads": 1}
    quantize_variant(SPEC.validate_python({"name": "f", "method": "fp8_w8a8"}),
                     out_dir=str(tmp_path / "f"), **kw)
    quantize_variant(SPEC.validate_python({"name": "k", "method": "kv_fp8", "num_samples": 4}),
                     out_dir=str(tmp_path / "k"), **kw)
    kv_model = load_causal_lm(str(tmp_path / "k"))
    assert count_kv_quantized_layers(kv_model) == 2
    assert count_kv_quantized_layers(load_causal_lm(str(tmp_path / "f"))) == 0
    ids = torch.randint(0, 300, (1, 24))
    with torch.no_grad():
        on = kv_model(input_ids=ids).logits
        for m in kv_model.modules():  # switch only the K/V quantization off
            if type(m).__name__ == "LlamaAttention":
                m.quantization_enabled = False
        off = kv_model(input_ids=ids).logits
    assert not torch.equal(on, off)


def test_group_size_that_does_not_divide_fails_with_the_key(tiny_model, calibration, tmp_path):
    spec = SPEC.validate_python({"name": "bad", "method": "int4_rtn", "group_size": 48})
    with pytest.raises(QuantizeError, match=r"variants\[bad\]\.group_size=48 does not divide"):
        quantize_variant(spec, model_path=tiny_model, calibration_path=calibration,
                         out_dir=str(tmp_path / "bad"), max_seq_len=64, threads=1)


def test_same_inputs_give_the_same_checkpoint(tiny_model, calibration, tmp_path):
    spec = SPEC.validate_python({"name": "k", "method": "kv_fp8", "num_samples": 8})
    kw = {"model_path": tiny_model, "calibration_path": calibration, "max_seq_len": 64, "threads": 1}
    a = quantize_variant(spec, out_dir=str(tmp_path / "a"), **kw)
    b = quantize_variant(spec, out_dir=str(tmp_path / "b"), **kw)
    files = [Path(x.checkpoint) / "model.safetensors" for x in (a, b)]
    assert files[0].read_bytes() == files[1].read_bytes()
