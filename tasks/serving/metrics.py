"""Per-deployment figures from Ray Serve's own metrics, not from a counter of ours: requests, errors
and the processing-latency histogram that every replica reports to the node's metrics agent, scraped
from each node's Prometheus endpoint (the port `ray.nodes()` gives) and read with the Prometheus
client's parser.

The rollout's analysis still reads per-request service times from the router's request log: a rank
test needs the samples, and a histogram only has its buckets. These figures are the operator's view
(`quantgate status`, the rollout report) and a cross-check of the log's counts.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from quantgate.tasks.engine.metrics import histogram_quantile

REQUESTS = "ray_serve_deployment_request_counter"
ERRORS = "ray_serve_deployment_error_counter"
LATENCY = "ray_serve_deployment_processing_latency_ms"


def parse(text: str, app_name: str) -> dict[str, dict[str, Any]]:
    """{deployment: {requests, errors, latency_ms_mean, latency_ms_p50/p95/p99}} for one application;
    series of all replicas (and routes, methods, error codes) are summed."""
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    wanted = {f"{REQUESTS}_total", f"{ERRORS}_total", f"{LATENCY}_sum", f"{LATENCY}_count"}
    for family in text_string_to_metric_families(text):
        for s in family.samples:  # by sample name: exporters differ in how they name the family
            if s.labels.get("application") != app_name or "deployment" not in s.labels:
                continue
            dep = s.labels["deployment"]
            if s.name == f"{LATENCY}_bucket":
                buckets[dep][float(s.labels["le"])] += s.value
            elif s.name in wanted:
                sums[dep][s.name] += s.value
    out: dict[str, dict[str, Any]] = {}
    for dep in sorted(set(sums) | set(buckets)):
        v, b = sums[dep], sorted(buckets[dep].items())
        count = v.get(f"{LATENCY}_count", 0.0)
        out[dep] = {"requests": int(v.get(f"{REQUESTS}_total", 0)),
                    "errors": int(v.get(f"{ERRORS}_total", 0)),
                    "latency_ms_mean": v.get(f"{LATENCY}_sum", 0.0) / count if count else math.nan,
                    **{f"latency_ms_p{round(q * 100)}": histogram_quantile(q, b) for q in (0.5, 0.95, 0.99)}}
    return out


def cluster_metrics(app_name: str) -> dict[str, dict[str, Any]]:
    """The application's figures from every alive node's metrics agent (replicas report to their own
    node's agent, every few seconds); {} when Ray is not up here or no agent answers: metrics are a
    view, never a reason for a rollout to stop."""
    import ray

    if not ray.is_initialized():
        return {}
    texts = []
    for node in ray.nodes():
        if node.get("Alive") and node.get("MetricsExportPort"):
            try:
                r = httpx.get(f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics",
                              timeout=10)
                r.raise_for_status()
                texts.append(r.text)
            except httpx.HTTPError:
                continue
    return parse("\n".join(texts), app_name) if texts else {}
