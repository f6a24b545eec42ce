"""Stratified, seeded split of traffic into a calibration set and a held-out set.

Strata are (tenant, domain, lang). Each set takes from every stratum in proportion to
its size (largest remainder), so small slices are not starved. The two sets share no
request id and no identical prompt (a repeated prompt would leak held-out text into
calibration).
"""

from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from quantgate.tasks.traffic.load import Request

STRATUM_KEYS = ("tenant", "domain", "lang")


@dataclass(frozen=True)
class Split:
    calibration: list[Request]
    heldout: list[Request]


def stratified_split(
    requests: Sequence[Request], *, calibration_size: int, heldout_size: int, seed: int
) -> Split:
    if calibration_size + heldout_size > len(requests):
        raise ValueError(
            f"traffic.calibration_size + traffic.heldout_size = {calibration_size + heldout_size}"
            f" exceeds the {len(requests)} valid requests in the log"
        )
    rng = random.Random(seed)
    strata = _strata(requests, rng)
    heldout = _take(strata, heldout_size)
    held_prompts = {_prompt_key(r) for r in heldout}
    remaining = {k: [r for r in v if _prompt_key(r) not in held_prompts] for k, v in strata.items()}
    calibration = _take(remaining, calibration_size)
    return Split(calibration=calibration, heldout=heldout)


def _strata(requests: Sequence[Request], rng: random.Random) -> dict[tuple[str, ...], list[Request]]:
    strata: dict[tuple[str, ...], list[Request]] = defaultdict(list)
    for r in requests:
        strata[tuple(r.slices[k] for k in STRATUM_KEYS)].append(r)
    for key in sorted(strata):
        rng.shuffle(strata[key])
    return dict(sorted(strata.items()))


def _take(strata: dict[tuple[str, ...], list[Request]], n: int) -> list[Request]:
    """Take n requests, proportionally per stratum; removes them from `strata`."""
    total = sum(len(v) for v in strata.values())
    n = min(n, total)
    quotas = {k: n * len(v) / total for k, v in strata.items()}
    counts = {k: int(q) for k, q in quotas.items()}
    by_remainder = sorted(strata, key=lambda k: (counts[k] - quotas[k], k))
    for k in by_remainder[: n - sum(counts.values())]:
        counts[k] += 1
    taken: list[Request] = []
    for k, v in strata.items():
        taken.extend(v[: counts[k]])
        del v[: counts[k]]
    return taken


def _prompt_key(r: Request) -> str:
    return hashlib.sha256(r.prompt_text().encode()).hexdigest()
