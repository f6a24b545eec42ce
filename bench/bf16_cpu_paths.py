"""A dequantized FP8 variant's multi-token bf16 Linears on CPU, three ways, against the fp32
baseline: prefill of a 55-token prompt (logits at its last position, as serving takes them) and one
batch-8 decode step after 32-token prompts, through `load_for_speed`, medians of 7 after 3 warm-ups.

The three ways (`kernels/bf16_cpu.Bf16Linear`): torch's bf16 GEMM (oneDNN's where it has bf16
kernels, torch's fallback where it has none: AVX2-only CPUs), fp32 on the whole weight upcast per
call, and fp32 on the weight upcast a block of rows at a time (what runs where oneDNN has no bf16).
Run it on a finished demo's state (one process, nothing beside it: ratios, not absolute times):

    .venv/bin/python bench/bf16_cpu_paths.py --state-dir .quantgate --threads 1
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch
from gpu_kernels import median_ms  # bench/ is on sys.path: this script runs from there

from quantgate.kernels import bf16_cpu
from quantgate.tasks.model.fast_cpu import load_for_speed


def _whole_upcast(x, weight, bias):
    bias = None if bias is None else bias.float()
    return torch.nn.functional.linear(x.float(), weight.float(), bias).to(x.dtype)


def _one(state: Path, pattern: str) -> Path:
    found = sorted(state.glob(pattern))
    if not found:
        raise SystemExit(f"--state-dir {state}: no {pattern} (run `make demo` first, or point at its state)")
    return found[-1]


def _time(model, prompt: torch.Tensor, prompts8: torch.Tensor) -> tuple[float, float]:
    """(prefill ms, batch-8 decode step ms)."""
    prefill = median_ms(lambda: model(input_ids=prompt, use_cache=True, logits_to_keep=1), 7, "cpu")
    out = model(input_ids=prompts8, use_cache=True, logits_to_keep=1)
    nxt = out.logits[:, -1:].argmax(-1)
    step = median_ms(lambda: model(input_ids=nxt, past_key_values=copy.deepcopy(out.past_key_values),
                                   use_cache=True, logits_to_keep=1), 7, "cpu")
    return prefill, step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state-dir", type=Path, default=Path(".quantgate"))
    ap.add_argument("--variant", default="fp8_w8a8", help="a variant whose Linears run in bf16")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, 40000, (1, 55), generator=gen)
    prompts8 = torch.randint(100, 40000, (8, 32), generator=gen)
    chunked, onednn = bf16_cpu.fp32_linear_chunked, bf16_cpu.ONEDNN_BF16
    print(f"oneDNN has bf16 kernels here: {onednn}; {args.threads} thread(s)")
    for name, path, ways in (
            ("baseline fp32", _one(args.state_dir, "models/*"), {"fp32": (onednn, chunked)}),
            (args.variant, _one(args.state_dir, f"variants/{args.variant}-*"),
             {"bf16 GEMM": (True, chunked), "fp32, whole weight upcast": (False, _whole_upcast),
              "fp32, upcast by row blocks": (False, chunked)})):
        model, _ = load_for_speed(str(path))
        with torch.inference_mode():
            for way, (use_bf16_gemm, fp32_path) in ways.items():
                bf16_cpu.ONEDNN_BF16, bf16_cpu.fp32_linear_chunked = use_bf16_gemm, fp32_path
                prefill, step = _time(model, prompt, prompts8)
                print(f"{name:14s} {way:27s} prefill 55 tokens {prefill:7.0f} ms   batch-8 decode step "
                      f"{step:7.1f} ms", flush=True)
        bf16_cpu.ONEDNN_BF16, bf16_cpu.fp32_linear_chunked = onednn, chunked


if __name__ == "__main__":
    main()
