"""Write bench/pii/labelled.jsonl: PII values and look-alikes in sentences, with labelled spans.

    python bench/pii/make_labelled.py

Stdlib only and seeded: a rerun writes the same bytes. Each row is
{"text": ..., "spans": [[start, end, kind], ...], "formats": [...]}: spans are empty for look-alikes,
"formats" names the PII format of each span (or the look-alike's category).
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

OUT = Path(__file__).with_name("labelled.jsonl")
R = random.Random(20261128)
ri, pick = R.randint, R.choice
ALNUM = string.ascii_letters + string.digits


def d(n: int) -> str:
    return "".join(pick(string.digits) for _ in range(n))


def s(n: int, chars: str = ALNUM) -> str:
    return "".join(pick(chars) for _ in range(n))


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        v = int(ch) * (2 if i % 2 else 1)
        total += v - 9 if v > 9 else v
    return total % 10 == 0


def card(prefix: str, length: int) -> str:
    body = prefix + d(length - len(prefix) - 1)
    return next(body + c for c in string.digits if luhn_ok(body + c))


def non_luhn(n: int) -> str:
    return next(x for x in iter(lambda: str(ri(1, 9)) + d(n - 1), None) if not luhn_ok(x))


def grouped(num: str, sizes: tuple[int, ...], sep: str) -> str:
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return sep.join(num[a:a + n] for a, n in zip(starts, sizes, strict=True))


def us(fmt: str) -> str:  # real area codes, exchanges 201-989 but N11
    exchange = pick([x for x in range(201, 990) if x % 100 != 11])
    return fmt.format(pick(["415", "212", "617", "312", "206", "512", "303"]), exchange, d(4))


def fr_mobile() -> str:  # the 9 digits after 0 / +33: 6..., or 7 then 3-9 (07 0x-2x are unassigned)
    return pick(["6" + d(8), "7" + pick("3456789") + d(7)])


def ipv4() -> str:
    return pick(["10.{}.{}.{}", "192.168.{}.{}", "172.16.{}.{}", "{}.{}.{}.{}"]).format(
        *(ri(1, 254) for _ in range(4)))


def isbn13() -> str:
    body = "978" + d(9)
    check = (10 - sum(int(c) * (3 if i % 2 else 1) for i, c in enumerate(body)) % 10) % 10
    return pick([f"978-{body[3]}-{body[4:7]}-{body[7:12]}-{check}", f"ISBN {body}{check}"])


FIRST = ["jane", "maria", "pierre", "li", "omar", "sofia", "lucas", "chloe", "diego", "anna"]
LAST = ["doe", "garcia", "martin", "wang", "haddad", "rossi", "dubois", "lopez", "smith", "muller"]
DOMAINS = ["example.com", "example.org", "acme.io", "correo.es", "exemple.fr"]
TOKEN = ALNUM + "-_"
# format -> (kind, generator); a generator returns the value, or (text before, value, text after)
PII = {
    "email_plain": ("email", lambda: f"{pick(FIRST)}.{pick(LAST)}@{pick(DOMAINS)}"),
    "email_plus": ("email", lambda: f"{pick(FIRST)}_{pick(LAST)}+{s(4, string.ascii_lowercase)}"
                                    f"@{pick(DOMAINS)}"),
    "email_subdomain": ("email", lambda: f"{pick(FIRST)}{d(2)}@{pick(['mail', 'eu', 'corp'])}."
                                         f"{pick(['example.co.uk', 'acme.io', 'example.com'])}"),
    "phone_us_paren": ("phone", lambda: us("({}) {}-{}")),
    "phone_us_dash": ("phone", lambda: us("{}-{}-{}")),
    "phone_us_dot": ("phone", lambda: us("{}.{}.{}")),
    "phone_us_intl": ("phone", lambda: us("+1 {} {} {}")),
    "phone_us_intl_paren": ("phone", lambda: us("+1 ({}) {}-{}")),
    "phone_fr_intl": ("phone", lambda: "+33 " + grouped(fr_mobile(), (1, 2, 2, 2, 2), " ")),
    "phone_fr_national": ("phone", lambda: "0" + grouped(fr_mobile(), (1, 2, 2, 2, 2), " ")),
    "phone_fr_dots": ("phone", lambda: f"0{pick('1234567')}." + grouped(d(8), (2, 2, 2, 2), ".")),
    "phone_es_intl": ("phone", lambda: f"+34 6{d(2)} {d(3)} {d(3)}"),
    "phone_uk_intl": ("phone", lambda: f"+44 20 7946 0{d(3)}"),
    "phone_uk_intl_trunk": ("phone", lambda: f"+44 (0)20 7946 0{d(3)}"),
    "phone_de_intl": ("phone", lambda: f"+49 30 {ri(2, 9)}{d(ri(5, 7))}"),
    "card_contiguous": ("card", lambda: card(pick(["4", "51", "55", "2221"]), 16)),
    "card_spaces": ("card", lambda: grouped(card(pick(["4", "53", "6011"]), 16), (4, 4, 4, 4), " ")),
    "card_dashes": ("card", lambda: grouped(card(pick(["4", "54", "65"]), 16), (4, 4, 4, 4), "-")),
    "card_amex": ("card", lambda: grouped(card(pick(["34", "37"]), 15), (4, 6, 5), pick(" -"))),
    "key_openai": ("api_key", lambda: "sk-" + s(48)),
    "key_openai_proj": ("api_key", lambda: "sk-proj-" + s(ri(40, 90), TOKEN) + s(4)),
    "key_aws": ("api_key", lambda: "AKIA" + s(16, string.ascii_uppercase + string.digits)),
    "key_github": ("api_key", lambda: "ghp_" + s(36)),
    "key_bearer": ("api_key", lambda: ("Bearer ", pick([f"eyJhbGciOiJIUzI1NiJ9.{s(24, TOKEN)}.{s(30, TOKEN)}",
                                                        s(40)]), "")),
    "ipv4": ("ip", ipv4),
    "ipv4_port": ("ip", lambda: ("", ipv4(), f":{pick([22, 443, 8080, 5432])}")),
    "ipv4_url": ("ip", lambda: ("http://", ipv4(), "/v1/chat")),
}
JSON_KEY = {"email": "email", "phone": "phone", "card": "card_number", "api_key": "api_key", "ip": "host"}
SENTENCES = [  # English, Spanish, French; start / middle / end / punctuation / JSON tool-call arguments
    "{v} is the best way to reach me.", "Please use {v} before Friday.", "My details are here: {v}",
    "Backup ({v}), if needed.", 'He wrote "{v}" on the form; please check.', "Is it still {v}?",
    "{v} es mi dato de contacto.", "Por favor, use {v} cuando pueda.", "¿Me confirma el dato {v}?",
    "Mis datos: {v}.", "{v} : voici mes coordonnées.", "Merci d'utiliser {v} dès que possible.",
    "Mes coordonnées : « {v} ».", "C'est bien {v} ?", '{"name": "Ana García", "{k}": "{v}", "urgent": true}',
    '{"{k}":"{v}"}', "Hi,\n{v}\nThanks!", "?{k}={v}&lang=fr",
]
PAIRS = [("phone_fr_intl", "phone_us_paren"), ("phone_fr_intl", "phone_us_dash"),
         ("phone_us_intl", "phone_uk_intl"), ("phone_us_intl", "phone_us_dash"),
         ("phone_es_intl", "phone_de_intl"), ("email_plain", "phone_fr_intl"),
         ("phone_us_dash", "phone_fr_national"), ("ipv4", "ipv4"), ("card_spaces", "ipv4"),
         ("key_github", "email_plus")]


def row(template: str, fmts: list[str]) -> dict:
    left, right = (p.replace("{k}", JSON_KEY[PII[fmts[0]][0]]) for p in template.split("{v}"))
    text, spans = left, []
    for i, fmt in enumerate(fmts):
        kind, gen = PII[fmt]
        v = gen()
        before, value, after = v if isinstance(v, tuple) else ("", v, "")
        text += (" " if i else "") + before
        spans.append([len(text), len(text) + len(value), kind])
        text += value + after
    return {"text": text + right, "spans": spans, "formats": fmts}


LOOK_ALIKES = {
    "order_number": lambda: pick([f"order #{d(5)}", f"ORD-{ri(2020, 2026)}-{d(6)}"]),
    "version": lambda: pick([f"Python 3.{ri(8, 13)}.{ri(0, 12)}", f"v2.{ri(0, 99)}.0",
                             f"build 10.0.{ri(19041, 22631)}.{ri(1000, 5000)}"]),
    "price": lambda: pick([f"{ri(1, 9)},{d(3)}.{d(2)}", f"${ri(1, 9)},{d(3)}.00", f"{ri(10, 99)} {d(3)} €",
                           f"€{ri(1, 999)},{d(2)}"]),
    "timestamp": lambda: pick([f"2026-{ri(1, 12):02}-{ri(1, 28):02}T{ri(0, 23):02}:00:00Z",
                               f"2026-11-{ri(1, 28):02} {ri(0, 23):02}:{d(1)}5:00",
                               f"ts {ri(1_700_000_000_000, 1_800_000_000_000)}"]),
    "date": lambda: pick([f"{ri(1, 28):02}/{ri(1, 12):02}/2026", f"{ri(1, 12)}/{ri(1, 28)}/2026",
                          f"{ri(1, 28):02}.{ri(1, 12):02}.2026"]),
    "ticket_id": lambda: pick([f"JIRA-{d(4)}", f"INC00{d(5)}", f"CASE-2026-{d(4)}"]),
    "arithmetic": lambda: (lambda a, b: pick([f"{a} + {b} = {a + b}", f"{a} × {b} = {a * b}"]))(
        ri(10, 9999), ri(2, 999)),
    "long_digits_non_luhn": lambda: pick([non_luhn(ri(13, 19)), grouped(non_luhn(16), (4,) * 4, " ")]),
    "id_12_digits": lambda: pick([f"user id {ri(1, 9)}{d(11)}", grouped(d(12), (4, 4, 4), "-")]),
    "range": lambda: pick([f"{ri(1, 9)}0-{ri(1, 9)}0-{ri(1, 9)}0", f"pages {d(3)}-{d(3)}",
                           f"{ri(1, 99)}-{ri(100, 999)}-{d(4)}"]),
    "percentage": lambda: pick([f"{ri(0, 99)}.{d(1)}%", f"{ri(1, 100)} %", f"+{d(1)}.{d(1)} %"]),
    "coordinates": lambda: f"{R.uniform(-90, 90):.4f}, {R.uniform(-180, 180):.4f}",
    "semver_range": lambda: pick([f">={d(1)}.{d(1)}.{d(1)},<{ri(2, 9)}.0.0", f"^{d(1)}.{d(2)}.{d(1)}",
                                  f"~{d(1)}.{d(1)}", f"@babel/core@7.{d(2)}.0"]),
    "isbn": isbn13,
    "duration": lambda: pick([f"{d(1)}h {d(2)}m", f"{ri(0, 23):02}:{ri(0, 59):02}:{d(2)}",
                              f"PT{d(1)}H{d(2)}M", f"{ri(100, 99999)} ms"]),
    "ip_like": lambda: pick(["1.2.3.4.5", f"256.{d(1)}.{d(1)}.{d(1)}", f"10.1.2.{ri(300, 999)}"]),
    "key_like": lambda: pick(["sk-learn", "sk-learn-compatible-estimators-api", f"task-{s(26)}",
                              "Bearer of bad news", f"{s(8, '0123456789abcdef')}-{d(4)}-{d(4)}",
                              f"commit {s(40, '0123456789abcdef')}"]),
    "email_like": lambda: pick([f"@{pick(FIRST)}_{d(2)}", f"logo@{d(1)}x.png", "@property",
                                f"{pick(FIRST)} at example dot org is not parsed"]),
    "luhn_valid_id": lambda: pick([f"IMEI {card('35', 15)}", f"SIRET {card(str(ri(1, 9)), 14)}"]),
    "tracking_number": lambda: pick([grouped("9400" + d(18), (4,) * 5 + (2,), " "), f"1Z{s(6)}{d(10)}",
                                     f"FedEx {d(12)}"]),
    "phone_like": lambda: pick([f"{d(1)} {d(3)} {d(3)} rows", f"tokens {d(3)} {d(2)} {d(3)}", f"ext. {d(4)}",
                                f"zip {ri(10000, 99999)}", f"{d(1)},{d(3)},{d(3)}"]),
}
FRAMES = ["See {v} for details.", "{v} was logged yesterday.", "Result: {v}", "Ver {v} para más detalles.",
          "El valor es {v}.", "Voir {v} pour les détails.", "La valeur est {v}.",
          '{"ref": "{v}", "ok": true}', "(ref {v})"]


def main() -> None:
    rows = [row(t, [fmt]) for fmt in PII for t in SENTENCES]
    rows += [row(SENTENCES[i % len(SENTENCES)], list(pair)) for i, pair in enumerate(PAIRS * 4)]
    rows += [{"text": FRAMES[i % len(FRAMES)].replace("{v}", gen()), "spans": [], "formats": [cat]}
             for cat, gen in LOOK_ALIKES.items() for i in range(18)]
    with OUT.open("w", encoding="utf-8", newline="\n") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    n_pii = sum(len(r["spans"]) for r in rows)
    print(f"wrote {OUT}: {len(rows)} rows, {n_pii} PII spans in {len(PII)} formats, "
          f"{sum(not r['spans'] for r in rows)} look-alikes in {len(LOOK_ALIKES)} categories")


if __name__ == "__main__":
    main()
