"""The gate's evidence, paired item by item: a variant's evaluation against the baseline's on the
same held-out requests, as intervals on the relative degradation, overall and per slice."""

from __future__ import annotations

from quantgate.tasks.evaluate.perplexity import EvalResult, RequestNll
from quantgate.tasks.gate.paired import Interval, perplexity_degradation


def perplexity_intervals(baseline: EvalResult, variant: EvalResult, *, min_tokens: int,
                         level: float = 0.95, resamples: int = 2000, seed: int = 0) -> dict[str, Interval]:
    """`overall` and every slice with ≥ `min_tokens` scored tokens -> interval on variant PPL /
    baseline PPL − 1, resampling requests with their pairs. The two results must come from the same
    held-out file (same requests in the same order, same scored tokens: one tokenizer)."""
    pairs = _paired_requests(baseline.requests, variant.requests)
    groups: dict[str, list[tuple[RequestNll, RequestNll]]] = {"overall": pairs}
    for b, v in pairs:
        for name in b.slices:
            groups.setdefault(name, []).append((b, v))
    out = {}
    for name, group in groups.items():
        if name != "overall" and sum(b.tokens for b, _ in group) < min_tokens:
            continue  # too few tokens to gate on: reported by the slice table, not here
        out[name] = perplexity_degradation([b.nll for b, _ in group], [v.nll for _, v in group],
                                           [b.tokens for b, _ in group], level=level,
                                           resamples=resamples, seed=seed)
    return out


def _paired_requests(baseline: tuple[RequestNll, ...], variant: tuple[RequestNll, ...]
                     ) -> list[tuple[RequestNll, RequestNll]]:
    if not baseline:
        raise ValueError("the baseline's evaluation has no per-request NLLs: re-evaluate it with this code")
    if [b.id for b in baseline] != [v.id for v in variant]:
        raise ValueError(f"not the same held-out requests: baseline has {len(baseline)}, variant "
                         f"{len(variant)}, or another order; evaluate both on one held-out file")
    for b, v in zip(baseline, variant, strict=True):
        if b.tokens != v.tokens:
            raise ValueError(f"request {b.id}: {b.tokens} scored tokens for the baseline, {v.tokens} for "
                             "the variant; a paired comparison needs one tokenizer")
    return list(zip(baseline, variant, strict=True))
