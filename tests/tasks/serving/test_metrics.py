"""Reading Ray Serve's Prometheus series: Prometheus' histogram_quantile on buckets whose answer is
known, and the sum over replicas, routes and error codes of one application's deployments."""

import math

from quantgate.tasks.serving.metrics import histogram_quantile, parse


def test_histogram_quantile_interpolates_inside_the_bucket():
    # 100 observations spread evenly over 0..100 ms, buckets every 10 ms
    buckets = [(float(b), float(b)) for b in range(10, 101, 10)] + [(math.inf, 100.0)]
    assert histogram_quantile(0.5, buckets) == 50.0
    assert abs(histogram_quantile(0.95, buckets) - 95.0) < 1e-9
    # everything beyond the last finite bound: that bound is all that is known
    assert histogram_quantile(0.99, [(10.0, 0.0), (math.inf, 5.0)]) == 10.0
    assert math.isnan(histogram_quantile(0.5, [(10.0, 0.0), (math.inf, 0.0)]))


def _series(app: str, dep: str, replica: str, requests: int, errors: int, under_100ms: int) -> str:
    labels = f'application="{app}",deployment="{dep}",replica="{replica}",route="/"'
    return "\n".join([
        f"ray_serve_deployment_request_counter_total{{{labels}}} {requests}",
        f'ray_serve_deployment_error_counter_total{{{labels},error_code="500"}} {errors}',
        f'ray_serve_deployment_processing_latency_ms_bucket{{{labels},le="100.0"}} {under_100ms}',
        f'ray_serve_deployment_processing_latency_ms_bucket{{{labels},le="+Inf"}} {requests}',
        f"ray_serve_deployment_processing_latency_ms_sum{{{labels}}} {requests * 80}",
        f"ray_serve_deployment_processing_latency_ms_count{{{labels}}} {requests}"])


def test_parse_sums_replicas_of_one_application_only():
    head = ("# TYPE ray_serve_deployment_request_counter counter\n"
            "# TYPE ray_serve_deployment_error_counter counter\n"
            "# TYPE ray_serve_deployment_processing_latency_ms histogram\n")
    text = head + "\n".join([
        _series("qg", "champion", "a", 6, 1, 6), _series("qg", "champion", "b", 4, 0, 2),
        _series("qg", "canary", "c", 3, 3, 3), _series("other", "champion", "d", 50, 9, 0)])
    out = parse(text + "\n", "qg")
    assert set(out) == {"champion", "canary"}
    assert (out["champion"]["requests"], out["champion"]["errors"]) == (10, 1)
    assert out["champion"]["latency_ms_mean"] == 80
    # 8 of 10 under 100 ms: the median inside the first bucket, the p95 beyond its bound
    assert out["champion"]["latency_ms_p50"] == 62.5 and out["champion"]["latency_ms_p95"] == 100
    assert (out["canary"]["requests"], out["canary"]["errors"]) == (3, 3)
