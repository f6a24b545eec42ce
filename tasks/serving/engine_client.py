"""A serving arm's calls to its engine server, over HTTP only: a request streamed token by token
(with its usage), and the likelihood of an answer from the engine's prompt logprobs.

Times are taken where the arm sees the stream: TTFT from the moment the request left to its first
text, TPOT over the rest (the engine's own view of the same requests is in its /metrics). An engine's
refusal keeps its status and OpenAI error body (`EngineHttpError`): a prompt longer than the context
is the engine's 400, passed through to the client.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from quantgate.tasks.serving.protocol import Prompt


class EngineHttpError(Exception):
    """The engine answered with an error: its HTTP status and OpenAI error body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status, body)  # args are what a pickled copy is rebuilt from (Ray, between arms)
        self.status, self.body = status, body

    def __str__(self) -> str:
        error = self.body.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        return f"engine {self.status}: {message or json.dumps(self.body)[:300]}"


def request_body(p: Prompt, model: str) -> tuple[str, dict[str, Any]]:
    """The engine endpoint and body for a prompt, streamed, with usage in the last chunk."""
    body: dict[str, Any] = {"model": model, "max_tokens": p.max_tokens, "temperature": p.temperature,
                            "top_p": p.top_p, "stream": True, "stream_options": {"include_usage": True}}
    if p.stop:
        body["stop"] = p.stop
    if p.seed is not None:
        body["seed"] = p.seed
    if p.kind == "chat":
        return "/v1/chat/completions", body | {"messages": p.messages}
    return "/v1/completions", body | {"prompt": p.text}


def _error_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
        return body if isinstance(body, dict) else {"error": {"message": str(body)}}
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {"error": {"message": raw[:300].decode("utf-8", "replace"), "type": "server_error"}}


async def stream(client: httpx.AsyncClient, p: Prompt, model: str) -> AsyncIterator[dict[str, Any]]:
    """{"delta": text} per chunk with text, then {"done": stats}: finish, token counts (the engine's
    usage), ttft_s, tpot_s and total_s as the arm saw them."""
    path, body = request_body(p, model)
    started, first, finish, usage, chunks = time.perf_counter(), None, "length", {}, 0
    async with client.stream("POST", path, json=body) as r:
        if r.status_code != 200:
            raise EngineHttpError(r.status_code, _error_body(await r.aread()))
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data.strip() == "[DONE]":
                break
            event = json.loads(data)
            if "error" in event:  # after the 200: the engine reports a failure as an event
                code = event["error"].get("code") if isinstance(event["error"], dict) else None
                raise EngineHttpError(code if isinstance(code, int) else 500, event)
            usage = event.get("usage") or usage
            for choice in event.get("choices", []):
                text = choice.get("delta", {}).get("content") if p.kind == "chat" else choice.get("text")
                finish = choice.get("finish_reason") or finish
                if text:
                    first = first or time.perf_counter()
                    chunks += 1
                    yield {"delta": text}
    end = time.perf_counter()
    tokens = int(usage.get("completion_tokens", chunks))
    yield {"done": {"finish": finish, "prompt_tokens": int(usage.get("prompt_tokens", 0)),
                    "completion_tokens": tokens, "ttft_s": (first - started) if first else None,
                    "tpot_s": (end - first) / (tokens - 1) if first and tokens > 1 else None,
                    "total_s": end - started, "queue_s": 0.0}}


async def answer_nll(client: httpx.AsyncClient, model: str, prompt_ids: list[int], answer_ids: list[int]
                     ) -> float | None:
    """Mean negative log-likelihood per token (nats) of `answer_ids` after `prompt_ids` under the
    engine's model, from its prompt logprobs; None for an empty answer."""
    if not answer_ids:
        return None
    ids = prompt_ids + answer_ids
    r = await client.post("/v1/completions", json={"model": model, "prompt": ids, "max_tokens": 1,
                                                   "temperature": 0.0, "prompt_logprobs": 0})
    if r.status_code != 200:
        raise EngineHttpError(r.status_code, _error_body(r.content))
    at = r.json()["choices"][0]["prompt_logprobs"]
    start = len(prompt_ids)
    return -sum(at[t][str(ids[t])]["logprob"] for t in range(start, len(ids))) / len(answer_ids)
