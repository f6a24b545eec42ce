"""A small client for an OpenAI-compatible chat endpoint: the judge's only way out.

Timeouts, connection errors, 5xx/429 and bodies that are not a chat completion are retried
with exponential backoff; after the last try the call returns a `JudgeCall` carrying the
error instead of raising, so one bad judgment never stops a run. The API key is read from
the environment variable named in conf and is never logged or written anywhere.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from quantgate.conf.settings import secret_from_env


@dataclass(frozen=True)
class JudgeCall:
    content: str | None
    logprobs: dict | None
    error: str = ""
    attempts: int = 1
    seconds: float = 0.0


class Chat(Protocol):
    """What the judge needs of an endpoint: `ChatEndpoint` (HTTP) or an actor proxy."""

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int = ..., schema: dict | None = ...,
             logprobs: bool = ...) -> JudgeCall: ...


@dataclass(frozen=True)
class ChatEndpoint:
    base_url: str  # ".../v1"
    model: str
    api_key_env: str | None  # these three from JudgeConf (None: no key): no second default here
    timeout_s: float
    retries: int
    backoff_s: float = 1.0

    def _headers(self) -> dict[str, str]:
        key = secret_from_env(self.api_key_env) if self.api_key_env else None
        return {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int = 16,
             schema: dict | None = None, logprobs: bool = True) -> JudgeCall:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": 0,
                                "max_tokens": max_tokens, "seed": 0}
        if logprobs:
            body |= {"logprobs": True, "top_logprobs": 10}  # a 1-5 grade needs five digits
        if schema is not None:
            # llama.cpp's server reads `schema` here; OpenAI's reads json_schema. Both: harmless.
            body["response_format"] = {"type": "json_object", "schema": schema}
        start = time.perf_counter()
        error = ""
        for attempt in range(1, self.retries + 2):
            try:
                with httpx.Client(timeout=self.timeout_s, headers=self._headers()) as http:
                    resp = http.post(f"{self.base_url.rstrip('/')}/chat/completions", json=body)
                if resp.status_code == 429 or resp.status_code >= 500:
                    error = f"HTTP {resp.status_code}"
                elif resp.status_code >= 400:
                    # A request the server rejects will be rejected again: no retry.
                    return JudgeCall(None, None, f"HTTP {resp.status_code}: {resp.text[:200]}",
                                     attempt, time.perf_counter() - start)
                else:
                    choice = resp.json()["choices"][0]
                    content = choice["message"]["content"]
                    if not isinstance(content, str):
                        raise TypeError("message.content is not a string")
                    return JudgeCall(content, choice.get("logprobs"), "", attempt,
                                     time.perf_counter() - start)
            except httpx.TimeoutException:
                error = f"timeout after {self.timeout_s:.0f} s"
            except httpx.TransportError as exc:
                error = f"connection: {type(exc).__name__}"
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                error = f"not a chat completion: {type(exc).__name__}: {str(exc)[:120]}"
            if attempt <= self.retries:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
        return JudgeCall(None, None, error, self.retries + 1, time.perf_counter() - start)
