"""Measure the packaged judge on labelled pairs and planted injections; record the result.

    .venv/bin/python bench/judge_reliability.py [--pairs 100] [--injections 30]

Starts the default profile's judge (local llama.cpp server, Qwen2.5-Coder-1.5B Q4_K_M),
judges pairs whose right answer is known, both orders each, and writes its record (one per
mode) into `conf/evals/judge_reliability.json`, keyed by the judge model's digest and the judge
code's digest: the gate trusts the judge only while both still match what was measured.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from quantgate.conf.evals import RELIABILITY_FILE
from quantgate.tasks.judge.client import ChatEndpoint
from quantgate.tasks.judge.reliability import judge_code_digest, measure_reliability
from quantgate.tasks.judge.server import JUDGE_SHA256, local_judge_server, packaged_judge_gguf


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--injections", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", type=Path, default=Path(".quantgate/models"))
    ap.add_argument("--mode", default="text", choices=["text", "prob", "rubric", "reference"])
    args = ap.parse_args()
    gguf = packaged_judge_gguf(args.cache)
    with tempfile.TemporaryDirectory() as tmp, \
            local_judge_server(gguf, log_path=Path(tmp) / "judge.log", threads=args.threads) as base:
        endpoint = ChatEndpoint(base, "judge", api_key_env=None, timeout_s=120, retries=3)
        out = Path(tmp)
        rel = measure_reliability(endpoint, mode=args.mode, tie_band=0.1,
                                  pairs=args.pairs, injection_pairs=args.injections, out_dir=out)
    record = {"judge_sha256": JUDGE_SHA256, "judge_code": judge_code_digest(args.mode),
              "measured": datetime.now(UTC).strftime("%Y-%m-%d"),
              "machine": "2-core CPU, llama.cpp server, 2 threads", **asdict(rel)}
    # One record per mode: measuring one mode keeps the others'.
    records = json.loads(RELIABILITY_FILE.read_text()) if RELIABILITY_FILE.is_file() else {}
    RELIABILITY_FILE.write_text(json.dumps({**records, args.mode: record}, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
