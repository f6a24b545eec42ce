"""Slices of traffic: tenant, domain, language and prompt-length bucket.

When a request carries no `labels.domain` / `labels.lang`, they are inferred from the
prompt with transparent keyword rules (no model call): good enough to slice on, and the
source of every label (`given` or `inferred`) is kept.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

SLICE_KEYS = ("tenant", "domain", "lang", "length")

_DOMAIN_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("json_tool", re.compile(r"\bjson\b|tool[_ ]?call|\bfunction call|\"arguments\"|\{\s*\"", re.I)),
    ("code", re.compile(r"```|\bdef \w+\(|\bfunction\b|\bpython\b|javascript|\bsql\b|\bregex\b"
                        r"|\bbug\b|\bcompile|\bcódigo|\bcode\b", re.I)),
    ("summarize", re.compile(r"summar|tl;dr|\brésum|\bresum", re.I)),
    ("math", re.compile(r"how many|how much|\bcuánt|\bcombien|\btotal\b|\bcost|\d+\s*[-+*/×]\s*\d+"
                        r"|\beach\b.*\d|\d.*\beach\b", re.I)),
    ("support", re.compile(r"\border\b|refund|account|password|subscription|invoice|deliver"
                           r"|pedido|reembolso|cuenta|commande|rembours|compte|livraison", re.I)),
)

_STOPWORDS = {
    "en": {"the", "and", "is", "of", "to", "a", "in", "what", "how", "my", "you", "it", "for"},
    "es": {"el", "la", "de", "que", "y", "en", "los", "las", "mi", "por", "cómo", "para", "una"},
    "fr": {"le", "la", "les", "de", "et", "est", "des", "une", "mon", "pour", "vous", "je", "que"},
    "de": {"der", "die", "das", "und", "ist", "nicht", "ich", "mein", "sie", "wie", "ein", "zu"},
}
_WORD = re.compile(r"[a-záéíóúñàâçèêëîïôûüäöß]+", re.I)


def infer_domain(prompt: str) -> str:
    for domain, rule in _DOMAIN_RULES:
        if rule.search(prompt):
            return domain
    return "general"


def infer_lang(prompt: str) -> str:
    words = [w.lower() for w in _WORD.findall(prompt)]
    scores = {lang: sum(w in stop for w in words) for lang, stop in _STOPWORDS.items()}
    best = max(scores, key=lambda lang: scores[lang])
    return best if scores[best] > 0 else "en"


def length_bucket(prompt_chars: int, bounds: Sequence[int]) -> str:
    names = ("short", "medium", "long", "xlong", "xxlong")
    if len(bounds) + 1 > len(names):
        raise ValueError(f"traffic.length_buckets: at most {len(names) - 1} boundaries")
    for name, bound in zip(names, bounds, strict=False):
        if prompt_chars < bound:
            return name
    return names[len(bounds)]


def slice_names(slices: dict[str, str]) -> list[str]:
    """`{"tenant": "acme", ...}` -> `["tenant=acme", ...]`, the names used in metrics."""
    return [f"{k}={slices[k]}" for k in SLICE_KEYS if k in slices]
