"""The serving engine as a real part: vLLM's OpenAI server started, measured, scored through and
stopped, on a tiny Llama it loads (head size 64). One server for the module; the failure cases start
their own."""

from __future__ import annotations

import json
import math
import socket
from pathlib import Path

import httpx
import psutil
import pytest
import torch
import torch.nn.functional as F

from quantgate.conf.engine import EngineConf
from quantgate.tasks.engine.checkpoints import servable
from quantgate.tasks.engine.environment import EngineMissing, find_engine
from quantgate.tasks.engine.metrics import scrape
from quantgate.tasks.engine.server import EngineServer, EngineSpec, EngineStartError, engine_server
from quantgate.tasks.evaluate.on_engine import evaluate_on_engine
from quantgate.tasks.evaluate.perplexity import evaluate_checkpoint
from quantgate.tasks.evaluate.served import score_served, sparse_kl, windows_for
from quantgate.tasks.model.load import load_causal_lm, load_tokenizer
from quantgate.tasks.perf.serving_bench import WHOLE_RUN, serving_meter, serving_sweep
from quantgate.tasks.traffic.load import load_traffic, read_requests, write_requests
from quantgate.tasks.traffic.tokens import encode_request

from factories import mixed_records, perturbed_copy, write_traffic

pytestmark = pytest.mark.timeout(900)

FP32 = EngineConf(dtype="float32", max_model_len=512, start_timeout_s=300)  # parity: the reference's dtype


@pytest.fixture(scope="module")
def model_dir(tiny_model):
    return tiny_model


@pytest.fixture(scope="module")
def heldout(tmp_path_factory):
    d = tmp_path_factory.mktemp("heldout")
    reqs = load_traffic(write_traffic(d / "t.jsonl", mixed_records(12)), max_line_bytes=65536,
                        length_buckets=(200,)).requests
    write_requests(d / "heldout.jsonl", reqs)
    return str(d / "heldout.jsonl")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    spec = EngineSpec(model=model_dir, served_name="tiny", dtype="float32", max_model_len=512)
    with engine_server(spec, state_dir=tmp_path_factory.mktemp("state"), log_name="tiny") as s:
        yield s


def test_the_server_is_up_on_loopback_with_its_startup_measured(server):
    assert server.alive() and server.healthy()
    assert server.base_url.startswith("http://127.0.0.1:")
    assert 0 < server.startup_s < 300
    models = httpx.get(f"{server.base_url}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["tiny"]
    assert len(server.cpus) == 1


def test_prompt_logprobs_match_the_reference_forward(server, model_dir, heldout):
    """Per-request NLL from the engine against an unbatched transformers forward, token for token."""
    tok, model = load_tokenizer(model_dir), load_causal_lm(model_dir)
    encoded = [encode_request(tok, r) for r in read_requests(Path(heldout))[:4]]
    items, positions = windows_for(encoded, 512)
    scores = score_served(server.base_url, "tiny", items, requests=len(encoded), positions=positions, k=5,
                          concurrency=4)
    for enc, (nll, n) in zip(encoded, scores.per_request, strict=True):
        ids = torch.tensor([enc.input_ids])
        with torch.no_grad():
            logp = F.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        want = -logp[torch.arange(len(ids[0]) - 1), ids[0, 1:]][enc.answer_start - 1:].sum()
        assert n == len(enc.input_ids) - enc.answer_start
        assert math.isclose(nll, float(want), rel_tol=1e-4)


def test_the_engines_metrics_count_a_window_of_requests(server):
    before = scrape(server.base_url)
    usage = [httpx.post(f"{server.base_url}/v1/completions", timeout=60, json={
        "model": "tiny", "prompt": f"def total{i}(xs):", "max_tokens": 6, "temperature": 0,
        "ignore_eos": True}).json()["usage"] for i in range(3)]
    window = scrape(server.base_url).since(before)
    assert window.counters["requests"] == 3
    assert window.counters["generation_tokens"] == sum(u["completion_tokens"] for u in usage) == 18
    assert window.histograms["ttft_s"].count == 3
    summary = window.summary()
    assert 0 < summary["ttft_s.p50"] <= summary["ttft_s.p99"]
    assert summary["itl_s.mean"] > 0


def test_vllms_serving_benchmark_gives_its_figures_and_joules_per_token(server, model_dir, tmp_path):
    """bench/engine_serving.py's sweep (tasks/perf/serving_bench.py) against this module's server."""
    tok = load_tokenizer(model_dir)
    prompts = [tok.apply_chat_template(r["request"]["messages"], tokenize=False, add_generation_prompt=True)
               for r in mixed_records(8)]
    meter, _ = serving_meter(server.process.pid, watts_per_busy_core=4.0, base_watts=20.0)
    levels = serving_sweep(server.base_url, "tiny", tokenizer=model_dir, prompts=prompts,
                           concurrency=(1, 4), output_tokens=8, max_num_seqs=server.spec.max_num_seqs,
                           meter=meter, out_dir=tmp_path / "bench", python=find_engine().python,
                           requests_per_client=8, engine_cpus=server.cpus)
    assert [lv.clients for lv in levels] == [1, 4]
    for lv in levels:
        assert lv.sent == lv.completed == 8 * lv.clients and lv.failed == 0
        assert lv.req_s > 0 and lv.out_tok_s > 0 and lv.duration_s > 0
        assert math.isclose(lv.out_tok_s * lv.duration_s, 8 * lv.completed)  # EOS ignored: 8 tokens each
        assert sorted(lv.latency_ms) == sorted(f"{m}_p{p}" for m in ("ttft", "tpot", "itl", "e2el")
                                               for p in (50, 95, 99))
        assert all(v > 0 for v in lv.latency_ms.values())
        assert lv.latency_ms["ttft_p50"] <= lv.latency_ms["ttft_p99"]
        e = lv.energy
        assert math.isfinite(e.j_per_token) and e.j_per_token > 0 and e.method in ("rapl", "estimated")
        assert e.window in (WHOLE_RUN, f"steady state, {lv.clients} running")
        assert 0 < e.tokens <= 8 * lv.completed


def test_kl_from_top_k_is_a_lower_bound_that_sees_a_perturbation(server, model_dir, heldout, tmp_path):
    """Against itself the served KL is 0; against a perturbed copy it is positive and at most the
    full-vocabulary KL (the coarsening loses divergence, never adds it)."""
    tok = load_tokenizer(model_dir)
    encoded = [encode_request(tok, r) for r in read_requests(Path(heldout))[:3]]
    items, positions = windows_for(encoded, 512)
    base = score_served(server.base_url, "tiny", items, requests=3, positions=positions, k=20, concurrency=3)
    same = score_served(server.base_url, "tiny", items, requests=3, positions=positions, k=20, concurrency=3,
                        reference=(base.record_idx, base.record_logp))
    assert all(abs(k) < 1e-5 for k in same.kl)

    variant = str(perturbed_copy(model_dir, tmp_path / "noisy", scale=0.05))
    p, q = load_causal_lm(model_dir), load_causal_lm(variant)
    full = 0.0
    for enc in encoded:
        ids = torch.tensor([enc.input_ids])
        with torch.no_grad():
            lp = F.log_softmax(p(input_ids=ids).logits[0, :-1].float(), -1)[enc.answer_start - 1:]
            lq = F.log_softmax(q(input_ids=ids).logits[0, :-1].float(), -1)[enc.answer_start - 1:]
        full += float((lp.exp() * (lp - lq)).sum())
    q_idx, q_logp = _top_k(q, encoded, 20)
    served = sparse_kl(base.record_idx, base.record_logp, q_idx, q_logp)
    assert 0 < served <= full * (1 + 1e-4)


def _top_k(model, encoded, k):
    rows_i, rows_l = [], []
    for enc in encoded:
        with torch.no_grad():
            lq = F.log_softmax(model(input_ids=torch.tensor([enc.input_ids])).logits[0, :-1].float(), -1)
        v, i = lq[enc.answer_start - 1:].topk(k, -1)
        rows_i.append(i.int().numpy())
        rows_l.append(v.numpy())
    import numpy as np

    return np.concatenate(rows_i), np.concatenate(rows_l)


def test_engine_perplexity_agrees_with_the_reference_path(model_dir, heldout, tmp_path):
    """The parity the gate relies on: the same checkpoint, dtype and windows scored by the engine and
    by the reference path give the same perplexity (within 0.5 %), overall and per request."""
    ref = evaluate_checkpoint(model_dir, heldout, str(tmp_path / "ref.json"), window=512, batch_size=4)
    got = evaluate_on_engine(model_dir, heldout, str(tmp_path / "eng.json"), engine=FP32,
                             state_dir=str(tmp_path / "state"), window=512, name="tiny",
                             record_reference=True)
    assert got.scored_by.startswith("vllm") and got.scored_by.endswith("float32")
    assert abs(got.ppl / ref.ppl - 1) < 0.005
    assert [r.tokens for r in got.requests] == [r.tokens for r in ref.requests]
    assert all(math.isclose(a.nll, b.nll, rel_tol=1e-3) for a, b in zip(got.requests, ref.requests,
                                                                        strict=True))
    assert got.reference_path is not None and got.slices.keys() == ref.slices.keys()


def test_stop_ends_every_engine_process(model_dir, tmp_path):
    spec = EngineSpec(model=model_dir, served_name="tiny", dtype="float32", max_model_len=512)
    server = EngineServer.start(spec, log_path=tmp_path / "e.log", cpus=(0,), timeout_s=300)
    leader = psutil.Process(server.process.pid)
    family = [leader, *leader.children(recursive=True)]
    assert len(family) >= 2  # the API server and its engine core at least
    server.stop(grace_s=10)
    gone, alive = psutil.wait_procs(family, timeout=10)
    assert not alive
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", server.port)) != 0


def test_a_taken_port_is_the_engines_reason(model_dir, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        spec = EngineSpec(model=model_dir, served_name="tiny", dtype="float32", max_model_len=512, port=port)
        with pytest.raises(EngineStartError, match=f"port {port} is taken"):
            EngineServer.start(spec, log_path=tmp_path / "e.log", cpus=(0,), timeout_s=300)


def test_a_checkpoint_the_engine_cannot_load_fails_with_its_reason(model_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"architectures": ["NoSuchForCausalLM"], "model_type": "nosuch"}')
    spec = EngineSpec(model=str(broken), served_name="broken", dtype="float32", max_model_len=512)
    with pytest.raises(EngineStartError) as err:
        EngineServer.start(spec, log_path=tmp_path / "e.log", cpus=(0,), timeout_s=300)
    assert "exited" in str(err.value) and "nosuch" in err.value.reason and "e.log" in str(err.value)


def test_a_missing_engine_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("QG_ENGINE_PYTHON", str(tmp_path / "nope" / "python"))
    with pytest.raises(EngineMissing, match="make install"):
        find_engine()


def test_codebook_formats_are_not_servable(tmp_path):
    for method, name in (("quip_sharp", "QuIP#"), ("aqlm_rht", "AQLM")):
        d = tmp_path / method
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": method}}))
        assert f"not servable on vllm: no production engine serves {name}" in servable(str(d))


def test_a_format_the_engine_refuses_is_scored_on_the_reference_path_paired_there(
        tiny_model, heldout, tmp_path, monkeypatch):
    """FP8 W8A8 on a CPU: vLLM would serve it on torch's generic `_scaled_mm`. The evaluation task
    refuses that fallback with the kernel's name, scores the variant on the reference path against
    the baseline scored there (evaluated on demand), and the gate pairs the two; it never wins. A
    second checkpoint in the same format is refused from memory, without another start-up."""
    # This machine's memory of refusals, fresh; vLLM's own cache (its model-class inspection, a
    # subprocess importing torch and vLLM on a miss) stays the session's.
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(Path.home() / ".cache" / "vllm"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    from pydantic import TypeAdapter

    from quantgate.conf.methods import VariantSpec
    from quantgate.conf.schema import EvalConf, GateConf
    from quantgate.tasks.evaluate.stages import evaluate_task
    from quantgate.tasks.gate.decide import VariantScores, decide, paired_baseline
    from quantgate.tasks.quantize.run import quantize_variant
    from quantgate.tasks.traffic.prepare import PreparedTraffic

    from factories import calibration_file

    spec = TypeAdapter(VariantSpec).validate_python({"name": "f", "method": "fp8_w8a8"})
    fp8 = quantize_variant(spec, model_path=tiny_model, calibration_path=str(calibration_file(tmp_path)),
                           out_dir=str(tmp_path / "fp8"), max_seq_len=64, threads=1).checkpoint
    traffic = PreparedTraffic("", heldout, "", "", "h", 12, 0, 0, 12, {})
    conf = EvalConf(window=64, min_slice_tokens=10, backend="engine")
    common = {"traffic": traffic, "conf": conf, "engine": FP32, "state_dir": str(tmp_path / "state")}
    base = evaluate_task.fn(variant="baseline", checkpoint=tiny_model, results_dir=str(tmp_path / "base"),
                            **common)
    assert base.scored_by.startswith("vllm") and not base.not_served
    got = evaluate_task.fn(variant="fp8", checkpoint=fp8, results_dir=fp8, baseline=base,
                           baseline_checkpoint=tiny_model, baseline_results_dir=str(tmp_path / "base"),
                           **common)
    assert "fallback kernel" in got.not_served
    assert "ChannelWiseTorchFP8ScaledMMLinearKernel" in got.not_served
    assert got.scored_by.startswith("reference") and got.paired_baseline
    paired = paired_baseline(got, base)
    assert paired.scored_by.startswith("reference") and paired.reference_path and paired is not base
    assert [r.id for r in paired.requests] == [r.id for r in got.requests]
    assert all(r.kl is not None for r in got.requests)  # KL against the reference baseline's record
    scores = [VariantScores("fp8", "fp8_w8a8", False, got)]
    decision = decide(VariantScores("baseline", "baseline", True, base), scores,
                      GateConf(budgets={"ppl": {"enable": 1.0, "monitor": 1.0, "investigate": 1.0},
                                        "kl": {"enable": 5.0, "monitor": 5.0, "investigate": 5.0}}),
                      min_slice_tokens=10, min_slice_items=1)
    assert decision.verdicts["fp8"].passed and decision.winner is None
    assert "the serving engine does not serve it" in decision.reason
    again = evaluate_task.fn(variant="fp8_again", checkpoint=fp8, results_dir=str(tmp_path / "again"),
                             baseline=base, baseline_checkpoint=tiny_model,
                             baseline_results_dir=str(tmp_path / "base"), **common)
    assert "ChannelWiseTorchFP8ScaledMMLinearKernel" in again.not_served
    assert "remembered from" in again.not_served
    assert not (tmp_path / "state" / "engine-logs" / "eval-fp8_again.log").exists()  # no start-up
    assert again.ppl == got.ppl  # the same reference path, the same numbers


@pytest.mark.parametrize("killed", ["server", "supervisor"])
def test_a_server_that_dies_takes_its_engine_processes_with_it(tiny_model, tmp_path, killed):
    """vLLM's API server killed outright (a crash): the supervisor ends what it left behind (its
    engine core would otherwise live on, holding its memory), and the server reads as dead. The
    supervisor killed outright (Ray kills a dead replica's children with SIGKILL): the server and its
    engine core end too."""
    import os
    import signal

    spec = EngineSpec(model=tiny_model, served_name="tiny", dtype="float32", max_model_len=512)
    server = EngineServer.start(spec, log_path=tmp_path / "e.log", cpus=(0,), timeout_s=300)
    try:
        family = psutil.Process(server.process.pid).children(recursive=True)
        assert len(family) >= 2  # the API server and its engine core at least
        os.kill(server.server_pid() if killed == "server" else server.process.pid, signal.SIGKILL)
        _, alive = psutil.wait_procs(family, timeout=30)
        assert not alive and not server.alive()
    finally:
        server.stop()
