"""Compare PII detectors on bench/pii/labelled.jsonl: recall, false positives, speed.

    python bench/pii/compare.py [-v]     # after python bench/pii/make_labelled.py; -v lists misses

(a) the redactor's regexes before this change (frozen below), (b) Presidio's pattern recognizers
(pip install presidio-analyzer; each recognizer's analyze() is called with nlp_artifacts=None, so no
spaCy model is needed), (c) phonenumbers' PhoneNumberMatcher (phones only), (d) the redactor now.
Recall: share of labelled spans fully covered by a detection of the same kind. False positives:
detections in look-alike texts plus detections overlapping no labelled span in PII texts.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

from quantgate.tasks.traffic import redact as new

ROWS = [json.loads(line) for line in Path(__file__).with_name("labelled.jsonl").open(encoding="utf-8")]
KINDS = new.KINDS


# ---- (a) tasks/traffic/redact.py at 713ae27: these patterns, re.sub'd in this order on the running text
def _old_card(m: re.Match) -> bool:
    digits = [int(c) for c in reversed(re.sub(r"\D", "", m[0]))]
    luhn = sum(v if i % 2 == 0 else (2 * v - 9 if v > 4 else 2 * v) for i, v in enumerate(digits))
    return 13 <= len(digits) <= 19 and luhn % 10 == 0


_O, _E = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)", r"(?!\w|[.,-]\d)"
OLD_RULES = [
    ("api_key", r"\bsk-[A-Za-z0-9_-]{20,}|\bAKIA[0-9A-Z]{16}\b|\bghp_[A-Za-z0-9]{36}\b", None),
    ("api_key", r"\b(?P<keep>[Bb]earer\s+)(?=[\w.~+/=-]*\d)[\w.~+/=-]{16,}", None),
    ("email", r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+"
              r"@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b", None),
    ("card", r"(?<![\w+.,-])(?:\d{3,6}(?:[ -]\d{3,6}){1,5}|\d{13,19})" + _E, _old_card),
    ("ip", rf"(?<![\w.]){_O}(?:\.{_O}){{3}}(?!\w|\.\d)", None),
    ("phone", r"(?<![\w+])\+\d{1,3}(?:[ .-]?(?:\(\d{1,4}\)|\d{1,4})){2,6}(?!\w)",
     lambda m: 8 <= len(re.sub(r"\D", "", m[0])) <= 15),
    ("phone", r"\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}" + _E
              + r"|(?<![\w.,-])\d{3}(?P<sep>[.-])\d{3}(?P=sep)\d{4}" + _E, None),
    ("phone", r"(?<![\w.,+-])0[1-9](?P<sep>[ .])\d{2}(?:(?P=sep)\d{2}){3}(?!\w|[ .,-]\d)", None),
]
OLD_RULES = [(kind, re.compile(p), check) for kind, p, check in OLD_RULES]


def old_redact(text: str) -> str:  # the old redact() loop, verbatim in effect
    for kind, p, check in OLD_RULES:
        def repl(m: re.Match, kind=kind, check=check) -> str:
            keep = m["keep"] if "keep" in m.re.groupindex else ""
            return m[0] if check and not check(m) else keep + new.PLACEHOLDERS[kind]

        text = p.sub(repl, text)
    return text


def old_spans(text: str) -> list:  # the same, but the spans it replaces (new._scan runs rules the same way)
    finders = [(kind, new._regex(p, check)) for kind, p, check in OLD_RULES]
    return new._scan(text, finders)[1]


# ---- (b) Presidio's predefined pattern recognizers (it has none for API keys)
def presidio_detector(threshold: float):
    import tldextract  # EmailRecognizer validates domains with it: use its bundled suffix list, no network
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        EmailRecognizer,
        IpRecognizer,
        PhoneRecognizer,
    )

    tldextract.extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
    recs = {"email": EmailRecognizer(), "phone": PhoneRecognizer(), "card": CreditCardRecognizer(),
            "ip": IpRecognizer()}
    return lambda text: [(r.start, r.end, kind) for kind, rec in recs.items()
                         for r in rec.analyze(text, entities=rec.supported_entities, nlp_artifacts=None)
                         if r.score >= threshold]


# ---- (c) phonenumbers alone: every match in any of these default regions
def phonenumbers_detector(leniency, regions=("US", "FR", "ES", "GB", "DE")):
    import phonenumbers

    return lambda text: [(m.start, m.end, "phone") for reg in regions
                         for m in phonenumbers.PhoneNumberMatcher(text, reg, leniency=leniency)]


def evaluate(detect) -> tuple[Counter, Counter, Counter, float, list]:
    total, hit, fp, misses = Counter(), Counter(), Counter(), []
    start = time.perf_counter()
    found = [detect(r["text"]) for r in ROWS]
    secs = (time.perf_counter() - start) * 1000 / len(ROWS)
    for row, dets in zip(ROWS, found, strict=True):
        for (s, e, kind), fmt in zip(row["spans"], row["formats"], strict=False):
            total[kind] += 1
            if any(k == kind and ds <= s and de >= e for ds, de, k in dets):
                hit[kind] += 1
            else:
                misses.append((kind, "missed " + fmt, row["text"][s:e], row["text"]))
        for ds, de, k in set(dets):  # a span found in several regions counts once
            if not any(ds < e and s < de for s, e, _ in row["spans"]):
                fp[k] += 1
                misses.append((k, "FP in " + row["formats"][0], row["text"][ds:de], row["text"]))
    return total, hit, fp, secs, misses


def main() -> None:
    import phonenumbers

    pii = [r for r in ROWS if r["spans"]]
    print(f"{len(ROWS)} texts: {len(pii)} with {sum(len(r['spans']) for r in pii)} PII spans in "
          f"{len({f for r in pii for f in r['formats']})} formats, {len(ROWS) - len(pii)} look-alikes in "
          f"{len({r['formats'][0] for r in ROWS if not r['spans']})} categories")
    assert all(new._render(r["text"], old_spans(r["text"]))[0] == old_redact(r["text"]) for r in ROWS)
    lenient = phonenumbers.Leniency
    detectors = {"(a) old regexes (HEAD)": (old_spans, KINDS),
                 "(b) presidio, score>=0.4": (presidio_detector(0.4), ("email", "phone", "card", "ip"))}
    detectors |= {f"(c) phonenumbers {lv}": (phonenumbers_detector(getattr(lenient, lv)), ("phone",))
                  for lv in ("POSSIBLE", "VALID", "STRICT_GROUPING")}
    detectors["(d) redact() now"] = (new.pii_spans, KINDS)
    print(f"{'recall, false positives':34}" + "".join(f"{k:>14}" for k in (*KINDS, "all")) + "  s/1000 texts")
    for name, (detect, kinds) in detectors.items():
        total, hit, fp, secs, misses = evaluate(detect)
        cells = [f"{hit[k] / total[k]:.3f} {fp[k]:>4}" if k in kinds else "—" for k in KINDS]
        n_hit, n_fp = sum(hit[k] for k in kinds), sum(fp[k] for k in kinds)
        cells.append(f"{n_hit / sum(total[k] for k in kinds):.3f} {n_fp:>4}")
        print(f"{name:34}" + "".join(f"{c:>14}" for c in cells) + f"{secs:8.2f}")
        for m in misses if "-v" in sys.argv else []:
            if m[0] in kinds:
                print("      ", *m[1:])
    print("labelled spans per kind:", dict(evaluate(old_spans)[0]))
    for blob in ("a" * 200_000, "1" * 200_000, "a." * 100_000, "x@" + "a." * 100_000, "+1 " * 60_000,
                 "sk-" * 70_000, "+33 6 12 34 56 78 " * 10_000):  # long tokens: no quadratic backtracking
        times = []
        for f in (old_spans, new.pii_spans):
            start = time.perf_counter()
            f(blob)
            times.append(time.perf_counter() - start)
        print(f"long text {blob[:8]!r}... ({len(blob)} chars): old {times[0]:.3f}s, new {times[1]:.3f}s")


if __name__ == "__main__":
    main()
