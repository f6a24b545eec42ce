"""Quality bounds of the PII redactor on two labelled sets.

- bench/pii/labelled.jsonl, the set the redactor was tuned on (bench/pii/make_labelled.py; the comparison
  with Presidio and phonenumbers is bench/pii/compare.py): recall 1.000 for every kind, 0 false positives
  (566 spans, 378 look-alikes). In-sample: a ceiling.
- bench/pii/heldout.jsonl, written blind to the redactor (bench/pii/score_heldout.py): recall 0.993
  (295 / 297; the misses are two AWS secret access keys), 6 false positives in 274 look-alike texts
  (git@host remotes, systemd unit@instance names, four-part versions read as IPs).

The bounds are the measured levels with a little room: quality floors, not timings.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from quantgate.tasks.traffic.redact import KINDS, pii_spans, redact

PII_SETS = Path(__file__).resolve().parents[3] / "bench" / "pii"


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (PII_SETS / name).open(encoding="utf-8")]


ROWS = _rows("labelled.jsonl")


def _measure(rows: list[dict]) -> tuple[Counter, Counter, list]:
    total, hit, false_pos = Counter(), Counter(), []
    for row in rows:
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
    total, hit, false_pos = _measure(ROWS)
    for kind in KINDS:
        assert hit[kind] / total[kind] >= 0.98, (kind, hit[kind], total[kind])
    assert sum(hit.values()) / sum(total.values()) >= 0.995
    assert len(false_pos) <= 2, false_pos


def test_recall_and_false_positives_on_the_held_out_set():
    total, hit, false_pos = _measure(_rows("heldout.jsonl"))
    assert sum(total.values()) >= 250
    for kind in KINDS:
        assert hit[kind] / total[kind] >= 0.94, (kind, hit[kind], total[kind])
    assert sum(hit.values()) / sum(total.values()) >= 0.99
    assert len(false_pos) <= 6, false_pos


@pytest.mark.parametrize("row", ROWS[::7], ids=lambda r: r["formats"][0])
def test_labelled_rows_redact_idempotently(row):
    once = redact(row["text"])
    assert sum(once.counts.values()) == len(pii_spans(row["text"]))
    again = redact(once.text)
    assert again.text == once.text and sum(again.counts.values()) == 0
