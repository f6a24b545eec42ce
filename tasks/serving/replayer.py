"""Replay held-out traffic against a serving endpoint: at a rate, with a concurrency, bounded in
count and in time, to loopback only (a replayer pointed at someone else's server is an attack).

Every request sent is accounted for: answered (2xx), refused with a status (4xx/5xx), or lost (no
status at all: connection reset, timeout). Nothing is dropped silently.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import httpx


@dataclass(frozen=True)
class Sent:
    status: int | None  # None: lost
    arm: str | None
    latency_s: float
    error: str | None = None


@dataclass
class ReplayResult:
    sent: list[Sent] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def statuses(self) -> dict[str, int]:
        return dict(Counter("lost" if s.status is None else str(s.status) for s in self.sent))

    def latency_quantiles(self, qs: tuple[float, ...] = (0.5, 0.95, 0.99)) -> dict[float, float]:
        ok = sorted(s.latency_s for s in self.sent if s.status == 200)
        if not ok:
            return {q: float("nan") for q in qs}
        return {q: ok[min(len(ok) - 1, int(q * len(ok)))] for q in qs}


def require_loopback(base_url: str) -> None:
    host = urlparse(base_url).hostname or ""
    try:
        loop = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loop = False
    if not loop:
        raise ValueError(f"replayer target {base_url!r}: loopback addresses only (127.0.0.1, ::1, localhost)")


async def _replay(base_url: str, prompts: list[list[dict[str, str]]], *, model: str, rate_per_s: float,
                  concurrency: int, max_requests: int, max_s: float, max_tokens: int,
                  api_key: str | None, timeout_s: float) -> ReplayResult:
    out, start = ReplayResult(), time.perf_counter()
    sem = asyncio.Semaphore(concurrency)
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}

    async def one(client: httpx.AsyncClient, messages: list[dict[str, str]]) -> None:
        t0 = time.perf_counter()
        body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": 0.0}
        try:
            r = await client.post(f"{base_url}/v1/chat/completions", json=body, headers=headers)
            out.sent.append(Sent(r.status_code, r.headers.get("x-quantgate-arm"), time.perf_counter() - t0))
        except httpx.HTTPError as exc:
            out.sent.append(Sent(None, None, time.perf_counter() - t0, type(exc).__name__))
        finally:
            sem.release()

    async with httpx.AsyncClient(timeout=timeout_s) as client:
        tasks = []
        for i in range(max_requests):
            if time.perf_counter() - start > max_s:
                break
            await sem.acquire()
            tasks.append(asyncio.create_task(one(client, prompts[i % len(prompts)])))
            if rate_per_s > 0:  # open-loop pacing, held back only by the concurrency bound
                await asyncio.sleep(max(0.0, start + (i + 1) / rate_per_s - time.perf_counter()))
        await asyncio.gather(*tasks)
    out.wall_s = time.perf_counter() - start
    return out


def replay(base_url: str, prompts: list[list[dict[str, str]]], *, model: str, rate_per_s: float = 0.0,
           concurrency: int = 1, max_requests: int = 32, max_s: float = 120.0, max_tokens: int = 32,
           api_key: str | None = None, timeout_s: float = 120.0) -> ReplayResult:
    """`rate_per_s` 0: as fast as `concurrency` allows. Stops starting requests after `max_s`."""
    require_loopback(base_url)
    if not prompts:
        raise ValueError("replayer: no prompts to send")
    return asyncio.run(_replay(base_url, prompts, model=model, rate_per_s=rate_per_s,
                               concurrency=concurrency, max_requests=max_requests, max_s=max_s,
                               max_tokens=max_tokens, api_key=api_key, timeout_s=timeout_s))
