import math

import torch
import torch.nn.functional as F

from quantgate.tasks.evaluate.perplexity import aggregate, evaluate_checkpoint, read_eval, request_nlls
from quantgate.tasks.model.load import load_causal_lm, load_tokenizer
from quantgate.tasks.traffic.load import load_traffic, write_requests
from quantgate.tasks.traffic.tokens import encode_request

from factories import record, write_traffic


def _requests(tmp_path):
    recs = [record(i, domain=d, tenant=t) for i, (d, t) in enumerate(
        [("code", "acme"), ("math", "acme"), ("support", "globex"), ("math", "globex")])]
    return load_traffic(write_traffic(tmp_path / "t.jsonl", recs), max_line_bytes=65536,
                        length_buckets=(200,)).requests


def _direct_nll(model, enc):
    """Independent reference: one unbatched forward, answer tokens only."""
    ids = torch.tensor([enc.input_ids])
    with torch.no_grad():
        logp = F.log_softmax(model(input_ids=ids).logits[0, :-1], -1)
    targets = ids[0, 1:]
    nll = -logp[torch.arange(len(targets)), targets]
    return float(nll[enc.answer_start - 1 :].sum()), len(targets) - (enc.answer_start - 1)


def test_batched_nll_matches_unbatched_reference(tmp_path, tiny_model):
    model, tok = load_causal_lm(tiny_model), load_tokenizer(tiny_model)
    encoded = [encode_request(tok, r) for r in _requests(tmp_path)]
    got = request_nlls(model, encoded, window=512, batch_size=3)
    for enc, (s, n) in zip(encoded, got, strict=True):
        ref_s, ref_n = _direct_nll(model, enc)
        assert n == ref_n
        assert math.isclose(s, ref_s, rel_tol=1e-4)


def test_answer_start_points_at_the_answer(tmp_path, tiny_model):
    tok = load_tokenizer(tiny_model)
    r = _requests(tmp_path)[0]
    enc = encode_request(tok, r)
    assert tok.decode(enc.input_ids[enc.answer_start:]).startswith(r.answer[:10])


def test_windows_score_every_answer_token_but_window_starts(tmp_path, tiny_model):
    model, tok = load_causal_lm(tiny_model), load_tokenizer(tiny_model)
    encoded = [encode_request(tok, r) for r in _requests(tmp_path)]
    whole = request_nlls(model, encoded, window=512, batch_size=4)
    small = request_nlls(model, encoded, window=16, batch_size=4)
    for enc, (_, n_whole), (_, n_small) in zip(encoded, whole, small, strict=True):
        answer_tokens = len(enc.input_ids) - enc.answer_start
        starts_in_answer = sum(1 for s in range(16, len(enc.input_ids), 16) if s >= enc.answer_start)
        assert n_whole == answer_tokens
        assert n_small == answer_tokens - starts_in_answer


def test_slices_aggregate_token_weighted():
    overall, slices = aggregate([(2.0, 2), (6.0, 2)], [{"tenant": "a", "domain": "x"},
                                                       {"tenant": "a", "domain": "y"}])
    assert math.isclose(overall.ppl, math.exp(2.0)) and overall.tokens == 4
    assert math.isclose(slices["domain=x"].ppl, math.exp(1.0))
    assert math.isclose(slices["tenant=a"].ppl, math.exp(2.0))


def test_evaluate_checkpoint_writes_a_readable_result(tmp_path, tiny_model):
    held = tmp_path / "held.jsonl"
    write_requests(held, _requests(tmp_path))
    res = evaluate_checkpoint(tiny_model, str(held), str(tmp_path / "e.json"), window=64, batch_size=2)
    assert res.ppl > 1 and "tenant=globex" in res.slices
    assert read_eval(str(tmp_path / "e.json")) == res
