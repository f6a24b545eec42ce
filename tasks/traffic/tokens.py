"""How a traffic request becomes tokens: the model's chat template over prompt + answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quantgate.tasks.traffic.load import Request


@dataclass(frozen=True)
class Encoded:
    input_ids: list[int]
    answer_start: int  # index of the first token of the served answer


def encode_request(tokenizer: Any, request: Request) -> Encoded:
    """Token ids of the whole conversation and where the assistant's answer begins.

    The prompt part is rendered with the generation prompt, so the answer's tokens are
    exactly what the model would be asked to produce.
    """
    prompt = render_chat(tokenizer, request.messages, add_generation_prompt=True)
    full = render_chat(
        tokenizer, [*request.messages, {"role": "assistant", "content": request.answer}],
        add_generation_prompt=False,
    )
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    full_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    start = len(prompt_ids) if full_ids[: len(prompt_ids)] == prompt_ids else _common_prefix(
        prompt_ids, full_ids
    )
    return Encoded(full_ids, start)


def render_chat(tokenizer: Any, messages: list[dict[str, str]], *, add_generation_prompt: bool) -> str:
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )
    # A base model without a chat template: plain "role: content" turns.
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
    return text + ("assistant: " if add_generation_prompt else "")


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
