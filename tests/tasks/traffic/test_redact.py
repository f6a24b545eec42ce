"""Tests for quantgate.tasks.traffic.redact (PII redaction)."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest

from quantgate.tasks.traffic.redact import PLACEHOLDERS, cut_redacted, redact

from factories import pii_hits

DEMO = Path(__file__).resolve().parents[3] / "conf" / "traffic" / "demo.jsonl"
KINDS = {"email", "phone", "card", "api_key", "ip"}


@pytest.mark.parametrize(
    "text, kind, expected",
    [
        ("Write to jane.doe@example.com today.", "email", "Write to [EMAIL] today."),
        ("cc: j_smith+news@mail.example.org", "email", "cc: [EMAIL]"),
        ('{"email": "ops@eu.mail.example.co.uk"}', "email", '{"email": "[EMAIL]"}'),
        ("Call +1 415 555 0132 after 5pm.", "phone", "Call [PHONE] after 5pm."),
        ("Call (415) 555-0199.", "phone", "Call [PHONE]."),
        ("Call 415-555-0199 or not.", "phone", "Call [PHONE] or not."),
        ("Call 1-415-555-0199 or not.", "phone", "Call [PHONE] or not."),
        ("Call +1 (415) 555-0199.", "phone", "Call [PHONE]."),
        ("Call +44 (0)20 7946 0958.", "phone", "Call [PHONE]."),
        ("Appelez le +33 6 12 34 56 78 demain.", "phone", "Appelez le [PHONE] demain."),
        ("Appelez le 06 12 34 56 78.", "phone", "Appelez le [PHONE]."),
        ("Llame al +34 612 345 678.", "phone", "Llame al [PHONE]."),
        ("Paid with 4111 1111 1111 1111.", "card", "Paid with [CARD]."),
        ("Paid with 4111-1111-1111-1111, exp 09/28.", "card", "Paid with [CARD], exp 09/28."),
        ("Paid with 4111111111111111", "card", "Paid with [CARD]"),
        ("Amex 3782 822463 10005 on file", "card", "Amex [CARD] on file"),
        ("key=sk-a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6", "api_key", "key=[API_KEY]"),
        (
            "OPENAI_API_KEY=sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34",
            "api_key",
            "OPENAI_API_KEY=[API_KEY]",
        ),
        ("aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "api_key", "aws_access_key_id = [API_KEY]"),
        ("token ghp_" + "aB3" * 12 + " expired", "api_key", "token [API_KEY] expired"),
        (
            "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.Zm9vYmFy123",
            "api_key",
            "Authorization: Bearer [API_KEY]",
        ),
        ("ssh to 10.1.2.3 please", "ip", "ssh to [IP] please"),
        ("The gateway is 192.168.0.14.", "ip", "The gateway is [IP]."),
        ("listen on 172.16.254.1:8080", "ip", "listen on [IP]:8080"),
    ],
)
def test_each_kind_replaced_and_counted(text, kind, expected):
    r = redact(text)
    assert r.text == expected
    assert r.counts[kind] == 1
    assert sum(r.counts.values()) == 1


@pytest.mark.parametrize(
    "text",
    [
        "She bought 12 apples for 3 dollars.",
        "1500 + 250 = 1750. The answer is 1750.",
        "First find the cost: 4 × 11 = 44. Then 50 - 44 = 6. The answer is 6.",
        "5+3=8 and 16 ÷ 4 = 4; it costs 340 € with 10 % off.",
        "In 2026 the price went from 1,299.99 to $1,349.00 (about 12.400 or 12 400 units).",
        "Upgrade to Python 3.11.7 or 3.12.1; Windows build 10.0.19045.3803.",
        "Not IPs: 1.2.3.4.5, 256.1.1.1, 10.1.2.300",
        "ts 2026-11-28T10:00:00Z, logged at 2026-11-28 14:05:00",
        "Order #48213 and ticket #674892 are linked; INV-20224 is due 2026-12-20.",
        "Card-like but fails Luhn: 4111 1111 1111 1112 and 1234567890123456.",
        "pi is 3.14159265358979 and the id is 12345678901",
        "latency_ms 812 with 120 prompt tokens and 80 completion tokens",
        "A bus travels at 45 km/h for 2 hours: 45 × 2 = 90 km.",
        "Bearer of bad news; sk-learn is a typo; task-abcdefghijklmnopqrstuvwxyz is fine.",
        "+250 points, -40.0 degrees, 98.6 F",
        "Names and addresses are not redacted: Jane Doe, 12 Main Street, Springfield.",
        "Retina assets logo@2x.png and icon@3x.webp; sk-learn-compatible-estimators-api.",
        "IMEI 356938035643809, ISBN 9783064061569, SIRET 73282932000074 pass Luhn but are no cards.",
    ],
)
def test_ordinary_text_survives_unchanged(text):
    r = redact(text)
    assert r.text == text
    assert sum(r.counts.values()) == 0


def test_mixed_text_order_card_before_phone():
    text = (
        "Email jane.doe@example.com, phone +1 415 555 0132, card 4111 1111 1111 1111, "
        "key sk-abcdefghijklmnopqrstuvwxyz012345, host 10.0.0.7."
    )
    r = redact(text)
    assert r.text == "Email [EMAIL], phone [PHONE], card [CARD], key [API_KEY], host [IP]."
    assert r.counts == {"email": 1, "phone": 1, "card": 1, "api_key": 1, "ip": 1}


def test_counts_multiple_and_result_shape():
    r = redact("a@example.com b@example.org 10.1.2.3 10.1.2.4")
    assert set(r.counts) == KINDS
    assert r.counts["email"] == 2 and r.counts["ip"] == 2 and r.counts["card"] == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.text = "x"  # type: ignore[misc]
    assert redact("").text == ""


def test_idempotent():
    once = redact("mail jane.doe@example.com card 4111-1111-1111-1111 ip 10.1.2.3").text
    again = redact(once)
    assert again.text == once and sum(again.counts.values()) == 0


@pytest.mark.timeout(60)  # the speed itself is measured by bench/pii/compare.py
def test_long_tokens_are_fast():
    # e.g. base64 blobs in prompts: the patterns must not backtrack quadratically
    for blob in ("a" * 200_000, "1" * 200_000, "a." * 100_000, "x@" + "a." * 100_000, "sk-" * 70_000):
        assert redact(blob).text == blob
    assert redact("+33 6 12 34 56 78 " * 10_000).counts["phone"] == 10_000


@pytest.mark.parametrize(
    "text, expected",
    [
        ("+33 6 12 34 56 78 (415) 555-3004", "[PHONE] [PHONE]"),  # the intl pattern used to eat "(415)"
        ("Call +33 6 12 34 56 78 415-555-3004.", "Call [PHONE] [PHONE]."),
        ("+1 415 555 0132 +44 20 7946 0958", "[PHONE] [PHONE]"),
        ("+1 415 555 0132 415-555-0199", "[PHONE] [PHONE]"),
        ('{"phone": "+34 612 345 678 +49 30 123456"}', '{"phone": "[PHONE] [PHONE]"}'),
        ("+33 6 12 34 56 78 06 12 34 56 79", "[PHONE] [PHONE]"),
        ("jane@example.com +33 6 12 34 56 78", "[EMAIL] [PHONE]"),
    ],
)
def test_two_numbers_in_a_row_are_two_placeholders(text, expected):
    r = redact(text)
    assert r.text == expected
    assert sum(r.counts.values()) == 2


@pytest.mark.parametrize(
    "text, max_chars, expected",
    [
        ("call [PHONE] now", 8, "call "),  # the cut falls inside [PHONE]: drop it whole
        ("call [PHONE] now", 11, "call "),
        ("call [PHONE] now", 12, "call [PHONE]"),
        ("call [PHONE] now", 13, "call [PHONE] "),
        ("call [PHONE] now", 100, "call [PHONE] now"),
        ("hello world", 5, "hello"),
        ("[EMAIL]", 3, ""),
        ("[IP] [CARD]", 7, "[IP] "),
        ("a [b] c [EMAIL]", 10, "a [b] c "),
        ("see [1] and [2", 13, "see [1] and ["),  # brackets that are no placeholder are plain text
        ("anything", 0, ""),
        ("", 5, ""),
    ],
)
def test_cut_redacted(text, max_chars, expected):
    assert cut_redacted(text, max_chars) == expected


def test_cut_redacted_never_splits_a_placeholder():
    text = redact("Mail jane.doe@example.com, call +1 415 555 0132, card 4111 1111 1111 1111, "
                  "key sk-abcdefghijklmnopqrstuvwxyz012345 from 10.0.0.7.").text
    partials = {p[:i] for p in PLACEHOLDERS.values() for i in range(1, len(p))}
    for n in range(len(text) + 2):
        cut = cut_redacted(text, n)
        assert len(cut) <= n and text.startswith(cut)
        assert not any(cut.endswith(p) for p in partials), (n, cut)
        assert len(cut) >= n - max(map(len, PLACEHOLDERS.values())) + 1 or len(cut) == len(text)


# ---------------------------------------------------------------- demo traffic log
NO_PII_DOMAINS = ("math", "code", "summarize")  # the generator never puts PII in these answers


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def _answer(rec: dict) -> str | None:
    try:
        choice = rec["response"]["choices"][0]
        return choice["message"]["content"] if "message" in choice else choice["text"]
    except (KeyError, IndexError, TypeError):
        return None


def test_demo_traffic_fully_redacted():
    assert DEMO.exists(), f"missing {DEMO} (run scripts/make_demo_traffic.py)"
    totals, before = Counter(), Counter()
    leaks = []
    for lineno, raw in enumerate(DEMO.read_bytes().splitlines(), 1):
        line = raw.decode("utf-8", errors="replace")
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            obj = line  # malformed line: redact it as plain text
        for s in _strings(obj):
            before.update(kind for kind, _ in pii_hits(s))
            r = redact(s)
            totals.update(r.counts)
            leaks += [(lineno, kind, m) for kind, m in pii_hits(r.text)]
        # responses of domains that never carry PII must come through untouched
        if isinstance(obj, dict) and (obj.get("labels") or {}).get("domain") in NO_PII_DOMAINS:
            answer = _answer(obj)
            if isinstance(answer, str):
                assert redact(answer).text == answer, f"line {lineno}: false positive in {answer!r}"
    assert not leaks, f"PII survived redaction: {leaks[:10]}"
    for kind in KINDS:  # every kind is planted: the detectors and the redactor must see it
        assert before[kind] >= 10, f"the test's own {kind} detector found only {before[kind]}"
        assert totals[kind] >= 10, f"only {totals[kind]} {kind} redactions in the demo log"
