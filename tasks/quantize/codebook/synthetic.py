"""The baseline's own text as extra distillation data for end-to-end tuning (data-free distillation).

LLM-QAT (Liu et al., arXiv 2305.17888, §2.1) distils a quantized model on sequences that the
full-precision model generates itself: the first token drawn uniformly from the vocabulary, the next
few taken greedily, the rest sampled from the model's softmax. Such text covers what the model knows
beyond the traffic sample (a few dozen chat requests), which is where 2-bit loses its facts; and it
needs no corpus, so nothing from an eval set can leak into it.
"""

from __future__ import annotations

import torch

SYNTHETIC_TOKENS = 128  # per sequence: half the calibration's 256, a step's cost near a traffic one's


def vocabulary_starts(tokenizer) -> list[int]:
    """Token ids a generated sequence may start from: every id but the special ones."""
    special = set(tokenizer.all_special_ids)
    return [i for i in range(len(tokenizer)) if i not in special]


@torch.no_grad()
def teacher_sequences(model: torch.nn.Module, starts: list[int], count: int, length: int, *,
                      greedy_tokens: int = 4, seed: int = 0, batch_size: int = 16) -> list[torch.Tensor]:
    """`count` sequences of `length` tokens ([1, length] each) written by `model` from random starts.

    Seeded: the same model and arguments give the same sequences."""
    generator = torch.Generator().manual_seed(seed)
    pool = torch.tensor(starts)
    device = next(model.parameters()).device
    model.eval()
    out: list[torch.Tensor] = []
    for first in range(0, count, batch_size):
        rows = min(batch_size, count - first)
        ids = pool[torch.randint(len(pool), (rows, 1), generator=generator)]
        step_ids, past = ids.to(device), None
        for position in range(length - 1):
            result = model(input_ids=step_ids, past_key_values=past, use_cache=True)
            past = result.past_key_values
            logits = result.logits[:, -1].float().cpu()
            if position < greedy_tokens:  # LLM-QAT's hybrid: a deterministic opening, then sampling
                chosen = logits.argmax(-1, keepdim=True)
            else:
                chosen = torch.multinomial(logits.softmax(-1), 1, generator=generator)
            ids = torch.cat([ids, chosen], 1)
            step_ids = chosen.to(device)
        out += [row[None] for row in ids]
    return out
