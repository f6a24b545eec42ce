"""Codes that move during end-to-end fine-tuning (PV-tuning's V step): the saved checkpoint holds the
moved codes of the state the tuner kept, no more of them per step than the trust limit allows, and
the runner turns them on from the variant's spec."""

import json
import math
import shutil
import time
from pathlib import Path

import pytest
import torch
from pydantic import TypeAdapter
from safetensors.torch import load_file

from quantgate.conf.methods import VariantSpec
from quantgate.tasks.model.codebook_format import load_codebook_model
from quantgate.tasks.model.load import load_causal_lm, load_tokenizer
from quantgate.tasks.quantize.codebook.finetune import finetune_checkpoint, finetune_end_to_end
from quantgate.tasks.quantize.run import VARIANT_RECORD, quantize_variant
from quantgate.tasks.traffic.load import read_requests
from quantgate.tasks.traffic.tokens import encode_request

SPEC = TypeAdapter(VariantSpec)
# No block tuning: it leaves the tiny model too close to the baseline for the end-to-end step to show.
PLAIN = {"num_samples": 8, "sequential": False, "block_epochs": 0}
METHODS = {
    "quip": {"method": "quip_sharp_2bit"},
    "aqlm": {"method": "aqlm_2x8", "max_rounds": 1, "adam_steps": 5, "beam_size": 1},
}
CODES = {"quip": "qidxs", "aqlm": "codes"}
FRACTION = 0.01


def _quantize(kind: str, name: str, out: Path, model: str, calibration: str, **extra) -> tuple[str, dict]:
    spec = SPEC.validate_python({"name": name, **METHODS[kind], **PLAIN, **extra})
    path = quantize_variant(spec, model_path=model, calibration_path=calibration, out_dir=str(out / name),
                            max_seq_len=64, threads=1).checkpoint
    return path, json.loads((Path(path) / VARIANT_RECORD).read_text())["notes"]


def _codes(model: torch.nn.Module, kind: str) -> dict[str, torch.Tensor]:
    return {k: v for k, v in model.state_dict().items() if k.endswith(f".{CODES[kind]}")}


@pytest.mark.parametrize("kind", sorted(METHODS))
def test_codes_move_within_the_trust_limit_and_the_kept_state_is_saved(kind, model96, calibration, tmp_path):
    plain, _ = _quantize(kind, "plain", tmp_path, model96, calibration, finetune_epochs=0)
    teacher = load_causal_lm(model96)
    tok = load_tokenizer(model96)
    requests = read_requests(Path(calibration))
    batches = [torch.tensor([encode_request(tok, r).input_ids[:48]]) for r in requests]
    original = _codes(load_codebook_model(plain, materialize=False), kind)

    settings = {"epochs": 3, "lr": 2e-3, "heldout": 2, "accumulate": 1, "code_lr": 0.02,
                "code_fraction": FRACTION}
    student = load_codebook_model(plain, materialize=False)
    report = finetune_end_to_end(student, teacher, batches, deadline=time.monotonic() + 300, **settings)
    assert report.stopped_by == "epochs" and report.codes_changed > 0, report
    assert report.kl_after <= report.kl_before
    kept, moved = _codes(student, kind), 0
    for key, codes in kept.items():
        groups = codes.shape[0] * codes.shape[1]
        differ = int((codes != original[key]).reshape(groups, -1).any(-1).sum())
        assert differ <= report.steps * math.ceil(FRACTION * groups), key
        moved += differ
    # The best held-out epoch is kept with its codes: moved ones (QuIP# on this model), or, when no epoch
    # beat the start (AQLM on this model), the input codes.
    if kind == "quip":
        assert report.kl_after < report.kl_before and moved > 0
    if report.kl_after == report.kl_before:
        assert moved == 0

    # Through the checkpoint, the same tuning (deterministic on the same inputs): its kept codes saved.
    tuned = str(tmp_path / "tuned")
    shutil.copytree(plain, tuned)
    saved = finetune_checkpoint(tuned, teacher, batches, deadline=time.monotonic() + 300, **settings)
    assert saved == report
    stored = load_file(f"{tuned}/model.safetensors")
    for key, codes in kept.items():
        assert stored[key].dtype == codes.dtype and torch.equal(stored[key], codes), key


def test_the_runner_moves_codes_when_the_spec_asks(model96, calibration, tmp_path):
    _, frozen = _quantize("aqlm", "frozen", tmp_path, model96, calibration)
    _, moving = _quantize("aqlm", "moving", tmp_path, model96, calibration, code_update_fraction=FRACTION,
                          code_lr=0.3)  # large steps: codes move within the default 2 epochs
    assert frozen["finetune_codes_changed"] == 0 and moving["finetune_codes_changed"] > 0
