"""Faults a drill injects into the canary on purpose (`quantgate rollout --inject`), applied by the
router to the requests it sends to the canary arm: a share of requests fails, every request waits
longer before its first token, or a share of answers is replaced by random text of the same length
(what a broken quantization looks like to a user). They live in the router's user_config, so a
running canary is reconfigured in place and a restarted router comes back with them.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass


class InjectedFault(RuntimeError):
    """A failure a drill asked for: served as a 500, like any replica error."""


@dataclass(frozen=True)
class Faults:
    errors: float = 0.0  # share of requests that fail
    latency_ms: float = 0.0  # added before the first token of every request
    garbage: float = 0.0  # share of answers replaced by random tokens

    @classmethod
    def parse(cls, specs: list[str] | tuple[str, ...]) -> Faults:
        """From `errors=0.2`, `latency_ms=500`, `garbage=0.3`; the error names the bad spec."""
        values: dict[str, float] = {}
        for spec in specs:
            key, _, value = spec.partition("=")
            if key not in cls.__dataclass_fields__ or not value:
                raise ValueError(f"--inject {spec!r}: expected one of errors=, latency_ms=, garbage=")
            try:
                values[key] = float(value)
            except ValueError:
                raise ValueError(f"--inject {spec!r}: {value!r} is not a number") from None
            if values[key] < 0 or (key != "latency_ms" and values[key] > 1):
                raise ValueError(f"--inject {spec!r}: out of range")
        return cls(**values)

    def active(self) -> bool:
        return bool(self.errors or self.latency_ms or self.garbage)


_ALPHABET = string.ascii_letters + string.digits + " " * 8 + ".,;:!?{}[]()"


def garble(text: str, rng: random.Random) -> str:
    """Random characters in place of an answer, its length and line breaks kept."""
    return "".join(c if c == "\n" else rng.choice(_ALPHABET) for c in text)
