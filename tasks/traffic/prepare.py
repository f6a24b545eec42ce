"""Traffic log -> calibration and held-out sets on disk, with a quarantine file and a summary.

The output folder is named by the hash of the log, the traffic config and the code that
reads it, so an identical
re-run finds the same files (and every downstream cache key stays the same).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from quantgate.conf.schema import TrafficConf
from quantgate.tasks.runtime.digest import source_digest
from quantgate.tasks.traffic import load as traffic
from quantgate.tasks.traffic import redact, sampling, slices
from quantgate.tasks.traffic import schema as traffic_schema
from quantgate.tasks.traffic.load import load_traffic, write_quarantine, write_requests
from quantgate.tasks.traffic.sampling import stratified_split


def traffic_code_digest() -> str:
    return source_digest(redact, sampling, slices, traffic, traffic_schema, sys.modules[__name__])


@dataclass(frozen=True)
class PreparedTraffic:
    calibration_path: str
    heldout_path: str
    quarantine_path: str
    summary_path: str
    calibration_hash: str
    valid: int
    quarantined: int
    calibration: int
    heldout: int
    pii_redacted: dict[str, int]

    def summary_line(self) -> str:
        return (f"{self.valid} valid, {self.quarantined} quarantined -> {self.quarantine_path}; "
                f"PII redacted: {self.pii_redacted}")


def prepare_traffic(conf: TrafficConf, out_root: Path) -> PreparedTraffic:
    digest = hashlib.sha256(conf.path.read_bytes() if conf.path.is_file() else b"")
    digest.update(conf.model_dump_json().encode())
    digest.update(traffic_code_digest().encode())  # new reading/splitting code: new folder
    out = out_root / digest.hexdigest()[:16]
    summary_path = out / "traffic_summary.json"
    if summary_path.is_file():
        return PreparedTraffic(**json.loads(summary_path.read_text())["prepared"])
    loaded = load_traffic(conf.path, max_line_bytes=conf.max_line_bytes,
                          length_buckets=conf.length_buckets)
    split = stratified_split(loaded.requests, calibration_size=conf.calibration_size,
                             heldout_size=conf.heldout_size, seed=conf.seed)
    out.mkdir(parents=True, exist_ok=True)
    cal, held, quarantine = out / "calibration.jsonl", out / "heldout.jsonl", out / "quarantine.jsonl"
    write_requests(cal, split.calibration)
    write_requests(held, split.heldout)
    write_quarantine(quarantine, loaded.quarantined)
    prepared = PreparedTraffic(
        calibration_path=str(cal), heldout_path=str(held), quarantine_path=str(quarantine),
        summary_path=str(summary_path),
        calibration_hash=hashlib.sha256(cal.read_bytes()).hexdigest()[:16],
        valid=len(loaded.requests), quarantined=len(loaded.quarantined),
        calibration=len(split.calibration), heldout=len(split.heldout), pii_redacted=loaded.pii,
    )
    counts = {key: dict(Counter(r.slices[key] for r in split.heldout))
              for key in ("tenant", "domain", "lang", "length")}
    summary = {"prepared": asdict(prepared), "lines": loaded.lines, "heldout_slices": counts,
               "inferred_labels": sum(bool(r.inferred) for r in loaded.requests),
               "quarantine_reasons": dict(Counter(q.reason.split(":")[0]
                                                  for q in loaded.quarantined))}
    summary_path.write_text(json.dumps(summary, indent=1))
    return prepared
