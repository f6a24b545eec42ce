"""One model's text generation for serving: the checkpoint on its fastest faithful CPU path, token
by token with a KV cache, so a replica can stream and time each token (TTFT, TPOT).

The canary serves on the engine (`engine_arm.py`); this loop stays as the old serving path that
`bench/serving_load.py` measures the engine against, and as the bench's decode path. Its `Faults`
are the drill's faults as the router applies them (`faults.py`).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from quantgate.tasks.model.fast_cpu import load_for_speed
from quantgate.tasks.model.load import load_tokenizer
from quantgate.tasks.serving.faults import Faults, InjectedFault
from quantgate.tasks.serving.protocol import Prompt, prompt_token_ids


@dataclass
class Token:
    text: str  # the text this token adds (may be "" while a UTF-8 character is incomplete)
    at: float  # perf_counter when it was produced


@dataclass
class Generation:
    tokens: list[Token] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    started_at: float | None = None  # when this request got the replica (queueing excluded)
    cpu_started_at: float | None = None  # this process's CPU clock then (one request at a time)
    first_token_at: float | None = None
    finish: str = "length"


class Generator:
    """Loads once; `stream` yields tokens. One generation at a time per replica (a lock): on a CPU
    replica with one thread, interleaving requests only makes each one slower."""

    def __init__(self, path: str, *, threads: int = 1, dtype: str = "float32", seed: int = 0) -> None:
        torch.set_num_threads(threads)
        self.model, self.path_desc = load_for_speed(path, dtype)
        self.tok = load_tokenizer(path)
        self.eos = {i for i in (self.tok.eos_token_id, getattr(self.model.config, "eos_token_id", None))
                    if isinstance(i, int)}
        self.lock = threading.Lock()
        self.rng = random.Random(seed)
        self.faults = Faults()

    def _input_ids(self, p: Prompt) -> torch.Tensor:
        return torch.tensor([prompt_token_ids(self.tok, p)], dtype=torch.long)

    def _pick(self, logits: torch.Tensor, p: Prompt, gen: torch.Generator) -> int:
        if p.temperature == 0:
            return int(logits.argmax())
        probs = torch.softmax(logits.float() / p.temperature, dim=-1)
        if p.top_p < 1:
            sorted_p, order = probs.sort(descending=True)
            keep = sorted_p.cumsum(0) - sorted_p < p.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
        return int(torch.multinomial(probs, 1, generator=gen))

    def score(self, p: Prompt, answer: str) -> tuple[float, int] | None:
        """Mean negative log-likelihood per token (nats) of `answer` as this model's reply to `p`,
        and its token count; None for an empty answer. One teacher-forced forward pass: the
        rollout's judge reads the champion's score of both answers of a mirrored pair."""
        prompt = self._input_ids(p)
        reply = self.tok(answer, add_special_tokens=False)["input_ids"]
        if not reply:
            return None
        ids = torch.cat([prompt, torch.tensor([reply], dtype=torch.long)], dim=1)
        with self.lock, torch.inference_mode():
            logits = self.model(input_ids=ids, use_cache=True).logits[0, prompt.shape[1] - 1: -1].float()
        logp = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(reply)[:, None])
        return float(-logp.mean()), len(reply)

    def stream(self, p: Prompt, out: Generation) -> Iterator[Token]:
        with self.lock:
            out.started_at, out.cpu_started_at = time.perf_counter(), time.process_time()
            fail, garble = self.rng.random() < self.faults.errors, self.rng.random() < self.faults.garbage
            if self.faults.latency_ms:
                time.sleep(self.faults.latency_ms / 1000)
            if fail:
                raise InjectedFault("injected fault (drill): this request fails on purpose")
            yield from self._decode(p, out, garble)

    def _decode(self, p: Prompt, out: Generation, garble: bool) -> Iterator[Token]:
        ids = self._input_ids(p)
        out.prompt_tokens = ids.shape[1]
        gen = torch.Generator().manual_seed(p.seed if p.seed is not None else self.rng.randrange(2**31))
        produced: list[int] = []
        text = ""
        past: Any = None
        step = ids
        with torch.inference_mode():
            for _ in range(p.max_tokens):
                # Logits at the last position only, as generate() does: the prompt's other rows of
                # the 49k-wide head cost 15 % of a 55-token prefill (SmolLM2 fp32, 282 -> 243 ms).
                res = self.model(input_ids=step, past_key_values=past, use_cache=True, logits_to_keep=1)
                past = res.past_key_values
                nxt = self._pick(res.logits[0, -1], p, gen)
                if nxt in self.eos:
                    out.finish = "stop"
                    break
                if garble:  # a random token of the vocabulary in place of the model's
                    nxt = int(torch.randint(len(self.tok), (1,), generator=gen))
                produced.append(nxt)
                out.completion_tokens += 1
                out.first_token_at = out.first_token_at or time.perf_counter()
                step = torch.tensor([[nxt]], dtype=torch.long)
                full = self.tok.decode(produced, skip_special_tokens=True)
                if full.endswith("\ufffd"):  # half of a multi-byte character: wait for the rest
                    continue
                delta, text = full[len(text):], full
                hit = min((i for s in p.stop if (i := text.find(s)) >= 0), default=-1)
                if hit >= 0:
                    cut = delta[: max(0, len(delta) - (len(text) - hit))]
                    token = Token(cut, time.perf_counter())
                    out.tokens.append(token)
                    yield token
                    out.finish = "stop"
                    return
                token = Token(delta, time.perf_counter())
                out.tokens.append(token)
                yield token
