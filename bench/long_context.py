"""The long-context probe on a finished run's checkpoints, outside the flow: long-document perplexity
by position and passkey retrieval at the served context, each variant gated against the baseline
with the run's `long_ppl` checks (conf/quality.yaml runs the same probe inside the flow).

    .venv/bin/python bench/long_context.py kv_fp8 fp8_w8a8 [--context 8192] [--documents 1]

Checkpoints are found by variant name under the run's state dir (the newest run's record).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from quantgate.conf.load import load_config
from quantgate.tasks.evaluate.long_context import run_long_context
from quantgate.tasks.gate.decide import rel
from quantgate.tasks.gate.evidence import perplexity_checks
from quantgate.tasks.registry.run_record import read_run_record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--state-dir", type=Path, default=Path(".quantgate"))
    ap.add_argument("--context", type=int, default=8192)
    ap.add_argument("--documents", type=int, default=1)
    ap.add_argument("--depths", default="0.1,0.5,0.9")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("bench-long"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gate = load_config().gate
    record = read_run_record(args.state_dir, None)
    paths = {"baseline": record["model"]["path"]}
    for name in args.variants:
        if name not in record["checkpoints"]:
            raise SystemExit(f"{name}: no checkpoint in the newest run under {args.state_dir}; it has "
                             f"{sorted(record['checkpoints'])}")
        paths[name] = record["checkpoints"][name]
    depths = tuple(float(d) for d in args.depths.split(","))
    results = {}
    for name, path in paths.items():
        results[name] = r = run_long_context(path, str(args.out / f"{name}-{args.context}.json"),
                                             context=args.context, documents=args.documents, block=256,
                                             depths=depths)
        print(json.dumps({"model": name, "context": args.context, "ppl": round(r.perplexity.ppl, 4),
                          "by_position": {k: round(s.ppl, 4) for k, s in r.perplexity.slices.items()},
                          "passkeys": r.passkeys, "kv_cache_quantized_layers":
                          r.perplexity.kv_cache_quantized_layers, "cpu_s": round(r.cpu_seconds)}), flush=True)
    base = results.pop("baseline")
    for name, r in results.items():
        for c in perplexity_checks(base.perplexity, r.perplexity, gate, min_tokens=256, metric="long_ppl"):
            i = c.interval
            print(f"{name:16s} {c.key:22s} {rel(i.estimate)} [{rel(i.low)}, {rel(i.high)}] n={i.n} "
                  f"p_beyond={i.p_beyond:.4f}")


if __name__ == "__main__":
    main()
