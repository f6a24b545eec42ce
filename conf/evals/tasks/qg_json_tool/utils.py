from pathlib import Path

from quantgate.conf.evals.suite import json_object, json_object_anywhere, jsonl_dataset

TOOLS = """Tools:
- get_weather(city: string, unit: "celsius" | "fahrenheit")
- convert_currency(amount: number, from: string, to: string)
- set_timer(minutes: integer)"""


def load(**_metadata):
    return jsonl_dataset(Path(__file__).with_name("data.jsonl"))


def prompt(doc):
    return (f"{TOOLS}\n\nCall exactly one tool for the request. Reply with only a JSON object "
            "and nothing else.\n\n"
            'Example request: Set a timer for 5 minutes.\n'
            'Example reply: {"tool": "set_timer", "arguments": {"minutes": 5}}\n\n'
            f"Request: {doc['request']}")


def _same(a, b):
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().lower() == b.strip().lower()
    return a == b


def score(doc, results):
    # Compliance is judged on the strict reading; content on the lenient one, so a right call
    # wrapped in prose still shows (and a variant that loses it is seen losing it).
    strict, call = json_object(results[0]), json_object_anywhere(results[0])
    schema = (call is not None and isinstance(call.get("tool"), str)
              and isinstance(call.get("arguments"), dict))
    want = doc["call"]
    exact = (schema and call["tool"] == want["tool"]
             and set(call["arguments"]) == set(want["arguments"])
             and all(_same(call["arguments"][k], v) for k, v in want["arguments"].items()))
    return {"json_only": float(strict is not None), "json_found": float(call is not None),
            "schema_valid": float(schema), "call_exact": float(exact)}
