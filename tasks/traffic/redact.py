"""Regex PII redactor for traffic logs (stdlib only).

Replaces, with typed placeholders, and counts per kind:

  email    [EMAIL]    jane.doe@example.com
  api_key  [API_KEY]  sk-... (20+ chars, incl. sk-proj-...), AKIA + 16 [0-9A-Z] (AWS),
                      ghp_ + 36 alnum (GitHub), and the token of "Bearer <token>"
  card     [CARD]     13-19 digits, contiguous or in groups separated by spaces/dashes,
                      that pass the Luhn check (other long numbers are left alone)
  ip       [IP]       IPv4 dotted quads, every octet 0-255 ("3.11.7", "1.2.3.4.5" are not IPs)
  phone    [PHONE]    international "+<cc> ..." (8-15 digits: +1 415 555 0132, +33 6 12 34 56 78),
                      US "(415) 555-0199" / "415-555-0199" / "415.555.0199",
                      FR "06 12 34 56 78" / "06.12.34.56.78"

Patterns run in a fixed order (api_key, email, card, ip, phone) so that a key or card
is never half-eaten by a later, looser pattern.

Not covered: personal names, postal addresses, dates of birth, IBANs / bank accounts,
national ID numbers, IPv6, passwords or other free-form secrets, US phones written
with spaces only ("415 555 0199"), FR phones without separators. Ordinary numbers --
quantities, arithmetic, years, prices like 1,299.99, versions like 3.11.7, ISO
timestamps, order numbers like #48213 -- are left untouched. Known false positives:
a 13-19 digit number (or a list of 3-6 digit groups) that happens to pass Luhn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KINDS = ("email", "phone", "card", "api_key", "ip")
PLACEHOLDERS = {"email": "[EMAIL]", "phone": "[PHONE]", "card": "[CARD]", "api_key": "[API_KEY]",
                "ip": "[IP]"}


@dataclass(frozen=True)
class Redaction:
    text: str  # redacted text
    counts: dict[str, int]  # kind -> number replaced (every kind in KINDS present, 0 if none)


def _digits(s: str) -> str:
    return "".join(ch for ch in s if ch.isdigit())


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def _is_card(m: re.Match) -> bool:
    d = _digits(m.group(0))
    return 13 <= len(d) <= 19 and _luhn_ok(d)


def _is_intl_phone(m: re.Match) -> bool:
    return 8 <= len(_digits(m.group(0))) <= 15


_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_NUM_END = r"(?!\w|[.,-]\d)"  # not followed by more of the same number
_API_KEY = re.compile(r"\bsk-[A-Za-z0-9_-]{20,}|\bAKIA[0-9A-Z]{16}\b|\bghp_[A-Za-z0-9]{36}\b")
# only the token is replaced; the named group `keep` ("Bearer ") stays
_BEARER = re.compile(r"\b(?P<keep>[Bb]earer\s+)(?=[\w.~+/=-]*\d)[\w.~+/=-]{16,}")
_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+"  # local part, only from its first character
    r"@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"
)
_CARD = re.compile(r"(?<![\w+.,-])(?:\d{3,6}(?:[ -]\d{3,6}){1,5}|\d{13,19})" + _NUM_END)
_IPV4 = re.compile(rf"(?<![\w.]){_OCTET}(?:\.{_OCTET}){{3}}(?!\w|\.\d)")
_PHONE_INTL = re.compile(r"(?<![\w+])\+\d{1,3}(?:[ .-]?(?:\(\d{1,4}\)|\d{1,4})){2,6}(?!\w)")
_PHONE_US = re.compile(
    r"\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}" + _NUM_END
    + r"|(?<![\w.,-])\d{3}(?P<sep>[.-])\d{3}(?P=sep)\d{4}" + _NUM_END
)
_PHONE_FR = re.compile(r"(?<![\w.,+-])0[1-9](?P<sep>[ .])\d{2}(?:(?P=sep)\d{2}){3}(?!\w|[ .,-]\d)")

# Applied in this order; (kind, pattern, extra check on the match or None).
_RULES = [
    ("api_key", _API_KEY, None),
    ("api_key", _BEARER, None),
    ("email", _EMAIL, None),
    ("card", _CARD, _is_card),
    ("ip", _IPV4, None),
    ("phone", _PHONE_INTL, _is_intl_phone),
    ("phone", _PHONE_US, None),
    ("phone", _PHONE_FR, None),
]


def redact(text: str) -> Redaction:
    """Return `text` with PII replaced by typed placeholders, plus per-kind counts."""
    counts = dict.fromkeys(KINDS, 0)
    for kind, pattern, check in _RULES:

        def repl(m: re.Match, kind: str = kind, check=check) -> str:
            if check is not None and not check(m):
                return m.group(0)
            counts[kind] += 1
            keep = m.group("keep") if "keep" in m.re.groupindex else ""
            return keep + PLACEHOLDERS[kind]

        text = pattern.sub(repl, text)
    return Redaction(text=text, counts=counts)
