"""The gate's evidence, paired item by item: a variant's evaluations against the baseline's on the
same held-out requests and the same task items, as checks (an interval on the relative degradation,
a one-sided p-value against the metric's `investigate` budget, flips for 0/1 outcomes, the items a
decision would take), overall and per slice."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quantgate.conf.schema import GateConf
from quantgate.tasks.evaluate.perplexity import EvalResult, RequestNll
from quantgate.tasks.gate.paired import (
    Flips,
    Interval,
    flips,
    items_to_decide_mean,
    items_to_decide_ppl,
    items_to_decide_score,
    mcnemar_p,
    per_token_mean,
    perplexity_degradation,
    score_degradation,
)

OVERALL = "overall"


@dataclass(frozen=True)
class Check:
    """One paired comparison: `metric` ("ppl" or "lmeval.<task>.<metric>") on `slice`."""

    metric: str
    slice: str
    interval: Interval
    items_to_decide: float  # at the observed effect, against the metric's monitor budget
    flips: Flips | None = None  # 0/1 metrics only
    mcnemar_p: float = math.nan
    rejected: bool = False  # beyond `investigate` with confidence, after the family correction

    @property
    def key(self) -> str:
        return self.metric if self.slice == OVERALL else f"{self.metric}@{self.slice}"


def perplexity_checks(baseline: EvalResult, variant: EvalResult, gate: GateConf, *,
                      min_tokens: int, metric: str = "ppl") -> list[Check]:
    """`overall` and every slice with ≥ `min_tokens` scored tokens: variant PPL / baseline PPL − 1,
    resampling requests with their pairs. Both results must come from one held-out file (same
    requests, same order, same scored tokens: one tokenizer)."""
    pairs = _paired_requests(baseline.requests, variant.requests, first_look=variant.look == "first")
    groups: dict[str, list[tuple[RequestNll, RequestNll]]] = {OVERALL: pairs}
    for b, v in pairs:
        for name in b.slices:
            groups.setdefault(name, []).append((b, v))
    budget, checks = gate.budget(metric), []
    for name, group in groups.items():
        if name != OVERALL and sum(b.tokens for b, _ in group) < min_tokens:
            continue  # too few tokens to gate on: reported by the slice table, not here
        b, v, t = ([b.nll for b, _ in group], [v.nll for _, v in group], [b.tokens for b, _ in group])
        interval = perplexity_degradation(b, v, t, level=gate.confidence, resamples=gate.resamples,
                                          seed=gate.seed, beyond=budget.investigate)
        need = items_to_decide_ppl(b, v, t, budget=budget.monitor, alpha=1 - gate.confidence)
        checks.append(Check(metric, name, interval, need))
    return checks


def kl_checks(baseline: EvalResult, variant: EvalResult, gate: GateConf, *, min_tokens: int) -> list[Check]:
    """Mean next-token KL from the baseline per scored token (nats), overall and per slice with ≥
    `min_tokens` tokens; none when the variant's evaluation did not measure it."""
    pairs = _paired_requests(baseline.requests, variant.requests, first_look=variant.look == "first")
    if any(v.kl is None for _, v in pairs):  # evaluated without the baseline's record
        return []
    groups: dict[str, list[RequestNll]] = {OVERALL: [v for _, v in pairs]}
    for _, v in pairs:
        for name in v.slices:
            groups.setdefault(name, []).append(v)
    budget, checks = gate.budget("kl"), []
    for name, group in groups.items():
        if name != OVERALL and sum(v.tokens for v in group) < min_tokens:
            continue
        kl, t = [v.kl or 0.0 for v in group], [v.tokens for v in group]
        interval = per_token_mean(kl, t, level=gate.confidence, resamples=gate.resamples, seed=gate.seed,
                                  beyond=budget.investigate)
        need = items_to_decide_mean(kl, t, budget=budget.monitor, alpha=1 - gate.confidence)
        checks.append(Check("kl", name, interval, need))
    return checks


def task_checks(baseline_samples: str, variant_samples: str, gate: GateConf, *, min_items: int
                ) -> tuple[list[Check], list[str]]:
    """Every gating lm-eval metric (gate.task_metrics), overall and on each slice with ≥ `min_items`
    items, paired on the item ids both runs scored. Notes say what could not gate and why."""
    base, var = _rows(baseline_samples), _rows(variant_samples)
    checks, notes = [], []
    for (task, metric), items in sorted(base.items()):
        if not gate.gates_on(task, metric):
            continue
        name = f"lmeval.{task}.{metric}"
        got = var.get((task, metric), {})
        ids = [i for i in items if i in got]
        if not ids:
            notes.append(f"{name}: the variant scored none of the baseline's items")
            continue
        groups: dict[str, list[str]] = defaultdict(list)
        groups[OVERALL] = ids
        for i in ids:
            for key, value in items[i][1].items():
                groups[f"{key}={value}"].append(i)
        for slice_name, members in groups.items():
            if slice_name != OVERALL and len(members) < min_items:
                continue
            b = np.array([items[i][0] for i in members])
            v = np.array([got[i][0] for i in members])
            if b.mean() == 0:
                notes.append(f"{name}" + ("" if slice_name == OVERALL else f"@{slice_name}")
                             + ": baseline scores 0, does not gate")
                continue
            checks.append(_score_check(name, slice_name, b, v, gate))
    return checks, notes


def _score_check(metric: str, slice_name: str, b: np.ndarray, v: np.ndarray, gate: GateConf) -> Check:
    budget = gate.budget(metric)
    interval = score_degradation(b, v, level=gate.confidence, resamples=gate.resamples, seed=gate.seed,
                                 beyond=budget.investigate)
    need = items_to_decide_score(b, v, budget=budget.monitor, alpha=1 - gate.confidence)
    if np.isin(np.concatenate([b, v]), (0.0, 1.0)).all():
        f = flips(b.astype(int), v.astype(int))
        return Check(metric, slice_name, interval, need, f, mcnemar_p(f))
    return Check(metric, slice_name, interval, need)


def _rows(samples_path: str) -> dict[tuple[str, str], dict[str, tuple[float, dict[str, str]]]]:
    """(task, metric) -> item id -> (value, slice labels), from lm-eval's per-sample JSONL."""
    out: dict[tuple[str, str], dict[str, tuple[float, dict[str, str]]]] = defaultdict(dict)
    with Path(samples_path).open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                for metric, value in row["metrics"].items():
                    out[(row["task"], metric)][row["id"]] = (float(value), row.get("slices", {}))
    return out


def _paired_requests(baseline: tuple[RequestNll, ...], variant: tuple[RequestNll, ...], *,
                     first_look: bool = False) -> list[tuple[RequestNll, RequestNll]]:
    if not baseline:
        raise ValueError("the baseline's evaluation has no per-request NLLs: re-evaluate it with this code")
    ids = [v.id for v in variant]
    if first_look:  # a spread subset of the held-out set: the baseline's matching requests
        picked = set(ids)
        baseline = tuple(b for b in baseline if b.id in picked)
    if [b.id for b in baseline] != ids:
        raise ValueError(f"not the same held-out requests: baseline has {len(baseline)}, variant "
                         f"{len(variant)}, or another order; evaluate both on one held-out file")
    for b, v in zip(baseline, variant, strict=True):
        if b.tokens != v.tokens:
            raise ValueError(f"request {b.id}: {b.tokens} scored tokens for the baseline, {v.tokens} for "
                             "the variant; a paired comparison needs one tokenizer")
    return list(zip(baseline, variant, strict=True))
