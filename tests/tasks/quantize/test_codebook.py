"""The 2-bit methods (QuIP#, AQLM) and their scalar controls on a tiny Llama whose widths are not
powers of two (96 = 12·8, 192, 48): real checkpoints, reloaded, compared with the baseline."""

import json
import os
import subprocess
import sys

import pytest
import torch
from pydantic import TypeAdapter

from quantgate.conf.methods import VariantSpec
from quantgate.kernels.codebook_linear import AqlmLinear, QuipLinear
from quantgate.tasks.model.codebook_format import load_codebook_model
from quantgate.tasks.model.formats import checkpoint_format
from quantgate.tasks.model.load import load_causal_lm
from quantgate.tasks.model.size import checkpoint_size
from quantgate.tasks.quantize.run import quantize_variant

from factories import mixed_records

SPEC = TypeAdapter(VariantSpec)
QUIP = {"name": "q", "method": "quip_sharp_2bit", "num_samples": 8}
AQLM = {"name": "a", "method": "aqlm_2x8", "num_samples": 8, "max_rounds": 1, "adam_steps": 5,
        "beam_size": 1, "incoherence": False}  # the aqlm package's own layout: it must load it too
OWN_TEXT = {"finetune_synthetic": 3}  # the fixture's AQLM also tunes on the baseline's own text


@pytest.fixture(scope="module")
def quantized(model96, calibration, tmp_path_factory):
    out = tmp_path_factory.mktemp("variants")
    paths = {}
    for spec in (QUIP, AQLM | OWN_TEXT, {"name": "r", "method": "int2_rtn", "group_size": 32}):
        res = quantize_variant(SPEC.validate_python(spec), model_path=model96, calibration_path=calibration,
                               out_dir=str(out / spec["name"]), max_seq_len=64, threads=1)
        paths[spec["method"]] = res.checkpoint
    return paths


def _rel_error(base_path: str, path: str) -> float:
    """Logit error on held-out text of the calibration's kind (not random ids: a Hessian from a few
    hundred tokens says nothing about directions that text never excites)."""
    from quantgate.tasks.model.load import load_tokenizer

    text = [f"{r['request']['messages'][0]['content']} {r['response']['choices'][0]['message']['content']}"
            for r in mixed_records(60, seed=7)[-4:]]
    ids = load_tokenizer(base_path)(text, return_tensors="pt", padding=True).input_ids
    with torch.no_grad():
        base = load_causal_lm(base_path)(input_ids=ids).logits
        quant = load_causal_lm(path)(input_ids=ids).logits
    return float((quant - base).norm() / base.norm())


def test_codebook_methods_reload_and_beat_scalar_2bit_rounding(model96, quantized):
    rtn = _rel_error(model96, quantized["int2_rtn"])
    for method in ("quip_sharp_2bit", "aqlm_2x8"):
        err = _rel_error(model96, quantized[method])
        assert 0 < err < 0.8 * rtn, (method, err, rtn)


def test_compressed_forward_matches_the_decoded_weights(quantized):
    ids = torch.randint(0, 300, (1, 12), generator=torch.Generator().manual_seed(1))
    for method, cls in (("quip_sharp_2bit", QuipLinear), ("aqlm_2x8", AqlmLinear)):
        dense = load_codebook_model(quantized[method], materialize=True)
        packed = load_codebook_model(quantized[method], materialize=False)
        assert sum(isinstance(m, cls) for m in packed.modules()) == 2 * 7  # every Linear but lm_head
        assert all(m.dense is None for m in packed.modules() if isinstance(m, cls))
        with torch.no_grad():
            torch.testing.assert_close(packed(input_ids=ids).logits, dense(input_ids=ids).logits,
                                       rtol=1e-4, atol=1e-4)


SHAPES = [(96, 96), (48, 96), (48, 96), (96, 96), (192, 96), (192, 96), (96, 192)]  # q k v o g u d
WEIGHTS = 2 * sum(m * n for m, n in SHAPES)


def test_bits_per_weight_count_codes_codebooks_scales_and_signs(model96, quantized):
    shapes, weights = SHAPES, WEIGHTS
    quip_bits = 2 * sum(2 * m * n + 16 * (m + n) + 32 for m, n in shapes)  # codes, SU, SV, Wscale
    aqlm_bits = 2 * sum(2 * m * n + 2 * 256 * 8 * 16 + 16 * m for m, n in shapes)  # codes, codebooks, scales
    assert checkpoint_size(quantized["quip_sharp_2bit"]).bits_per_weight == pytest.approx(quip_bits / weights)
    assert checkpoint_size(quantized["aqlm_2x8"]).bits_per_weight == pytest.approx(aqlm_bits / weights)
    assert checkpoint_size(quantized["int2_rtn"]).bits_per_weight < 3.5


def test_aqlm_with_incoherence_stores_signs_reloads_and_decodes_in_the_original_basis(
        model96, calibration, quantized, tmp_path):
    """`incoherence`: codes of W̃ = T_m W T_nᵀ; the loaded layer undoes the rotation in decode and in
    the compressed forward alike, and the checkpoint pays 16 bits per row and column for the signs."""
    spec = SPEC.validate_python(AQLM | {"name": "ar", "incoherence": True})
    res = quantize_variant(spec, model_path=model96, calibration_path=calibration,
                           out_dir=str(tmp_path / "ar"), max_seq_len=64, threads=1)
    config = json.loads((tmp_path / "ar" / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == "aqlm_rht"  # not "aqlm": the aqlm package would misread the codes
    assert checkpoint_format(res.checkpoint).kind == "aqlm"
    packed = load_codebook_model(res.checkpoint, materialize=False)
    layers = [m for m in packed.modules() if isinstance(m, AqlmLinear)]
    assert len(layers) == 14 and all(m.rotated for m in layers)
    assert all(set(m.SU.unique().tolist()) == {-1.0, 1.0} for m in layers)  # random signs, stored
    ids = torch.randint(0, 300, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        dense = load_codebook_model(res.checkpoint)(input_ids=ids).logits
        torch.testing.assert_close(packed(input_ids=ids).logits, dense, rtol=1e-4, atol=1e-4)
    err, rtn = _rel_error(model96, res.checkpoint), _rel_error(model96, quantized["int2_rtn"])
    assert 0 < err < 0.8 * rtn, (err, rtn)  # decoded in the original basis: a rotation left in is O(1)
    extra = 2 * sum(16 * (m + n) for m, n in SHAPES) / WEIGHTS
    plain = checkpoint_size(quantized["aqlm_2x8"]).bits_per_weight
    assert checkpoint_size(res.checkpoint).bits_per_weight == pytest.approx(plain + extra)


def test_record_has_the_methods_notes(quantized):
    notes = json.loads((__import__("pathlib").Path(quantized["quip_sharp_2bit"]) /
                        "quantgate_variant.json").read_text())["notes"]
    assert notes["layers"] == 14 and notes["cheap_layers"] == 0
    assert 0 < notes["mean_proxy_loss"] < notes["mean_nearest_loss"]  # BlockLDLQ beat nearest rounding
    assert notes["finetune_synthetic"] == 0
    aqlm = json.loads((__import__("pathlib").Path(quantized["aqlm_2x8"]) /
                       "quantgate_variant.json").read_text())["notes"]
    # 8 requests, 2 held out, 3 own sequences, 2 epochs, 4 sequences a step: 2 steps an epoch + 1
    # for the extra text (which is never held out).
    assert aqlm["finetune_synthetic"] == 3 and aqlm["finetune_steps"] == 2 * 3


@pytest.mark.parametrize("spec", [QUIP, AQLM, AQLM | {"incoherence": True}], ids=["quip", "aqlm", "aqlm_rht"])
def test_an_exhausted_budget_still_saves_a_whole_model_and_says_so(spec, model96, calibration, tmp_path):
    res = quantize_variant(SPEC.validate_python(spec | {"time_budget_s": 1e-6}), model_path=model96,
                           calibration_path=calibration, out_dir=str(tmp_path / "v"), max_seq_len=64,
                           threads=1)
    notes = json.loads((tmp_path / "v" / "quantgate_variant.json").read_text())["notes"]
    assert notes["cheap_layers"] == notes["layers"] == 14
    assert notes["budget"].startswith("exhausted")
    assert _rel_error(model96, res.checkpoint) < 1.0


def test_aqlm_checkpoint_loads_through_transformers_and_the_aqlm_package(model96, quantized, tmp_path):
    """The same files through `AutoModelForCausalLM.from_pretrained` + aqlm's QuantizedLinear. aqlm
    1.1.7's CPU GEMV races across numba threads, so that process runs numba single-threaded."""
    ids = [[5, 17, 42, 99, 7, 3]]
    code = (
        "import json, sys, torch\n"
        "from transformers import AutoModelForCausalLM\n"
        f"m = AutoModelForCausalLM.from_pretrained({quantized['aqlm_2x8']!r}, dtype=torch.float32)\n"
        "assert type(m.model.layers[0].mlp.down_proj).__name__ == 'QuantizedLinear'\n"
        f"print(json.dumps(m(input_ids=torch.tensor({ids})).logits[0, -1].tolist()))\n")
    env = os.environ | {"NUMBA_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    theirs = torch.tensor(json.loads(out.stdout.strip().splitlines()[-1]))
    with torch.no_grad():
        ours = load_codebook_model(quantized["aqlm_2x8"])(input_ids=torch.tensor(ids)).logits[0, -1]
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-4)


def test_end_to_end_finetuning_lowers_the_heldout_kl(model96, calibration, tmp_path):
    """On a model quantized without block tuning (the block-tuned one is already within ~1e-4 nats of
    the tiny baseline, which leaves the end-to-end step nothing to show)."""
    import time

    from quantgate.tasks.model.load import load_tokenizer
    from quantgate.tasks.quantize.codebook.finetune import finetune_end_to_end
    from quantgate.tasks.quantize.codebook.synthetic import teacher_sequences, vocabulary_starts
    from quantgate.tasks.traffic.load import read_requests
    from quantgate.tasks.traffic.tokens import encode_request

    tok = load_tokenizer(model96)
    batches = [torch.tensor([encode_request(tok, r).input_ids[:48]])
               for r in read_requests(__import__("pathlib").Path(calibration))]
    teacher = load_causal_lm(model96)
    plain = quantize_variant(SPEC.validate_python(QUIP | {"sequential": False, "block_epochs": 0}),
                             model_path=model96, calibration_path=calibration, out_dir=str(tmp_path / "q"),
                             max_seq_len=64, threads=1).checkpoint
    student = load_codebook_model(plain, materialize=False)
    su_before = student.model.layers[0].mlp.down_proj.SU.clone()
    report = finetune_end_to_end(student, teacher, batches, deadline=time.monotonic() + 120, epochs=3,
                                 lr=2e-3, heldout=2, accumulate=1)
    assert report.steps == 3 * 6 and report.stopped_by == "epochs"
    assert report.kl_after < 0.95 * report.kl_before, report

    # The baseline's own text trains beside the traffic (one step per sequence here), never held out.
    own_text = teacher_sequences(teacher, vocabulary_starts(tok), 4, 16)
    beside = load_codebook_model(plain, materialize=False)
    report_beside = finetune_end_to_end(beside, teacher, batches, deadline=time.monotonic() + 120, epochs=1,
                                        lr=2e-3, heldout=2, accumulate=1, extra=own_text)
    assert report_beside.steps == 6 + 4 and report_beside.kl_before == report.kl_before
    assert not torch.equal(student.model.layers[0].mlp.down_proj.SU, su_before.float())  # signs relaxed
    assert all(not p.requires_grad for p in student.parameters())

    # The sign vectors take their own rate: at a vanishing weight rate only they (and no norm) move.
    signs_only = load_codebook_model(plain, materialize=False)
    norm_before = signs_only.model.layers[0].input_layernorm.weight.clone()
    su_before = signs_only.model.layers[0].mlp.down_proj.SU.clone()
    report = finetune_end_to_end(signs_only, teacher, batches, deadline=time.monotonic() + 120, epochs=2,
                                 lr=1e-12, sign_lr=2e-3, heldout=2, accumulate=1)
    assert report.kl_after < report.kl_before, report
    assert (signs_only.model.layers[0].mlp.down_proj.SU - su_before.float()).abs().max() > 1e-4
    assert (signs_only.model.layers[0].input_layernorm.weight - norm_before).abs().max() < 1e-9

    # A budget that the first held-out check already spends: no step, no second check, the input
    # parameters back untouched (the check's own cost is kept out of the training time).
    late = load_codebook_model(plain, materialize=False)
    sv = late.model.layers[0].self_attn.q_proj.SV.clone()
    report = finetune_end_to_end(late, teacher, batches, deadline=time.monotonic(), epochs=3, heldout=2)
    assert (report.steps, report.epochs, report.stopped_by) == (0, 1, "deadline")
    assert report.kl_after == report.kl_before
    assert torch.equal(late.model.layers[0].self_attn.q_proj.SV, sv.float())


def test_a_kept_layer_is_stored_in_fp16_and_priced_in_bits_per_weight(model96, calibration, tmp_path):
    """Mixed precision through `ignore`: the kept Linear stays a plain Linear (block tuning may move
    it), is written in fp16 and counts 16 bits a weight."""
    spec = QUIP | {"ignore": ["lm_head", "layers.0.mlp.down_proj"], "finetune_epochs": 0}
    res = quantize_variant(SPEC.validate_python(spec), model_path=model96, calibration_path=calibration,
                           out_dir=str(tmp_path / "v"), max_seq_len=64, threads=1)
    from safetensors import safe_open

    with safe_open(f"{res.checkpoint}/model.safetensors", "pt") as f:
        assert f.get_slice("model.layers.0.mlp.down_proj.weight").get_dtype() == "F16"
        assert "model.layers.0.mlp.down_proj.qidxs" not in f.keys()
        assert f.get_slice("model.layers.0.input_layernorm.weight").get_dtype() == "F32"  # the rest as was
    model = load_codebook_model(res.checkpoint)
    assert type(model.model.layers[0].mlp.down_proj) is torch.nn.Linear
    assert isinstance(model.model.layers[1].mlp.down_proj, QuipLinear)
    shapes = [(96, 96), (48, 96), (48, 96), (96, 96), (192, 96), (192, 96), (96, 192)]
    quip_bits = 2 * sum(2 * m * n + 16 * (m + n) + 32 for m, n in shapes) - (2 * 96 * 192 + 16 * 288 + 32)
    weights = 2 * sum(m * n for m, n in shapes)
    expected = (quip_bits + 16 * 96 * 192) / weights
    assert checkpoint_size(res.checkpoint).bits_per_weight == pytest.approx(expected)
    assert _rel_error(model96, res.checkpoint) < 1.0
