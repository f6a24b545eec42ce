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
    ("json_tool", re.compile(r"\bjson\b|tool[_ ]?call|\bfunction call|\"arguments\"|\{\s*\"|\btools?\b"
                             r"|\bschema\b|\bextract\b|\bextrae\b|\bextrais\b|\bbook \"|\bticket\b"
                             r"|\bconvert\b|\bshow me\b", re.I)),
    ("code", re.compile(r"```|\bdef \w+\(|\bfunction\b|\bpython\b|javascript|\bsql\b|\bregex\b"
                        r"|\bbug\b|\bcompile|\bcódigo|\bcode\b", re.I)),
    ("summarize", re.compile(r"summar|tl;dr|\brésum|\bresum", re.I)),
    ("math", re.compile(r"how many|how much|\bcuánt|\bqué cantidad|\bcombien de (?!temps)|\d+\s*%"
                        r"|\d+\s*[-+*/×]\s*\d+|\beach\b|\bcada\b|\bchacun|show your work"
                        r"|explica los pasos|\bétapes\b|sale price|\bprecio\b|\bprix\b|\btotal\b"
                        r"|combien d'|combien lui|quelle distance|how far|\bcalcul", re.I)),
    ("support", re.compile(r"\border\b|refund|account|password|subscription|invoice|deliver|charged"
                           r"|cancel|log ?in|\breset\b|restarts?\b|broken|\bplan\b|pedido|reembolso"
                           r"|cuenta|suscripci|cobrad|contraseña|commande|rembours|compte|livraison"
                           r"|résilier|connecter|mot de passe|formule|redémarre|abonnement|restarting"
                           r"|won't turn on|reinicia|bought|compré|acheté", re.I)),
)

# An explicit "summarize" instruction outweighs the numbers in the passage it applies to.
_WEIGHT = {"summarize": 4, "json_tool": 2}

_STOPWORDS = {
    "en": {"the", "and", "is", "of", "to", "a", "in", "what", "how", "my", "you", "it", "for"},
    "es": {"el", "la", "de", "que", "y", "en", "los", "las", "mi", "por", "cómo", "para", "una",
           "un", "si", "más", "qué", "tiene", "con", "del", "se", "es", "hola", "gracias", "cuántos",
           "cuántas", "pedido", "puedo", "cuenta", "está"},
    "fr": {"le", "la", "les", "de", "et", "est", "des", "une", "mon", "pour", "vous", "je", "que",
           "il", "elle", "avec", "combien", "bonjour", "merci", "pas", "dans", "du", "au", "ma",
           "commande", "sont", "ai", "votre"},
    "de": {"der", "die", "das", "und", "ist", "nicht", "ich", "mein", "sie", "wie", "ein", "zu"},
}
_WORD = re.compile(r"[a-záéíóúñàâçèêëîïôûüäöß]+", re.I)


def infer_domain(prompt: str) -> str:
    """The domain whose cues occur most often (earlier rules win ties); `general` if none."""
    scores = [(len(rule.findall(prompt)) * _WEIGHT.get(domain, 1), -i, domain)
              for i, (domain, rule) in enumerate(_DOMAIN_RULES)]
    best = max(scores)
    return best[2] if best[0] > 0 else "general"


def infer_lang(prompt: str) -> str:
    words = [w.lower() for w in _WORD.findall(prompt)]
    scores = {lang: sum(w in stop for w in words) for lang, stop in _STOPWORDS.items()}
    # Inverted punctuation is Spanish; these accents are French (both break ties).
    scores["es"] += 2 * (prompt.count("¿") + prompt.count("¡"))
    scores["fr"] += sum(prompt.count(c) for c in "çèêàœ")
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
