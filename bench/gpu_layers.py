"""Decode time per token of a SmolLM2-shaped model whose Linears are dense bf16, QuIP# (E8P + RHT)
or AQLM 2x8, with random weights and codes (speed depends on the shapes, not on trained values), and
the RHT's two paths: log2(n) butterfly stages against one matmul by the cached Hadamard matrix.

    python bench/gpu_layers.py [--device cuda|cpu] [--layers 30] [--out gpu_layers.json]

Each model decodes 32 tokens after a 64-token prompt at batch 1 and 32, KV cache on, median of
`--repeats`; CUDA-synchronized wall time. The prompt's logits are taken at its last position only,
as generation does (the 49k-row head over 32 × 64 positions was most of the CPU dry run's time).
`--device cpu --layers 1 --new-tokens 4` is the dry run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from quantgate.kernels import hadamard
from quantgate.kernels.codebook_linear import AqlmLinear, QuipLinear

PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def smollm2_shaped(layers: int) -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
                         num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def with_codebook_layers(model: LlamaForCausalLM, kind: str) -> LlamaForCausalLM:
    """Every projection of every block replaced by a codebook layer of the same shape, random codes."""
    gen = torch.Generator().manual_seed(1)
    for block in model.model.layers:
        for name in PROJECTIONS:
            parent_name, attr = name.split(".")
            parent = getattr(block, parent_name)
            old = getattr(parent, attr)
            n, m = old.in_features, old.out_features
            if kind == "quip":
                new = QuipLinear(n, m)
                codes = torch.randint(-(1 << 15), 1 << 15, (m, n // 8), dtype=torch.int16, generator=gen)
                new.qidxs.copy_(codes)
                new.SU.copy_(torch.randint(0, 2, (n,), generator=gen) * 2 - 1)
                new.SV.copy_(torch.randint(0, 2, (m,), generator=gen) * 2 - 1)
                new.Wscale.fill_(0.02)
            else:
                new = AqlmLinear(n, m, rotated=kind == "aqlm_rht")
                if new.rotated:
                    new.SU.copy_(torch.randint(0, 2, (n,), generator=gen) * 2 - 1)
                    new.SV.copy_(torch.randint(0, 2, (m,), generator=gen) * 2 - 1)
                codes = torch.randint(-128, 128, new.codes.shape, dtype=torch.int8, generator=gen)
                new.codes.data.copy_(codes)
                new.codebooks.data.copy_(torch.randn(new.codebooks.shape, generator=gen) * 0.05)
            setattr(parent, attr, new.to(old.weight.device))
    return model


@torch.no_grad()
def tpot_ms(model: LlamaForCausalLM, batch: int, device: str, repeats: int, new_tokens: int = 32) -> float:
    gen = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, model.config.vocab_size, (batch, 64), generator=gen).to(device)
    times = []
    for _ in range(repeats + 1):  # the first one warms up (Triton compiles, caches fill)
        out = model(prompt, use_cache=True, logits_to_keep=1)
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(new_tokens):
            out = model(nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / new_tokens * 1e3)
    return statistics.median(times[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--out", type=Path, default=Path("gpu_layers.json"))
    args = ap.parse_args()
    if args.new_tokens < 1:
        ap.error("--new-tokens: decode at least one token")
    dtype = torch.bfloat16
    rows = []
    dense_max = hadamard.DENSE_FWHT_MAX
    for kind, fwht_max in (("dense", None), ("quip", 0), ("quip", dense_max), ("aqlm", None),
                           ("aqlm_rht", None)):
        model = smollm2_shaped(args.layers).to(args.device, dtype)
        if kind != "dense":
            model = with_codebook_layers(model, kind)
        hadamard.DENSE_FWHT_MAX = dense_max if fwht_max is None else fwht_max
        path = {"dense": "bf16 nn.Linear", "aqlm": "AQLM 2x8 codes",
                "aqlm_rht": "AQLM 2x8 codes, rotated (RHT as one matmul)"}.get(
            kind, "QuIP# E8P, RHT " + ("as one matmul" if fwht_max else "in butterfly stages"))
        for batch in (1, 32):
            ms = tpot_ms(model, batch, args.device, args.repeats, args.new_tokens)
            rows.append({"model": kind, "path": path, "batch": batch, "tpot_ms": round(ms, 2),
                         "tokens_per_s": round(batch * 1e3 / ms, 1)})
            print(json.dumps(rows[-1]), flush=True)
        del model
    hadamard.DENSE_FWHT_MAX = dense_max
    args.out.write_text(json.dumps({"layers": args.layers, "device": args.device,
                                    "new_tokens": args.new_tokens, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
