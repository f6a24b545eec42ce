"""PII redactor for traffic logs: regexes, plus `phonenumbers` to cut international numbers.

Replaces, with typed placeholders, and counts per kind:

  api_key  [API_KEY]  sk-... (20+ chars with a digit, incl. sk-proj-...), AKIA/ASIA + 16 [0-9A-Z] (AWS),
                      ghp_/gho_/ghu_/ghs_/ghr_ + 36 alnum (GitHub), and the token of "Bearer <token>"
  email    [EMAIL]    jane.doe@example.com (not file names like logo@2x.png)
  card     [CARD]     13-19 digits, contiguous or in groups separated by spaces/dashes, starting
                      with 2-6 (the card networks' prefixes) and passing the Luhn check, unless
                      labelled as another Luhn-checked id ("IMEI 35...", "SIRET ...", "ISBN ...")
  ip       [IP]       IPv4 dotted quads, every octet 0-255 ("3.11.7", "1.2.3.4.5" are not IPs)
  phone    [PHONE]    international "+<cc> ...": the longest prefix of the digit groups that
                      phonenumbers finds valid (else possible) for that country, so two numbers
                      in a row are two placeholders (+1 415 555 0132, +33 6 12 34 56 78, +44 20 7946 0958);
                      a run it finds no number in is replaced whole if it has 8-15 digits,
                      US "(415) 555-0199" / "415-555-0199" / "415.555.0199" / "1-415-555-0199",
                      FR "06 12 34 56 78" / "06.12.34.56.78"

Rules run in a fixed order (api_key, email, card, ip, phone) on the running text, so that a key or
card is never half-eaten by a later, looser pattern; placeholders contain no digits, so redacting
twice changes nothing. Measured on bench/pii/labelled.jsonl by bench/pii/compare.py.

Not covered: personal names, postal addresses, dates of birth, IBANs / bank accounts,
national ID numbers, IPv6, passwords or other free-form secrets, US phones written
with spaces only ("415 555 0199"), national numbers of other countries ("020 7946 0958"),
FR phones without separators. Ordinary numbers -- quantities, arithmetic, years, prices like
1,299.99, versions like 3.11.7, ISO timestamps, order numbers like #48213 -- are left untouched.
Known false positives: an unlabelled 13-19 digit number starting with 2-6 that passes Luhn.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import phonenumbers

KINDS = ("email", "phone", "card", "api_key", "ip")
PLACEHOLDERS = {"email": "[EMAIL]", "phone": "[PHONE]", "card": "[CARD]", "api_key": "[API_KEY]",
                "ip": "[IP]"}

Span = tuple[int, int, str]  # start, end, kind
Finder = Callable[[str], Iterable[tuple[int, int]]]


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
    if not (13 <= len(d) <= 19 and d[0] in "23456" and _luhn_ok(d)):
        return False
    return not _ID_LABEL.search(m.string, max(m.start() - 20, 0), m.start())  # "IMEI 3528..." is no card


_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_NUM_END = r"(?!\w|[.,-]\d)"  # not followed by more of the same number
# the digit is checked after the match: a look-ahead would rescan long "sk-sk-sk-..." runs
_OPENAI = re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")
_API_KEY = re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|\bgh[pousr]_[A-Za-z0-9]{36}\b")
# only the token is replaced; the named group `keep` ("Bearer ") stays
_BEARER = re.compile(r"\b(?P<keep>[Bb]earer\s+)(?=[\w.~+/=-]*\d)[\w.~+/=-]{16,}")
_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+"  # local part, only from its first character
    r"@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.(?P<tld>[A-Za-z]{2,})\b"
)
_FILE_EXT = {"png", "jpg", "jpeg", "gif", "svg", "webp", "ico", "bmp", "pdf"}
# other numbers that pass Luhn by design, when labelled right before the number
_ID_LABEL = re.compile(r"(?i)\b(?:imei|siret|siren|isbn|ean|gtin)\W{0,3}$")
_CARD = re.compile(r"(?<![\w+.,-])(?:\d{3,6}(?:[ -]\d{3,6}){1,5}|\d{13,19})" + _NUM_END)
_IPV4 = re.compile(rf"(?<![\w.]){_OCTET}(?:\.{_OCTET}){{3}}(?!\w|\.\d)")
# "+<cc>" and up to 7 digit groups; _intl_phones() keeps the longest prefix that is a phone number
_PHONE_INTL = re.compile(r"(?<![\w+])\+\d{1,3}(?:[ .-]?(?:\(\d{1,4}\)|\d{1,4})){1,7}")
_GROUP_END = re.compile(r"[\d)](?![\d)])")
_PHONE_US = re.compile(
    r"\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}" + _NUM_END
    + r"|(?<![\w.,-])(?:1[.-])?\d{3}(?P<sep>[.-])\d{3}(?P=sep)\d{4}" + _NUM_END
)
_PHONE_FR = re.compile(r"(?<![\w.,+-])0[1-9](?P<sep>[ .])\d{2}(?:(?P=sep)\d{2}){3}(?!\w|[ .,-]\d)")


def _regex(pattern: re.Pattern, check: Callable[[re.Match], bool] | None = None) -> Finder:
    def find(text: str) -> Iterable[tuple[int, int]]:
        for m in pattern.finditer(text):
            if check is None or check(m):
                yield (m.end("keep") if "keep" in pattern.groupindex else m.start()), m.end()

    return find


def _phone_number(candidate: str) -> int:
    """2 if phonenumbers finds `candidate` ("+<cc> ...") a valid number, 1 if possible, else 0."""
    if not 8 <= len(_digits(candidate)) <= 15:
        return 0
    try:
        num = phonenumbers.parse(candidate, None)
    except phonenumbers.NumberParseException:
        return 0
    return 2 if phonenumbers.is_valid_number(num) else int(phonenumbers.is_possible_number(num))


def _intl_phones(text: str) -> Iterable[tuple[int, int]]:
    for m in _PHONE_INTL.finditer(text):
        run, tail = m.group(0), text[m.end():m.end() + 1]
        ends = [g.end() for g in _GROUP_END.finditer(run) if g.end() < len(run) or not tail.isalnum()]
        best = {}
        for end in reversed(ends):  # longest first: keep the longest valid, else the longest possible
            best.setdefault(_phone_number(run[:end]), end)
            if 2 in best:
                break
        if best.get(2) or best.get(1):
            yield m.start(), m.start() + (best.get(2) or best[1])
        elif ends and ends[-1] == len(run) and 8 <= len(_digits(run)) <= 15:
            yield m.span()  # unknown to phonenumbers (new or rare plan): the whole run, as before


# Applied in this order; (kind, finder of (start, end) in the running text).
_RULES: list[tuple[str, Finder]] = [
    ("api_key", _regex(_OPENAI, lambda m: any(ch.isdigit() for ch in m.group(0)[3:]))),
    ("api_key", _regex(_API_KEY)),
    ("api_key", _regex(_BEARER)),
    ("email", _regex(_EMAIL, lambda m: m.group("tld").lower() not in _FILE_EXT)),
    ("card", _regex(_CARD, _is_card)),
    ("ip", _regex(_IPV4)),
    ("phone", _intl_phones),
    ("phone", _regex(_PHONE_US)),
    ("phone", _regex(_PHONE_FR)),
]


def _render(text: str, spans: list[Span]) -> tuple[str, list[tuple[int, int, int, int]]]:
    """`text` with `spans` replaced; per placeholder (start, end in the result, start, end in text)."""
    out, marks, pos, at = [], [], 0, 0
    for s, e, kind in spans:
        out.append(text[pos:s])
        at += s - pos
        marks.append((at, at + len(PLACEHOLDERS[kind]), s, e))
        out.append(PLACEHOLDERS[kind])
        at, pos = marks[-1][1], e
    out.append(text[pos:])
    return "".join(out), marks


def _to_orig(marks: list[tuple[int, int, int, int]], starts: list[int], pos: int, is_end: bool) -> int:
    """A position in the text rendered with `marks` -> the same position in the original text."""
    i = bisect_right(starts, pos - is_end) - 1
    if i < 0:
        return pos
    _, b, s, e = marks[i]
    return (e if is_end else s) if pos < b + is_end else pos - b + e


def _scan(text: str, rules: list[tuple[str, Finder]]) -> tuple[str, list[Span]]:
    """Apply `rules` in order, each on the text redacted so far; the result and its spans in `text`."""
    spans: list[Span] = []
    for kind, find in rules:
        current, marks = _render(text, spans)
        starts = [mk[0] for mk in marks]
        found = [(_to_orig(marks, starts, s, False), _to_orig(marks, starts, e, True), kind)
                 for s, e in find(current)]
        if found:  # a match spanning placeholders swallows them (matches end on placeholder bounds)
            old = [sp[0] for sp in spans]
            gone = {i for s, e, _ in found for i in range(bisect_left(old, s), bisect_left(old, e))}
            spans = sorted([sp for i, sp in enumerate(spans) if i not in gone] + found)
    return _render(text, spans)[0], spans


def pii_spans(text: str) -> list[Span]:
    """The (start, end, kind) spans of `text` that redact() replaces, in order."""
    return _scan(text, _RULES)[1]


def redact(text: str) -> Redaction:
    """Return `text` with PII replaced by typed placeholders, plus per-kind counts."""
    out, spans = _scan(text, _RULES)
    counts = dict.fromkeys(KINDS, 0)
    for _, _, kind in spans:
        counts[kind] += 1
    return Redaction(text=out, counts=counts)


def cut_redacted(text: str, max_chars: int) -> str:
    """The first `max_chars` characters of an already-redacted `text`, never a partial placeholder."""
    cut = text[:max(max_chars, 0)]
    i = cut.rfind("[")
    if i >= 0 and any(text.startswith(p, i) and i + len(p) > len(cut) for p in PLACEHOLDERS.values()):
        return cut[:i]
    return cut
