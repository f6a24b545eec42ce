"""The flow's bench on the serving engine: a real vLLM server per servable checkpoint, vLLM's serving
benchmark at each concurrency, the report the gate reads; formats the engine does not serve get no
figures and say why, without a start-up."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from quantgate.conf.engine import EngineConf
from quantgate.conf.methods import VariantSpec
from quantgate.conf.schema import BenchConf
from quantgate.tasks.engine.refusals import learn_refusal
from quantgate.tasks.engine.server import EngineStartError
from quantgate.tasks.perf.bench import bench_table, read_report
from quantgate.tasks.perf.engine_bench import run_engine_bench
from quantgate.tasks.quantize.run import quantize_variant
from quantgate.tasks.traffic.load import load_traffic, write_requests

from factories import calibration_file, mixed_records, write_traffic

pytestmark = pytest.mark.timeout(600)

ENGINE = EngineConf(dtype="float32", max_model_len=512, start_timeout_s=300)


def test_the_engine_benches_what_it_serves_and_says_why_not_for_the_rest(tiny_model, tmp_path, monkeypatch):
    # This machine's memory of refusals, fresh; vLLM's own cache (its model-class inspection, a
    # subprocess importing torch and vLLM on a miss) stays the session's.
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(Path.home() / ".cache" / "vllm"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    reqs = load_traffic(write_traffic(tmp_path / "t.jsonl", mixed_records(12)), max_line_bytes=65536,
                        length_buckets=(200,)).requests
    write_requests(tmp_path / "heldout.jsonl", reqs)
    # An FP8 W8A8 checkpoint whose refusal this machine remembers (as an evaluation's start-up leaves
    # it), and a QuIP# one, which no production engine serves.
    spec = TypeAdapter(VariantSpec).validate_python({"name": "f", "method": "fp8_w8a8"})
    fp8 = quantize_variant(spec, model_path=tiny_model, calibration_path=str(calibration_file(tmp_path)),
                           out_dir=str(tmp_path / "fp8"), max_seq_len=64, threads=1).checkpoint
    learn_refusal(fp8, ENGINE, EngineStartError("served on a fallback kernel (TorchFP8)", tmp_path / "e.log"))
    quip = tmp_path / "quip"
    quip.mkdir()
    (quip / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "quip_sharp"}}))

    conf = BenchConf(batch_sizes=(1, 2), gate_batch=2, new_tokens=4, requests_per_client=2)
    out = tmp_path / "bench" / "b.json"
    report = run_engine_bench(conf, {"baseline": tiny_model, "fp8": fp8, "quip": str(quip)},
                              heldout_path=str(tmp_path / "heldout.jsonl"), out_path=str(out), engine=ENGINE,
                              state_dir=str(tmp_path / "state"))

    assert report.backend == "engine" and list(report.models) == ["baseline"]
    assert "remembered from" in report.not_benched["fp8"] and "TorchFP8" in report.not_benched["fp8"]
    assert "not servable on vllm" in report.not_benched["quip"]
    logs = sorted(p.name for p in (tmp_path / "state" / "engine-logs").iterdir())
    assert logs == ["bench-baseline.log"]  # one start-up: the refused formats got none
    assert 0 < report.startup_s["baseline"] < 300
    base = report.models["baseline"]
    assert base.path.startswith("vLLM OpenAI server (vllm") and sorted(base.speeds) == [1, 2]
    for clients, s in base.speeds.items():
        assert s.batch == clients and s.req_s > 0 and s.decode_tok_s > 0 and s.peak_bytes > 0
        assert 0 < s.ttft_ms <= s.ttft_p95_ms and 0 < s.tpot_ms <= s.tpot_p95_ms
        assert math.isfinite(s.j_per_token) and s.j_per_token > 0
        assert report.ratio("baseline", clients) == 1.0
    # What the gate reads: the figures at the gate's level, the request rate beside them.
    m = report.metrics("baseline")
    g = base.speeds[2]
    assert (m["energy.j_per_token"], m["perf.requests_per_s"], m["perf.batch"]) == (g.j_per_token, g.req_s, 2)
    assert "perf.prefill_tok_s.bs1" not in m  # not separable on a serving engine: not reported as a number
    table = bench_table(report)
    assert "| clients |" in table and "no serving bench: not servable on vllm" in table
    again = read_report(str(out))  # the flow's cache reads it back whole (NaN prefill: compare as read)
    assert bench_table(again) == table and again.metrics("baseline") == m
    assert (again.not_benched, again.startup_s) == (report.not_benched, report.startup_s)
    assert (out.with_suffix(".details.json")).exists() and Path(out.with_suffix("")).is_dir()

