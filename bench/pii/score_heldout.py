"""Score the redactor on bench/pii/heldout.jsonl, a held-out set: written once, as data, by a script
that never saw the redactor nor labelled.jsonl (the set the redactor was tuned on), so its score is not
in-sample. 489 texts, 297 PII values in 33 formats, 274 look-alike texts in 25 categories.

    python bench/pii/score_heldout.py [path.jsonl]

Uses only the redactor's public functions. Recall per kind: share of labelled spans fully covered by a
detected span of the same kind. False positives: detected spans in texts without PII, plus detected spans in
PII texts that overlap no labelled span (a span found twice counts once). Every miss and every false positive
is printed, with the text as redact() leaves it.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from quantgate.tasks.traffic.redact import pii_spans, redact

KINDS = ("email", "phone", "card", "api_key", "ip")


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    path = Path(args[0]) if args else Path(__file__).with_name("heldout.jsonl")
    rows = [json.loads(line) for line in path.open(encoding="utf-8")]
    total, hit, fp, fp_cat = Counter(), Counter(), Counter(), Counter()
    fmt_total, fmt_hit = Counter(), Counter()
    misses, fps, partial, confused = [], [], Counter(), Counter()
    texts_with_fp = 0
    for row in rows:
        text = row["text"]
        dets = sorted({(s, e, k) for s, e, k in pii_spans(text)})
        fmts = row.get("formats") or [""] * max(1, len(row["spans"]))
        for (s, e, kind), fmt in zip(row["spans"], fmts, strict=False):
            total[kind] += 1
            fmt_total[fmt] += 1
            if any(k == kind and ds <= s and de >= e for ds, de, k in dets):
                hit[kind] += 1
                fmt_hit[fmt] += 1
                continue
            over = [(ds, de, k) for ds, de, k in dets if ds < e and s < de]
            if any(k == kind for *_, k in over):
                partial[kind] += 1
            for *_, k in over:
                if k != kind:
                    confused[(kind, k)] += 1
            misses.append((kind, fmt, text[s:e], over, text))
        row_fp = [(ds, de, k) for ds, de, k in dets if not any(ds < e and s < de for s, e, _ in row["spans"])]
        texts_with_fp += bool(row_fp) and not row["spans"]
        for ds, de, k in row_fp:
            fp[k] += 1
            fp_cat[fmts[0] if not row["spans"] else "in a PII text"] += 1
            fps.append((k, fmts[0] if not row["spans"] else "PII text", text[ds:de], (ds, de), text))

    pii = [r for r in rows if r["spans"]]
    n_look = len(rows) - len(pii)
    print(f"{path}: {len(rows)} texts, {len(pii)} with {sum(total.values())} PII spans, {n_look} without PII")
    print(f"{'':10}{'spans':>7}{'found':>7}{'recall':>8}{'FP':>5}")
    for k in (*KINDS, "all"):
        t = sum(total.values()) if k == "all" else total[k]
        h = sum(hit.values()) if k == "all" else hit[k]
        f = sum(fp.values()) if k == "all" else fp[k]
        print(f"{k:10}{t:>7}{h:>7}{h / t if t else 0:>8.3f}{f:>5}")
    print(f"look-alike texts with at least one detection: {texts_with_fp}/{n_look}")
    if partial or confused:
        print("missed spans overlapped by a same-kind detection (partial):", dict(partial),
              "| by another kind (labelled, detected):", dict(confused))
    print("\nrecall per format:")
    for fmt in sorted(fmt_total):
        print(f"  {fmt:28}{fmt_hit[fmt]:>4}/{fmt_total[fmt]:<4}")
    print("\nfalse positives per source:", dict(fp_cat.most_common()))
    print(f"\nMISSES ({len(misses)}):")
    for _kind, fmt, value, over, text in misses:
        got = ", ".join(f"{k} {text[ds:de]!r}" for ds, de, k in over) or "nothing"
        print(f"- [{fmt}] {value!r} (detected: {got})")
        print(f"    text: {text!r}\n    redacted: {redact(text).text!r}")
    print(f"\nFALSE POSITIVES ({len(fps)}):")
    for kind, src, value, (ds, de), text in fps:
        print(f"- [{kind} in {src}] {value!r} at {ds}:{de}")
        print(f"    text: {text!r}\n    redacted: {redact(text).text!r}")


if __name__ == "__main__":
    main()
