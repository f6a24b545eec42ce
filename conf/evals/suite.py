"""Helpers the suite's `utils.py` files share: data loading and answer parsing.

lm-eval imports each task's `utils.py` by file path, so shared code lives here, in the
installed package, and the per-task files stay a few lines each.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

_INT = re.compile(r"-?\d[\d,]*")
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.S)
_WORD = re.compile(r"\w+", re.U)


def jsonl_dataset(path: str | Path) -> Any:
    """A one-split ("test") DatasetDict from a JSONL file: no hub, no datasets cache."""
    import datasets

    with Path(path).open(encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if not rows:
        raise ValueError(f"{path}: no items")
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def last_int(text: str) -> int | None:
    """The last integer in a reply, where a worked answer ends ("9 + 24 = 33" -> 33), else None."""
    found = _INT.findall(text)
    return int(found[-1].replace(",", "")) if found else None


def json_object(reply: str) -> dict[str, Any] | None:
    """The reply as a JSON object, or None. Strict: the whole reply (a ```json fence
    around it is tolerated, as chat models add one) must be one object, no prose."""
    text = reply.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def json_object_anywhere(reply: str) -> dict[str, Any] | None:
    """Lenient: the first JSON object embedded anywhere in the reply (prose or fences around)."""
    decoder = json.JSONDecoder()
    for start in (i for i, ch in enumerate(reply) if ch == "{"):
        try:
            value, _ = decoder.raw_decode(reply, start)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD-style bag-of-words F1 between two texts, case-folded."""
    pred = Counter(w.lower() for w in _WORD.findall(prediction))
    ref = Counter(w.lower() for w in _WORD.findall(reference))
    overlap = sum((pred & ref).values())
    if not overlap:
        return 0.0
    precision, recall = overlap / sum(pred.values()), overlap / sum(ref.values())
    return 2 * precision * recall / (precision + recall)
