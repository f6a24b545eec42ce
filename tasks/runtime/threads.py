"""Torch threads matched to the CPUs a task was given."""

from __future__ import annotations

import os

import torch


def set_threads(num_cpus: float) -> int:
    """Set torch's intra-op threads to the whole CPUs of `num_cpus` (at least one); returns them.
    Call it in the thread that computes: OpenMP's thread count is per calling thread."""
    n = max(1, int(num_cpus))
    torch.set_num_threads(n)
    os.environ["OMP_NUM_THREADS"] = str(n)
    return n
