#!/usr/bin/env python3
"""Generate conf/traffic/demo.jsonl: a fake production traffic log for quantgate.

The log imitates what an OpenAI-compatible gateway serving `smollm2-135m-instruct`
would record: one JSON object per line with id, ts, tenant, request (chat `messages`
or, for ~3 % of lines, completions `prompt`), response, usage, latency_ms and labels.

Everything is SYNTHETIC. Prompts and responses are assembled by this script from the
template banks in scripts/demo_traffic_templates.json and from facts it computes itself
(correct arithmetic for math, real Python functions whose example outputs are obtained
by running them, valid JSON for extraction / tool calls). No response was produced by
a model, so the "responses" are reference-quality, not a model's actual behaviour.

Deliberate defects, for exercising the loader and the redactor:
  * ~15 % of lines have no `labels`, ~5 % have only one of domain / lang;
  * ~8 % of requests carry planted PII (email, phone, card, API key, IPv4);
  * exactly 12 malformed lines at fixed positions (see MALFORMED below).

Template banks (scripts/demo_traffic_templates.json, loaded as the namespace `T`; the
banks are plain data, keyed by language "en"/"es"/"fr" where the text differs):
  * strings are `str.format` templates filled from computed facts (`{{`/`}}` = literal
    braces); in the PII banks (PII_USER, API_KEY_USER, PII_ECHO) `{v}` is the planted
    value; in PHONE_FORMATS each '#' becomes a random digit;
  * fr CITIES start with a consonant so "de {city}" stays correct; PRODUCTS are all
    masculine / consonant-initial so articles and possessives need no agreement;
  * ITEMS and PRICED rows are [en, es, fr], indexed by LANG_INDEX; HABITS rows are
    [habit, habit_do, outcome, outcome_verb];
  * a MATH answer ("a") ends with "... . The answer is N."; the MATH_OUTRO sentence is
    inserted just before that final sentence;
  * CODE_TASKS "code" is executed and its "examples" evaluated, so shown outputs are real;
  * TOOL_REQUESTS entries are [template, argument keys it fixes]; SUPPORT scenarios have
    "ask" variants and "answer" as a list of slots, one sentence picked per slot;
    FOLLOWUPS entries are [user question, assistant answer];
  * the top-level "_comment" entry is documentation only.
Changing any bank changes the output: regenerate conf/traffic/demo.jsonl afterwards
(tests/scripts/test_demo_traffic.py checks the committed file is reproduced exactly).

Deterministic: the same --seed/--n always gives byte-identical output (stdlib only).
Usage: python3 scripts/make_demo_traffic.py [--seed 7] [--n 1600] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import string
import unicodedata
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

TEMPLATES = Path(__file__).resolve().with_name("demo_traffic_templates.json")
T = SimpleNamespace(**json.loads(TEMPLATES.read_text(encoding="utf-8")))

MODEL = "smollm2-135m-instruct"
START = datetime(2026, 11, 27, tzinfo=UTC)
TENANTS = {  # tenant: (share of traffic, domain weights)
    "acme": (0.40, {"code": 40, "json_tool": 25, "support": 15, "math": 10, "summarize": 10}),
    "globex": (0.35, {"support": 45, "summarize": 20, "json_tool": 15, "math": 10, "code": 10}),
    "initech": (0.25, {"math": 45, "summarize": 20, "support": 15, "code": 10, "json_tool": 10}),
}
# probability of es and (separately) of fr per domain; code is English only
LANG_ES_FR = {"code": 0.0, "json_tool": 0.08, "math": 0.21, "support": 0.24, "summarize": 0.21}
# 1-based line numbers (for the default n=1600, i.e. 1612 lines) -> why the line is malformed
MALFORMED = {
    57: "truncated_json", 190: "json_array", 333: "missing_request", 468: "empty_messages",
    601: "empty_content", 745: "tenant_not_string", 880: "max_tokens_string",
    1013: "invalid_utf8", 1150: "oversized_line", 1291: "duplicate_id",
    1420: "bad_timestamp", 1555: "unknown_role",
}
PII_KINDS = ["email", "phone", "card", "api_key", "ip"]
PII_WEIGHTS = [30, 25, 15, 15, 15]


def n_tokens(text: str) -> int:
    return round(len(text.split()) * 1.3)


def ascii_slug(s: str) -> str:
    return unicodedata.normalize("NFKD", s).encode("ascii", "ignore").decode().lower()


def money(x, lang: str) -> str:
    return f"${x}" if lang == "en" else f"{x} €"


def decimal(x: float, lang: str) -> str:
    return f"{x:.1f}" if lang == "en" else f"{x:.1f}".replace(".", ",")


def thousands(x: int, lang: str) -> str:
    return f"{x:,}".replace(",", {"en": ",", "es": ".", "fr": " "}[lang])


class Gen:
    def __init__(self, rng: random.Random, pii_rate: float = 0.09):
        self.r, self.pii_rate = rng, pii_rate
        self.pii = Counter()  # kind -> values planted
        self.pii_in_response = 0  # requests whose response contains planted PII
        self.pii_requests = 0  # requests with any planted PII
        self.planted: list[tuple[str, str]] = []  # (kind, value) in the current record

    # ------------------------------------------------------------ PII values
    def pii_value(self, kind: str, lang: str) -> str:
        v = self._pii_value(kind, lang)
        self.planted.append((kind, v))
        self.pii[kind] += 1
        return v

    def _pii_value(self, kind: str, lang: str) -> str:
        r = self.r
        if kind == "email":
            first = ascii_slug(r.choice(T.NAMES[lang]))
            last = ascii_slug(r.choice(T.SURNAMES)).replace(" ", "")
            local = r.choice([f"{first}.{last}", f"{first}{r.randint(1, 99)}",
                              f"{first[0]}{last}", f"{first}_{last}"])
            return f"{local}@{r.choice(T.EMAIL_DOMAINS)}"
        if kind == "phone":
            fmt = r.choice(T.PHONE_FORMATS[lang])  # '#' = random digit
            return "".join(str(r.randint(0, 9)) if ch == "#" else ch for ch in fmt)
        if kind == "card":
            prefix, length, groups = r.choice(
                [("4", 16, (4, 4, 4, 4)), ("51", 16, (4, 4, 4, 4)), ("37", 15, (4, 6, 5))]
            )
            body = prefix + "".join(str(r.randint(0, 9)) for _ in range(length - len(prefix) - 1))
            total = 0
            for i, ch in enumerate(reversed(body)):  # Luhn check digit
                v = int(ch) * (2 if i % 2 == 0 else 1)
                total += v - 9 if v > 9 else v
            digits, sep = body + str((10 - total % 10) % 10), r.choice([" ", "-", ""])
            cuts = [sum(groups[:k]) for k in range(len(groups) + 1)]
            return sep.join(digits[a:b] for a, b in zip(cuts, cuts[1:], strict=False))
        if kind == "api_key":
            alnum = string.ascii_letters + string.digits

            def pick(chars: str, k: int) -> str:
                return "".join(r.choice(chars) for _ in range(k))

            return r.choice([f"sk-{pick(alnum, 40)}", f"sk-proj-{pick(alnum, 36)}",
                             f"sk-{pick(alnum, 32)}", f"ghp_{pick(alnum, 36)}",
                             f"AKIA{pick(string.ascii_uppercase + string.digits, 16)}"])
        a = r.choice([(10, r.randint(0, 255)), (192, 168), (172, r.randint(16, 31)), (203, 0)])
        return f"{a[0]}.{a[1]}.{r.randint(0, 255)}.{r.randint(1, 254)}"

    def plant(self, text: str, kind: str, lang: str) -> tuple[str, str]:
        """Add a sentence carrying a fresh PII value to `text`; returns (text, value)."""
        v = self.pii_value(kind, lang)
        bank = T.PII_USER[kind][lang]
        if kind == "api_key" and lang == "en":
            provider = {"AKIA": "aws", "ghp_": "github"}.get(v[:4], "openai")
            bank = T.API_KEY_USER[provider]
        sentence = self.r.choice(bank).format(v=v)
        return (f"{text} {sentence}" if self.r.random() < 0.7 else f"{sentence}\n\n{text}"), v

    # ------------------------------------------------------------ domains
    def math(self, lang: str):
        r, li = self.r, T.LANG_INDEX[lang]
        kind = r.choice(list(T.MATH))
        f = {"name": r.choice(T.NAMES[lang]), "item": r.choice(T.ITEMS)[li]}
        if kind == "change":
            f.update(a=r.randint(2, 9), p=r.randint(2, 11))
            f["total"] = f["a"] * f["p"]
            f["bill"] = next(b for b in (20, 50, 100) if b > f["total"])
            f["change"] = f["bill"] - f["total"]
        elif kind == "share":
            f.update(k=r.randint(3, 8), each=r.randint(3, 15))
            f["total"] = f["k"] * f["each"]
        elif kind == "trip":
            f.update(v1=r.choice([40, 45, 50, 60, 65, 70, 80]), t1=r.randint(2, 5))
            f.update(v2=r.choice([30, 40, 55, 90]), t2=r.randint(2, 4))
            f.update(d1=f["v1"] * f["t1"], d2=f["v2"] * f["t2"])
            f["total"] = f["d1"] + f["d2"]
        elif kind == "reading":
            f.update(p=r.choice([10, 15, 20, 25, 30]), d=r.randint(3, 12), r=r.randint(2, 9) * 10)
            f.update(left=f["p"] * f["d"], n=f["r"] + f["p"] * f["d"])
        elif kind == "discount":
            f.update(thing=r.choice(T.PRICED)[li], P=r.randint(2, 20) * 20)
            f["d"] = r.choice([10, 20, 25, 50])
            f["saving"] = f["P"] * f["d"] // 100
            f["final"] = f["P"] - f["saving"]
        elif kind == "collect":
            f.update(a=r.randint(12, 60), c=r.randint(2, 5), per=r.randint(4, 12))
            f["b"] = r.randint(2, f["a"] // 2)
            f.update(x1=f["a"] - f["b"], x2=f["c"] * f["per"])
            f["res"] = f["x1"] + f["x2"]
        else:  # savings
            f.update(s=r.randint(5, 25), w=r.randint(4, 12))
            f["saved"] = f["s"] * f["w"]
            f["x"] = r.randint(1, f["saved"] // 10) * 5
            f["left"] = f["saved"] - f["x"]
        for k in [k for k in f if k in ("p", "bill", "change", "P", "s", "x", "left")]:
            f[k + "_m"] = money(f[k], lang)
        t = T.MATH[kind][lang]
        q = r.choice(T.MATH_WRAP[lang]).format(q=r.choice(t["q"]).format(**f))
        steps, final = t["a"].format(**f).rsplit(". ", 1)  # final = "The answer is N."
        outro = r.choice(T.MATH_OUTRO[lang])
        return q, f"{r.choice(T.MATH_INTRO[lang])}{steps}. {outro + ' ' if outro else ''}{final}"

    def code(self, lang: str):
        r = self.r
        task = r.choice(T.CODE_TASKS)
        ns: dict = {}
        exec(task["code"], ns)  # our own template code: run it so the example output is real
        example = r.choice(task["examples"])
        q = r.choice(T.CODE_PROMPTS).format(desc=r.choice(task["desc"]), fn=task["fn"])
        a = (
            f"{r.choice(T.CODE_INTROS)}\n\n```python\n{task['code']}```\n\n{task['note']} "
            f"For example, `{example}` returns `{eval(example, ns)!r}`. {r.choice(T.CODE_TIPS)}"
        )
        return q, a.strip()

    def json_tool(self, lang: str, pii: list[str]):
        """Returns (user, answer, system or None, PII kinds already handled here)."""
        r = self.r
        f = {"name": r.choice(T.NAMES[lang]), "surname": r.choice(T.SURNAMES)}
        f.update(city=r.choice(T.CITIES[lang]), full=f"{f['name']} {f['surname']}")
        if pii and r.random() < 0.6:  # contact extraction: PII in the prompt and the JSON answer
            f.update(email=self.pii_value("email", lang), phone=self.pii_value("phone", lang))
            self.pii_in_response += 1
            s = r.choice(T.CONTACT_SENTENCES[lang]).format(**f)
            out = {"name": f["full"], "email": f["email"], "phone": f["phone"]}
            q = r.choice(T.CONTACT_PROMPTS[lang]).format(s=s)
            return q, json.dumps(out, ensure_ascii=False), None, pii
        if lang != "en" or r.random() < 0.35:  # person -> {name, [age], city}
            keys = r.choice(["nc", "nac"])
            f["age"] = r.randint(19, 78)
            s = r.choice(T.PERSON_SENTENCES[lang][keys]).format(**f)
            out = {"name": f["full"]} | ({"age": f["age"]} if keys == "nac" else {})
            out["city"] = f["city"]
            q = r.choice(T.PERSON_PROMPTS[lang][keys]).format(s=s)
            return q, json.dumps(out, ensure_ascii=False), None, []
        if r.random() < 0.3 and r.random() < 0.5:  # order request
            f.update(q=r.randint(2, 40), item=r.choice(T.ORDER_ITEMS), price=r.randint(8, 250))
            s = r.choice(T.ORDER_SENTENCES).format(price_m=money(f["price"], "en"), **f)
            out = {"product": f["item"], "quantity": f["q"], "unit_price": f["price"]}
            out["ship_to"] = f["city"]
            return T.ORDER_PROMPT.format(s=s), json.dumps(out), None, []
        if r.random() < 0.15:  # invoice
            f.update(num=r.randint(10000, 99999), vendor=r.choice(T.VENDORS))
            f.update(amount=round(r.uniform(90, 9000), 2), date=f"2026-12-{r.randint(1, 31):02d}")
            s = r.choice(T.INVOICE_SENTENCES).format(**f)
            out = {"vendor": f["vendor"], "invoice_number": f"INV-{f['num']}"}
            out.update(amount=f["amount"], currency="USD", due_date=f["date"])
            return T.INVOICE_PROMPT.format(s=s), json.dumps(out), None, []
        # tool call: the system message lists the tool (plus 0-2 distractors) as JSON schemas
        tool = r.choice(list(T.TOOL_REQUESTS))
        template, keys = r.choice(T.TOOL_REQUESTS[tool])
        a1, a2 = r.sample(T.NAMES["en"], 2)
        f.update(
            unit=r.choice(["celsius", "fahrenheit"]), amount=r.choice([20, 75, 120, 250, 1000]),
            from_currency=r.choice(T.CURRENCIES[:3]), to_currency=r.choice(T.CURRENCIES[3:]),
            priority=r.choice(["low", "normal", "high"]), subject=r.choice(T.TICKET_SUBJECTS),
            customer_name=f["full"], status=r.choice(["pending", "shipped", "delivered"]),
            title=r.choice(T.MEETING_TITLES), date=f"2026-12-{r.randint(1, 20):02d}",
            duration_minutes=r.choice([15, 30, 45, 60]), attendees=[a1, a2], a1=a1, a2=a2,
        )
        args = {k: f[k] for k in keys}
        handled = []
        if tool == "search_orders" and "email" in pii:  # look up by email: PII in the call too
            f["customer_email"] = self.pii_value("email", lang)
            self.pii_in_response += 1
            template, handled = T.ORDERS_BY_EMAIL, ["email"]
            args = {"customer_email": f["customer_email"], "status": f["status"]}
        names = [tool] + r.sample([t for t in T.TOOLS if t != tool], r.randint(0, 2))
        r.shuffle(names)
        tools = json.dumps([{"name": n, **T.TOOLS[n]} for n in names])
        system = r.choice(T.TOOL_SYSTEM).format(tools=tools)
        answer = json.dumps({"tool": tool, "arguments": args})
        return template.format(**f), answer, system, handled

    def support(self, lang: str, pii: list[str]):
        """Returns (messages without the final answer, answer)."""
        r = self.r
        f = {
            "name": r.choice(T.NAMES[lang]), "brand": r.choice(T.BRANDS),
            "product": r.choice(T.PRODUCTS)[lang], "plan": r.choice(T.PLANS),
            "order": r.randint(10000, 99999), "ticket": r.randint(100000, 999999),
            "amount_m": money(r.choice([9, 12, 19, 29, 49, 129, 249]), lang),
            "days": r.randint(2, 10), "late": r.randint(2, 9), "minutes": r.choice([15, 30, 60]),
            "secs": r.choice([10, 15, 30]), "hours": r.choice([4, 12, 24, 48]),
            "city": r.choice(T.CITIES[lang]),
        }
        m, day = T.MONTHS[lang][r.randint(0, 11)], r.randint(1, 28)
        f["date"] = {"en": f"{m} {day}", "es": f"{day} de {m}", "fr": f"{day} {m}"}[lang]
        sc = T.SUPPORT[r.choice(list(T.SUPPORT))][lang]
        ask = r.choice(sc["ask"]).format(**f)
        body = " ".join(r.choice(slot).format(**f) for slot in sc["answer"])
        greet = r.choice(T.GREETINGS[lang]).format(**f)
        sep = "\n\n" if greet[-1] in ",:" else " "
        first = f"{greet}{sep}{body}{sep}{r.choice(T.CLOSINGS[lang]).format(**f)}"
        echo = None
        for kind in pii:
            ask, v = self.plant(ask, kind, lang)
            if kind in T.PII_ECHO and r.random() < 0.5:
                echo = r.choice(T.PII_ECHO[kind][lang]).format(v=v)
        msgs = []
        if r.random() < 0.4:
            msgs.append({"role": "system", "content": T.SUPPORT_SYSTEM[lang].format(**f)})
        msgs.append({"role": "user", "content": ask})
        answer = first
        if r.random() < 0.3:  # multi-turn: a prior assistant turn, then a follow-up question
            q2, a2 = r.choice(T.FOLLOWUPS[lang])
            msgs += [{"role": "assistant", "content": first}, {"role": "user", "content": q2}]
            answer = a2.format(**f)
        if echo:
            answer = f"{answer} {echo}"
            self.pii_in_response += 1
        return msgs, answer

    def summarize(self, lang: str):
        r = self.r
        topic = r.choice([t for t in T.SUMMARIZE if lang in T.SUMMARIZE[t]])
        habit, feats = r.choice(T.HABITS), r.sample(T.FEATURES, 2)
        f = {
            "company": r.choice(T.BRANDS), "city": r.choice(T.CITIES[lang]),
            "quarter": r.choice(T.QUARTERS[lang]), "revenue": decimal(r.uniform(8, 95), lang),
            "growth": r.randint(3, 28), "move": r.randint(2, 11),
            "product": r.choice(T.PRODUCTS)["pl"][lang], "hires": r.choice([40, 60, 120, 200]),
            "project": r.choice(T.PROJECTS[lang]), "yes": r.randint(7, 12), "no": r.randint(1, 6),
            "budget": decimal(r.uniform(1.5, 40), lang), "month": r.choice(T.MONTHS[lang]),
            "duration": r.choice([6, 9, 14, 18, 24]), "rain": r.randint(45, 160),
            "hours": r.randint(3, 12), "wind": r.randint(80, 140), "schools": r.randint(12, 90),
            "outages": thousands(r.randint(20, 400) * 100, lang),
            "price": r.choice([79, 129, 199, 249, 399]), "battery": r.choice([12, 20, 30, 48]),
            "feature1": feats[0], "feature2": feats[1], "years": r.randint(4, 12),
            "n": thousands(r.randint(12, 95) * 100, lang), "pct": r.randint(12, 38),
            "n2": thousands(r.randint(3, 15) * 100, lang), "habit": habit[0],
            "habit_do": habit[1], "outcome": habit[2], "outcome_verb": habit[3],
        }
        if topic == "launch":
            f["product"] = r.choice(T.PRODUCTS)["en"]
            f["model"] = f"{f['company']} {r.choice(T.MODEL_NAMES)} {r.randint(2, 5)}"
        t = T.SUMMARIZE[topic][lang]
        q = r.choice(T.SUMMARIZE_WRAP[lang]).format(p=t["p"].format(**f))
        return q, r.choice(T.SUMMARY_PREFIX[lang]) + r.choice(t["s"]).format(**f)

    # ------------------------------------------------------------ one request
    def record(self, tenant: str, domain: str, lang: str) -> dict:
        r = self.r
        pii, self.planted = [], []
        if r.random() < self.pii_rate:
            pii = r.choices(PII_KINDS, PII_WEIGHTS, k=1 if r.random() < 0.8 else 2)
            self.pii_requests += 1
        if domain == "support":
            msgs, answer = self.support(lang, pii)
        else:
            system = None
            if domain == "json_tool":
                user, answer, system, handled = self.json_tool(lang, pii)
                pii = [k for k in pii if k not in handled]
            else:
                user, answer = getattr(self, domain)(lang)
            for kind in pii:  # domains without special handling: PII in the user turn only
                user, _ = self.plant(user, kind, lang)
            msgs = [{"role": "system", "content": system}] if system else []
            msgs.append({"role": "user", "content": user})
        prompt_tokens = sum(n_tokens(m["content"]) for m in msgs)
        completion_tokens = n_tokens(answer)
        fits = [t for t in (128, 256, 512, 1024) if t >= completion_tokens * 1.1]
        max_tokens = r.choice(fits or [2048])
        if r.random() < 0.03:  # legacy completions form
            prompt = msgs[0]["content"]
            if len(msgs) > 1:
                turns = [f"{m['role'].capitalize()}: {m['content']}" for m in msgs]
                prompt = "\n\n".join(turns) + "\n\nAssistant:"
            request = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens}
            response = {"choices": [{"text": answer}]}
        else:
            request = {"model": MODEL, "messages": msgs, "max_tokens": max_tokens}
            response = {"choices": [{"message": {"role": "assistant", "content": answer}}]}
        response["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
        ms = 90 + 0.3 * prompt_tokens + completion_tokens * r.uniform(14, 22) + r.gauss(0, 25)
        rec = {"id": None, "ts": None, "tenant": tenant, "request": request, "response": response,
               "latency_ms": max(60, int(ms))}
        x = r.random()  # labels: 80 % full, 5 % partial, 15 % absent
        if x >= 0.20:
            rec["labels"] = {"domain": domain, "lang": lang}
        elif x >= 0.15:
            rec["labels"] = {"domain": domain} if x < 0.175 else {"lang": lang}
        return rec


def pick(r: random.Random, weights: dict) -> str:
    return r.choices(list(weights), list(weights.values()))[0]


def malformed(kind: str, rec: dict, earlier_id: str) -> bytes:
    """Turn a well-formed record into a line that is broken for exactly one reason."""
    req = rec["request"]
    msgs = req.setdefault("messages", [{"role": "user", "content": req.pop("prompt", "")}])
    user = next(m for m in msgs if m["role"] == "user")
    if kind == "truncated_json":
        line = json.dumps(rec, ensure_ascii=False)
        return line[: len(line) // 2].encode()
    if kind == "json_array":
        return json.dumps([rec], ensure_ascii=False).encode()
    if kind == "missing_request":
        del rec["request"]
    elif kind == "empty_messages":
        req["messages"] = []
    elif kind == "empty_content":
        user["content"] = ""
    elif kind == "tenant_not_string":
        rec["tenant"] = 42
    elif kind == "max_tokens_string":
        req["max_tokens"] = str(req["max_tokens"])
    elif kind == "invalid_utf8":  # Latin-1 bytes and 0xFF 0xFE: not decodable as UTF-8
        user["content"] = "@@RAW@@ " + user["content"]
        line = json.dumps(rec, ensure_ascii=False).encode()
        return line.replace(b"@@RAW@@", b"Caf\xe9 cr\xe8me \xff\xfe")
    elif kind == "oversized_line":  # ~80 KB, over the 64 KiB line limit
        log = [f"2026-11-28 03:{i // 60 % 60:02d}:{i % 60:02d} worker-{i % 7} heartbeat ok "
               f"queue_depth={i % 13}" for i in range(1400)]
        user["content"] = "Summarize this log dump:\n" + "\n".join(log)
        rec["response"]["usage"]["prompt_tokens"] = n_tokens(user["content"])
    elif kind == "duplicate_id":
        rec["id"] = earlier_id
    elif kind == "bad_timestamp":
        rec["ts"] = "28/11/2026 14:05"
    elif kind == "unknown_role":
        msgs.insert(msgs.index(user), {"role": "robot", "content": "Beep. Context attached."})
    return json.dumps(rec, ensure_ascii=False).encode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--n", type=int, default=1600, help="well-formed requests (>= 200)")
    ap.add_argument("--out", default="conf/traffic/demo.jsonl")
    args = ap.parse_args()
    if args.n < 200:
        ap.error("--n must be >= 200")
    rng = random.Random(args.seed)
    gen = Gen(rng)
    keys = ("tenant", "domain", "lang", "tenant_domain", "labels", "form", "pii_occurrences")
    stats = {k: Counter() for k in keys}
    ts, records = START, []
    for i in range(1, args.n + 1):
        tenant = rng.choices(list(TENANTS), [v[0] for v in TENANTS.values()])[0]
        domain = pick(rng, TENANTS[tenant][1])
        p = LANG_ES_FR[domain] * (1.2 if tenant == "globex" else 1.0)
        lang = pick(rng, {"en": 1 - 2 * p, "es": p, "fr": p})
        rec = gen.record(tenant, domain, lang)
        rec["id"], rec["ts"] = f"r-{i:05d}", ts.strftime("%Y-%m-%dT%H:%M:%SZ")
        ts += timedelta(seconds=max(1, round(rng.expovariate(1 / 106))))
        records.append(rec)
        text = json.dumps(rec, ensure_ascii=False)
        for kind, v in gen.planted:  # a value may also be echoed in the response
            stats["pii_occurrences"][kind] += text.count(v)
        for k, v in zip(keys[:4], (tenant, domain, lang, f"{tenant}/{domain}"), strict=True):
            stats[k][v] += 1
        stats["labels"]["+".join(sorted(rec.get("labels", {}))) or "none"] += 1
        if "prompt" in rec["request"]:
            stats["form"]["completions"] += 1
        else:
            turns = sum(m["role"] == "assistant" for m in rec["request"]["messages"])
            stats["form"][f"chat ({turns} prior assistant turns)"] += 1

    total = args.n + len(MALFORMED)
    bad_at = {max(2, round(pos * total / 1612)): kind for pos, kind in MALFORMED.items()}
    # separate random stream, so the malformed lines never shift the well-formed ones
    bad_gen = Gen(random.Random(args.seed + 1_000_003), pii_rate=0.0)
    lines, good, written = [], iter(records), []
    for lineno in range(1, total + 1):
        if lineno in bad_at:
            kind = bad_at[lineno]
            domain = "summarize" if kind == "oversized_line" else "support"
            rec = bad_gen.record("globex", domain, "en")
            rec["id"], rec["ts"] = f"r-9{lineno:04d}", written[-1]["ts"]
            rec["labels"] = {"domain": domain, "lang": "en"}
            lines.append(malformed(kind, rec, earlier_id=written[-min(50, len(written))]["id"]))
        else:
            written.append(next(good))
            lines.append(json.dumps(written[-1], ensure_ascii=False).encode())
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as fh:
        fh.write(b"\n".join(lines) + b"\n")

    mb, n = out.stat().st_size / 1e6, args.n
    print(f"wrote {out}: {total} lines = {n} well-formed requests + {len(bad_at)} malformed, "
          f"{mb:.2f} MB")
    print(f"  span: {records[0]['ts']} .. {records[-1]['ts']}")
    for k in ("tenant", "domain", "lang", "labels", "form"):
        items = sorted(stats[k].items())
        print(f"  {k:8s} " + ", ".join(f"{v}={c} ({100 * c / n:.1f}%)" for v, c in items))
    for tenant in TENANTS:
        row = sorted((d.split("/")[1], c) for d, c in stats["tenant_domain"].items()
                     if d.startswith(tenant + "/"))
        print(f"  {tenant:8s} " + ", ".join(f"{d}={c}" for d, c in row))
    print(f"  PII planted: {sum(gen.pii.values())} values in {gen.pii_requests} requests; "
          + ", ".join(f"{k}={gen.pii[k]}" for k in PII_KINDS)
          + f"; requests with PII in the response: {gen.pii_in_response}")
    occ = stats["pii_occurrences"]
    print(f"  PII occurrences in the file (what a redactor should replace): "
          f"{sum(occ.values())}; " + ", ".join(f"{k}={occ[k]}" for k in PII_KINDS))
    print("  malformed lines (1-based): "
          + ", ".join(f"{n}:{k}" for n, k in sorted(bad_at.items())))


if __name__ == "__main__":
    main()
