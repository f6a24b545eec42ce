"""Next-token KL divergence of a variant from the baseline on the held-out traffic, without holding
both models at once. The baseline's evaluation records, at every scored position, its top-k
next-token log-probabilities; a variant's evaluation reads them back and computes
KL(P_baseline ‖ P_variant) over those k tokens plus one bucket for all the others.

Coarsening a distribution can only lose divergence (the data-processing inequality), so this is a
lower bound on the full-vocabulary KL; with k = 32 the bucket holds a few percent of the baseline's
mass on this traffic. KL sees what accuracy hides: a quantized model can keep its accuracy while
its distributions, and many answers, move (Dutta et al., "Accuracy is Not All You Need",
arXiv 2407.09141).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

TOP_K = 32


def coarse_kl(ref_idx: torch.Tensor, ref_logp: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL per position ([N]) between the reference's top-k (+ rest) distribution and the one
    `logits` ([N, V]) gives over the same k tokens (+ rest)."""
    logq = F.log_softmax(logits.float(), dim=-1).gather(1, ref_idx.long())  # [N, k]
    p = ref_logp.float().exp()
    p_rest = (1 - p.sum(1)).clamp_min(1e-12)
    q_rest = (1 - logq.exp().sum(1)).clamp_min(1e-12)
    return (p * (ref_logp.float() - logq)).sum(1) + p_rest * (p_rest.log() - q_rest.log())


class TopKRecorder:
    """Collects the baseline's top-k log-probabilities, position by position, in request order."""

    def __init__(self, positions: int, k: int = TOP_K) -> None:
        self.idx = np.zeros((positions, k), dtype=np.int32)
        self.logp = np.zeros((positions, k), dtype=np.float32)

    def __call__(self, request: int, offset: int, logits: torch.Tensor) -> None:
        values, idx = F.log_softmax(logits.float(), dim=-1).topk(self.idx.shape[1], dim=-1)
        self.idx[offset: offset + len(idx)] = idx.numpy()
        self.logp[offset: offset + len(idx)] = values.numpy()

    def save(self, path: str) -> None:
        save_topk(path, self.idx, self.logp)


def save_topk(path: str, idx: np.ndarray, logp: np.ndarray) -> None:
    """A top-k record, written whole or not at all (two evaluations may race to write the same)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(f"{path}.{os.getpid()}.partial")
    with open(tmp, "wb") as f:  # np.savez would append ".npz" to a name without it
        np.savez_compressed(f, idx=idx, logp=logp)
    tmp.replace(path)


class KlMeter:
    """Sums each request's coarse KL against a recorded reference."""

    def __init__(self, reference_path: str, requests: int) -> None:
        with np.load(reference_path) as ref:
            self.idx, self.logp = torch.from_numpy(ref["idx"]), torch.from_numpy(ref["logp"])
        self.per_request = [0.0] * requests

    def __call__(self, request: int, offset: int, logits: torch.Tensor) -> None:
        n = len(logits)
        if offset + n > len(self.idx):
            raise ValueError("the reference holds fewer scored positions than this evaluation: "
                             "not the same held-out set or tokenizer")
        kl = coarse_kl(self.idx[offset: offset + n], self.logp[offset: offset + n], logits)
        self.per_request[request] += float(kl.double().sum())
