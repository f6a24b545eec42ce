"""The format probe outside the flow: ask the serving engine about each variant's format, on the
config's model and calibration traffic, with this machine's memory of earlier answers left aside,
and time it (one-layer quantizations included; `tasks/engine/probe.py`).

    .venv/bin/python bench/format_probe.py [--config conf/default.yaml] [--cpu 0]

Variants: the config's, plus FP8 W8A8 (a fallback kernel on CPUs without AMX-FP8). Prints each
answer and the wall time; the engine's logs are under a temporary state dir, printed at the end.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--cpu", type=int, default=0, help="the core this process runs on")
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.cpu})
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="probe-memory-")  # nothing remembered

    from quantgate.conf.load import load_config
    from quantgate.conf.methods import variant_spec
    from quantgate.tasks.engine.probe import probe_candidates, probe_formats
    from quantgate.tasks.model.source import resolve_model
    from quantgate.tasks.traffic.prepare import prepare_traffic

    config = load_config(args.config) if args.config else load_config()
    state = config.runtime.state_dir.resolve()
    model = resolve_model(config.model.name, state / "models")
    traffic = prepare_traffic(config.traffic, state / "traffic")
    specs = probe_candidates([*config.variants, variant_spec({"name": "fp8_w8a8", "method": "fp8_w8a8"})])
    out = Path(tempfile.mkdtemp(prefix="format-probe-"))
    started = time.perf_counter()
    answers = probe_formats(specs, model_path=model.path, model_digest=model.digest,
                            calibration_path=traffic.calibration_path, engine=config.engine,
                            state_dir=str(out))
    seconds = time.perf_counter() - started
    for name, answer in answers.items():
        print(answer.line(name)[:300])
    print(f"\n{len(specs)} formats in {seconds:.1f} s on core {args.cpu}; engine logs: {out / 'engine-logs'}")


if __name__ == "__main__":
    main()
