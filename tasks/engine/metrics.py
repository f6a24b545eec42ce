"""The engine's own view of a window of traffic, from its Prometheus `/metrics`.

vLLM times every request inside the engine: queueing, time to first token, inter-token latency, end
to end. Two scrapes, before and after a window, give that window's histograms (counts are cumulative,
so the difference is exactly the window's requests) and quantiles read from them as Prometheus'
`histogram_quantile` does (linear within a bucket: a bucket's width bounds the error).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

HISTOGRAMS = {"ttft_s": "vllm:time_to_first_token_seconds", "itl_s": "vllm:inter_token_latency_seconds",
              "tpot_s": "vllm:request_time_per_output_token_seconds",
              "e2e_s": "vllm:e2e_request_latency_seconds", "queue_s": "vllm:request_queue_time_seconds"}
COUNTERS = {"requests": "vllm:request_success", "generation_tokens": "vllm:generation_tokens",
            "prompt_tokens": "vllm:prompt_tokens", "preemptions": "vllm:num_preemptions"}
GAUGES = {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting",
          "kv_cache_usage": "vllm:kv_cache_usage_perc"}


@dataclass(frozen=True)
class Histogram:
    buckets: tuple[tuple[float, float], ...]  # (upper bound, cumulative count), increasing, +Inf last
    count: float
    total: float

    def minus(self, earlier: Histogram) -> Histogram:
        before = dict(earlier.buckets)
        return Histogram(tuple((le, n - before.get(le, 0.0)) for le, n in self.buckets),
                         self.count - earlier.count, self.total - earlier.total)

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan

    def quantile(self, q: float) -> float:
        return histogram_quantile(q, list(self.buckets))


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' `histogram_quantile`: linear inside the bucket that holds rank q·count.
    `buckets`: (upper bound, cumulative count), +inf last."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return math.nan
    rank, lower, below = q * buckets[-1][1], 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if math.isinf(upper):
                return lower  # beyond the last finite bound: the bound is all that is known
            return lower + (upper - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = upper, count
    return lower


@dataclass(frozen=True)
class EngineSnapshot:
    histograms: dict[str, Histogram]
    counters: dict[str, float]
    gauges: dict[str, float]

    def since(self, earlier: EngineSnapshot) -> EngineSnapshot:
        """What happened between `earlier` and this scrape (gauges: as of this scrape)."""
        return EngineSnapshot(
            {k: h.minus(earlier.histograms[k]) for k, h in self.histograms.items()
             if k in earlier.histograms},
            {k: v - earlier.counters.get(k, 0.0) for k, v in self.counters.items()}, dict(self.gauges))

    def summary(self, quantiles: tuple[float, ...] = (0.5, 0.95, 0.99)) -> dict[str, float]:
        """Flat numbers for a report or MLflow: `ttft_s.p95`, `itl_s.mean`, `requests`, ..."""
        out = {f"{k}.p{round(q * 100)}": h.quantile(q) for k, h in self.histograms.items() for q in quantiles}
        out |= {f"{k}.mean": h.mean for k, h in self.histograms.items()}
        return out | self.counters | self.gauges


def parse_metrics(text: str) -> EngineSnapshot:
    """Histograms, counters and gauges of interest, summed over label sets (engines, finish reasons)."""
    wanted = {v: k for k, v in HISTOGRAMS.items()}
    buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counters, gauges = defaultdict(float), defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if family.name in wanted:
                key = wanted[family.name]
                if sample.name.endswith("_bucket"):
                    buckets[key][float(sample.labels["le"])] += sample.value
                elif sample.name.endswith(("_count", "_sum")):
                    sums[key][sample.name.rsplit("_", 1)[1]] += sample.value
            elif (key := _key(COUNTERS, family.name)) and sample.name.endswith("_total"):
                counters[key] += sample.value
            elif key := _key(GAUGES, family.name):
                gauges[key] += sample.value
    histograms = {k: Histogram(tuple(sorted(b.items())), sums[k]["count"], sums[k]["sum"])
                  for k, b in buckets.items()}
    return EngineSnapshot(histograms, dict(counters), dict(gauges))


def _key(names: dict[str, str], family: str) -> str | None:
    return next((k for k, v in names.items() if v == family), None)


def scrape(base_url: str, timeout_s: float = 10) -> EngineSnapshot:
    r = httpx.get(f"{base_url}/metrics", timeout=timeout_s)
    r.raise_for_status()
    return parse_metrics(r.text)
