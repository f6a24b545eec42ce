"""Append a domain-shifted burst to a live traffic log: the demo's code, French and Spanish requests
only, as if the served model's users had moved. For trying the drift watch (docs/operations.md).

    python scripts/shift_traffic.py LOG [--n 300] [--source conf/traffic/demo.jsonl] [--seed 0]

Appends whole lines (each ends with a newline), with fresh ids and timestamps, in one write.
Drift on SmolLM2 from such a mix: ~0.05 against the 0.03 threshold (bench/drift_scores.py).
"""

from __future__ import annotations

import argparse
import json
import random
from datetime import UTC, datetime
from pathlib import Path

DEMO = Path(__file__).resolve().parents[1] / "conf" / "traffic" / "demo.jsonl"


def shifted(source: Path) -> list[dict]:
    out = []
    for line in source.read_bytes().splitlines():
        try:
            row = json.loads(line)
            labels = row.get("labels") or {}
        except (ValueError, AttributeError):  # the demo's deliberately bad lines (JSON, UTF-8)
            continue
        if labels.get("domain") == "code" or labels.get("lang") in ("fr", "es"):
            out.append(row)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("log", type=Path)
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--source", type=Path, default=DEMO)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    pool = shifted(args.source)
    if not pool:
        raise SystemExit(f"{args.source}: no code / fr / es requests to draw from")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    rows = random.Random(args.seed).choices(pool, k=args.n)
    text = "".join(json.dumps({**r, "id": f"shift-{now}-{i:05d}", "ts": now}) + "\n"
                   for i, r in enumerate(rows))
    with args.log.open("a", encoding="utf-8") as f:
        f.write(text)
    print(f"appended {args.n} code / fr / es requests to {args.log}")


if __name__ == "__main__":
    main()
