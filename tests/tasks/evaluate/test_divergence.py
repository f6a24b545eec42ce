"""Next-token KL from a recorded baseline: exact where it must be, a lower bound of the full KL,
and measured through the real evaluation on a tiny model and a perturbed copy."""

import torch
import torch.nn.functional as F

from quantgate.tasks.evaluate.divergence import TOP_K, coarse_kl
from quantgate.tasks.evaluate.perplexity import evaluate_checkpoint
from quantgate.tasks.traffic.load import load_traffic, write_requests

from factories import mixed_records, perturbed_copy, write_traffic


def _top(logits, k=TOP_K):
    values, idx = F.log_softmax(logits, -1).topk(k, -1)
    return idx, values


def test_coarse_kl_is_zero_on_itself_and_a_lower_bound_of_the_full_kl():
    torch.manual_seed(0)
    base = torch.randn(64, 500) * 3
    var = base + 0.5 * torch.randn_like(base)
    idx, logp = _top(base)
    assert coarse_kl(idx, logp, base).abs().max() < 1e-5
    full = (F.softmax(base, -1) * (F.log_softmax(base, -1) - F.log_softmax(var, -1))).sum(-1)
    coarse = coarse_kl(idx, logp, var)
    assert (coarse >= -1e-6).all() and (coarse <= full + 1e-5).all()
    assert coarse.mean() > 0.5 * full.mean()  # most of the divergence is in the top tokens here
    wide_idx, wide_logp = _top(base, k=500)  # every token kept: the full KL exactly
    assert torch.allclose(coarse_kl(wide_idx, wide_logp, var), full, atol=1e-4)


def test_evaluation_records_the_baseline_and_measures_a_variant_against_it(tiny_model, tmp_path):
    held = tmp_path / "heldout.jsonl"
    requests = load_traffic(write_traffic(tmp_path / "t.jsonl", mixed_records(12, seed=5)),
                            max_line_bytes=65536, length_buckets=(200,)).requests
    write_requests(held, requests)
    base = evaluate_checkpoint(tiny_model, str(held), str(tmp_path / "base.json"), window=64, batch_size=4,
                               record_reference=True)
    assert base.reference_path and base.kl != base.kl  # the baseline records; it measures no KL
    same = evaluate_checkpoint(tiny_model, str(held), str(tmp_path / "same.json"), window=64, batch_size=3,
                               reference=base.reference_path)
    assert abs(same.kl) < 1e-5  # another batch size, the same model: no divergence
    perturbed_copy(tiny_model, tmp_path / "v", 0.05)
    var = evaluate_checkpoint(str(tmp_path / "v"), str(held), str(tmp_path / "v.json"), window=64,
                              batch_size=4, reference=base.reference_path)
    assert var.kl > 1e-4 and all(r.kl is not None and r.kl >= -1e-6 for r in var.requests)
    assert abs(sum(r.kl for r in var.requests) / var.tokens - var.kl) < 1e-12
    # Two looks: the first reads a spread quarter, the second the rest; merged, they are the one-pass
    # result request by request (NLL and KL), in held-out order, with the time of both.
    first = evaluate_checkpoint(str(tmp_path / "v"), str(held), str(tmp_path / "v1.json"), window=64,
                                batch_size=4, reference=base.reference_path, look="first", first_share=0.25)
    assert first.look == "first" and len(first.requests) == 3
    assert {r.id for r in first.requests} < {r.id for r in var.requests}
    both = evaluate_checkpoint(str(tmp_path / "v"), str(held), str(tmp_path / "v2.json"), window=64,
                               batch_size=4, reference=base.reference_path, look="rest", first_share=0.25,
                               first=first)
    assert both.look == "both" and [r.id for r in both.requests] == [r.id for r in var.requests]
    for one, two in zip(var.requests, both.requests, strict=True):
        assert abs(one.nll - two.nll) < 1e-3 * max(1.0, one.nll) and one.tokens == two.tokens
        assert abs(one.kl - two.kl) < 1e-4
    assert both.tokens == var.tokens and abs(both.ppl - var.ppl) < 1e-3 * var.ppl
    assert both.slices.keys() == var.slices.keys() and both.seconds > first.seconds
