"""Each method through llm-compressor on a tiny Llama: a checkpoint transformers reloads."""

import json
from pathlib import Path

import pytest
import torch
from pydantic import TypeAdapter

from quantgate.conf.methods import VariantSpec
from quantgate.tasks.evaluate.perplexity import count_kv_quantized_layers
from quantgate.tasks.model.load import load_causal_lm
from quantgate.tasks.model.size import checkpoint_size
from quantgate.tasks.quantize.run import QuantizeError, quantize_variant, variant_dir

from factories import calibration_file

SPEC = TypeAdapter(VariantSpec)


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    return str(calibration_file(tmp_path_factory.mktemp("cal")))


def _logits(path, ids):
    with torch.no_grad():
        return load_causal_lm(path)(input_ids=ids).logits


@pytest.mark.parametrize("spec, max_bpw", [
    ({"name": "b", "method": "baseline_bf16"}, 16.01),
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


def test_gptq_is_reproducible_across_processes_for_a_thread_count(tiny_model, calibration, tmp_path):
    """Equal inputs and thread count, two fresh processes: the same checkpoint, bit for bit, and the
    record says what it was computed with. (Other thread counts may differ in the last bits: they
    get their own folder, see test_the_thread_count_is_part_of_the_variant_key.)"""
    import subprocess
    import sys

    code = ("import sys; from quantgate.conf.methods import variant_spec; "
            "from quantgate.tasks.quantize.run import quantize_variant; "
            "from quantgate.tasks.runtime.threads import set_threads; "
            "spec = variant_spec({'name': 'g', 'method': 'int4_gptq', 'group_size': 32, 'num_samples': 8}); "
            "quantize_variant(spec, model_path=sys.argv[1], calibration_path=sys.argv[2], "
            "out_dir=sys.argv[3], max_seq_len=64, threads=set_threads(1))")
    outs = [tmp_path / name for name in ("first", "second")]
    for out in outs:
        subprocess.run([sys.executable, "-c", code, tiny_model, str(calibration), str(out)], check=True,
                       capture_output=True, timeout=300)
    first, second = ((o / "model.safetensors").read_bytes() for o in outs)
    assert first == second
    record = json.loads((outs[0] / "quantgate_variant.json").read_text())["computed_with"]
    assert record["torch_threads"] == record["observed_threads"] == 1 and record["cpu_capability"]


def test_the_thread_count_is_part_of_the_variant_key(tmp_path):
    spec = SPEC.validate_python({"name": "g", "method": "int4_gptq", "group_size": 32})
    kw = {"model_digest": "m", "calibration_hash": "c", "max_seq_len": 64}
    one, again, two = (variant_dir(tmp_path, spec, threads=t, **kw) for t in (1, 1, 2))
    assert one == again != two
    bigger = spec.model_copy(update={"resources": spec.resources.model_copy(update={"memory_gb": 9})})
    assert variant_dir(tmp_path, bigger, threads=1, **kw) == one
