"""Loading checkpoints the same way everywhere: baseline and every variant, same dtype."""

from __future__ import annotations

import os
from typing import Any

import torch

EVAL_DTYPE = torch.float32


def set_threads(num_cpus: float) -> None:
    """Match torch's intra-op threads to the CPUs this task was given."""
    n = max(1, int(num_cpus))
    torch.set_num_threads(n)
    os.environ["OMP_NUM_THREADS"] = str(n)


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def load_causal_lm(path: str) -> torch.nn.Module:
    """Any checkpoint transformers reads (plain or compressed-tensors), fp32, eval mode."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=EVAL_DTYPE)
    model.eval()
    return model
