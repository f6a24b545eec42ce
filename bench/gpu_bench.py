"""The GPU benchmark, one prepared script: baseline, FP8 W8A8, INT4 and the 2-bit variants on one GPU.

    python bench/gpu_bench.py --baseline DIR --variant fp8_w8a8=DIR --variant int4_gptq=DIR \\
        --variant quip_sharp_2bit=DIR --variant aqlm_2x8=DIR --heldout HELDOUT.jsonl \\
        [--batch 1,32] [--out gpu_bench.json] [--device cpu]   # --device cpu: the dry run

Decode tokens/s at batch 1 and 32 (and TTFT, TPOT, peak memory) through `tasks.perf.bench`, the same
harness as `quantgate bench`, and J/token from NVML's total-energy counter (Zeus, or pynvml
directly) over the steady decode window. Every model in one process, interleaved rounds, medians.
Writes a JSON with the date, the GPU's name, driver, and the clocks and power limit it read (never
set: this script changes no GPU setting). `--device cpu` runs the same path on CPU with the
estimated meter, to test the script before spending GPU time.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path


def gpu_facts() -> dict[str, object]:
    """What the GPU reports about itself: read only."""
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    name = pynvml.nvmlDeviceGetName(h)
    facts: dict[str, object] = {"gpu": name.decode() if isinstance(name, bytes) else name,
                                "driver": str(pynvml.nvmlSystemGetDriverVersion())}
    for key, call in (("power_limit_w", lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000),
                      ("sm_clock_max_mhz", lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)),
                      ("mem_clock_max_mhz",
                       lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM))):
        try:
            facts[key] = call()
        except pynvml.NVMLError as exc:  # e.g. not supported under MIG: say so, do not guess
            facts[key] = f"unavailable: {exc}"
    return facts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True)
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--heldout", required=True, help="held-out traffic JSONL (the prompts)")
    ap.add_argument("--batch", default="1,32")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--out", type=Path, default=Path("gpu_bench.json"))
    args = ap.parse_args()
    sizes = tuple(int(b) for b in args.batch.split(","))
    paths = {"baseline": args.baseline} | dict(v.split("=", 1) for v in args.variant)
    bench_on_device(paths, heldout=args.heldout, device=args.device, sizes=sizes, new_tokens=args.new_tokens,
                    repeats=args.repeats, out=args.out)


def bench_on_device(paths: dict[str, str], *, heldout: str, device: str, sizes: tuple[int, ...],
                    new_tokens: int, repeats: int, out: Path) -> None:
    """Decode speed and energy of `paths` (name -> checkpoint) on `device`; the JSON at `out`."""
    from quantgate.conf.schema import BenchConf
    from quantgate.tasks.perf.bench import bench_table, run_bench

    gpu = device == "cuda"
    conf = BenchConf(device=device, batch_sizes=sizes, gate_batch=sizes[0], prompt_tokens=64,
                     new_tokens=new_tokens, repeats=repeats, bf16_baseline=not gpu,
                     energy=("nvml",) if gpu else ("rapl", "estimated"),
                     hardware="h200" if gpu else "cpu-epyc-2core")
    report = run_bench(conf, paths, heldout_path=heldout, out_path=str(out))
    data = json.loads(out.read_text())
    data["date"] = datetime.date.today().isoformat()
    data["device"] = gpu_facts() if gpu else {"cpu": report.machine}
    out.write_text(json.dumps(data, indent=1))
    print(bench_table(report))
    print(f"energy: {report.energy_method} ({report.energy_detail}); JSON: {out}")


if __name__ == "__main__":
    main()
