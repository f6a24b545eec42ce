"""Quantize 2-bit variants on the config's model and calibration traffic, outside the flow, and
score perplexity against the baseline on the held-out traffic (per slice) and on the GPL-3 text.

For method work (issue 4's step table, issue 10's Hessian correction, issue 14's block tuning): one
process, a chosen thread count, a variant given as its conf mapping, so one setting can be changed at
a time. The traffic and model are prepared as the flow prepares them (the same folders under
--state-dir, so a finished run's are reused).

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
from quantgate.tasks.evaluate.long_context import CORPUS_DIR, block_nlls
from quantgate.tasks.evaluate.perplexity import evaluate_checkpoint
from quantgate.tasks.model.load import load_causal_lm, load_tokenizer
from quantgate.tasks.model.source import resolve_model
from quantgate.tasks.quantize.run import VARIANT_RECORD, quantize_variant
from quantgate.tasks.traffic.prepare import prepare_traffic

GPL3_WINDOW = 512


def gpl3_ppl(checkpoint: str) -> float:
    """Perplexity of /usr/share/common-licenses/GPL-3, in windows of 512 tokens: a public corpus
    anyone can score on (the licence text is the same on every Debian system)."""
    import math

    tokenizer = load_tokenizer(checkpoint)
    ids = tokenizer((CORPUS_DIR / "GPL-3").read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]
    model = load_causal_lm(checkpoint, "float32")
    nll = tokens = 0.0
    for doc, start in enumerate(range(0, len(ids) - 1, GPL3_WINDOW)):
        for block in block_nlls(model, ids[start : start + GPL3_WINDOW + 1], GPL3_WINDOW, doc):
            nll, tokens = nll + block.nll, tokens + block.tokens
    return math.exp(nll / tokens)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help="variant mappings as JSON, as in conf `variants:`")
    ap.add_argument("--state-dir", type=Path, default=Path(".quantgate"))
    ap.add_argument("--out", type=Path, default=Path("bench-twobit"), help="checkpoints and evals")
    ap.add_argument("--config", default=None, help="eval, calibration settings (default: conf/default.yaml)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tasks", action="store_true",
                    help="also the config's lm-eval tasks; recovery = variant's metric / baseline's")
    args = ap.parse_args()
    conf = load_config(args.config)
    torch.set_num_threads(args.threads)
    traffic = prepare_traffic(conf.traffic, args.state_dir / "traffic")
    heldout, calibration = traffic.heldout_path, traffic.calibration_path
    model_path = resolve_model(conf.model.name, args.state_dir / "models").path

    def evaluate(path: str, name: str):  # the run's own eval settings
        return evaluate_checkpoint(path, heldout, str(args.out / f"{name}-eval.json"),
                                   window=conf.eval.window, batch_size=conf.eval.batch_size,
                                   dtype=conf.eval.dtype)

    def task_metrics(path: str, name: str) -> dict[str, float]:
        if not args.tasks:
            return {}
        from quantgate.tasks.evaluate.lmeval import read_lmeval, run_lmeval

        out = args.out / f"{name}-lmeval"
        if (out / "lmeval.json").is_file():  # written last: a finished evaluation (the baseline's, reused)
            return read_lmeval(str(out / "lmeval.json")).metrics
        return run_lmeval(path, str(out), tasks=list(conf.lmeval.tasks),
                          replay_path=heldout, replay_size=conf.lmeval.replay_size,
                          batch_size=conf.lmeval.batch_size, dtype=conf.eval.dtype).metrics

    base = evaluate(model_path, "baseline")
    base_tasks = task_metrics(model_path, "baseline")
    base_gpl3 = gpl3_ppl(model_path)
    print(f"baseline PPL {base.ppl:.3f} on {base.tokens} tokens; GPL-3 {base_gpl3:.3f}", flush=True)
    for mapping in args.variants:
        spec = variant_spec(json.loads(mapping))
        res = quantize_variant(spec, model_path=model_path, calibration_path=calibration,
                               out_dir=str(args.out / spec.name), max_seq_len=conf.calibration.max_seq_len,
                               threads=args.threads)
        ev = evaluate(res.checkpoint, spec.name)
        gpl3 = gpl3_ppl(res.checkpoint)
        tasks = task_metrics(res.checkpoint, spec.name)
        recovery = {k: round(v / base_tasks[k], 3) if base_tasks.get(k) else None for k, v in tasks.items()}
        notes = json.loads((Path(res.checkpoint) / VARIANT_RECORD).read_text())["notes"]
        slices = sorted(((s.ppl / base.slices[k].ppl, k) for k, s in ev.slices.items()
                         if k in base.slices and s.tokens >= conf.eval.min_slice_tokens), reverse=True)
        losses = {n: v["proxy_loss"] for n, v in notes.get("per_layer", {}).items() if "proxy_loss" in v}
        worst_layers = sorted(losses.items(), key=lambda kv: -kv[1])[:3]
        print(json.dumps({
            "variant": spec.name, "ppl": round(ev.ppl, 3), "ratio": round(ev.ppl / base.ppl, 3),
            "gpl3_ppl": round(gpl3, 3), "gpl3_ratio": round(gpl3 / base_gpl3, 3),
            "worst_slices": [(k, round(r, 2)) for r, k in slices[:3]], "quantize_s": round(res.seconds),
            "notes": {k: v for k, v in notes.items() if k != "per_layer"},
            "worst_layers": [(n, round(loss, 4)) for n, loss in worst_layers],
            "tasks": {k: round(v, 3) for k, v in tasks.items()}, "task_recovery": recovery,
        }), flush=True)


if __name__ == "__main__":
    main()
