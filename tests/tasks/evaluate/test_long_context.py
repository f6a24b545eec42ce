"""The long-context probe on a tiny model: documents from the shipped licence texts, scored in
blocks by position, passkeys planted where asked; its evidence gates like perplexity."""

import math

import pytest

from quantgate.conf.schema import GateConf
from quantgate.tasks.evaluate.long_context import (
    _bucket,
    corpus_ids,
    passkey_prompt,
    read_long_context,
    run_long_context,
)
from quantgate.tasks.gate.evidence import perplexity_checks
from quantgate.tasks.model.load import load_tokenizer

from factories import perturbed_copy


def test_position_buckets_double():
    assert [_bucket(p) for p in (0, 1023, 1024, 2047, 2048, 4095, 4096, 8000)] == [
        "pos=0-1k", "pos=0-1k", "pos=1k-2k", "pos=1k-2k", "pos=2k-4k", "pos=2k-4k", "pos=4k-8k", "pos=4k-8k"]


def test_passkey_sits_at_its_depth_inside_the_context(tiny_model):
    tok = load_tokenizer(tiny_model)
    filler = corpus_ids(tok, 600)
    for depth in (0.1, 0.9):
        ids = passkey_prompt(tok, filler, 256, depth, "48213")
        assert len(ids) <= 256 - 8 and tok.decode(ids).rstrip().endswith("The pass key is")
        before = next(i for i, (a, b) in enumerate(zip(ids, filler, strict=False)) if a != b)
        after = len(ids) - before - len(tok(" The pass key is 48213. Remember it. 48213 is the pass key. ")[
            "input_ids"]) - len(tok("\n\nWhat is the pass key? The pass key is")["input_ids"])
        assert abs(before / (before + after) - depth) < 0.02  # the filler split at the depth asked


def test_probe_scores_blocks_and_pairs_them_like_perplexity(tiny_model, tmp_path):
    kw = {"context": 96, "documents": 2, "block": 32, "depths": (0.5,)}
    base = run_long_context(tiny_model, str(tmp_path / "b.json"), **kw)
    assert len(base.perplexity.requests) == 2 * 3 and base.perplexity.tokens == 2 * 95
    assert math.isfinite(base.perplexity.ppl) and len(base.passkeys) == 1
    assert read_long_context(str(tmp_path / "b.json")) == base
    variant = perturbed_copy(tiny_model, tmp_path / "v", 0.2)
    var = run_long_context(str(variant), str(tmp_path / "v.json"), **kw)
    (check,) = perplexity_checks(base.perplexity, var.perplexity, GateConf(resamples=300), min_tokens=10**6,
                                 metric="long_ppl")
    assert check.metric == "long_ppl" and check.interval.n == 6
    assert check.interval.estimate == pytest.approx(var.perplexity.ppl / base.perplexity.ppl - 1, rel=1e-6)
