"""Asking the serving engine about a format before quantizing: a one-layer model in that format, the
real engine started on it, the answer remembered per machine; the planner's input."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import TypeAdapter

from quantgate.conf.engine import EngineConf
from quantgate.conf.methods import VariantSpec
from quantgate.tasks.engine.environment import cpu_flags
from quantgate.tasks.engine.probe import probe_candidates, probe_formats, probe_model
from quantgate.tasks.engine.stages import refusals_task
from quantgate.tasks.model.source import ModelRef
from quantgate.tasks.traffic.prepare import PreparedTraffic

from factories import calibration_file

pytestmark = pytest.mark.timeout(600)

ENGINE = EngineConf(dtype="float32", max_model_len=512, start_timeout_s=300)
SPEC = TypeAdapter(VariantSpec)


def _specs(*rows):
    return [SPEC.validate_python(r) for r in rows]


def test_one_probe_per_format_the_engine_could_load_controls_last():
    specs = _specs({"name": "gptq", "method": "int4_gptq", "group_size": 64},
                   {"name": "rtn", "method": "int4_rtn", "group_size": 64},  # gptq's format
                   {"name": "rtn32", "method": "int4_rtn", "group_size": 32},
                   {"name": "awq", "method": "int4_awq", "group_size": 64},  # asymmetric: another format
                   {"name": "int8", "method": "int8_w8a8"},
                   {"name": "ctl", "method": "fp8_w8a8", "control": True},
                   {"name": "bf16", "method": "baseline_bf16"},
                   {"name": "quip", "method": "quip_sharp_2bit"})
    assert [s.name for s in probe_candidates(specs)] == ["gptq", "rtn32", "awq", "int8", "ctl"]


def test_the_probe_model_has_the_shapes_and_one_layer(tiny_model, tmp_path):
    import json

    d = Path(probe_model(tiny_model, tmp_path / "probe"))
    got, want = (json.loads((p / "config.json").read_text()) for p in (d, Path(tiny_model)))
    assert got["num_hidden_layers"] == 1 < want["num_hidden_layers"]
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                "vocab_size"):
        assert got[key] == want[key], key
    assert (d / "tokenizer_config.json").exists()


def test_the_engine_answers_once_per_format_and_the_planner_reads_it(tiny_model, tmp_path, monkeypatch):
    """INT8 W8A8 is served on every x86 build; W4A16 only where the build has its kernel (AVX-512)
    and activations are 16-bit: the answer follows the CPU and the engine's dtype. Both formats are
    asked of one engine process; asked again, the memory answers without one; a refused format not
    quantized yet is the planner's skip, with the engine's words."""
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(Path.home() / ".cache" / "vllm"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # this machine's memory, fresh
    calibration, state = str(calibration_file(tmp_path)), str(tmp_path / "state")
    int8, int4 = _specs({"name": "int8", "method": "int8_w8a8"},
                        {"name": "int4", "method": "int4_gptq", "group_size": 32})

    def probe(*specs):
        return probe_formats(list(specs), model_path=tiny_model, model_digest="d" * 16,
                             calibration_path=calibration, engine=ENGINE, state_dir=state)

    first = probe(int8, int4)
    assert (first["int8"].status, first["int8"].asked) == ("served", True), first
    w4a16 = first["int4"]
    # vLLM's CPU WNA16 kernel: AVX-512 builds only, and 16-bit activations only ("not implemented
    # for 'Float'"): the engine here computes in float32, so refused on every CPU, for either reason.
    wna16_here = "avx512f" in cpu_flags() and ENGINE.dtype in ("bfloat16", "float16")
    assert w4a16.asked and w4a16.status == ("served" if wna16_here else "refused"), w4a16
    logs = sorted(p.name for p in (tmp_path / "state" / "engine-logs").iterdir())
    assert logs == ["probe-int4.log", "probe-int8.log"]  # each format's log
    assert len(list((tmp_path / "state" / "load-check").iterdir())) == 1  # one engine process
    again = probe(int8)["int8"]
    assert (again.status, again.asked) == ("served", False)
    assert len(list((tmp_path / "state" / "load-check").iterdir())) == 1  # none started for it

    traffic = PreparedTraffic(calibration_path=calibration, heldout_path="", quarantine_path="",
                              summary_path="", calibration_hash="h", valid=8, quarantined=0, calibration=8,
                              heldout=0, pii_redacted={})
    refused = refusals_task.fn(variants=(int8, int4), model=ModelRef("tiny", tiny_model, "d" * 16),
                               traffic=traffic, engine=ENGINE, max_seq_len=64, state_dir=state)
    if w4a16.status == "refused":
        assert list(refused) == ["int4"] and w4a16.reason in refused["int4"]
        assert "engine-support.json" in refused["int4"]  # how to make it ask again
    else:
        assert refused == {}


def test_the_planner_skips_a_format_the_engine_refused_here_before_quantizing(tiny_model, tmp_path,
                                                                              monkeypatch):
    """An evaluation's start-up refused an INT4 g32 checkpoint (W4A16 on an AVX2 build, say): the next
    run's planner skips INT4 GPTQ at g32 (the same format, another method) before quantizing it, with
    the engine's words; the INT4 RTN control in that format is measured anyway (reference path);
    another group size and INT8 W8A8 are not the refused format and run."""
    from quantgate.conf.schema import PlanConf
    from quantgate.tasks.engine.refusals import learn_refusal
    from quantgate.tasks.engine.server import EngineStartError
    from quantgate.tasks.perf.stages import plan_task
    from quantgate.tasks.quantize.run import quantize_variant

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no engine starts here
    rtn = SPEC.validate_python({"name": "r", "method": "int4_rtn", "group_size": 32})
    int4 = quantize_variant(rtn, model_path=tiny_model, calibration_path=str(calibration_file(tmp_path)),
                            out_dir=str(tmp_path / "int4"), max_seq_len=64, threads=1).checkpoint
    learn_refusal(int4, ENGINE, EngineStartError("failed its first token: cpu_gemm_wna16 missing",
                                                    tmp_path / "e.log"))
    specs = tuple(SPEC.validate_python(v) for v in (
        {"name": "gptq32", "method": "int4_gptq", "group_size": 32},
        {"name": "rtn32", "method": "int4_rtn", "group_size": 32, "control": True},
        {"name": "gptq16", "method": "int4_gptq", "group_size": 16},
        {"name": "int8", "method": "int8_w8a8"}))
    model = ModelRef("tiny", tiny_model, "d" * 16)
    traffic = PreparedTraffic(calibration_path="", heldout_path="", quarantine_path="", summary_path="",
                              calibration_hash="h", valid=0, quarantined=0, calibration=0, heldout=0,
                              pii_redacted={})
    refused = refusals_task.fn(variants=specs, model=model, traffic=traffic, engine=ENGINE, max_seq_len=64,
                               state_dir=str(tmp_path / "state"))
    assert sorted(refused) == ["gptq32", "rtn32"]  # the control too: the plan measures it anyway
    plan = plan_task.fn(conf=PlanConf(target="a100-80gb"), model=model, variants=specs, refused=refused)
    assert [s.name for s in plan.runnable] == ["rtn32", "gptq16", "int8"]
    why = plan.skipped["gptq32"]
    assert "cpu_gemm_wna16 missing" in why and "engine-support.json" in why
    assert any(line.startswith("- rtn32: control, measured anyway") for line in plan.lines)
    without = plan_task.fn(conf=PlanConf(target="a100-80gb"), model=model, variants=specs)
    assert [s.name for s in without.runnable] == ["gptq32", "rtn32", "gptq16", "int8"]  # reference path
