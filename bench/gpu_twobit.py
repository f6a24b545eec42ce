"""Issue 14's GPU check, one prepared script: QuIP# and AQLM quantized on the GPU, the Triton decode
kernels against the PyTorch reference, and decode timed at batch 1 and 32.

    python bench/gpu_twobit.py [--budget 300] [--out gpu_twobit] [--device cpu]   # cpu: the dry run

1. Quantizes SmolLM2 with `quip_sharp_2bit` and `aqlm_2x8` through `quantize_variant`, the code the
   flow runs, with `resources.num_gpus: 1` (layer loop, Hessians, block and end-to-end tuning on
   CUDA), and scores perplexity on the default config's held-out traffic against the baseline.
2. Every quantized Linear of both checkpoints through the kernel path the device picks (Triton on
   CUDA) and through the reference, at 1 and 32 tokens: the largest relative error.
3. Decode tokens/s (and TTFT, TPOT, memory, J/token) at batch 1 and 32 through `gpu_bench`.
Reads the GPU's clocks and power limit, never sets them. `--device cpu` runs every step on the CPU
(the fast path stands in for Triton), with a small budget, to test the script before GPU time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from gpu_bench import bench_on_device  # noqa: E402

from quantgate.conf.load import load_config  # noqa: E402
from quantgate.conf.methods import variant_spec  # noqa: E402
from quantgate.kernels.aqlm_ops import aqlm_decode_matmul, aqlm_decode_matmul_reference  # noqa: E402
from quantgate.kernels.codebook_linear import AqlmLinear, QuipLinear  # noqa: E402
from quantgate.kernels.quip_ops import e8p_decode_matmul, e8p_decode_matmul_reference  # noqa: E402
from quantgate.tasks.evaluate.perplexity import evaluate_checkpoint  # noqa: E402
from quantgate.tasks.model.codebook_format import load_codebook_model  # noqa: E402
from quantgate.tasks.model.source import resolve_model  # noqa: E402
from quantgate.tasks.quantize.run import VARIANT_RECORD, quantize_variant  # noqa: E402


@torch.no_grad()
def kernel_parity(checkpoint: str, device: str) -> dict[str, float]:
    """Largest relative error, kernel path vs reference, over every codebook layer, at 1 and 32 tokens."""
    model = load_codebook_model(checkpoint, materialize=False).to(device)
    worst: dict[str, float] = {}
    gen = torch.Generator(device=device).manual_seed(0)
    for module in model.modules():
        if not isinstance(module, QuipLinear | AqlmLinear):
            continue
        for tokens in (1, 32):
            x = torch.randn(tokens, module.in_features, device=device, generator=gen)
            if isinstance(module, QuipLinear):
                fast = e8p_decode_matmul(x, module.qidxs, module.codebook)
                ref = e8p_decode_matmul_reference(x, module.qidxs, module.codebook)
            else:
                fast = aqlm_decode_matmul(x, module.codes, module.codebooks, module.scales)
                ref = aqlm_decode_matmul_reference(x, module.codes, module.codebooks, module.scales)
            err = float((fast.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-12))
            key = f"{type(module).__name__}@{tokens}"
            worst[key] = max(worst.get(key, 0.0), err)
    return worst


def _stage(result: dict[str, object], key: str, fn, t0: float):
    """One stage; its failure is recorded with its reason and the rest still runs (GPU time is scarce)."""
    started = time.perf_counter()
    print(f"[{time.perf_counter() - t0:6.0f}s] {key} ...", flush=True)
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 - report and go on: one failure must not cost the others
        value = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=8)}
        print(value["traceback"], flush=True)
    print(f"[{time.perf_counter() - t0:6.0f}s] {key}: {json.dumps(value)[:2000]} "
          f"({time.perf_counter() - started:.0f} s)", flush=True)
    result[key] = value
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=300, help="time_budget_s of each 2-bit variant")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--model", help="a catalogue name, .gguf or model dir (default: the config's)")
    ap.add_argument("--smoke", action="store_true", help="a tiny random Llama instead (tests/factories.py)")
    ap.add_argument("--calibration", help="calibration JSONL (default: prepared from the config's traffic)")
    ap.add_argument("--heldout", help="held-out JSONL (default: prepared from the config's traffic)")
    ap.add_argument("--state-dir", type=Path, default=Path(".quantgate"))
    ap.add_argument("--out", type=Path, default=Path("gpu_twobit"))
    args = ap.parse_args()
    if bool(args.calibration) != bool(args.heldout):
        ap.error("--calibration and --heldout go together (or neither: the config's traffic is prepared)")
    if args.smoke and args.model:
        ap.error("--smoke builds its own tiny model: drop --model")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: run with --device cpu for the dry run")
    t0 = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    conf = load_config(None)
    if args.calibration:  # with --heldout: checked above
        calibration, heldout = args.calibration, args.heldout
    else:
        from quantgate.tasks.traffic.prepare import prepare_traffic  # redaction needs phonenumbers

        traffic = prepare_traffic(conf.traffic, args.state_dir / "traffic")
        calibration, heldout = traffic.calibration_path, traffic.heldout_path
    if args.smoke:
        sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
        from factories import tiny_llama

        model_path = str(tiny_llama(args.out / "tiny", hidden=96))
    else:
        model_path = resolve_model(args.model or conf.model.name, args.state_dir / "models").path
    gpus = 1 if args.device == "cuda" else 0
    result: dict[str, object] = {"device": args.device, "budget_s": args.budget, "model": model_path,
                                 "torch": torch.__version__,
                                 "gpu": torch.cuda.get_device_name(0) if gpus else None}
    print(f"[{time.perf_counter() - t0:6.0f}s] model ready: {model_path}", flush=True)

    def ppl(path: str, name: str) -> float:
        return evaluate_checkpoint(path, heldout, str(args.out / f"{name}-eval.json"),
                                   window=conf.eval.window, batch_size=conf.eval.batch_size).ppl

    _stage(result, "baseline_ppl", lambda: ppl(model_path, "baseline"), t0)
    paths = {"baseline": model_path}
    for method in ("quip_sharp_2bit", "aqlm_2x8"):
        spec = variant_spec({"name": method, "method": method, "time_budget_s": args.budget,
                             "resources": {"num_cpus": 8, "num_gpus": gpus, "memory_gb": 32}})

        def run(spec=spec, method=method) -> dict[str, object]:
            started = time.perf_counter()
            res = quantize_variant(spec, model_path=model_path, calibration_path=calibration,
                                   out_dir=str(args.out / method), max_seq_len=conf.calibration.max_seq_len,
                                   threads=torch.get_num_threads())
            notes = json.loads((Path(res.checkpoint) / VARIANT_RECORD).read_text())["notes"]
            paths[method] = res.checkpoint
            return {"quantize_s": round(time.perf_counter() - started, 1), "ppl": ppl(res.checkpoint, method),
                    "cut_layers": len(notes.get("cut_layers", [])),
                    "notes": {k: v for k, v in notes.items() if not isinstance(v, list | dict)},
                    "kernel_vs_reference": kernel_parity(res.checkpoint, args.device)}

        _stage(result, method, run, t0)
        (args.out / "gpu_twobit.json").write_text(json.dumps(result, indent=1))
    _stage(result, "decode_bench", lambda: bench_on_device(
        paths, heldout=heldout, device=args.device, sizes=(1, 32), new_tokens=32, repeats=2,
        out=args.out / "decode_bench.json") or "decode_bench.json", t0)
    result["total_s"] = round(time.perf_counter() - t0, 1)
    (args.out / "gpu_twobit.json").write_text(json.dumps(result, indent=1))
    failed = [key for key, value in result.items() if isinstance(value, dict) and "error" in value]
    print(f"[{result['total_s']:6.0f}s] done: {args.out / 'gpu_twobit.json'}"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
