"""Code updates (PV-tuning's V step) against frozen codes: end-to-end fine-tuning of one saved 2-bit
checkpoint for a fixed number of epochs with each setting, held-out KL to the baseline per token.

The checkpoint is tuned in memory, never written. Settings are `fraction:code_lr[:lr[:sign_lr]]`
(0:0 = frozen codes; lr and sign_lr default to the tuner's):

    .venv/bin/python bench/code_updates.py --state-dir /tmp/qgstate /tmp/bt/aqlm_v5p_300 0:0 0.01:0.02
    .venv/bin/python bench/code_updates.py --state-dir /tmp/qgstate /tmp/bt/quip_3600 0:0 0:0:5e-4:5e-3
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from quantgate.conf.load import load_config
from quantgate.tasks.model.codebook_format import load_codebook_model
from quantgate.tasks.model.load import load_causal_lm, load_tokenizer
from quantgate.tasks.model.source import resolve_model
from quantgate.tasks.quantize.codebook.finetune import finetune_end_to_end
from quantgate.tasks.quantize.run import _calibration_rows
from quantgate.tasks.traffic.prepare import prepare_traffic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", help="a 2-bit checkpoint (quip_sharp_2bit or aqlm_2x8)")
    ap.add_argument("settings", nargs="+",
                    help="fraction:code_lr[:lr[:sign_lr]], e.g. 0.01:0.02; 0:0 keeps codes frozen")
    ap.add_argument("--state-dir", type=Path, default=Path(".quantgate"))
    ap.add_argument("--config", default=None, help="traffic, calibration (default: conf/default.yaml)")
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    conf = load_config(args.config)
    traffic = prepare_traffic(conf.traffic, args.state_dir / "traffic")
    model_path = resolve_model(conf.model.name, args.state_dir / "models").path
    rows = _calibration_rows(load_tokenizer(model_path), traffic.calibration_path, args.samples,
                             conf.calibration.max_seq_len)
    batches = [torch.tensor([row["input_ids"]]) for row in rows]
    teacher = load_causal_lm(model_path)
    for setting in args.settings:
        fraction, code_lr, *rates = (float(x) for x in setting.split(":"))
        given = dict(zip(("lr", "sign_lr"), rates, strict=False))  # unset: the tuner's defaults
        student = load_codebook_model(args.checkpoint, materialize=False)
        started = time.monotonic()
        report = finetune_end_to_end(student, teacher, batches, deadline=started + 24 * 3600,
                                     epochs=args.epochs, code_lr=code_lr, code_fraction=fraction, **given)
        print(json.dumps({"setting": setting, "seconds": round(time.monotonic() - started),
                          **asdict(report)}), flush=True)


if __name__ == "__main__":
    main()
