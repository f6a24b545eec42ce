"""Quantize 2-bit variants on a finished run's model and calibration traffic, outside the flow,
and score perplexity on its held-out traffic against the baseline, per slice.

For method work (issue 4's step table, issue 10's Hessian correction): one process, a chosen thread
count, a variant given as its conf mapping, so one setting can be changed at a time.

    .venv/bin/python bench/twobit_ppl.py --threads 2 \\
        '{"name": "quip_noft", "method": "quip_sharp_2bit", "num_samples": 64, "finetune_epochs": 0}'
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from quantgate.conf.load import load_config
from quantgate.conf.methods import variant_spec
from quantgate.tasks.evaluate.perplexity import evaluate_checkpoint
from quantgate.tasks.quantize.run import VARIANT_RECORD, quantize_variant
from quantgate.tasks.registry.run_record import read_run_record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help="variant mappings as JSON, as in conf `variants:`")
    ap.add_argument("--state-dir", type=Path, default=Path(".quantgate"))
    ap.add_argument("--run", default=None, help="flow run id (default: the newest finished run)")
    ap.add_argument("--out", type=Path, default=Path("bench-twobit"), help="checkpoints and evals")
    ap.add_argument("--config", default=None, help="eval, calibration settings (default: conf/default.yaml)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    conf = load_config(args.config)
    torch.set_num_threads(args.threads)
    record = read_run_record(args.state_dir, args.run)
    heldout = record["heldout_path"]
    calibration = str(Path(heldout).with_name("calibration.jsonl"))  # prepare writes both side by side

    def evaluate(path: str, name: str):  # the run's own eval settings
        return evaluate_checkpoint(path, heldout, str(args.out / f"{name}-eval.json"),
                                   window=conf.eval.window, batch_size=conf.eval.batch_size,
                                   dtype=conf.eval.dtype)

    base = evaluate(record["model"]["path"], "baseline")
    print(f"baseline PPL {base.ppl:.3f} on {base.tokens} tokens", flush=True)
    for mapping in args.variants:
        spec = variant_spec(json.loads(mapping))
        res = quantize_variant(spec, model_path=record["model"]["path"], calibration_path=calibration,
                               out_dir=str(args.out / spec.name), max_seq_len=conf.calibration.max_seq_len,
                               threads=args.threads)
        ev = evaluate(res.checkpoint, spec.name)
        notes = json.loads((Path(res.checkpoint) / VARIANT_RECORD).read_text())["notes"]
        slices = sorted(((s.ppl / base.slices[k].ppl, k) for k, s in ev.slices.items()
                         if k in base.slices and s.tokens >= conf.eval.min_slice_tokens), reverse=True)
        losses = {n: v["proxy_loss"] for n, v in notes.get("per_layer", {}).items() if "proxy_loss" in v}
        worst_layers = sorted(losses.items(), key=lambda kv: -kv[1])[:3]
        print(json.dumps({
            "variant": spec.name, "ppl": round(ev.ppl, 3), "ratio": round(ev.ppl / base.ppl, 3),
            "worst_slices": [(k, round(r, 2)) for r, k in slices[:3]], "quantize_s": round(res.seconds),
            "notes": {k: v for k, v in notes.items() if k != "per_layer"},
            "worst_layers": [(n, round(loss, 4)) for n, loss in worst_layers],
        }), flush=True)


if __name__ == "__main__":
    main()
