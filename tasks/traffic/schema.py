"""The traffic-log record (DESIGN.md "Traffic log"): the shape an OpenAI-compatible gateway logs.

A message (of the request or the served response) carries `content`, or `tool_calls` whose
`function.arguments` are JSON text; either way it becomes text (`Message.text`), which is redacted
like everything else that is written.

Extra fields are allowed (gateways add their own); the fields we use are typed strictly.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

NonEmpty = Annotated[StrictStr, Field(min_length=1)]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class FunctionCall(_Open):
    name: NonEmpty
    arguments: StrictStr  # JSON text, as OpenAI sends it


class ToolCall(_Open):
    function: FunctionCall


class Message(_Open):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: NonEmpty | None = None
    tool_calls: Annotated[list[ToolCall], Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _says_something(self) -> Message:
        if self.content is None and self.tool_calls is None:
            raise ValueError("needs `content` or `tool_calls`")
        return self

    def text(self) -> str:
        """The content, or the tool calls as one JSON object per line (what the model produced)."""
        if self.content is not None:
            return self.content
        return "\n".join(json.dumps({"name": c.function.name, "arguments": c.function.arguments},
                                    ensure_ascii=False) for c in self.tool_calls or [])


class RequestBody(_Open):
    model: StrictStr | None = None
    messages: Annotated[list[Message], Field(min_length=1)] | None = None
    prompt: NonEmpty | None = None
    max_tokens: StrictInt | None = None

    @model_validator(mode="after")
    def _one_prompt(self) -> RequestBody:
        if self.messages is None and self.prompt is None:
            raise ValueError("needs `messages` (chat) or `prompt` (completions)")
        if self.messages is not None and not any(m.role == "user" for m in self.messages):
            raise ValueError("messages: no user message")
        return self


class Choice(_Open):
    message: Message | None = None
    text: NonEmpty | None = None

    @property
    def content(self) -> str | None:
        return self.message.text() if self.message is not None else self.text


class ResponseBody(_Open):
    choices: Annotated[list[Choice], Field(min_length=1)]

    @model_validator(mode="after")
    def _has_answer(self) -> ResponseBody:
        if self.choices[0].content is None:
            raise ValueError("choices[0] has neither message.content nor text")
        return self


class Labels(_Open):
    domain: NonEmpty | None = None
    lang: NonEmpty | None = None


class TrafficRecord(_Open):
    id: NonEmpty
    ts: datetime
    tenant: NonEmpty
    request: RequestBody
    response: ResponseBody
    latency_ms: Annotated[float, Field(ge=0)] | None = None
    labels: Labels | None = None

    def prompt_messages(self) -> list[dict[str, str]]:
        if self.request.messages is not None:
            return [{"role": m.role, "content": m.text()} for m in self.request.messages]
        return [{"role": "user", "content": self.request.prompt or ""}]

    def answer(self) -> str:
        return self.response.choices[0].content or ""
