"""Write bench/pii/heldout.jsonl: a held-out PII set, written apart from labelled.jsonl and the redactor.

    python bench/pii/make_heldout.py        # stdlib only, seeded: byte-identical output on every run

Each line: {"text": ..., "spans": [[start, end, kind], ...], "formats": [...]}; kind is one of email, phone,
card, api_key, ip; a span covers the PII value only (the token after "Bearer ", the address inside <...> or
after mailto:, the IPv4 address without its port). "formats" runs parallel to "spans" ("kind:format"); a text
without PII has no spans and a single format, "lookalike:<category>".

PII texts are templates with [[kind:format]] slots (a slot named [[kind:format#x]] can be repeated as
[[#x]]); look-alike texts are drawn per category. Every planted value is checked (email shape, Luhn for cards,
key shapes, octets), every span's text is asserted to be the planted value, and every look-alike (and the text
around the spans of PII texts) is checked to hold no Luhn-valid 13-19 digit run, no key-shaped token and no
e-mail or dotted quad outside the categories named for them.
"""

from __future__ import annotations

import base64
import json
import math
import random
import re
import string
from collections import Counter
from pathlib import Path

R = random.Random(0x5EED_0FF)
OUT = Path(__file__).with_name("heldout.jsonl")
KINDS = ("email", "phone", "card", "api_key", "ip")
ALNUM = string.ascii_letters + string.digits


# ---------------------------------------------------------------- small helpers
def d(n: int) -> str:
    return "".join(R.choice(string.digits) for _ in range(n))


def dn(n: int) -> str:  # n digits, the first not zero
    return R.choice("123456789") + d(n - 1)


def hx(n: int) -> str:
    return "".join(R.choice("0123456789abcdef") for _ in range(n))


def pick(seq):
    return R.choice(seq)


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, c in enumerate(reversed(digits)):
        v = int(c)
        if i % 2:
            v = v * 2 - 9 if v > 4 else v * 2
        total += v
    return total % 10 == 0


def nl(n: int) -> str:  # an n-digit number that fails the Luhn check
    s = dn(n)
    return s if not luhn_ok(s) else s[:-1] + str((int(s[-1]) + 1) % 10)


def uid() -> str:
    return f"{hx(8)}-{hx(4)}-4{hx(3)}-{pick('89ab')}{hx(3)}-{hx(12)}"


MONTHS_EN = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
             "October", "November", "December"]
MONTHS_FR = ["janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre", "octobre",
             "novembre", "décembre"]
MONTHS_ES = ["enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto", "septiembre",
             "octubre", "noviembre", "diciembre"]


def ymd() -> tuple[int, int, int]:
    return R.randint(2021, 2025), R.randint(1, 12), R.randint(1, 28)


def date_iso() -> str:
    y, m, dd = ymd()
    return f"{y}-{m:02d}-{dd:02d}"


def date_eu() -> str:
    y, m, dd = ymd()
    return f"{dd:02d}/{m:02d}/{y}"


def hms() -> str:
    return f"{R.randint(0, 23):02d}:{R.randint(0, 59):02d}:{R.randint(0, 59):02d}"


# ---------------------------------------------------------------- PII value generators
FIRST = ["maria", "jean", "lucia", "pierre", "sofia", "ahmed", "wei", "priya", "kenji", "olga", "tom", "emma",
         "lucas", "chloe", "javier", "camille", "noah", "aisha", "diego", "ines", "marco", "femke", "raj",
         "yuki", "joao", "hannah", "omar", "lea", "pablo", "nadia"]
LAST = ["garcia", "dupont", "martin", "rossi", "muller", "smith", "tanaka", "patel", "silva", "okafor",
        "nguyen", "kowalski", "moreau", "fernandez", "lefebvre", "schmidt", "johnson", "oliveira", "sharma",
        "devries", "bianchi", "lopez", "bernard", "kim", "haddad", "ruiz", "ito", "santos", "girard", "weber"]
DOMAINS = ["gmail.com", "yahoo.fr", "hotmail.es", "outlook.com", "protonmail.com", "icloud.com", "orange.fr",
           "free.fr", "telefonica.net", "gmx.de", "acme-logistics.com", "northwind.io", "brightpath.co",
           "dataforge.ai", "libero.it", "web.de", "uol.com.br", "rediffmail.com", "ziggo.nl", "laposte.net"]
SUBDOMAINS = ["eng.globex.com", "mail.univ-lille.fr", "cs.ucl.ac.uk", "soporte.tienda-luna.es",
              "corp.fabrikam.co.uk", "alumni.upm.es", "ops.stackhaus.dev", "research.kyoto-u.ac.jp",
              "ventas.grupo-orion.com.mx", "it.mairie-nantes.fr", "us.contoso-health.com"]
TAGS = ["newsletter", "amazon", "work", "2024", "shop", "github", "bills", "test", "spam", "netflix"]


def email(fmt: str) -> str:
    f, last = pick(FIRST), pick(LAST)
    if fmt == "plain":
        return pick([f"{f}@{pick(DOMAINS)}", f"{f}{last}@{pick(DOMAINS)}", f"{f[0]}{last}@{pick(DOMAINS)}",
                     f"{f}_{last}@{pick(DOMAINS)}", f"{f}-{last}@{pick(DOMAINS)}"])
    if fmt == "plus":
        return pick([f"{f}.{last}+{pick(TAGS)}@gmail.com", f"{f}+{pick(TAGS)}@{pick(DOMAINS)}",
                     f"{f}{last}+{pick(TAGS)}@outlook.com"])
    if fmt == "dotted":
        return pick([f"{f}.{last}@{pick(DOMAINS)}",
                     f"{f}.{pick(string.ascii_lowercase)}.{last}@{pick(DOMAINS)}",
                     f"{f[0]}.{last}@{pick(DOMAINS)}"])
    if fmt == "subdomain":
        return pick([f"{f}.{last}@{pick(SUBDOMAINS)}", f"{f[0]}{last}@{pick(SUBDOMAINS)}",
                     f"{f}@{pick(SUBDOMAINS)}"])
    if fmt == "upper":
        dom = pick(DOMAINS)
        return pick([f"{f}.{last}@{dom}".upper(), f"{f.title()}.{last.title()}@{dom.title()}",
                     f"{f.title()}{last.title()}@{dom}", f"{f}@{dom}".upper()])
    if fmt == "digits":
        return pick([f"{f}{last}{R.randint(70, 99)}@{pick(DOMAINS)}",
                     f"{f}.{last}{R.randint(1, 9)}@{pick(DOMAINS)}",
                     f"{f}{R.randint(100, 2005)}@{pick(DOMAINS)}", f"{R.randint(1, 99)}{f}@{pick(DOMAINS)}",
                     f"{f[0]}{last}{R.randint(1980, 2004)}@{pick(DOMAINS)}"])
    raise ValueError(fmt)


US_AREAS = ["212", "415", "312", "617", "206", "305", "512", "646", "718", "503", "702", "404", "214", "303",
            "602", "919", "416", "514", "604", "858", "773", "347"]


def nxx() -> str:
    while True:
        s = str(R.randint(2, 9)) + d(2)
        if s[1:] != "11" and s != "555":
            return s


def phone(fmt: str) -> str:  # noqa: C901 - one branch per format reads best
    a, x, line = pick(US_AREAS), nxx(), d(4)
    fr = pick("67") + d(8) if R.random() < 0.6 else pick("123459") + d(8)
    fr_pairs = " ".join(fr[i:i + 2] for i in range(1, 9, 2))
    table = {
        "us_paren": f"({a}) {x}-{line}",
        "us_dash": f"{a}-{x}-{line}",
        "us_dot": f"{a}.{x}.{line}",
        "us_intl_space": f"+1 {a} {x} {line}",
        "us_intl_dash": f"+1-{a}-{x}-{line}",
        "us_intl_paren": f"+1 ({a}) {x}-{line}",
        "fr_intl": f"+33 {fr[0]} {fr_pairs}",
        "fr_intl0": f"+33 (0){fr[0]} {fr_pairs}",
        "fr_nat_space": f"0{fr[0]} {fr_pairs}",
        "fr_nat_dot": f"0{fr[0]}.{fr_pairs.replace(' ', '.')}",
        "es_mobile": pick([f"+34 6{d(2)} {d(3)} {d(3)}", f"+34 6{d(2)} {d(2)} {d(2)} {d(2)}",
                           f"+34 7{d(2)} {d(3)} {d(3)}"]),
        "es_land": f"+34 {pick(['91', '93', '95', '96'])} {d(3)} {d(2)} {d(2)}",
        "uk_london": f"+44 20 {pick('378')}{d(3)} {d(4)}",
        "uk_mobile": f"+44 7{pick('4579')}{d(2)} {d(6)}",
        "uk_intl0": f"+44 (0){pick(['161', '113', '131'])} {d(3)} {d(4)}",
        "de_land": pick([f"+49 30 {d(8)}", f"+49 89 {d(4)} {d(4)}", f"+49 40 {d(3)} {d(5)}",
                         f"+49 (0)221 {d(6)}"]),
        "de_mobile": f"+49 1{pick(['51', '52', '60', '70', '71', '76'])} {d(8)}",
        "it_land": f"+39 {pick(['06', '02', '011', '055'])} {d(4)} {d(4)}",
        "it_mobile": f"+39 3{pick(['33', '47', '28', '89', '40'])} {d(3)} {d(4)}",
        "nl_land": f"+31 {pick(['20', '10', '70', '30'])} {d(3)} {d(4)}",
        "nl_mobile": pick([f"+31 6 {d(8)}", f"+31 6 {d(4)} {d(4)}", f"+31 (0)6 {d(8)}"]),
        "br_mobile": f"+55 {pick(['11', '21', '31', '41', '51'])} 9{d(4)}-{d(4)}",
        "br_paren": f"+55 ({pick(['11', '21', '61', '71'])}) 9{d(4)}-{d(4)}",
        "br_land": f"+55 {pick(['11', '21', '31'])} {pick('2345')}{d(3)}-{d(4)}",
        "in_mobile": f"+91 {pick('6789')}{d(4)} {d(5)}",
        "in_dash": f"+91-{pick('6789')}{d(4)}-{d(5)}",
        "in_land": f"+91 {pick(['80', '22', '11', '44'])} {d(4)} {d(4)}",
        "jp_land": f"+81 {pick(['3', '6'])}-{d(4)}-{d(4)}",
        "jp_mobile": f"+81 {pick(['90', '80', '70'])}-{d(4)}-{d(4)}",
    }
    if fmt.startswith("e164_"):
        src = {"us": "us_intl_space", "fr": "fr_intl", "es": "es_mobile", "uk": "uk_mobile",
               "de": "de_mobile", "br": "br_mobile", "in": "in_mobile", "jp": "jp_mobile", "nl": "nl_mobile", "it": "it_mobile"}
        return "+" + re.sub(r"\D", "", table[src[fmt[5:]]].replace("(0)", ""))
    return table[fmt]


def luhn_complete(prefix: str, length: int) -> str:
    body = prefix + d(length - len(prefix) - 1)
    return next(body + c for c in string.digits if luhn_ok(body + c))


def card(fmt: str) -> str:
    brand, style = fmt.rsplit("_", 1)
    if brand == "visa":
        num = luhn_complete("4", 16)
    elif brand == "mc":
        num = luhn_complete(str(R.randint(51, 55)), 16)
    elif brand == "mc2":
        num = luhn_complete(str(R.randint(2221, 2720)), 16)
    elif brand == "amex":
        num = luhn_complete(pick(["34", "37"]), 15)
    elif brand == "disc":
        num = luhn_complete(pick(["6011", "65", str(R.randint(644, 649))]), 16)
    else:
        raise ValueError(fmt)
    groups = [num[:4], num[4:10], num[10:]] if brand == "amex" else [num[i:i + 4] for i in range(0, 16, 4)]
    return {"contig": num, "space": " ".join(groups), "dash": "-".join(groups)}[style]


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def rand_chars(n: int, alphabet: str = ALNUM) -> str:
    return "".join(R.choice(alphabet) for _ in range(n))


def api_key(fmt: str) -> str:
    if fmt == "sk":  # legacy: sk- + 48, often with T3BlbkFJ in the middle
        return pick([f"sk-{rand_chars(20)}T3BlbkFJ{rand_chars(20)}", f"sk-{rand_chars(48)}"])
    if fmt == "sk_proj":
        return f"sk-proj-{rand_chars(R.randint(60, 140), ALNUM + '_-')}"
    if fmt == "akia":
        return "AKIA" + rand_chars(16, string.ascii_uppercase + "234567")
    if fmt == "aws_secret":
        return rand_chars(40, ALNUM + "/+")
    if fmt == "ghp":
        return "ghp_" + rand_chars(36)
    if fmt == "jwt":
        alg = pick(["HS256", "RS256"])
        head = json.dumps({"alg": alg, "typ": "JWT"}, separators=(",", ":")).encode()
        claims = {"sub": str(R.randint(10**5, 10**9)), "iat": R.randint(1_690_000_000, 1_740_000_000)}
        if R.random() < 0.5:
            claims["role"] = pick(["user", "admin", "service"])
        if R.random() < 0.5:
            claims["exp"] = claims["iat"] + 3600
        payload = json.dumps(claims, separators=(",", ":")).encode()
        sig = rand_chars(43 if alg == "HS256" else 342, ALNUM + "_-")
        return f"{b64url(head)}.{b64url(payload)}.{sig}"
    if fmt == "opaque":
        return pick([rand_chars(40), rand_chars(32, "0123456789abcdef"),
                     "ya29." + rand_chars(70, ALNUM + "_-")])
    raise ValueError(fmt)


PUBLIC_FIRST = [3, 13, 18, 23, 34, 35, 45, 52, 54, 62, 77, 81, 85, 91, 104, 138, 142, 151, 159, 176, 185, 188,
                195, 203, 212, 213, 217]


def ip(fmt: str) -> str:
    if fmt == "private":
        return pick([f"10.{R.randint(0, 255)}.{R.randint(0, 255)}.{R.randint(1, 254)}",
                     f"192.168.{R.randint(0, 10)}.{R.randint(1, 254)}",
                     f"172.{R.randint(16, 31)}.{R.randint(0, 255)}.{R.randint(1, 254)}"])
    if fmt == "public":
        return f"{pick(PUBLIC_FIRST)}.{R.randint(0, 255)}.{R.randint(0, 255)}.{R.randint(1, 254)}"
    if fmt == "dns":
        return pick(["8.8.8.8", "8.8.4.4", "1.1.1.1", "9.9.9.9", "208.67.222.222"])
    if fmt == "loopback":
        return pick(["127.0.0.1", "0.0.0.0"])
    raise ValueError(fmt)


GEN = {"email": email, "phone": phone, "card": card, "api_key": api_key, "ip": ip}
DEFAULT_FMTS = {  # slots written without a format take these in turn
    "email": ["plain", "plus", "dotted", "subdomain", "upper", "digits"],
    "phone": ["us_paren", "fr_intl", "es_mobile", "uk_mobile", "de_land", "it_mobile", "nl_mobile",
              "br_mobile", "in_mobile", "jp_mobile", "us_dash", "fr_nat_space"],
    "card": ["visa_space", "mc_contig", "amex_space", "disc_dash", "mc2_space", "visa_contig"],
    "api_key": ["sk", "sk_proj", "akia", "ghp", "jwt"],
    "ip": ["private", "public"],
}
_turn = Counter()

CHECK = {
    "email": re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}"),
    "phone": re.compile(r"\+?[\d(][\d ().-]{6,20}\d"),
    "card": re.compile(r"\d{4}(?:[ -]?\d{4,6}){2}(?:[ -]?\d{4,5})?"),
    "api_key": re.compile(r"sk-(?:proj-)?[\w-]{40,}|AKIA[A-Z2-7]{16}|[A-Za-z0-9/+]{40}|ghp_[A-Za-z0-9]{36}"
                          r"|eyJ[\w-]+\.eyJ[\w-]+\.[\w-]+|[A-Za-z0-9]{40}|[0-9a-f]{32}|ya29\.[\w-]{70}"),
    "ip": re.compile(r"\d{1,3}(?:\.\d{1,3}){3}"),
}


def check_value(kind: str, fmt: str, value: str) -> None:
    assert CHECK[kind].fullmatch(value), (kind, fmt, value)
    if kind == "card":
        digits = re.sub(r"\D", "", value)
        assert luhn_ok(digits) and len(digits) == (15 if fmt.startswith("amex") else 16), value
    if kind == "ip":
        assert all(0 <= int(o) <= 255 for o in value.split(".")), value
    if kind == "phone":
        n = len(re.sub(r"\D", "", value.replace("(0)", "")))
        assert 10 <= n <= 13, value


SLOT = re.compile(r"\[\[(?:(\w+)(?::(\w+))?)?(?:#(\w+))?\]\]")


def render(tpl: str) -> dict:
    text, spans, fmts, named, last = "", [], [], {}, 0
    for m in SLOT.finditer(tpl):
        text += tpl[last:m.start()]
        last = m.end()
        kind, fmt, name = m.groups()
        if kind is None:
            value, kind, fmt = named[name]
        else:
            if fmt is None:
                options = DEFAULT_FMTS[kind]
                fmt = options[_turn[kind] % len(options)]
                _turn[kind] += 1
            value = GEN[kind](fmt)
            check_value(kind, fmt, value)
            if name:
                named[name] = (value, kind, fmt)
        spans.append([len(text), len(text) + len(value), kind])
        fmts.append(f"{kind}:{fmt}")
        text += value
    text += tpl[last:]
    assert "[[" not in text and "]]" not in text, tpl
    return {"text": text, "spans": spans, "formats": fmts}


# ---------------------------------------------------------------- PII texts
# (support chats, tool calls, logs, code, forms)
PII_TEMPLATES = [
    # --- e-mails
    "Hi, I can't log in. My account email is [[email:plain]] and I already reset my password twice.",
    "Please send the invoice to [[email:plus]], not to my work address.",
    "Hola, mi correo es [[email:dotted]]. ¿Pueden reenviarme la factura del pedido 20931?",
    "Bonjour, pouvez-vous m'écrire à [[email:plain]] ? Merci d'avance.",
    "[[email:upper]] keeps bouncing with \"550 5.1.1 user unknown\", any idea why?",
    "From: Jean Dupont <[[email:dotted]]>\nTo: <[[email:subdomain]]>\nSubject: Re: devis n° 2024-118",
    '<p>Questions? <a href="mailto:[[email:plain]]">Write to us</a></p>',
    '{"user": {"id": 48213, "email": "[[email:digits]]", "plan": "pro", "seats": 12}}',
    "Can you write a regex that accepts [[email:plus]] and [[email:subdomain]] but rejects plain words?",
    "commit 9f2c4e1\nAuthor: Priya Sharma <[[email:digits]]>\nDate:   Tue Mar 12 10:42:17 2024 +0530",
    "Mi jefe es [[email:subdomain]]; ponlo en copia, por favor.",
    "Envoyez le CV à [[email:dotted]], ou passez directement à l'accueil.",
    "SELECT id, created_at FROM users WHERE email = '[[email:upper]]';",
    'user_email = "[[email:plain]]"  # TODO: remove before commit',
    "Reply-To: [[email:plus]]\nX-Mailer: PHPMailer 6.8.1",
    "Thanks a lot! — Camille ([[email:plain]])",
    "I have two accounts, [[email:digits]] and [[email:dotted]]. Can you merge them?",
    "[[[email:subdomain#m]]](mailto:[[#m]])",
    "2024-03-14 09:12:44,118 INFO mailer: password reset sent to [[email:plain]] (msg_id=7f3a9c2e)",
    "id,name,email,signup\n101,Lucía Fernández,[[email:dotted]],2023-11-02\n102,Tom "
    "Baker,[[email:upper]],2024-01-17",
    "Est-ce que [[email:plus]] est bien enregistré ? Je ne reçois aucun mail.",
    "The signup form says 'invalid email' when I type [[email:subdomain]]. Is it the subdomain?",
    "cc: [[email:plain]], [[email:digits]]; bcc: [[email:dotted]].",
    'await sendEmail({ to: "[[email:plain]]", subject: "Your order #10482 has shipped" });',
    "My Apple ID ([[email:digits]]) is locked, what do I do?",
    "Pour toute question : [[email:subdomain]].",
    "Unsubscribe [[email:plus]] from the weekly digest please!",
    "smtplib.SMTPRecipientsRefused: {'[[email:dotted]]': (550, b'5.7.1 Relaying denied')}",
    "¿Puedo cambiar el correo [[email:plain]] por [[email:digits]]?",
    "<[[email:upper]]>: host mx2.mailhost.net said: 452 4.2.2 Mailbox full",
    "mailto:[[email:plus]]?subject=Refund%20request&body=Order%2010482",
    "assert parse_address('\"Ana Ruiz\" <[[email:dotted#a]]>') == ('Ana Ruiz', '[[#a]]')",
    "- [x] invite [[email:subdomain]] to the Slack workspace\n- [ ] order laptops (budget 2 400 €)",
    "Send it to [[email:plain]]!",
    "Correo: [[email:upper]]\nTeléfono: [[phone:es_mobile]]\nCiudad: Valencia",
    "git config --global user.email \"[[email:digits]]\"",
    "Le compte [[email:plain]], créé le 03/02/2022, n'apparaît plus dans l'admin.",
    "Is [[email:upper]] still the right contact for the audit, or should I use [[email:plain]]?",
    '{"to": ["[[email:plain]]", "[[email:plus]]"], "template_id": "d-4f1c2a", "send_at": 1718035200}',
    "Noté, je mets [[email:subdomain]] en copie (et [[email:dotted]]).",
    "Mi usuario es [[email:digits]]: no me deja entrar desde el móvil.",
    "@everyone the new on-call alias is [[email:subdomain]], effective Monday.",
    "```yaml\nalerting:\n  email_to: [[email:plain]]\n  smtp_port: 587\n```",
    "Dear support, please close the account registered as [[email:upper]]. Regards",
    "profile = {'name': 'Yuki Ito', 'mail': '[[email:plus]]', 'lang': 'ja-JP'}",
    "hi its [[email:plain]] again lol, still no confirmation mail",
    "Bonjour,\n\nMerci de contacter [[email:dotted]] pour la facture F2024-00871.\n\nCordialement",
    # --- phones
    "You can reach me at [[phone:us_paren]] after 5pm.",
    "[[phone:us_dash]] is the number on file, but it's outdated.",
    "Call [[phone:us_dot]] or [[phone:us_intl_space]].",
    "Mobile: [[phone:us_intl_dash]]\nOffice: [[phone:us_intl_paren]] ext. 214",
    "Mon numéro : [[phone:fr_nat_space]], je suis dispo le matin.",
    "Rappelez-moi au [[phone:fr_nat_dot]] ou au [[phone:fr_intl]].",
    "[[phone:fr_intl]] — c'est le numéro de la boutique de Lyon.",
    "Tél. [[phone:fr_intl0]] | Fax [[phone:fr_intl0]]",
    "Llámame al [[phone:es_mobile]], estoy disponible todo el día.",
    "Oficina de Madrid: [[phone:es_land]] (de 9:00 a 18:00).",
    "UK office: [[phone:uk_london]], mobile [[phone:uk_mobile]].",
    "Our Berlin team is on [[phone:de_land]]; for urgent stuff use [[phone:de_mobile]].",
    "The restaurant in Rome is [[phone:it_land]], booking for 4 at 20:30.",
    "Contact in Amsterdam: [[phone:nl_land]] or [[phone:nl_mobile]]",
    "My WhatsApp is [[phone:br_mobile]] (Brazil), text me there.",
    "India support line: [[phone:in_mobile]]. Hours 10am-7pm IST.",
    "Tokyo office: [[phone:jp_land]], Kenji's mobile: [[phone:jp_mobile]].",
    '{"name": "Kenji Tanaka", "phone": "[[phone:e164_jp]]", "country": "JP", "age": 34}',
    'send_sms(to="[[phone:e164_us]]", body="Your verification code is 482913")',
    '<a href="tel:[[phone:e164_fr]]" class="btn btn-primary">Appeler</a>',
    "Numbers to try: [[phone:uk_mobile]], [[phone:de_mobile]], [[phone:it_mobile]].",
    "Tel [[phone:us_dash]] Fax [[phone:us_dash]]",
    "[[phone:br_land]] is the landline; the mobile is [[phone:br_paren]].",
    "Call me: [[phone:in_dash]].",
    "Numéro perso : [[phone:fr_intl]]. Numéro pro : [[phone:fr_nat_space]].",
    "2024-03-15T08:22:10Z WARN twilio: delivery failed to=[[phone:e164_uk]] code=30003 attempt=2",
    "Emergency contact: Olga Kowalski, [[phone:de_land]]",
    "Nom : Moreau\nPrénom : Inès\nTéléphone : [[phone:fr_nat_dot]]\nVille : Lyon (69003)",
    "Mi número es [[phone:es_mobile]] y el de mi hermana [[phone:es_mobile]].",
    "BEGIN:VCARD\nVERSION:3.0\nFN:Hannah Weber\nTEL;TYPE=CELL:[[phone:us_intl_dash]]\nEND:VCARD",
    "Sure, you can also reach me on [[phone:nl_mobile]].",
    "(phone: [[phone:jp_mobile]])",
    "WhatsApp: [[phone:in_mobile]] / [[phone:in_land]]",
    "Please update my number from [[phone:us_paren]] to [[phone:us_paren]], thanks.",
    "[[phone:uk_intl0]] is the Manchester office, ask for Raj.",
    "Teléfono fijo: [[phone:es_land]]. Móvil: [[phone:es_mobile]].",
    "Customer said to call [[phone:it_mobile]] or [[phone:it_land]] between 2 and 4 pm.",
    "phone_numbers = [\"[[phone:e164_de]]\", \"[[phone:e164_br]]\", \"[[phone:e164_in]]\"]",
    "Je n'ai pas reçu le SMS sur le [[phone:fr_nat_space]] ; le code a expiré au bout de 10 minutes.",
    "Hotline: [[phone:us_dot]] (24/7). Reference your ticket #88123 when calling.",
    "+ Contact: [[phone:de_mobile]] (Herr Schmidt)",
    "Dial [[phone:nl_land]], then press 2 for billing.",
    "| Nombre | Teléfono |\n|---|---|\n| Pablo Ruiz | [[phone:es_mobile]] |\n| Lucía López | "
    "[[phone:es_land]] |",
    "El cliente dejó dos números: [[phone:br_mobile]] o [[phone:e164_es]].",
    "Our São Paulo office moved; new number [[phone:br_paren]].",
    "curl -X POST https://api.example-sms.io/v2/send -d 'to=[[phone:e164_nl]]&text=Hello'",
    "Contacto en Bombay: [[phone:in_land]]; en Osaka: [[phone:jp_land]].",
    "Bonjour, je vous laisse mon portable [[phone:fr_intl]] pour le rendez-vous du 12.",
    "If nobody answers at [[phone:uk_london]], try [[phone:e164_uk]].",
    "Phone: [[phone:us_intl_space]]",
    "[[phone:it_mobile]]",
    "Telefono: [[phone:e164_it]], sede di Milano.",
    "Teléfono de contacto del repartidor: [[phone:es_mobile]]. Pedido 2024/ES/00412.",
    # --- cards
    "My card [[card:visa_space]] was charged twice for order #48213.",
    "POST /checkout card_number=[[card:visa_contig]]&exp=09/27&cvc=***&amount=129.00",
    "Tarjeta: [[card:mc_dash]], caduca el 11/26.",
    "Ma carte [[card:amex_space]] a été refusée, pourquoi ?",
    '{"payment_method": {"type": "card", "number": "[[card:mc2_contig]]", "exp_month": 4, "exp_year": 2027}}',
    "Use my Discover [[card:disc_dash]] for the renewal please.",
    "Card on file: [[card:amex_dash]]",
    "I typed [[card:mc_space]] but checkout says the number is invalid.",
    "2024-02-01 12:00:03 DEBUG payments: charge pan=[[card:visa_contig]] amount=49.99 EUR status=declined",
    "Numéro de carte : [[card:disc_space]] — exp. 03/28",
    "Pagué con la [[card:mc2_space]] y no me llegó el pedido 2024-00981.",
    "Why does my validator reject [[card:amex_contig]]? I think it's a valid Amex.",
    "cards = ['[[card:visa_dash]]', '[[card:mc_contig]]', '[[card:disc_contig]]']",
    "Visa: [[card:visa_space]]\nMastercard: [[card:mc_space]]",
    "Please refund $120.00 to card [[card:disc_contig]].",
    "[[card:mc2_dash]] is the new card, the old one expired.",
    "La tarjeta [[card:visa_dash]] es de empresa; la personal es [[card:amex_space]].",
    "Carte bancaire : [[card:mc_contig]] (exp 07/26). Montant : 89,90 €.",
    "| card | exp |\n|---|---|\n| [[card:disc_space]] | 05/29 |",
    "charge failed: card [[card:mc2_contig]] declined (insufficient_funds), retry in 24h",
    "Can you pay the hotel with [[card:amex_dash]]? Reservation 7781-K.",
    "I have a Visa [[card:visa_contig]] and a Mastercard [[card:mc_dash]], which one is on the account?",
    "Tengo dos tarjetas; la que falla es la [[card:visa_space]], la otra va bien.",
    "test('luhn', () => expect(isValid('[[card:disc_contig]]')).toBe(true));",
    "Amex [[card:amex_space]], CID on the front, expires 2027.",
    "El cargo de 59,90 € en la [[card:mc_space]] no lo reconozco.",
    # --- API keys and secrets
    "OPENAI_API_KEY=[[api_key:sk]]\nOPENAI_ORG=org-internal\nMAX_TOKENS=4096",
    'client = OpenAI(api_key="[[api_key:sk_proj]]")',
    'curl https://api.openai.com/v1/chat/completions -H "Authorization: Bearer [[api_key:sk_proj]]" '
    '-H "Content-Type: application/json"',
    "[default]\naws_access_key_id = [[api_key:akia]]\naws_secret_access_key = [[api_key:aws_secret]]\n"
    "region = eu-west-3",
    "export GITHUB_TOKEN=[[api_key:ghp]]",
    "git clone https://[[api_key:ghp]]@github.com/acme/infra.git",
    'headers = {"Authorization": "Bearer [[api_key:jwt]]", "Accept": "application/json"}',
    "GET /api/v2/orders?page=3 HTTP/1.1\nHost: shop.internal\nAuthorization: Bearer [[api_key:jwt]]\n"
    "User-Agent: okhttp/4.12.0",
    "mi clave es [[api_key:sk]] y me da error 401, ¿qué hago?",
    "Ma clé [[api_key:sk_proj]] ne marche plus depuis hier, erreur 429.",
    "The secret scanner flagged [[api_key:akia]] in the public repo, commit 4c1d2e9.",
    ".env\nAWS_ACCESS_KEY_ID=[[api_key:akia]]\nAWS_REGION=us-east-1\nBUCKET=prod-assets-2024",
    "const res = await fetch(url, { headers: { Authorization: `Bearer [[api_key:jwt]]` } });",
    "github:\n  token: [[api_key:ghp]]\n  org: acme\n  retries: 3",
    "I keep getting 401 Unauthorized with `Authorization: Bearer [[api_key:opaque]]`, is the token expired?",
    'os.environ["OPENAI_API_KEY"] = "[[api_key:sk]]"',
    "openai.AuthenticationError: Incorrect API key provided: [[api_key:sk]]. You can find your API key at "
    "https://platform.openai.com/account/api-keys.",
    "Here is my config, what's wrong?\n```json\n{\"api_key\": \"[[api_key:sk_proj]]\", \"model\": "
    "\"gpt-4o-mini\", \"temperature\": 0.2}\n```",
    "Authorization: Bearer [[api_key:jwt]]",
    "here's the token: [[api_key:ghp]] (scopes: repo, workflow)",
    "aws configure set aws_access_key_id [[api_key:akia]] && aws s3 ls s3://backups-2024/",
    "Le token JWT : Bearer [[api_key:jwt]] expire au bout de 3600 s.",
    "El header que mando es Authorization: Bearer [[api_key:opaque]] pero el servidor responde 403.",
    "requests.post(URL, headers={'Authorization': f'Bearer {TOKEN}'}) with TOKEN='[[api_key:sk]]'",
    "- name: Deploy\n  env:\n    GH_TOKEN: [[api_key:ghp]]\n    NODE_VERSION: 20.11.1",
    "AWS_SECRET_ACCESS_KEY=[[api_key:aws_secret]] AWS_ACCESS_KEY_ID=[[api_key:akia]] terraform apply",
    "WWW-Authenticate error after sending 'Bearer [[api_key:jwt]]' to /oauth/introspect",
    "sk key for the staging bot: [[api_key:sk_proj]]",
    "> curl -s -H 'Authorization: Bearer [[api_key:opaque]]' https://api.internal/v1/me | jq .",
    # --- IPv4
    "The server at [[ip:private]] stopped responding after the kernel upgrade.",
    "curl http://[[ip:private]]:8080/health returns connection refused",
    '[[ip:public]] - - [12/Mar/2024:10:15:32 +0000] "GET /api/v1/users?page=2 HTTP/1.1" 200 5123 "-" '
    '"Mozilla/5.0"',
    "Allow inbound from [[ip:public]] and [[ip:public]] on port 443 only.",
    "X-Forwarded-For: [[ip:public]], [[ip:private]]",
    "Mi router es [[ip:private]] pero no puedo entrar al panel.",
    "L'adresse IP du serveur est [[ip:public]], port 22.",
    "DATABASE_URL=postgres://app:****@[[ip:private]]:5432/prod",
    "Mar 15 03:12:44 web01 sshd[2231]: Failed password for root from [[ip:public]] port 52144 ssh2",
    '{"client_ip": "[[ip:public]]", "ua": "Mozilla/5.0", "ts": 1710497412, "status": 403}',
    "$ ping -c 1 [[ip:dns#p]]\n64 bytes from [[#p]]: icmp_seq=1 ttl=117 time=12.4 ms",
    "upstream backend {\n    server [[ip:private]]:3000;\n    server [[ip:private]]:3001;\n}",
    "My public IP is [[ip:public]].",
    "redis-cli -h [[ip:private]] -p 6379 ping",
    "kubectl get svc shows EXTERNAL-IP [[ip:public]] but the LB never answers.",
    "Bonjour, je n'arrive pas à joindre [[ip:private]] depuis le VPN.",
    "nameserver [[ip:dns]]\nnameserver [[ip:dns]]",
    "http://[[ip:private]]/admin/login.php?next=%2Fdashboard",
    "2: eth0: <BROADCAST,MULTICAST,UP> mtu 1500\n    inet [[ip:private]]/24 brd [[ip:private]] scope "
    "global eth0",
    "Server running at http://[[ip:loopback]]:5000/ (Press CTRL+C to quit)",
    "uvicorn main:app --host [[ip:loopback]] --port 8000 --reload",
    "¿Por qué el ping a [[ip:public]] tarda 300 ms?",
    "2024-03-15 11:02:33 WARN rate limit exceeded for [[ip:public]] (120 req/min)",
    "ssh -i ~/.ssh/id_ed25519 ubuntu@[[ip:public]]",
    "Le DNS [[ip:dns]] ne résout plus notre domaine, on passe sur [[ip:dns]].",
    "firewall-cmd --add-rich-rule='rule family=ipv4 source address=[[ip:public]] accept'",
    "Connecting to [[ip:private]]:27017... MongoNetworkError: connect ECONNREFUSED [[ip:private]]:27017",
    "[[ip:private]] is the gateway, [[ip:private]] the printer.",
    "socket.connect(('[[ip:private]]', 9092))",
    "Banned IPs today: [[ip:public]], [[ip:public]], [[ip:public]].",
    "El balanceador tiene la IP [[ip:public]]; los nodos, [[ip:private]] y [[ip:private]].",
    "Visit http://[[ip:public]]:8443/ui to see the dashboard.",
    "rtt min/avg/max = 11.2/12.8/15.1 ms to [[ip:loopback]]",
    # --- several kinds in one text (forms, tickets, tool calls)
    "Name: Diego Santos\nEmail: [[email:plain]]\nPhone: [[phone:br_mobile]]\nCard: [[card:visa_space]]",
    '{"tool": "create_contact", "arguments": {"email": "[[email:dotted]]", "phone": "[[phone:e164_fr]]"}}',
    "Nouveau client : [[email:upper]], tél. [[phone:fr_nat_space]], commande n° 55012 du 04/03/2024.",
    "Cliente: Lucía Ruiz <[[email:plus]]>, móvil [[phone:es_mobile]], IP de registro [[ip:public]].",
    "2024-03-15 10:22:01 INFO login ok user=[[email:digits]] ip=[[ip:public]] session=5f3c9a1e",
    "Hey, it's Tom ([[email:plain]] / [[phone:us_paren]]). My card [[card:mc_space]] got declined.",
    'create_payment(customer_email="[[email:subdomain]]", card="[[card:amex_contig]]", amount_cents=4599)',
    "Ticket #88412 — reporter [[email:dotted]] from [[ip:private]], browser Chrome 122.0.6261.94",
    "Account: [[email:plus]]\nAPI key: [[api_key:sk]]\nPlan: Team (10 seats)",
    "Merci de rappeler M. Girard au [[phone:fr_intl]] ou de lui écrire à [[email:plain]].",
    "Datos de envío: Pablo López, C/ Mayor 12, 28013 Madrid. Tel. [[phone:es_land]], [[email:digits]]",
    "[ERROR] webhook to http://[[ip:private]]:9000/hook failed for [[email:upper]] (timeout after 30s)",
    "Signed up as [[email:plain]] from [[ip:public]], then paid with [[card:disc_space]].",
    '{"messages": [{"role": "user", "content": "my email is [[email:dotted]] and phone '
    '[[phone:uk_mobile]]"}]}',
    "Contact: Aisha Haddad, [[phone:de_mobile]], [[email:subdomain]]",
    # --- code fences, no-space separators, more languages
    "```python\nUSERS = [\n    {\"name\": \"Femke de Vries\", \"email\": \"[[email:plain]]\", \"tel\": "
    "\"[[phone:nl_mobile]]\"},\n]\n```",
    "```bash\nexport AWS_ACCESS_KEY_ID=[[api_key:akia]]\nexport OPENAI_API_KEY=[[api_key:sk_proj]]\npython "
    "run.py\n```",
    "¿Me podéis llamar? [[phone:e164_es]]",
    "Mon IP fixe ([[ip:public]]) a été bloquée par votre pare-feu.",
    "Hola: escribidme a <[[email:plain]]> o al [[phone:es_land]].",
    "Numéro de CB : [[card:visa_dash]].",
    "Email:[[email:plain]];Tel:[[phone:us_dash]]",
    "(Mastercard [[card:mc2_space]])",
    '{"level":"debug","headers":{"authorization":"Bearer [[api_key:jwt]]","x-request-id":"r-8812"}}',
    "[[ip:public]]:443 -> [[ip:private]]:8443 (NAT)",
    "Teléfono: [[phone:us_paren]] (EE. UU.)",
    'contact_email: "[[email:subdomain]]"\ncontact_phone: "[[phone:e164_it]]"',
]

# ---------------------------------------------------------------- texts without PII, with look-alikes
LOOKALIKES = {
    "order/ticket/invoice numbers": [
        lambda: f"Hola, mi pedido {dn(3)}-{dn(7)}-{dn(7)} llegó roto.",
        lambda: f"Commande n° {dn(9)} : le suivi indique « en cours de livraison » depuis 5 jours.",
        lambda: f"Ticket ZD-{dn(6)} reopened by the customer after {R.randint(2, 9)} days.",
        lambda: f"Where is my order #{dn(7)}? It says shipped since {date_iso()}.",
        lambda: f"Pedido nº {dn(6)}-{d(2)} todavía no ha llegado, ¿me ayudan?",
        lambda: f"Ma commande CMD-{R.randint(2022, 2025)}-{dn(5)} est marquée livrée mais je n'ai rien reçu.",
        lambda: f"Order ID: {dn(3)}-{dn(7)}-{dn(7)} (placed {date_eu()})",
        lambda: f'{{"order_id": {dn(8)}, "status": "in_transit", "carrier": "UPS", '
                f'"tracking": "1Z{rand_chars(6, string.ascii_uppercase + string.digits)}{d(10)}"}}',
        lambda: f"Re: [Ticket #{dn(6)}] Refund not processed",
        lambda: f"JIRA PAY-{R.randint(100, 9999)} blocks REL-{R.randint(10, 999)}; see also "
                f"PAY-{R.randint(100, 9999)}.",
        lambda: f"Incidencia INC{d(7)} abierta por el equipo de redes el {date_eu()}.",
        lambda: f"Invoice INV-{R.randint(2022, 2025)}-{d(6)} is due on {date_iso()}.",
        lambda: f"Facture n° F{R.randint(2022, 2025)}{d(5)} du {R.randint(1, 28)} {pick(MONTHS_FR)} — "
                f"montant {R.randint(10, 999)},{d(2)} €",
        lambda: f"Factura {pick('ABC')}-{d(8)}, serie 2024. Albarán {dn(5)}.",
        lambda: f"Salesforce case {'0' * 2}{dn(6)} was escalated to tier 2.",
        lambda: f"RMA {R.randint(2023, 2025)}-{R.randint(1, 12):02d}-{d(4)} approved, ship the unit back.",
        lambda: f"Your booking reference is {rand_chars(6, string.ascii_uppercase)} and your e-ticket number "
                f"{dn(3)}-{dn(10)}.",
        lambda: f"Support request {dn(5)} merged into {dn(5)}.",
    ],
    "software versions/build numbers": [
        lambda: f"Broke after upgrading Node from 18.{R.randint(10, 19)}.0 to 20.{R.randint(5, 12)}.1 (npm "
                f"10.{R.randint(1, 5)}.0)",
        lambda: f"openjdk 17.0.{R.randint(5, 11)} 2024-01-16 LTS\nOpenJDK Runtime Environment (build "
                f"17.0.{R.randint(5, 11)}+{R.randint(7, 12)})",
        lambda: f"PostgreSQL 15.{R.randint(1, 7)} (Debian 15.{R.randint(1, 7)}-1.pgdg120+2) on "
                f"x86_64-pc-linux-gnu",
        lambda: f"I'm on Python 3.{R.randint(8, 13)}.{R.randint(0, 12)} with pip "
                f"{R.randint(22, 24)}.{R.randint(0, 3)}.",
        lambda: f"Chrome {R.randint(110, 126)}.0.{R.randint(5000, 6500)}.{R.randint(50, 200)} (Official "
                f"Build) (64-bit)",
        lambda: f"Windows 11 Pro, version 23H2, OS build 22631.{R.randint(2000, 4000)}",
        lambda: f"macOS 14.{R.randint(0, 6)}.{R.randint(0, 2)} (23{pick('EFG')}{R.randint(100, 300)})",
        lambda: f"Android 14 (UP1A.{d(6)}.{d(3)}), security patch {date_iso()}",
        lambda: f"uname -r -> 6.{R.randint(1, 8)}.0-{R.randint(10, 40)}-generic",
        lambda: f"NVIDIA-SMI 535.{R.randint(100, 200)}.{R.randint(1, 9):02d}  Driver Version: "
                f"535.{R.randint(100, 200)}"
                f".{R.randint(1, 9):02d}  CUDA Version: 12.{R.randint(0, 4)}",
        lambda: f"pip install torch=={R.randint(1, 2)}.{R.randint(0, 5)}.{R.randint(0, 2)}+cu121 --index-url "
                "https://download.pytorch.org/whl/cu121",
        lambda: f"Version 2.{R.randint(0, 20)}.{R.randint(0, 9)} (build "
                f"{date_iso().replace('-', '')}.{R.randint(1, 9)})",
        lambda: f"Cette version {R.randint(1, 5)}.{R.randint(0, 9)}.{R.randint(0, 9)} corrige le plantage "
                f"au démarrage.",
        lambda: f"Actualicé a la versión {R.randint(8, 12)}.{R.randint(0, 9)}.{R.randint(0, 20)} y ahora "
                f"falla el login.",
        lambda: f"Build #{dn(5)} failed on main, last green was #{dn(5)}.",
        lambda: f"https://github.com/acme/api/actions/runs/{dn(10)}/job/{dn(11)}",
        lambda: f"Docker version 24.0.{R.randint(1, 9)}, build {hx(7)}",
        lambda: f"iOS 17.{R.randint(0, 5)}.{R.randint(0, 1)}, app version "
                f"4.{R.randint(0, 30)}.{R.randint(0, 9)} "
                f"({dn(4)})",
        lambda: f"Firmware {R.randint(1, 9)}.{R.randint(0, 99):02d}.{d(4)} — release notes dated {date_eu()}",
    ],
    "semantic versions": [
        lambda: f"```toml\n[tool.poetry.dependencies]\npython = \"^3.{R.randint(9, 12)}\"\nfastapi = "
                f"\"^0.{R.randint(100, 111)}.0\"\n```",
        lambda: f"## [2.{R.randint(0, 9)}.{R.randint(0, 9)}] - {date_iso()}\n### Fixed\n- crash on empty "
                f"config",
        lambda: f'"dependencies": {{"react": "^18.{R.randint(0, 3)}.0", "next": '
                f'"14.{R.randint(0, 2)}.{R.randint(0, 9)}",'
                f' "typescript": "~5.{R.randint(0, 5)}.{R.randint(2, 4)}"}}',
        lambda: f"requires numpy>=1.{R.randint(20, 26)},<2.0 and "
                f"pandas=={R.randint(1, 2)}.{R.randint(0, 2)}.{R.randint(0, 3)}",
        lambda: f"Released {R.randint(1, 3)}.0.0-rc.{R.randint(1, 4)}+build.{R.randint(1, 99)} to the beta "
                f"channel.",
        lambda: f"bump version from 3.9.{R.randint(10, 19)} to 3.10.0",
        lambda: f"require github.com/gin-gonic/gin v1.9.{R.randint(0, 1)}\nrequire golang.org/x/net "
                f"v0.{R.randint(10, 25)}.0",
        lambda: f'serde = {{ version = "1.0.{R.randint(150, 210)}", features = ["derive"] }}',
        lambda: f"Se rompió todo al pasar de la 4.{R.randint(0, 9)}.{R.randint(0, 9)} a la "
                f"5.0.0-beta.{R.randint(1, 5)}.",
        lambda: f"La 0.{R.randint(10, 40)}.{R.randint(0, 5)} est compatible, la 1.0.0 non.",
        lambda: f"helm upgrade api ./chart --version {R.randint(0, 3)}.{R.randint(0, 20)}.{R.randint(0, 9)}",
        lambda: f"tag v{R.randint(1, 9)}.{R.randint(0, 30)}.{R.randint(0, 9)} pushed",
    ],
    "prices/currencies": [
        lambda: f"Subtotal ${R.randint(10, 99)}.{d(2)}, shipping $5.99, tax ${R.randint(1, 9)}.{d(2)}, "
                f"total ${R.randint(100, 199)}.{d(2)}",
        lambda: (lambda ht: f"Le devis s'élève à {ht // 1000}\u00a0{ht % 1000:03d} € HT, soit "
                 f"{ht * 12 // 10000}\u00a0{ht * 12 // 10 % 1000:03d},{ht * 12 % 10}0 € TTC.")(R.randint(1000, 9999)),
        lambda: f"The annual plan is ${R.randint(1, 9)},{d(3)}.{d(2)} before tax.",
        lambda: f"Total : {R.randint(1, 9)}\u202f{d(3)},{d(2)} € TTC",
        lambda: f"Precio final: {R.randint(1, 9)}.{d(3)},{d(2)} € (IVA incluido)",
        lambda: f"£{R.randint(10, 99)}.{d(2)}/month, or £{R.randint(100, 999)} a year",
        lambda: f"CHF {R.randint(1, 9)}'{d(3)}.{pick(['00', '50', '90'])} per seat",
        lambda: f"Valor: R$ {R.randint(1, 9)}.{d(3)},{d(2)} em até 10x",
        lambda: f"₹{R.randint(1, 9)},{d(2)},{d(3)} including GST",
        lambda: f"¥{R.randint(10, 99)},{d(3)} (tax incl.)",
        lambda: f"MXN ${R.randint(1, 9)},{d(3)}.00 — envío gratis",
        lambda: f"Le prix est passé de {R.randint(10, 40)},99 € à {R.randint(41, 80)},99 € sans prévenir.",
        lambda: f"Refunded USD {R.randint(10, 99)},{d(3)}.{d(2)} on {date_iso()}",
        lambda: f'{{"amount": {dn(5)}, "currency": "eur", "amount_decimal": "{dn(3)}.{d(2)}"}}',
        lambda: f"Budget Q3: 1\u00a0{d(3)}\u00a0{d(3)} € HT",
        lambda: f"Cuesta {R.randint(2, 9)}{d(2)} $ pero con el cupón queda en "
                f"{R.randint(1, 9)}{d(1)},{d(2)} $.",
    ],
    "dates/timestamps": [
        lambda: f"[{date_eu()} {hms()}] PHP Warning: Undefined array key \"id\" in /var/www/html/form.php "
                f"on line {R.randint(10, 400)}",
        lambda: f"Sprint {R.randint(20, 60)}: {R.randint(1, 28)}/{R.randint(1, 12)} – "
                f"{R.randint(1, 28)}/{R.randint(1, 12)} (ISO week "
                f"{R.randint(2024, 2025)}-W{R.randint(10, 52)})",
        lambda: f"{date_iso()}T{hms()}.{d(3)}Z ERROR worker: job failed after 3 retries",
        lambda: f"Last-Modified: {pick(['Mon', 'Tue', 'Fri'])}, {R.randint(1, 28):02d} "
                f"{pick(['Jan', 'Mar', 'Oct'])} "
                f"{R.randint(2021, 2025)} {hms()} GMT",
        lambda: f"Meeting moved to {date_eu()} {R.randint(8, 18)}:{pick(['00', '15', '30', '45'])}.",
        lambda: f"{R.randint(1, 12):02d}/{R.randint(1, 28):02d}/{R.randint(21, 25)} "
                f"{R.randint(1, 12)}:{d(1)}{d(1)} PM",
        lambda: f"backup_{date_iso().replace('-', '')}_{hms().replace(':', '')}.tar.gz",
        lambda: f'{{"created": {R.randint(1_600_000_000, 1_750_000_000)}, "updated_ms": '
                f'{R.randint(1_600_000_000_000, 1_750_000_000_000)}}}',
        lambda: f"Rendez-vous le {date_eu()} à {R.randint(8, 18)}h{pick(['00', '15', '30'])}.",
        lambda: f"La reunión es el {R.randint(1, 28)} de {pick(MONTHS_ES)} de {R.randint(2023, 2025)} a las "
                f"{R.randint(9, 19)}:{pick(['00', '30'])}.",
        lambda: f"cron: 0 */{R.randint(2, 8)} * * * — next run {date_iso()} {hms()} UTC",
        lambda: f"Deadline: {pick(MONTHS_EN)} {R.randint(1, 28)}, {R.randint(2023, 2025)}. "
                f"Q{R.randint(1, 4)} planning "
                f"starts week {R.randint(1, 52)}.",
        lambda: f"Valid from {date_iso()} to {date_iso()}",
        lambda: f"{date_eu().replace('/', '.')} {hms()} [INFO] Dienst gestartet",
        lambda: f"timestamp={R.randint(1_600_000_000, 1_750_000_000)}.{d(6)} level=debug msg=\"cache miss\"",
        lambda: f"Le {R.randint(1, 28)} {pick(MONTHS_FR)} {R.randint(2022, 2025)}, entre 14:00 et 16:30.",
    ],
    "durations": [
        lambda: f"Le trajet dure {R.randint(1, 5)} h {R.randint(0, 59):02d}, correspondance à "
                f"Lyon-Part-Dieu.",
        lambda: "retrying in 1.5s, then 3s, 6s, 12s (exponential backoff, max 5 attempts)",
        lambda: f"The migration took {R.randint(1, 9)}h {R.randint(1, 59)}m {R.randint(1, 59)}s.",
        lambda: f"ffmpeg: time=00:{R.randint(0, 59):02d}:{R.randint(0, 59):02d}.{d(2)} "
                f"bitrate={R.randint(500, 5000)}.{d(1)}kbits/s",
        lambda: f"elapsed={R.randint(100, 9999)}.{d(2)}ms p95={R.randint(100, 999)}ms "
                f"p99={R.randint(1, 3)}.{d(1)}s",
        lambda: f"ETA {R.randint(0, 9)}:{R.randint(0, 59):02d}:{R.randint(0, 59):02d}",
        lambda: f"Durée : {R.randint(1, 3)} h {R.randint(0, 59)} min — pause de 15 min incluse.",
        lambda: f"Duración estimada: {R.randint(20, 90)} min (más {R.randint(5, 15)} de preparación).",
        lambda: f" 10:{R.randint(10, 59)}:{R.randint(10, 59)} up {R.randint(2, 400)} days, "
                f"{R.randint(0, 23)}:{R.randint(10, 59)},"
                f"  3 users,  load average: 0.{d(2)}, 0.{d(2)}, 0.{d(2)}",
        lambda: f"requests.get(url, timeout=({R.randint(1, 5)}.05, {R.randint(10, 60)}))",
        lambda: f"Ran {R.randint(100, 999)} tests in {R.randint(1, 99)}.{d(3)}s\n\nOK "
                f"(skipped={R.randint(1, 9)})",
        lambda: f"TTL {R.randint(60, 86400)} s, refresh every {R.randint(5, 30)} min",
    ],
    "measurements": [
        lambda: f"Peso neto: {R.randint(1, 9)},{d(3)} kg; dimensiones {R.randint(10, 60)} × "
                f"{R.randint(10, 40)} × {R.randint(5, 30)} cm",
        lambda: f"GPU memory {R.randint(10, 79)}.{d(1)}/80.0 GB, temp {R.randint(40, 85)} °C, power "
                f"{R.randint(100, 690)} W / 700 W",
        lambda: f"Screen resolution {pick(['1920x1080', '2560x1440', '3840x2160', '1366x768'])} at "
                f"{pick([60, 120, 144])} Hz",
        lambda: f"Box: {R.randint(10, 60)}.{d(1)} cm x {R.randint(10, 60)}.{d(1)} cm x {R.randint(5, 30)} "
                f"cm, "
                f"{R.randint(1, 20)}.{d(1)} kg",
        lambda: f"Mem: {R.randint(8, 64)}.{d(1)}Gi total, {R.randint(1, 8)}.{d(1)}Gi used, swap "
                f"{R.randint(0, 4)}.0Gi",
        lambda: f"I'm 5'{R.randint(1, 11)}\" ({R.randint(150, 190)} cm) and {R.randint(55, 95)} kg.",
        lambda: f"Il fait {R.randint(-5, 35)} °C, vent à {R.randint(5, 60)} km/h, humidité "
                f"{R.randint(30, 99)} %.",
        lambda: f"Tengo que recorrer {R.randint(2, 40)},{d(1)} km en menos de {R.randint(1, 3)} h.",
        lambda: f"capacitor {R.randint(1, 470)} µF {R.randint(6, 50)} V, resistor "
                f"{R.randint(1, 99)}.{d(1)} kΩ",
        lambda: f"disk /dev/nvme0n1p2 {R.randint(100, 999)}G {R.randint(10, 99)}G {R.randint(100, 900)}G "
                f"{R.randint(5, 95)}% /",
        lambda: f"A4 is 210 × 297 mm; letter is 8.5 × 11 in ({R.randint(215, 216)}.9 × 279.4 mm).",
        lambda: f"Model size: {R.randint(1, 70)}.{d(1)}B params, {R.randint(2, 140)}.{d(2)} GiB in bf16",
    ],
    "arithmetic": [
        lambda: "```python\n>>> 0.1 + 0.2\n0.30000000000000004\n```",
        lambda: (lambda p, n: f"El {p} % de {n} es {p * n / 100:g}.")(R.randint(5, 50), R.randint(100, 5000)),
        lambda: (lambda a, b: f"{a} + {b} = {a + b}")(R.randint(100, 9999), R.randint(100, 9999)),
        lambda: "2^32 = 4294967296 and 2^64 = 18446744073709551616",
        lambda: (lambda a, b: f"What is {a} × {b}? I got {a * b}.")(R.randint(12, 99), R.randint(12, 99)),
        lambda: f"({R.randint(100, 500)} - 32) * 5 / 9 = ?",
        lambda: f"1024 * 768 = 786432, {R.randint(3, 9)} * 1024 = ?",
        lambda: f"assert {R.randint(10, 99)} % {R.randint(2, 9)} in range(10)",
        lambda: f"¿Cuánto es {R.randint(100, 999)} entre {R.randint(2, 12)}? Necesito el resultado con 2 "
                f"decimales.",
        lambda: f"Calcule {R.randint(1000, 9999)} − {R.randint(100, 999)} puis divise par {R.randint(2, 9)}.",
        lambda: (lambda n: f"factorial({n}) = {math.factorial(n)}")(R.randint(13, 19)),
        lambda: f"x = np.linspace(0, {R.randint(1, 100)}, {R.randint(100, 1000)}); y = {R.randint(2, 9)} * "
                f"x ** 2 - 3",
        lambda: f"{R.randint(10, 99)}.{d(3)} / {R.randint(2, 9)}.{d(2)} ≈ {R.randint(1, 40)}.{d(4)}",
    ],
    "long numeric ids (not Luhn-valid)": [
        lambda: f"Mon numéro client est le {nl(11)}, contrat {nl(10)}.",
        lambda: f"ID de transacción {nl(18)} (pasarela Redsys)",
        lambda: f"customer_id={nl(16)} not found in CRM",
        lambda: f"Discord user ID {nl(18)} keeps spamming the server.",
        lambda: f"https://x.com/acme/status/{nl(19)}",
        lambda: f"transaction {nl(16)} settled on {date_iso()}",
        lambda: f"Número de expediente: {R.randint(2020, 2025)}/{nl(12)}",
        lambda: f"Référence de virement : {nl(15)}",
        lambda: f"USPS tracking 9400 {d(4)} {d(4)} {d(4)} {d(4)} {d(2)}",
        lambda: f'{{"trace_id": "{nl(19)}", "span_id": "{nl(16)}"}}',
        lambda: f"Steam ID 7656119{nl(10)}",
        lambda: f"Telegram chat_id: -100{nl(10)}",
        lambda: f"Snowflake query id {nl(16)}, warehouse COMPUTE_WH",
        lambda: f"Lote de producción {nl(14)}, caducidad {date_eu()}",
        lambda: f"Numéro de dossier {nl(13)} — merci de le rappeler dans vos échanges.",
        lambda: f"GTIN {nl(14)} / EAN {nl(13)}",
    ],
    "UUIDs": [
        lambda: f"```\nCorrelation-Id: {uid()}\nTraceparent: 00-{hx(32)}-{hx(16)}-01\n```",
        lambda: f"request_id={uid()} status=500",
        lambda: f'{{"id": "{uid()}", "parent": "{uid()}"}}',
        lambda: f"Subscription {uid()} was cancelled on {date_iso()}.",
        lambda: f"docker rm {hx(12)} && kubectl delete pod "
                f"api-{hx(10)}-{rand_chars(5, string.ascii_lowercase)}",
        lambda: f"El identificador de la sesión es {uid()}.",
        lambda: f"Identifiant de corrélation : {uid().upper()}",
        lambda: f"X-Request-ID: {uid()}",
        lambda: f"/projects/{uid()}/datasets/{uid()}/export",
    ],
    "git commit hashes": [
        lambda: f"$ git log --oneline\n{hx(7)} Bump deps\n{hx(7)} Fix typo in README\n{hx(7)} Merge pull "
                f"request #{R.randint(100, 9999)} from acme/feat",
        lambda: f"commit {hx(40)}\nMerge: {hx(7)} {hx(7)}",
        lambda: f"Fixed in {hx(7)}, cherry-picked to release/2.{R.randint(1, 9)} as {hx(7)}.",
        lambda: f"HEAD is now at {hx(7)} Fix race in scheduler",
        lambda: f"git rebase -i {hx(12)}~3",
        lambda: f"El bug se introdujo en {hx(10)}; revertí con git revert {hx(7)}.",
        lambda: f"sha256:{hx(64)}",
        lambda: f"md5sum: {hx(32)}  model.safetensors",
        lambda: f'ETag: "{hx(40)}"',
        lambda: f"Le correctif est dans le commit {hx(8)} (branche hotfix/{R.randint(100, 999)}).",
    ],
    "hex colors": [
        lambda: f":root {{ --brand-500: #{hx(6)}; --brand-600: #{hx(6)}; --radius: {R.randint(2, 12)}px; }}",
        lambda: f".btn-primary {{ color: #{hx(6)}; background: #{hx(6).upper()}; border: 1px solid "
                f"#{hx(3)}; }}",
        lambda: f"Use #{hx(6).upper()} for the header and rgba({R.randint(0, 255)}, {R.randint(0, 255)}, "
                f"{R.randint(0, 255)}, 0.{R.randint(1, 9)}) for the overlay.",
        lambda: f"Le logo utilise #{hx(6)} et #{hx(6)}.",
        lambda: f'theme = {{"primary": "#{hx(6)}", "secondary": "#{hx(6)}", "radius": {R.randint(2, 16)}}}',
        lambda: f"El color corporativo es el #{hx(6).upper()} (Pantone {R.randint(100, 999)} C).",
        lambda: f"color: hsl({R.randint(0, 360)}, {R.randint(10, 100)}%, {R.randint(10, 90)}%);",
    ],
    "file names, units and handles with @": [
        lambda: "ls assets/\nlogo.svg  logo@2x.png  logo@3x.png  favicon-32x32.png",
        lambda: f"Add icon@2x.png and icon@3x.png to Assets.xcassets "
                f"({R.randint(40, 180)}x{R.randint(40, 180)} px).",
        lambda: f"npm i lodash@4.17.21 @angular/core@17.{R.randint(0, 3)}.{R.randint(0, 9)}",
        lambda: "splash@2x~ipad.png is missing from the bundle",
        lambda: f"docker pull python@sha256:{hx(64)}",
        lambda: "@pytest.mark.parametrize('n', [1, 2, 3])\ndef test_sq(n):\n    assert n @ n",
        lambda: "@media (min-width: 768px) and (max-width: 1024px) { .grid { gap: 12px; } }",
        lambda: "Thanks @maria_dev and @jlopez for the review!",
        lambda: "@Override\npublic String toString() { return name + \"@\" + version; }",
        lambda: f"Le fichier logo@{R.randint(2, 3)}x.webp est trop lourd ({R.randint(200, 900)} Ko).",
        lambda: "pnpm add -D @types/node@20 @vitejs/plugin-react@4.2.1",
        lambda: "result = A @ B.T  # matrix product, shapes (64, 128) @ (128, 64)",
        lambda: "El avatar@2x.jpg se ve borroso en pantallas retina.",
        lambda: "systemctl restart getty@tty1.service",
        lambda: "journalctl -u openvpn-client@office.service --since today",
    ],
    "package names and sk- look-alikes": [
        lambda: "pip install sk-learn  # is this the same as scikit-learn?",
        lambda: "ModuleNotFoundError: No module named 'sklearn' even though I installed sk-learn",
        lambda: '<div class="sk-circle"><div class="sk-circle1 sk-child"></div></div>',
        lambda: "Locale sk-SK uses a comma as decimal separator.",
        lambda: "npm install sk-video-player@2.0.1 fails on node 18",
        lambda: "¿sk-learn o scikit-learn? En requirements.txt puse scikit-learn==1.4.1.post1",
        lambda: "OPENAI_API_KEY=sk-...  # put your own key here",
        lambda: "Authorization: Bearer <YOUR_TOKEN>",
        lambda: "curl -H \"Authorization: Bearer $GITHUB_TOKEN\" https://api.github.com/user",
        lambda: "Remplacez sk-xxxx par votre clé et ghp_xxxxxxxx par votre token.",
        lambda: "headers = {'Authorization': f'Bearer {os.environ[\"API_TOKEN\"]}'}",
        lambda: "aws_access_key_id = <your-access-key-id>",
        lambda: "The task-runner sk-scheduler-v2 crashed, see skaffold.yaml",
    ],
    "CSS/URL fragments": [
        lambda: f"margin: 0 {R.randint(2, 16)}px {R.randint(8, 32)}px {R.randint(8, 48)}px; z-index: "
                f"{R.randint(10, 9999)};",
        lambda: "https://docs.python.org/3/library/re.html#re.sub",
        lambda: f"https://shop.example.com/p/{R.randint(1000, 99999)}?utm_source=newsletter&utm_campaign="
                f"{R.randint(2023, 2025)}-{R.randint(1, 12):02d}&page={R.randint(2, 9)}",
        lambda: "transform: translate(-50%, -50%) rotate(45deg) scale(1.05);",
        lambda: "grid-template-columns: repeat(3, minmax(0, 1fr)); grid-gap: 1.5rem 2rem;",
        lambda: f"See https://en.wikipedia.org/wiki/Luhn_algorithm#Example_for_validating_check_digit and "
                f"RFC {R.randint(1000, 9999)}.",
        lambda: f"/api/v{R.randint(1, 3)}/users/{R.randint(1, 99999)}/orders?limit=50"
                f"&offset={R.randint(0, 500)}",
        lambda: "font: 400 14px/1.4 -apple-system, 'Segoe UI', Roboto, sans-serif;",
        lambda: "a[href^=\"http\"]:not([href*=\"acme.io\"])::after { content: \" ↗\"; }",
        lambda: f"https://maps.example.com/@{R.randint(-60, 60)}.{d(6)},{R.randint(-120, 120)}.{d(6)},"
                f"{R.randint(10, 20)}z",
    ],
    "coordinates": [
        lambda: f"Coordenadas de la obra: {R.randint(36, 43)}.{d(6)}, -{R.randint(1, 8)}.{d(6)}",
        lambda: "48.8566, 2.3522",
        lambda: f"40.4168° N, 3.7038° W — Puerta del Sol, km {R.randint(0, 9)}",
        lambda: f"lat=-33.{d(4)}&lon=151.{d(4)}",
        lambda: f"GPS: 19.{d(4)}, -99.{d(4)} (Ciudad de México)",
        lambda: "48°51′24″N 2°21′03″E",
        lambda: f'{{"type": "Point", "coordinates": [{R.randint(-10, 30)}.{d(6)}, '
                f'{R.randint(35, 60)}.{d(6)}]}}',
        lambda: f"Le point de rendez-vous est à 45.{d(4)}, 4.{d(4)}.",
        lambda: f"bbox = ({R.randint(-10, 10)}.{d(3)}, {R.randint(35, 45)}.{d(3)}, "
                f"{R.randint(11, 20)}.{d(3)}, "
                f"{R.randint(46, 55)}.{d(3)})",
    ],
    "ISBNs (not Luhn-valid)": [
        lambda: f"ISBN {isbn13(dashed=True)}",
        lambda: f"ISBN-13: {isbn13()} — Clean Code, 1st edition",
        lambda: f"Le livre (ISBN {isbn13(dashed=True)}) est en rupture de stock.",
        lambda: f"¿Tienen el libro con ISBN {isbn13()} en español?",
        lambda: f"@book{{knuth, title={{TAOCP}}, isbn={{{isbn13(dashed=True)}}}, "
                f"year={{{R.randint(1968, 2011)}}}}}",
        lambda: f"ISBN-10 {isbn10()}, ISBN-13 {isbn13()}",
    ],
    "percentages": [
        lambda: f"Il reste {R.randint(5, 60)} % de batterie, soit environ {R.randint(1, 9)} h.",
        lambda: f"CPU at {R.randint(50, 99)}.{d(1)}% for the last {R.randint(5, 60)} minutes.",
        lambda: f"La tasa de conversión bajó del {R.randint(2, 9)},{d(1)} % al {R.randint(1, 2)},{d(1)} %.",
        lambda: f"Taux de réussite : {R.randint(60, 99)},{d(1)} % (contre {R.randint(50, 89)} % l'an "
                f"dernier).",
        lambda: f"accuracy 0.{d(4)} ({R.randint(80, 99)}.{d(2)}%), F1 0.{d(3)}",
        lambda: f"SLA: 99.{pick(['9', '95', '99'])}% uptime, credits of {R.randint(5, 25)}% below that.",
        lambda: f"[{'#' * R.randint(5, 20)}{'.' * 5}] {R.randint(10, 99)}% | "
                f"{R.randint(100, 999)}/{R.randint(1000, 2000)} "
                f"[{R.randint(0, 9)}:{R.randint(10, 59)}<00:{R.randint(10, 59)}, "
                f"{R.randint(1, 99)}.{d(2)}it/s]",
    ],
    "short phone-like numbers": [
        lambda: f"Appartement {R.randint(1, 60)}, étage {R.randint(1, 9)}, digicode {d(4)}B",
        lambda: f"Llame a la extensión {R.randint(100, 999)} o acuda al mostrador {R.randint(1, 20)}.",
        lambda: "Call 311 for non-emergencies; dial 9 for an outside line.",
        lambda: f"Call the front desk, ext. {R.randint(1000, 9999)}.",
        lambda: f"The meeting is in room {R.randint(100, 999)}-{pick('ABC')}, {R.randint(2, 9)}th floor.",
        lambda: "In an emergency dial 911 (or 112 in Europe).",
        lambda: "En caso de emergencia, marca el 112.",
        lambda: "Pour le SAMU, appelez le 15 ; pompiers : 18.",
        lambda: f"Ship to ZIP {R.randint(10000, 99999)}-{d(4)}.",
        lambda: f"Código postal {R.randint(10000, 52999)}, {pick(['Madrid', 'Sevilla', 'Bilbao'])}.",
        lambda: f"Gate B{R.randint(1, 60)}, seat {R.randint(1, 40)}{pick('ABCDEF')}, flight AF "
                f"{R.randint(1000, 9999)}",
        lambda: f"SKU {R.randint(100, 999)}-{R.randint(10, 99)}, qty {R.randint(1, 20)}",
        lambda: f"File \"main.py\", line {R.randint(100, 999)}, in handle\nKeyError: 'user'",
        lambda: f"Error 0x{hx(8).upper()} while installing update KB{dn(7)}",
        lambda: f"Your one-time code is {d(6)}. It expires in 10 minutes.",
        lambda: f"Extensions {R.randint(2000, 2999)} or {R.randint(2000, 2999)} for billing.",
        lambda: f"Bus {R.randint(10, 99)} then tram T{R.randint(1, 9)}, stop n° {R.randint(100, 999)}",
        lambda: f"Listening on port {R.randint(1024, 65535)} (pid {R.randint(1000, 99999)})",
        lambda: f"Code postal {R.randint(10, 95)}{d(3)}, bâtiment {pick('ABC')}, porte {R.randint(1, 30)}.",
        lambda: f"Version {R.randint(1, 3)}-{R.randint(100, 999)}-{R.randint(10, 99)} of the form is "
                f"deprecated.",
        lambda: f"Le colis pèse {R.randint(1, 9)},{d(3)} kg et mesure {R.randint(10, 99)} x "
                f"{R.randint(10, 99)} x "
                f"{R.randint(10, 99)} cm.",
    ],
    "cloud resource ids": [
        lambda: f"GCP project number {dn(12)}, billing account "
                f"{hx(6).upper()}-{hx(6).upper()}-{hx(6).upper()}",
        lambda: f"arn:aws:iam::{dn(12)}:role/deploy-{pick(['prod', 'staging'])}",
        lambda: f"aws ec2 describe-instances --instance-ids i-0{hx(16)} --region eu-west-{R.randint(1, 3)}",
        lambda: f"ami-0{hx(16)} in vpc-0{hx(16)}, sg-0{hx(16)}",
        lambda: f"projects/acme-prod-{d(6)}/locations/europe-west1/services/api",
        lambda: f"pod api-{hx(9)}-{rand_chars(5, string.ascii_lowercase + string.digits)} "
                f"CrashLoopBackOff, restarts {R.randint(3, 40)}",
        lambda: f"Stripe PaymentIntent pi_3{rand_chars(23)} succeeded for cus_{rand_chars(14)}",
        lambda: f"s3://acme-logs-{dn(12)}/{date_iso().replace('-', '/')}/app.log.gz",
    ],
    "hashes and encoded blobs": [
        lambda: f'"integrity": "sha512-{base64.b64encode(R.randbytes(64)).decode()}"',
        lambda: f'<img '
                f'src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA{base64.b64encode(R.randbytes(30)).decode()}">',
        lambda: f"SHA256 (ubuntu-22.04.4-live-server-amd64.iso) = {hx(64)}",
        lambda: f"salt=$2b$12${rand_chars(22, ALNUM + './')}",
        lambda: f'nonce="{base64.b64encode(R.randbytes(16)).decode()}"',
    ],
    "code snippets with numbers": [
        lambda: "```python\nfor i in range(0, 1000, 25):\n    batch = rows[i:i + 25]\n    "
                "db.insert_many(batch)\n```",
        lambda: "```js\nconst TIMEOUT_MS = 30_000;\nsetInterval(poll, 5 * 60 * 1000);\n```",
        lambda: "```sql\nSELECT order_id, SUM(amount) FROM payments WHERE created_at >= '2024-01-01'\n"
                "GROUP BY 1 HAVING SUM(amount) > 1000 LIMIT 50;\n```",
        lambda: "```bash\nfor port in 8080 8081 8082; do curl -s localhost:$port/health; done\n```",
        lambda: "```go\nconst maxRetries = 5\nvar backoff = []time.Duration{100 * time.Millisecond, 250 * "
                "time.Millisecond}\n```",
        lambda: "```yaml\nresources:\n  limits:\n    cpu: 500m\n    memory: 512Mi\nreplicas: 3\n```",
        lambda: f"```json\n{{\"page\": 2, \"per_page\": 50, \"total\": {dn(4)}, \"ids\": [{dn(5)}, "
                f"{dn(5)}, {dn(5)}]}}\n```",
        lambda: "```python\nEMAIL_RE = r'^[\\w.+-]+@[\\w-]+\\.[\\w.]+$'\nPHONE_RE = r'^\\+?\\d{7,15}$'\n```",
        lambda: "```c\n#define BUF_SIZE 4096\nuint8_t mask = 0xFF;\nint octets[4] = {0};\n```",
        lambda: "def luhn(n: str) -> bool:\n    total = sum(int(c) for c in n[::-2])\n    return total % "
                "10 == 0",
        lambda: "```css\n.card { width: 320px; padding: 16px 24px; box-shadow: 0 2px 8px rgba(0, 0, 0, "
                ".15); }\n```",
        lambda: f"Voici mon code :\n```python\nprix_ttc = round(prix_ht * 1.2, 2)  # TVA 20 %\nassert "
                f"prix_ttc == {R.randint(10, 99)}.{d(2)}\n```",
    ],
    "four-part versions and OIDs (dotted-quad look-alikes)": [
        lambda: f'[assembly: AssemblyVersion("{R.randint(1, 4)}.{R.randint(0, 9)}.0.0")]',
        lambda: f"snmpget -v2c -c public switch01 1.3.6.1.2.1.1.3.0 (OID sysUpTime), ifIndex "
                f"{R.randint(1, 48)}",
        lambda: f"FileVersion {R.randint(1, 9)}.{R.randint(0, 9)}.{R.randint(0, 9)}.{R.randint(0, 99)} of "
                f"the driver "
                "is signed.",
    ],
    "ssh remotes (git@host)": [
        lambda: "git remote add origin git@github.com:acme/payments-api.git",
        lambda: "git clone git@gitlab.com:grupo-orion/infra.git falla con Permission denied (publickey).",
    ],
    "misc network ids (MAC, ASN)": [
        lambda: "ether " + ":".join(hx(2) for _ in range(6)) + f" txqueuelen {R.randint(1000, 1000)}",
        lambda: f"Our ASN is AS{R.randint(10000, 65000)} and we peer at "
                f"{pick(['AMS-IX', 'DE-CIX', 'LINX'])}.",
        lambda: f"Wi-Fi BSSID {':'.join(hx(2).upper() for _ in range(6))}, channel {R.randint(1, 165)}",
    ],
}


def isbn13(dashed: bool = False) -> str:
    while True:
        body = "978" + d(9)
        check = (10 - sum(int(c) * (1 if i % 2 == 0 else 3) for i, c in enumerate(body)) % 10) % 10
        num = body + str(check)
        if not luhn_ok(num):
            break
    return f"{num[:3]}-{num[3]}-{num[4:6]}-{num[6:12]}-{num[12]}" if dashed else num


def isbn10() -> str:
    body = d(9)
    check = sum((10 - i) * int(c) for i, c in enumerate(body)) % 11
    check = (11 - check) % 11
    return f"{body[0]}-{body[1:4]}-{body[4:9]}-{'X' if check == 10 else check}"


# ---------------------------------------------------------------- checks on text outside the planted values
EMAILISH = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
EMAIL_SHAPED_OK = ("ssh remotes (git@host)", "file names, units and handles with @")
QUAD = re.compile(r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?![\d.])")
KEYISH = re.compile(r"sk-(?:proj-)?[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|ghp_[A-Za-z0-9]{36}|eyJ[\w-]{10,}\.")


def luhn_runs(text: str) -> list[str]:
    """Digit runs (groups joined by single spaces or dashes) of 13-19 digits that pass the Luhn check."""
    found = []
    for m in re.finditer(r"\d+(?:[ -]\d+)*", text):
        groups = re.split(r"[ -]", m[0])
        for i in range(len(groups)):
            acc = ""
            for g in groups[i:]:
                acc += g
                if len(acc) > 19:
                    break
                if len(acc) >= 13 and luhn_ok(acc):
                    found.append(acc)
        for run in re.findall(r"\d{13,19}", m[0]):
            if luhn_ok(run):
                found.append(run)
    return found


def clean_outside(text: str, category: str | None) -> bool:
    if luhn_runs(text) or KEYISH.search(text):
        return False
    if EMAILISH.search(text) and category not in EMAIL_SHAPED_OK:
        return False
    quads = [q for q in QUAD.findall(text) if all(int(o) <= 255 for o in q.split("."))]
    return not quads or category == "four-part versions and OIDs (dotted-quad look-alikes)"


def masked(row: dict) -> str:
    text = row["text"]
    for s, e, _ in row["spans"]:
        text = text[:s] + "\u2588" * (e - s) + text[e:]
    return text


def build() -> list[dict]:
    rows = []
    for tpl in PII_TEMPLATES:
        row = render(tpl)
        text, prev_end = row["text"], -1
        for (s, e, kind), fmt in zip(row["spans"], row["formats"], strict=True):
            value = text[s:e]
            check_value(kind, fmt.split(":", 1)[1], value)  # the span's text is the value planted
            assert s >= prev_end, ("overlap", text)
            assert s == 0 or not text[s - 1].isalnum(), ("glued before", value, text)
            assert e == len(text) or not text[e].isalnum(), ("glued after", value, text)
            prev_end = e
        assert clean_outside(masked(row), None), ("stray look-alike in a PII text", text)
        rows.append(row)
    n_pii = len(rows)
    for category, makers in LOOKALIKES.items():
        for make in makers:
            for _ in range(100):  # redraw until the random parts hold no accidental PII shape
                text = make()
                if clean_outside(text, category):
                    break
            else:
                raise AssertionError(("look-alike keeps failing its checks", category, text))
            rows.append({"text": text, "spans": [], "formats": [f"lookalike:{category}"]})
    assert len({r["text"] for r in rows}) == len(rows), "duplicate texts"
    assert sum(len(r["spans"]) for r in rows[:n_pii]) >= 250 and len(rows) - n_pii >= 250, (
        sum(len(r["spans"]) for r in rows[:n_pii]), len(rows) - n_pii)
    R.shuffle(rows)
    return rows


def main() -> None:
    rows = build()
    with OUT.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    pii = [r for r in rows if r["spans"]]
    kinds = Counter(s[2] for r in pii for s in r["spans"])
    print(f"wrote {OUT}: {len(rows)} texts, {len(pii)} with {sum(kinds.values())} PII spans "
          f"({', '.join(f'{k} {kinds[k]}' for k in KINDS)}), {len(rows) - len(pii)} look-alikes")


if __name__ == "__main__":
    main()
