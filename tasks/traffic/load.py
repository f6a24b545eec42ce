"""Read a traffic log: validate each line, quarantine the bad ones, redact PII, label slices.

A bad line never stops a run: it is recorded with its line number and reason (and a
redacted excerpt) in the quarantine list, and counted. PII is redacted here, before any
text is written anywhere, in every field that is kept: every message of every role (tool-call
arguments included), the served answer, the request id, and the tenant and labels, which become
slice names in metric names. An excerpt is redacted whole first and cut after, never through a
placeholder. An identifier or slice value that is not safe to show (PII in it, or characters a
metric name cannot carry) is replaced by a stable hash of itself, so slices and ids stay distinct.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from quantgate.tasks.traffic.redact import cut_redacted, redact
from quantgate.tasks.traffic.schema import TrafficRecord
from quantgate.tasks.traffic.slices import infer_domain, infer_lang, length_bucket

EXCERPT_CHARS = 300
_SAFE_VALUE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class Request:
    id: str
    messages: list[dict[str, str]]  # redacted prompt, chat form
    answer: str  # redacted served response
    slices: dict[str, str]  # tenant, domain, lang, length
    inferred: tuple[str, ...] = ()  # which labels were inferred, not given

    def prompt_text(self) -> str:
        return "\n".join(m["content"] for m in self.messages)


@dataclass(frozen=True)
class Quarantined:
    line: int
    reason: str
    excerpt: str


@dataclass(frozen=True)
class TrafficLoad:
    requests: list[Request]
    quarantined: list[Quarantined]
    lines: int
    pii: dict[str, int] = field(default_factory=dict)


class TrafficError(RuntimeError):
    """The traffic log cannot be read at all (missing, or no valid request in it)."""


def load_traffic(path: Path, *, max_line_bytes: int, length_buckets: Sequence[int]) -> TrafficLoad:
    if not path.is_file():
        raise TrafficError(f"traffic.path: {path} does not exist")
    requests: list[Request] = []
    bad: list[Quarantined] = []
    pii: Counter[str] = Counter()
    seen: set[str] = set()
    lines = 0
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            lines += 1
            request, reason = _parse_line(raw, max_line_bytes, length_buckets, seen, pii)
            if request is None:
                excerpt = redact(raw.decode("utf-8", errors="replace").rstrip("\n")).text
                bad.append(Quarantined(line=number, reason=redact(reason).text,
                                       excerpt=cut_redacted(excerpt, EXCERPT_CHARS)))
            else:
                requests.append(request)
    if not requests:
        raise TrafficError(f"traffic.path: {path} holds no valid request ({len(bad)} quarantined)")
    return TrafficLoad(requests=requests, quarantined=bad, lines=lines, pii=dict(pii))


def _parse_line(
    raw: bytes, limit: int, buckets: Sequence[int], seen: set[str], pii: Counter[str]
) -> tuple[Request | None, str]:
    if len(raw) > limit:
        return None, f"line is {len(raw)} bytes, over traffic.max_line_bytes={limit}"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 (byte {exc.start})"
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(obj, dict):
        return None, f"not a JSON object (got {type(obj).__name__})"
    try:
        record = TrafficRecord.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "record"
        return None, f"{where}: {err['msg']}"
    if record.id in seen:
        return None, f"id: duplicate id {record.id!r}"
    seen.add(record.id)
    return _to_request(record, buckets, pii), ""


def _stable_hash(value: str) -> str:
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:12]


def safe_value(value: str, pii: Counter[str] | None = None) -> str:
    """`value` when it is safe to show as an id or in a metric name, else its stable hash."""
    r = redact(value)
    if pii is not None:
        pii.update(r.counts)
    return value if r.text == value and _SAFE_VALUE.fullmatch(value) else _stable_hash(value)


def _to_request(record: TrafficRecord, buckets: Sequence[int], pii: Counter[str]) -> Request:
    def clean(text: str) -> str:
        r = redact(text)
        pii.update(r.counts)
        return r.text

    messages = [{"role": m["role"], "content": clean(m["content"])} for m in record.prompt_messages()]
    user_text = "\n".join(m["content"] for m in messages if m["role"] == "user")
    prompt_text = "\n".join(m["content"] for m in messages)  # system prompts name the tools
    labels = record.labels
    inferred = []
    domain = labels.domain if labels and labels.domain else None
    lang = labels.lang if labels and labels.lang else None
    if domain is None:
        domain, inferred = infer_domain(prompt_text), [*inferred, "domain"]
    if lang is None:
        lang, inferred = infer_lang(user_text), [*inferred, "lang"]
    slices = {
        "tenant": safe_value(record.tenant, pii),
        "domain": safe_value(domain, pii),
        "lang": safe_value(lang, pii),
        "length": length_bucket(sum(len(m["content"]) for m in messages), buckets),
    }
    return Request(safe_value(record.id, pii), messages, clean(record.answer()), slices, tuple(inferred))


def write_requests(path: Path, requests: Sequence[Request]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in requests:
            row = {"id": r.id, "messages": r.messages, "answer": r.answer, "slices": r.slices,
                   "inferred": list(r.inferred)}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_requests(path: Path) -> list[Request]:
    with path.open(encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [Request(r["id"], r["messages"], r["answer"], r["slices"], tuple(r["inferred"]))
            for r in rows]


def write_quarantine(path: Path, quarantined: Sequence[Quarantined]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for q in quarantined:
            f.write(json.dumps({"line": q.line, "reason": q.reason, "excerpt": q.excerpt},
                               ensure_ascii=False) + "\n")
