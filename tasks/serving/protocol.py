"""The OpenAI-compatible request and response shapes, and the errors a client gets for bad input.

Requests are validated by pydantic models that mirror the fields the OpenAI API documents for
`/v1/chat/completions` and `/v1/completions`; fields we accept but do not act on (`user`, `n` = 1,
`presence_penalty`, ...) are allowed, unknown ones are ignored as the OpenAI API does. Every refusal
is an `ApiError`: an HTTP status and the OpenAI error body `{"error": {"message", "type", "param",
"code"}}`, so an OpenAI client raises its usual `BadRequestError` / `NotFoundError`.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)  # strict: "max_tokens": "5" is a type error
    model: str
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] = 0.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    stream: bool = False
    stop: str | list[str] | None = None
    seed: int | None = None
    n: Literal[1] = 1
    user: str | None = None  # also the sticky-routing key: one user's requests stay on one arm
    stream_options: dict[str, Any] | None = None  # {"include_usage": true}: a last chunk with usage


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    role: Literal["system", "user", "assistant", "developer"]
    content: str


class ChatRequest(_Request):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]


class CompletionRequest(_Request):
    prompt: str


def _float_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """JSON has one number type: `"temperature": 0` is a valid float, though strict mode says int."""
    return {k: float(v) if k in ("temperature", "top_p") and type(v) is int else v for k, v in raw.items()}


def parse_request(body: bytes, kind: Literal["chat", "completion"]) -> ChatRequest | CompletionRequest:
    try:
        raw = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = ChatRequest if kind == "chat" else CompletionRequest
    try:
        return model.model_validate(_float_fields(raw))
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise ApiError(400, f"{param}: {first['msg']}", param=param) from None


@dataclass(frozen=True)
class Prompt:
    """What a replica generates from: chat messages or raw text, the limits already checked."""
    kind: Literal["chat", "completion"]
    messages: list[dict[str, str]] | None
    text: str | None
    max_tokens: int
    temperature: float
    top_p: float
    stop: list[str]
    seed: int | None


def to_prompt(req: ChatRequest | CompletionRequest, *, default_max_tokens: int, max_max_tokens: int,
              max_prompt_chars: int) -> Prompt:
    if isinstance(req, ChatRequest):
        chars = sum(len(m.content) for m in req.messages)
        if not any(m.content.strip() for m in req.messages):
            raise ApiError(400, "messages: every message is empty", param="messages")
    else:
        chars = len(req.prompt)
        if not req.prompt.strip():
            raise ApiError(400, "prompt: the prompt is empty", param="prompt")
    if chars > max_prompt_chars:
        raise ApiError(400, f"the prompt has {chars} characters, more than this server's "
                       f"{max_prompt_chars}", param="messages" if isinstance(req, ChatRequest) else "prompt",
                       code="context_length_exceeded")
    if req.max_tokens is not None and req.max_tokens > max_max_tokens:
        raise ApiError(400, f"max_tokens: {req.max_tokens} is more than this server's {max_max_tokens}",
                       param="max_tokens")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    return Prompt(kind="chat" if isinstance(req, ChatRequest) else "completion",
                  messages=[m.model_dump() for m in req.messages] if isinstance(req, ChatRequest) else None,
                  text=req.prompt if isinstance(req, CompletionRequest) else None,
                  max_tokens=req.max_tokens or default_max_tokens, temperature=req.temperature,
                  top_p=req.top_p, stop=stop, seed=req.seed)


def completion_body(kind: str, model: str, text: str, finish: str, prompt_tokens: int,
                    completion_tokens: int) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
    if kind == "chat":
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    return {"id": f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}",
            "object": "chat.completion" if kind == "chat" else "text_completion",
            "created": int(time.time()), "model": model, "choices": [choice],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def chunk_body(kind: str, model: str, chunk_id: str, delta: str | None, finish: str | None,
               first: bool) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
    if kind == "chat":
        choice["delta"] = ({"role": "assistant", "content": delta or ""} if first
                           else ({"content": delta} if delta else {}))
    else:
        choice["text"] = delta or ""
    return {"id": chunk_id, "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
            "created": int(time.time()), "model": model, "choices": [choice]}


def usage_body(kind: str, model: str, chunk_id: str, prompt_tokens: int, completion_tokens: int
               ) -> dict[str, Any]:
    """A stream's last chunk when the client asked for `stream_options.include_usage`: no choices."""
    return {"id": chunk_id, "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
            "created": int(time.time()), "model": model, "choices": [],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def prompt_token_ids(tokenizer: Any, p: Prompt) -> list[int]:
    """The token ids a model is asked to continue: the chat template with the generation prompt, or
    the raw text (the old generation loop and the likelihood judge's scoring read the same ids)."""
    if p.messages is not None:
        ids = tokenizer.apply_chat_template(p.messages, add_generation_prompt=True, return_dict=False)
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)
    return list(tokenizer(p.text)["input_ids"])
