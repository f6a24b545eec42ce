"""Quality bounds of the PII redactor on the labelled set bench/pii/labelled.jsonl.

The set and the comparison with Presidio / phonenumbers: bench/pii/make_labelled.py, bench/pii/compare.py.
Measured there: recall 1.000 for every kind and 0 false positives (566 spans, 378 look-alikes);
the bounds below leave a little room, they are quality floors, not timings.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from quantgate.tasks.traffic.redact import KINDS, pii_spans, redact

LABELLED = Path(__file__).resolve().parents[3] / "bench" / "pii" / "labelled.jsonl"
ROWS = [json.loads(line) for line in LABELLED.open(encoding="utf-8")]


def _measure() -> tuple[Counter, Counter, list]:
    total, hit, false_pos = Counter(), Counter(), []
    for row in ROWS:
        found = pii_spans(row["text"])
        for s, e, kind in row["spans"]:
            total[kind] += 1
            hit[kind] += any(k == kind and ds <= s and de >= e for ds, de, k in found)
        false_pos += [(row["text"], row["text"][ds:de]) for ds, de, _ in found
                      if not any(ds < e and s < de for s, e, _ in row["spans"])]
    return total, hit, false_pos


def test_labelled_set_is_big_and_varied():
    pii = [r for r in ROWS if r["spans"]]
    assert sum(len(r["spans"]) for r in pii) >= 300 and len(ROWS) - len(pii) >= 300
    assert len({f for r in pii for f in r["formats"]}) >= 10
    assert {k for r in pii for _, _, k in r["spans"]} == set(KINDS)


def test_recall_and_false_positives_on_labelled_set():
    total, hit, false_pos = _measure()
    for kind in KINDS:
        assert hit[kind] / total[kind] >= 0.98, (kind, hit[kind], total[kind])
    assert sum(hit.values()) / sum(total.values()) >= 0.995
    assert len(false_pos) <= 2, false_pos


@pytest.mark.parametrize("row", ROWS[::7], ids=lambda r: r["formats"][0])
def test_labelled_rows_redact_idempotently(row):
    once = redact(row["text"])
    assert sum(once.counts.values()) == len(pii_spans(row["text"]))
    again = redact(once.text)
    assert again.text == once.text and sum(again.counts.values()) == 0
