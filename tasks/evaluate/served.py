"""Perplexity and KL of what serves: the engine's prompt logprobs over the held-out traffic.

The same requests, tokens and windows as the reference path (`perplexity.py`: the chat template over
prompt + served answer, fixed windows, the answer's tokens scored), sent to the engine as token ids
with `max_tokens: 1` and `prompt_logprobs: k`. vLLM returns, at every prompt position t, the logprob
of token t given the tokens before it, and the top-k there. Sum −logprob over a request's scored
tokens: its NLL, as the reference path sums it.

KL from the baseline needs the variant's probabilities at the baseline's top tokens, and an engine
returns only its own top-k. At each position both top-k lists are known; on their intersection S
both distributions are known exactly, so KL is taken over S plus one bucket for every other token.
Any coarsening of the vocabulary can only lose divergence (the data-processing inequality): this is
a lower bound on the full KL, as the reference path's top-32 KL is (`divergence.py`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import numpy as np

from quantgate.tasks.traffic.tokens import Encoded


class EngineScoringError(RuntimeError):
    """An engine refused or failed a scoring request; the message carries its answer."""


@dataclass(frozen=True)
class WindowScore:
    nll: float
    tokens: int
    top_idx: np.ndarray  # [n, k] int32, -1 where the engine returned fewer than k
    top_logp: np.ndarray  # [n, k] float32


def score_window(client: httpx.Client, model: str, ids: Sequence[int], first: int, k: int) -> WindowScore:
    """One window: the NLL of tokens first..len-1 and the engine's top-k at each of them."""
    body = {"model": model, "prompt": list(ids), "max_tokens": 1, "temperature": 0.0,
            "prompt_logprobs": k}
    r = client.post("/v1/completions", json=body)
    if r.status_code != 200:
        raise EngineScoringError(f"engine answered {r.status_code} to a {len(ids)}-token scoring request: "
                                 f"{r.text[:300]}")
    positions = r.json()["choices"][0]["prompt_logprobs"]  # [len(ids)], None at 0
    n = len(ids) - first
    top_idx, top_logp, nll = np.full((n, k), -1, np.int32), np.zeros((n, k), np.float32), 0.0
    for row, t in enumerate(range(first, len(ids))):
        at = positions[t]
        nll -= at[str(ids[t])]["logprob"]
        ranked = sorted(((int(tok), v["logprob"]) for tok, v in at.items() if 0 < v["rank"] <= k),
                        key=lambda x: -x[1])[:k]
        for j, (tok, logp) in enumerate(ranked):
            top_idx[row, j], top_logp[row, j] = tok, logp
    return WindowScore(nll, n, top_idx, top_logp)


def sparse_kl(p_idx: np.ndarray, p_logp: np.ndarray, q_idx: np.ndarray, q_logp: np.ndarray) -> float:
    """Σ over positions of KL(P ‖ Q) coarsened to the tokens in both top-k lists plus the rest."""
    total = 0.0
    for pi, pl, qi, ql in zip(p_idx, p_logp, q_idx, q_logp, strict=True):
        q_at = {int(t): float(v) for t, v in zip(qi, ql, strict=True) if t >= 0}
        shared = [(float(v), q_at[int(t)]) for t, v in zip(pi, pl, strict=True) if int(t) in q_at]
        p_rest = max(1.0 - sum(math.exp(a) for a, _ in shared), 1e-12)
        q_rest = max(1.0 - sum(math.exp(b) for _, b in shared), 1e-12)
        total += sum(math.exp(a) * (a - b) for a, b in shared) + p_rest * math.log(p_rest / q_rest)
    return total


@dataclass(frozen=True)
class ServedScores:
    per_request: list[tuple[float, int]]  # (summed NLL, scored tokens), every request (0, 0 if not scored)
    kl: list[float | None]  # per request, against `reference` (None: no reference given)
    record_idx: np.ndarray  # [positions, k] this model's top-k at every scored position (request order)
    record_logp: np.ndarray


def score_served(base_url: str, model: str, items: list[tuple[int, list[int], int, int]], *, requests: int,
                 positions: int, k: int, concurrency: int, only: Collection[int] | None = None,
                 reference: tuple[np.ndarray, np.ndarray] | None = None,
                 timeout_s: float = 600) -> ServedScores:
    """`items`: (request, window ids, first scored position, offset) as `perplexity.scored_positions`
    numbers them; requests outside `only` are skipped. In flight at once: `concurrency` windows, which
    the engine batches."""
    todo = [it for it in items if only is None or it[0] in only]
    idx, logp = np.full((positions, k), -1, np.int32), np.zeros((positions, k), np.float32)
    totals = [[0.0, 0] for _ in range(requests)]
    kl: list[float | None] = [None if reference is None else 0.0 for _ in range(requests)]
    with httpx.Client(base_url=base_url, timeout=timeout_s) as client, \
            ThreadPoolExecutor(max_workers=concurrency) as pool:
        scores = pool.map(lambda it: score_window(client, model, it[1], it[2], k), todo)
        for (request, _, _, offset), s in zip(todo, scores, strict=True):
            totals[request][0] += s.nll
            totals[request][1] += s.tokens
            idx[offset: offset + s.tokens], logp[offset: offset + s.tokens] = s.top_idx, s.top_logp
            if reference is not None:
                span = slice(offset, offset + s.tokens)
                ref_idx, ref_logp = reference[0][span], reference[1][span]
                if len(ref_idx) < s.tokens:
                    raise ValueError("the reference holds fewer scored positions than this evaluation: "
                                     "not the same held-out set or tokenizer")
                kl[request] = (kl[request] or 0.0) + sparse_kl(ref_idx, ref_logp, s.top_idx, s.top_logp)
    return ServedScores([(s, int(n)) for s, n in totals], kl, idx, logp)


def load_record(path: str) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path) as ref:
        return ref["idx"], ref["logp"]


def windows_for(encoded: list[Encoded], window: int) -> tuple[list[tuple[int, list[int], int, int]], int]:
    """The reference path's windows and the number of scored positions they hold."""
    from quantgate.tasks.evaluate.perplexity import scored_positions

    items = scored_positions(encoded, window)
    return items, sum(len(ids) - first for _, ids, first, _ in items)
