"""The bench on a tiny Llama: real generation, real (estimated) energy, side-by-side ratios, JSON."""

import json
import math

import pytest
import torch

from quantgate.conf.schema import BenchConf
from quantgate.tasks.model.load import load_causal_lm
from quantgate.tasks.perf.bench import BenchReport, read_report, run_bench, write_report
from quantgate.tasks.perf.energy import EstimatedCpuMeter
from quantgate.tasks.perf.timing import bench_models, prompt_rows, resident_bytes, time_generation

from factories import mixed_records, write_traffic


def _heldout(tmp_path):
    """A prepared held-out file, as the flow writes it."""
    from quantgate.conf.schema import TrafficConf
    from quantgate.tasks.traffic.prepare import prepare_traffic

    raw = write_traffic(tmp_path / "traffic.jsonl", mixed_records(60))
    conf = TrafficConf(path=raw, calibration_size=10, heldout_size=40)
    return prepare_traffic(conf, tmp_path / "prepared").heldout_path


def test_prompt_rows_are_exact_and_too_few_tokens_names_the_keys():
    rows = prompt_rows(list(range(100)), batch=3, prompt_tokens=16)
    assert rows.shape == (3, 16) and rows[1, 0] == 16
    with pytest.raises(ValueError, match="bench.prompt_tokens"):
        prompt_rows(list(range(10)), batch=2, prompt_tokens=8)


def test_generation_times_both_phases_and_meters_the_decode_window(tiny_model):
    model = load_causal_lm(tiny_model)
    meter = EstimatedCpuMeter(watts_per_busy_core=4.0, base_watts=20.0)
    ids = torch.randint(0, 300, (2, 12))
    prefill, decode, joules, peak = time_generation(model, ids, 6, meter)
    assert prefill > 0 and decode > 0 and peak >= 0
    assert joules >= 20.0 * decode * 0.9  # the base power over the window, at least
    with pytest.raises(ValueError, match="new_tokens"):
        time_generation(model, ids, 1, meter)


def test_resident_bytes_count_tied_weights_once(tiny_model):
    model = load_causal_lm(tiny_model)
    params = sum(p.numel() for p in model.parameters()) * 4  # parameters() dedups tied ones too
    assert params <= resident_bytes(model) <= params + sum(b.nbytes for b in model.buffers())


def test_side_by_side_bench_ratios_and_json_round_trip(tiny_model, tmp_path):
    benches = bench_models({"baseline": tiny_model, "copy": tiny_model},
                           loader=lambda n, p: (load_causal_lm(p), "fp32"), token_stream=list(range(5, 400)),
                           batch_sizes=(1, 2), prompt_tokens=8, new_tokens=4, warmup=1, repeats=2,
                           meter=EstimatedCpuMeter(4.0, 20.0))
    assert set(benches) == {"baseline", "copy"} and set(benches["copy"].speeds) == {1, 2}
    s = benches["copy"].speeds[2]
    assert s.decode_tok_s == pytest.approx(2 * 3 / (s.tpot_ms * 3 / 1e3))
    report = BenchReport(benches, (1, 2), 1, "estimated", "test", "cpu", 1, 8, 4, 2)
    assert report.ratio("baseline", 1) == 1.0 and math.isnan(report.ratio("copy", 1, to="baseline_bf16"))
    m = report.metrics("copy")
    assert m["energy.j_per_token"] == m["energy.j_per_token.bs1"] and m["perf.batch"] == 1
    assert {"perf.decode_tok_s.bs2", "perf.ttft_ms", "perf.tpot_ms", "mem.peak_bytes"} <= set(m)
    write_report(report, tmp_path / "b.json")
    again = read_report(str(tmp_path / "b.json"))
    assert again.models["copy"].speeds[2] == s
    assert json.loads((tmp_path / "b.json").read_text())["speedup_vs_baseline"]["baseline"]["1"] == 1.0


def test_run_bench_end_to_end_on_held_out_prompts(tiny_model, tmp_path):
    conf = BenchConf(batch_sizes=(1, 2), prompt_tokens=8, new_tokens=3, warmup=0, repeats=1,
                     energy=("rapl", "estimated"))
    report = run_bench(conf, {"baseline": tiny_model}, heldout_path=_heldout(tmp_path),
                       out_path=str(tmp_path / "bench.json"))
    assert set(report.models) == {"baseline", "baseline_bf16"}
    assert report.energy_method == "estimated" and any(n.startswith("rapl") for n in report.meter_notes)
    assert report.models["baseline"].disk_bytes > 0
    assert "bf16" in report.models["baseline_bf16"].path
    assert (tmp_path / "bench.json").is_file()


def test_compiled_decode_generates_the_same_tokens_as_eager(tiny_model):
    """The compiled static-cache path is the same greedy decode, only faster."""
    from quantgate.tasks.perf.timing import _decode_steps

    model = load_causal_lm(tiny_model)
    ids = torch.randint(0, 300, (1, 10), generator=torch.Generator().manual_seed(1))
    tokens = {}
    for name, step in (("eager", None), ("compiled", torch.compile(model.forward, dynamic=False))):
        prefill, decode = _decode_steps(model, ids, 6, step)
        with torch.no_grad():
            tokens[name] = [prefill().item()] + [t.item() for t in decode()]
    benches = bench_models({"m": tiny_model}, loader=lambda n, p: (load_causal_lm(p), "fp32"),
                           token_stream=list(range(5, 100)), batch_sizes=(1,), prompt_tokens=8,
                           new_tokens=3, warmup=1, repeats=1, meter=EstimatedCpuMeter(4.0, 20.0),
                           compile_decode=True)
    assert "compiled" in benches["m"].path and benches["m"].speeds[1].decode_tok_s > 0
    assert tokens["eager"] == tokens["compiled"]
    with pytest.raises(ValueError, match="warmup"):
        bench_models({"m": tiny_model}, loader=lambda n, p: (load_causal_lm(p), "fp32"),
                     token_stream=list(range(5, 100)), batch_sizes=(1,), prompt_tokens=8, new_tokens=3,
                     warmup=0, repeats=1, meter=EstimatedCpuMeter(4.0, 20.0), compile_decode=True)
