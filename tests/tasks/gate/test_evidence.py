"""Paired perplexity evidence from two real evaluations of a tiny model and a perturbed copy."""

import dataclasses

import pytest

from quantgate.conf.schema import GateConf
from quantgate.tasks.evaluate.perplexity import evaluate_checkpoint, read_eval
from quantgate.tasks.gate.evidence import perplexity_checks
from quantgate.tasks.traffic.load import load_traffic, write_requests

from factories import mixed_records, perturbed_copy, write_traffic


@pytest.fixture(scope="module")
def evals(tiny_model, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evidence")
    held = tmp / "heldout.jsonl"
    requests = load_traffic(write_traffic(tmp / "t.jsonl", mixed_records(24, seed=3)), max_line_bytes=65536,
                            length_buckets=(200,)).requests
    write_requests(held, requests)
    variant_dir = perturbed_copy(tiny_model, tmp / "variant", 0.02)

    def run(path, name):
        return evaluate_checkpoint(str(path), str(held), str(tmp / name), window=64, batch_size=4)

    return run(tiny_model, "base.json"), run(variant_dir, "variant.json"), tmp


def perplexity_intervals(base, var, *, min_tokens, resamples=200):
    checks = perplexity_checks(base, var, GateConf(resamples=resamples), min_tokens=min_tokens)
    return {c.slice: c.interval for c in checks}


def test_intervals_are_centred_on_the_reported_ppl_ratios(evals):
    base, var, tmp = evals
    assert len(base.requests) == 24 and read_eval(str(tmp / "variant.json")) == var
    intervals = perplexity_intervals(base, var, min_tokens=0, resamples=500)
    assert set(intervals) == {"overall", *base.slices}
    assert intervals["overall"].estimate == pytest.approx(var.ppl / base.ppl - 1, rel=1e-9)
    for name, iv in intervals.items():
        if name != "overall":
            assert iv.estimate == pytest.approx(var.slices[name].ppl / base.slices[name].ppl - 1, rel=1e-9)
        assert iv.low <= iv.estimate <= iv.high and iv.low < iv.high and iv.n >= 1


def test_small_slices_are_left_out_and_a_model_against_itself_is_exactly_zero(evals):
    base, var, _ = evals
    big = max(s.tokens for s in base.slices.values())
    kept = perplexity_intervals(base, var, min_tokens=big, resamples=200)
    assert set(kept) == {"overall", *(k for k, s in base.slices.items() if s.tokens >= big)}
    same = perplexity_intervals(base, base, min_tokens=0, resamples=200)
    assert all((iv.low, iv.estimate, iv.high) == (0.0, 0.0, 0.0) for iv in same.values())


def test_evaluations_of_different_requests_do_not_pair(evals):
    base, var, _ = evals
    with pytest.raises(ValueError, match="not the same held-out requests"):
        perplexity_intervals(base, dataclasses.replace(var, requests=var.requests[1:]), min_tokens=0)
    shifted = dataclasses.replace(var.requests[0], tokens=var.requests[0].tokens + 1)
    with pytest.raises(ValueError, match="one tokenizer"):
        perplexity_intervals(base, dataclasses.replace(var, requests=(shifted, *var.requests[1:])),
                             min_tokens=0)
    with pytest.raises(ValueError, match="no per-request NLLs"):
        perplexity_intervals(dataclasses.replace(base, requests=()), var, min_tokens=0)
