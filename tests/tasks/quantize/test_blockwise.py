"""Block-wise quantization with tuning inside each decoder block, on a tiny Llama: the groups
follow the forward, tuning lowers the block's held-out error and the model's, and a cached result
cut short by a loaded machine is not reused."""

import json

import pytest
import torch
from pydantic import TypeAdapter

from quantgate.conf.methods import VariantSpec
from quantgate.kernels.hessian import HessianCollector
from quantgate.tasks.model.load import load_causal_lm, load_tokenizer
from quantgate.tasks.quantize.codebook.block_tuning import run_block
from quantgate.tasks.quantize.codebook.blockwise import _group_hessians, _groups, capture_block_inputs
from quantgate.tasks.quantize.run import VARIANT_RECORD, cut_by_load, quantize_variant

from factories import mixed_records

SPEC = TypeAdapter(VariantSpec)
QUIP = {"name": "q", "method": "quip_sharp_2bit", "num_samples": 8, "finetune_epochs": 0}


def _quantize(spec: dict, model: str, calibration: str, out) -> tuple[str, dict]:
    res = quantize_variant(SPEC.validate_python(spec), model_path=model, calibration_path=calibration,
                           out_dir=str(out), max_seq_len=64, threads=1)
    return res.checkpoint, json.loads((out / VARIANT_RECORD).read_text())


def _logit_error(base: str, path: str) -> float:
    """On held-out text of the calibration's kind (random ids excite directions no Hessian saw)."""
    text = [f"{r['request']['messages'][0]['content']} {r['response']['choices'][0]['message']['content']}"
            for r in mixed_records(60, seed=7)[-4:]]
    ids = load_tokenizer(base)(text, return_tensors="pt", padding=True).input_ids
    with torch.no_grad():
        ref = load_causal_lm(base)(input_ids=ids).logits
        return float((load_causal_lm(path)(input_ids=ids).logits - ref).norm() / ref.norm())


def test_groups_follow_the_forward_and_share_inputs(model96):
    model = load_causal_lm(model96)
    seqs = capture_block_inputs(model, [torch.tensor([[5, 9, 13, 21, 40]])])
    block = model.model.layers[0]
    own = {n: m for n, m in block.named_modules() if isinstance(m, torch.nn.Linear)}
    assert _groups(block, own, seqs[0]) == [
        ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"], ["self_attn.o_proj"],
        ["mlp.gate_proj", "mlp.up_proj"], ["mlp.down_proj"]]


def test_group_hessians_stopped_early_are_those_of_whole_forwards(model96):
    """Each group's forwards stop once its layers saw their input; the Hessians are the full ones."""
    model = load_causal_lm(model96)
    seqs = capture_block_inputs(model, [torch.tensor([[5, 9, 13, 21, 40, 2]]), torch.tensor([[7, 3, 11]])])
    block = model.model.layers[0]
    own = {n: m for n, m in block.named_modules() if isinstance(m, torch.nn.Linear)}
    whole = HessianCollector().attach(own)
    with torch.no_grad():
        for seq in seqs:
            run_block(block, seq.quantized, seq.kwargs)
            whole.next_batch()
    whole.detach()
    expected = whole.hessians()
    down_calls = []
    counter = own["mlp.down_proj"].register_forward_pre_hook(lambda *_: down_calls.append(1))
    for group in _groups(block, own, seqs[0]):
        down_calls.clear()
        got = _group_hessians(block, {n: own[n] for n in group}, seqs, sequential=True)
        assert set(got) == set(group)
        for name in group:
            torch.testing.assert_close(got[name], expected[name], rtol=1e-12, atol=1e-12)
        # stopped before the MLP's end: down_proj runs only for its own group, once a sequence
        assert len(down_calls) == (len(seqs) if group == ["mlp.down_proj"] else 0)
    counter.remove()
    out = run_block(block, seqs[0].quantized, seqs[0].kwargs)  # no stop hook left behind
    assert out.shape == seqs[0].quantized.shape


def test_block_tuning_lowers_the_block_and_model_error(model96, calibration, tmp_path):
    plain, _ = _quantize(QUIP | {"sequential": False, "block_epochs": 0}, model96, calibration,
                         tmp_path / "a")
    tuned, record = _quantize(QUIP | {"block_epochs": 6, "block_lr": 1e-3, "block_sign_lr": 1e-2},
                              model96, calibration, tmp_path / "b")
    per_layer = record["notes"]["per_layer"]
    assert len(per_layer) == 14 and record["notes"]["cut_layers"] == []
    assert set(record["notes"]["block_loop_seconds"]) == {"forwards", "hessians", "normalization",
                                                          "search", "block_tuning"}
    assert all(v["block_error_after"] <= v["block_error_before"] for v in per_layer.values())
    assert any(v["block_error_after"] < 0.9 * v["block_error_before"] for v in per_layer.values())
    assert _logit_error(model96, tuned) < _logit_error(model96, plain)


def test_a_result_cut_short_on_a_loaded_machine_is_quantized_again(model96, calibration, tmp_path):
    spec = QUIP | {"time_budget_s": 1e-6, "block_epochs": 0}
    out = tmp_path / "v"
    _, record = _quantize(spec, model96, calibration, out)
    assert len(record["notes"]["cut_layers"]) == 14
    # past the budget nothing but the cheap rounding runs: no Hessian, so no loss measured against one
    assert not any(k.endswith("_loss") for v in record["notes"]["per_layer"].values() for k in v)
    record["main_thread_cpu_share"] = 0.5  # as if another job had taken half the CPU
    (out / VARIANT_RECORD).write_text(json.dumps(record))
    assert cut_by_load(record)
    again = quantize_variant(SPEC.validate_python(spec), model_path=model96, calibration_path=calibration,
                             out_dir=str(out), max_seq_len=64, threads=1)
    assert not again.reused
    idle = json.loads((out / VARIANT_RECORD).read_text()) | {"main_thread_cpu_share": 0.95}
    (out / VARIANT_RECORD).write_text(json.dumps(idle))
    assert quantize_variant(SPEC.validate_python(spec), model_path=model96, calibration_path=calibration,
                            out_dir=str(out), max_seq_len=64, threads=1).reused
    assert not cut_by_load(idle | {"notes": {"cut_layers": [], "cheap_layers": 0},
                                   "main_thread_cpu_share": 0.1})


@pytest.mark.parametrize("up", ["dense", "aqlm", "aqlm_rht", "quip"])
def test_input_normalization_through_the_absorber_keeps_the_block_function(model96, up):
    """W D reading D⁻¹ x: the norms and up_proj (dense, AQLM's row scales, or S_V of QuIP# and of a
    rotated AQLM, whose rows are mixed by the transform) take D⁻¹."""
    from quantgate.kernels.codebook_linear import AqlmLinear, QuipLinear
    from quantgate.tasks.quantize.codebook.absorb import normalize_group_inputs

    model = load_causal_lm(model96)
    block = model.model.layers[0]
    if up != "dense":  # a quantized up_proj with random codes: only its function matters here
        linear = block.mlp.up_proj
        module = (QuipLinear(linear.in_features, linear.out_features) if up == "quip"
                  else AqlmLinear(linear.in_features, linear.out_features, rotated=up == "aqlm_rht"))
        with torch.no_grad():
            for tensor in module.buffers() if up == "quip" else module.parameters():
                if tensor.dtype in (torch.int8, torch.int16):
                    gen = torch.Generator().manual_seed(1)
                    tensor.copy_(torch.randint(-100, 100, tensor.shape, generator=gen))
            if up != "quip":
                module.codebooks.normal_(generator=torch.Generator().manual_seed(2))
            if up == "aqlm_rht":
                module.SV.copy_(torch.randn(linear.out_features, generator=gen).sign())
            module.materialize()
        block.mlp.set_submodule("up_proj", module)
    seq = capture_block_inputs(model, [torch.tensor([[5, 9, 13, 21, 40, 77, 3]])])[0]
    with torch.no_grad():
        before = block(seq.original, **seq.kwargs)
    before = before[0] if isinstance(before, tuple) else before
    gen = torch.Generator().manual_seed(0)
    groups = [["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"], ["mlp.gate_proj", "mlp.up_proj"],
              ["mlp.down_proj"]]
    if up != "dense":  # a quantized gate/up group was normalized before it was quantized
        del groups[1]
    for group in groups:
        n = block.get_submodule(group[0]).in_features
        H = torch.diag(torch.rand(n, generator=gen, dtype=torch.float64) ** 4 * 100 + 0.01)
        scaled = normalize_group_inputs(block, group, dict.fromkeys(group, H), power=1.0)
        diag = scaled[group[0]].diagonal()
        assert torch.allclose(diag, H.diagonal().mean().expand(n))  # every channel at the mean energy
    with torch.no_grad():
        after = block(seq.original, **seq.kwargs)
    after = after[0] if isinstance(after, tuple) else after
    tol = 2e-3 if up in ("quip", "aqlm_rht") else 2e-4  # S_V is stored in fp16
    torch.testing.assert_close(after, before, rtol=tol, atol=tol / 10)
