"""Drift scores on SmolLM2: how far resamples of the demo traffic sit from its calibration, and how far
a domain-shifted mix does; the gap is where `drift.threshold` (conf/operations.py) goes.

    python bench/drift_scores.py [--state .quantgate] [--samples 64]

Each window is prepared as the drift watch prepares it (redaction, quarantine, the same stratified
calibration sample) and calibrated on the same model; prints one line per window.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from quantgate.conf.load import load_config
from quantgate.tasks.calibrate.stats import calibrate_file, calibration_drift
from quantgate.tasks.model.source import resolve_model
from quantgate.tasks.traffic.prepare import prepare_traffic


def _stats(model_path: str, traffic_conf, path: Path, work: Path, max_seq_len: int) -> str:
    prepared = prepare_traffic(traffic_conf.model_copy(update={"path": path}), work / "traffic")
    out = work / "calib" / path.stem
    return calibrate_file(model_path, prepared.calibration_path, str(out), max_seq_len=max_seq_len,
                          top_k=8).stats_path


def _labels(line: bytes) -> dict[str, str]:
    try:
        return json.loads(line).get("labels") or {}
    except (ValueError, AttributeError):  # the demo's deliberately bad lines
        return {}


def _windows(lines: list[bytes], size: int, work: Path) -> dict[str, Path]:
    def write(name: str, chosen: list[bytes]) -> Path:
        (p := work / f"{name}.jsonl").write_bytes(b"".join(chosen))
        return p

    labels = [_labels(ln) for ln in lines]
    shifted = [ln for ln, lab in zip(lines, labels, strict=True)
               if lab.get("domain") == "code" or lab.get("lang") in ("fr", "es")]
    out = {f"resample seed {s}": write(f"resample{s}", random.Random(s).sample(lines, size))
           for s in (1, 2, 3)}
    out["code + fr/es only"] = write("shifted", random.Random(4).choices(shifted, k=size))
    half = random.Random(5).sample(lines, size // 2) + random.Random(6).choices(shifted, k=size - size // 2)
    out["half demo, half code + fr/es"] = write("half", half)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--state", type=Path, default=Path(".quantgate"))
    args = p.parse_args()
    config = load_config(None)
    model = resolve_model(config.model.name, args.state.resolve() / "models")
    lines = config.traffic.path.read_bytes().splitlines(keepends=True)
    size = round(1.25 * (config.traffic.calibration_size + config.traffic.heldout_size))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        t = time.perf_counter()
        seq = config.calibration.max_seq_len
        reference = _stats(model.path, config.traffic, config.traffic.path, work, seq)
        print(f"reference: the demo's calibration sample ({time.perf_counter() - t:.0f} s)")
        for name, path in _windows(lines, size, work).items():
            t = time.perf_counter()
            stats = _stats(model.path, config.traffic, path, work, seq)
            drift = calibration_drift(reference, stats)
            print(f"{name:32} drift {drift:.4f}  ({time.perf_counter() - t:.0f} s)")


if __name__ == "__main__":
    main()
