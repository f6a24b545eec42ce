"""The flow through the CLI on a tiny Llama: real Prefect server, real Ray, MLflow on SQLite."""

import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from quantgate.tasks.registry.aliases import alias_history
from quantgate.tasks.runtime.child_process import free_port

from factories import MECHANICS, cli_env, mixed_records, write_traffic

# The serving target is an A100 (plan.target): it has no FP8 tensor cores, so the planner skips a
# non-control FP8 variant; the FP8 controls are quantized and measured anyway. The first run scores
# on the serving engine (vLLM on this CPU): INT8 W8A8 it serves everywhere; FP8 W8A8 only on a
# fallback kernel, and W4A16 only on AVX-512 CPUs, so those are scored on the reference path against
# the baseline scored there, labelled, and never chosen to serve.
VARIANTS = [
    {"name": "int8_w8a8", "method": "int8_w8a8", "num_samples": 4},
    {"name": "fp8_w8a8", "method": "fp8_w8a8", "control": True},
    {"name": "kv_fp8", "method": "kv_fp8", "num_samples": 4, "control": True},
    {"name": "int4_gptq", "method": "int4_gptq", "group_size": 32, "num_samples": 4},
    {"name": "int4_rtn", "method": "int4_rtn", "group_size": 32, "control": True},
    {"name": "bad_group", "method": "int4_rtn", "group_size": 48},
    {"name": "fp8_on_ampere", "method": "fp8_w8a8"},
]


def _config(tmp_path, model, *, judge=False, backend="reference"):
    traffic = write_traffic(tmp_path / "traffic.jsonl", mixed_records(120),
                            [b"not json", b'{"id": "x"}'])
    conf = {"model": {"name": model, "served_name": "tiny"},
            # Which of these formats this CPU's engine serves is asked before quantizing in the e2e run
            # and tests/tasks/engine/test_probe.py; here the evaluation finds out, whatever the CPU.
            "engine": {"probe": False},
            "traffic": {"path": str(traffic), "calibration_size": 12, "heldout_size": 36},
            "calibration": {"max_seq_len": 64},
            "eval": {"window": 64, "batch_size": 8, "min_slice_tokens": 50, "backend": backend},
            "variants": VARIANTS,
            # A random tiny model scores near chance: its task metrics are noise, so they only
            # have to run and be logged here (thresholds ~0); the judge only reports (advisory).
            # Task evals on the HF path (else an engine start-up each; the engine's: test_lmeval_engine).
            "lmeval": {"backend": "hf", "tasks": ["qg_facts_mc", "qg_replay"], "limit": 4, "replay_size": 6,
                       "batch_size": 4, "min_slice_items": 2},
            "judge": {"enabled": judge, "max_pairs": 2, "min_agreement": 1.0},
            "long_context": {"enabled": True, "context": 96, "documents": 1, "block": 32, "depths": [0.5]},
            "plan": {"target": "a100-80gb"},
            # The reference bench here (the engine's: tests/tasks/perf/test_engine_bench.py, and the
            # e2e run on SmolLM2): which of these formats vLLM serves depends on the CPU.
            "bench": {"backend": "reference", "batch_sizes": [1, 2], "prompt_tokens": 8, "new_tokens": 3,
                      "warmup": 0, "repeats": 1, "num_cpus": 2},
            # Budgets a random model's noise cannot breach: every working variant passes.
            "gate": {"budgets": {"ppl": {"enable": 1.0, "monitor": 1.0, "investigate": 1.0},
                                 "kl": {"enable": 5.0, "monitor": 5.0, "investigate": 5.0},
                                 "task": {"enable": 1.0, "monitor": 1.0, "investigate": 1.0}}},
            "runtime": {"state_dir": str(tmp_path / "state"), "prefect_port": free_port(),
                        "mlflow_ui_port": free_port()}}
    path = tmp_path / "conf.yaml"
    path.write_text(yaml.safe_dump(conf))
    return path


def _cli(*args, own_prefect=False, **kw):
    exe = Path(sys.executable).parent / "quantgate"
    env = cli_env(own_prefect=own_prefect)
    return subprocess.Popen([str(exe), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, **kw)


def _mlflow(tmp):
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'state' / 'mlflow.db'}")
    (exp,) = [e for e in client.search_experiments() if e.name == "model"]
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    versions = client.search_model_versions("name='tiny'")
    return client, runs, parents, versions


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, tiny_model):
    tmp = tmp_path_factory.mktemp("flow")
    conf = _config(tmp, tiny_model, judge=True, backend="engine")
    proc = _cli("run", "--config", str(conf))
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    return tmp, conf, out


@pytest.mark.timeout(1200)  # the first test pays for the module's whole flow run
def test_run_prints_table_and_addresses(first_run):
    _, _, out = first_run
    for stage in ("[1/7]", "[4/7]", "[6/7]", "[7/7]"):
        assert stage in out
    assert "| baseline |" in out and "| int4_gptq |" in out
    assert "FAILED: QuantizeError: variants[bad_group].group_size=48" in out
    assert "fp8_on_ampere: none" in out and "skipped by the planner" in out
    assert "fp8_w8a8: none" in out and "control, measured anyway" in out
    assert "[6/7] bench: 6 models" in out  # baseline + the five variants that quantized
    assert "fp8_w8a8: not served on vLLM here: vLLM serves it on a fallback kernel" in out
    assert re.search(r"int8_w8a8: scored by vllm\S* [\d.]+, \w+, engine up in \d+ s", out), out[-3000:]
    assert re.search(r"baseline: scored by vllm\S* [\d.]+, \w+, engine up in \d+ s", out), out[-3000:]
    assert re.search(r"\[5/7\] judging \d variants.*\n.*judge up in \d+ s", out), out[-3000:]
    assert "MLflow:  sqlite:///" in out and "Prefect: flow run" in out
    passed = r"int4_gptq: perplexity screen: pass \((ppl|kl)\): every gating metric"
    assert re.search(passed, out), out[-3000:]
    assert "where the time went:" in out and "| variants |" in out and "| int4_gptq | quantize |" in out


@pytest.mark.timeout(1200)
def test_mlflow_holds_parent_children_metrics_and_alias(first_run):
    tmp, _, _ = first_run
    client, runs, parents, versions = _mlflow(tmp)
    assert len(parents) == 1
    parent = parents[0]
    assert parent.data.metrics["traffic.quarantined"] == 2
    children = {r.data.tags["variant"]: r for r in runs if r.data.tags.get("mlflow.parentRunId")
                == parent.info.run_id}
    assert set(children) == {"baseline", *(v["name"] for v in VARIANTS)}
    assert children["bad_group"].info.status == "FAILED"
    assert children["fp8_on_ampere"].info.status == "KILLED"  # not run, by decision
    assert "no FP8 tensor cores" in children["fp8_on_ampere"].data.tags["error"]
    for name in ("baseline", "int4_gptq", "fp8_w8a8"):
        run = children[name].data
        assert run.tags["energy_method"] == "estimated" and run.tags["bench.batch"] == "1"
        for key in ("perf.decode_tok_s", "perf.ttft_ms", "perf.tpot_ms", "energy.j_per_token",
                    "energy.j_per_token.bs2", "perf.speedup_vs_baseline.bs1", "mem.peak_bytes"):
            assert run.metrics[key] > 0, (name, key)
    assert children["baseline"].data.metrics["perf.speedup_vs_baseline.bs1"] == 1.0
    assert "group_size=48" in children["bad_group"].data.tags["error"]
    gptq = children["int4_gptq"].data
    assert gptq.tags["calibration_hash"] == parent.data.tags["calibration_hash"]
    for key in ("ppl", "ppl.domain.code", "ppl.tenant.acme", "recovery.ppl", "gate.passed",
                "size.bytes", "size.bits_per_weight"):
        assert key in gptq.metrics, key
    assert children["kv_fp8"].data.metrics["eval.kv_cache_quantized_layers"] == 2
    for name in ("baseline", "kv_fp8", "int4_gptq"):  # the long-context probe, on every screen survivor
        assert children[name].data.metrics["long.context"] == 96 and "long.ppl" in children[name].data.metrics
    assert (gptq.tags["gate.verdict"], gptq.tags["gate.stage"]) == ("pass", "bench")
    int8 = children["int8_w8a8"].data
    assert int8.tags["eval.scored_by"].startswith("vllm") and "eval.not_served" not in int8.tags
    fp8 = children["fp8_w8a8"].data  # a fallback kernel here: scored on the reference path, labelled
    assert fp8.tags["eval.scored_by"].startswith("reference") and "fallback" in fp8.tags["eval.not_served"]
    if "eval.not_served" in gptq.tags:  # W4A16: served on AVX-512 CPUs, not by vLLM's AVX2 build
        assert gptq.tags["eval.scored_by"].startswith("reference")
    assert gptq.tags["gate.decided_by"] in {"ppl", "kl", "long_ppl", "lmeval.qg_facts_mc.acc",
                                            "lmeval.qg_replay.token_f1"}
    assert 0 <= gptq.metrics["gate.kl.delta"] < 5  # next-token KL from the baseline was measured
    m = gptq.metrics
    assert m["gate.ppl.delta_low"] <= m["gate.ppl.delta"] <= m["gate.ppl.delta_high"]
    assert parent.data.metrics["time.flow_s"] >= parent.data.metrics["time.variants_s"] > 0
    for key in ("lmeval.qg_facts_mc.acc", "lmeval.qg_replay.token_f1", "judge.pairs",
                "judge.win_or_tie", "judge.identical"):
        assert key in gptq.metrics, key
    base = children["baseline"].data.metrics
    for metric in ("qg_facts_mc.acc", "qg_replay.token_f1"):  # recovery where the baseline scores
        if base[f"lmeval.{metric}"] > 0:
            assert f"recovery.lmeval.{metric}" in gptq.metrics, metric
        else:
            assert f"lmeval.{metric}: baseline scores 0" in gptq.tags["gate.notes"], metric
    assert gptq.metrics["judge.pairs"] == 2
    assert any(k.startswith("lmeval.qg_replay.token_f1.domain.") for k in gptq.metrics)
    files = {f.path for f in client.list_artifacts(children["int4_gptq"].info.run_id)}
    assert {"lmeval.json", "lmeval_samples.jsonl", "judge_transcript.jsonl"} <= files
    winner = parent.data.tags["gate.winner"]
    passed = {n for n, r in children.items() if r.data.metrics.get("gate.passed") == 1.0}
    # the passing variants, and the baseline: the first run of a model registers it as `champion`
    assert {v.tags["variant"] for v in versions} == passed | {"baseline"}
    assert client.get_model_version_by_alias("tiny", "champion").tags["variant"] == "baseline"
    assert winner in passed  # on the tiny model every working variant passes
    assert client.get_model_version_by_alias("tiny", "canary").tags["variant"] == winner
    assert alias_history(client, "tiny")[-1]["alias"] == "canary"
    artifacts = {f.path for f in client.list_artifacts(parent.info.run_id)}
    assert {"gate_report.md", "quarantine.jsonl", "pareto.png", "bench.json",
            "roofline_plan.json", "activation_stats.safetensors"} <= artifacts  # the drift watch's reference
    # Each evaluated variant is a LoggedModel linked to its run; each version says why it passed.
    exp_id = parent.info.experiment_id
    models = {m.name: m for m in client.search_logged_models([exp_id])}
    assert set(models) == {n for n, r in children.items() if n != "baseline" and "ppl" in r.data.metrics}
    assert models["int4_gptq"].source_run_id == children["int4_gptq"].info.run_id
    gptq_model = models["int4_gptq"]
    assert gptq_model.tags["gate.verdict"] == "pass" and gptq_model.params["group_size"] == "32"
    assert str(gptq_model.status) in ("READY", "LoggedModelStatus.READY")
    gptq_version = next(v for v in versions if v.tags["variant"] == "int4_gptq")
    assert "Gate verdict `pass`" in gptq_version.description
    assert gptq_version.description.startswith("int4_gptq: int4_gptq, ")
    (tmp / "dl").mkdir(exist_ok=True)
    report = client.download_artifacts(parent.info.run_id, "gate_report.md", str(tmp / "dl"))
    text = Path(report).read_text()
    assert "## lm-eval tasks" in text and "## LLM-as-judge" in text and "| int4_gptq |" in text
    assert "## Speed and energy" in text and "Roofline plan on `a100-80gb`" in text
    assert re.search(r"\| int4_gptq \| 2 \| int4", text)  # bench row: batch 2, its fast path named


@pytest.mark.timeout(900)
def test_identical_rerun_reuses_every_variant_and_publishes_nothing_new(first_run):
    tmp, conf, _ = first_run
    _, runs_before, _, versions_before = _mlflow(tmp)
    proc = _cli("run", "--config", str(conf))
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    for name in ("fp8_w8a8", "kv_fp8", "int4_gptq", "int4_rtn"):
        assert re.search(rf"{name}: quantized in [0-9.]+ s \(reused\)", out), out[-3000:]
    assert "published already: nothing new was recorded" in out
    _, runs, parents, versions = _mlflow(tmp)
    assert len(parents) == 1 and {r.info.run_id for r in runs} == {r.info.run_id for r in runs_before}
    def listed(vs):  # the registry lists versions by last update: compare them as sets
        return sorted((v.version, v.source) for v in vs)

    assert listed(versions) == listed(versions_before)
    assert parents[0].data.tags["prefect.flow_run_ids"].count(",") == 1  # both flow runs named
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'state' / 'mlflow.db'}")
    names = [m.name for m in client.search_logged_models([parents[0].info.experiment_id])]
    assert len(names) == len(set(names))  # no second LoggedModel for a republished variant


@pytest.mark.timeout(900)
def test_run_ends_with_the_winners_rollout_when_auto_is_on(first_run):
    """rollout.auto: the flow's last stage rolls the gate's winner out on Ray Serve, its arms vLLM
    engine servers, and prints the decision, its report and where the rollout's time went; the
    registry ends consistent with it. Run on the module's state after the identical rerun (which it
    follows in this file): every variant is reused, so what runs anew is the gate and the rollout."""
    tmp, conf_path, _ = first_run
    client, _, parents, _ = _mlflow(tmp)
    winner = parents[0].data.tags["gate.winner"]  # INT8 W8A8 on AVX2 CPUs (W4A16 is not served there)
    conf = yaml.safe_load(conf_path.read_text())
    conf["rollout"] = {"auto": True, "steps": [50, 100], "window_canary_requests": 4, "replay_max_tokens": 6,
                       "pause_timeout_s": 20, "analysis": {"min_error_samples": 8, **MECHANICS},
                       "serving": {"port": free_port(), "replica_cpus": 0.25}}
    (path := tmp / "auto.yaml").write_text(yaml.safe_dump(conf))
    proc = _cli("run", "--config", str(path))
    out, _ = proc.communicate(timeout=800)
    assert proc.returncode == 0, out[-3000:]
    assert f"[rollout] {winner} (version" in out and "steps 50, 100 %" in out, out[-3000:]
    # A random model's budgets are loose (a `pass` verdict): the good canary walks both steps.
    assert re.search(r"^rollout: promoted: all 2 steps passed", out, re.M), out[-3000:]
    assert re.search(r"\| rollout \| \d+\.\d \|", out.split("where the time went:")[1])
    assert client.get_model_version_by_alias("tiny", "champion").tags["variant"] == winner
    assert client.get_model_version_by_alias("tiny", "previous-champion").tags["variant"] == "baseline"


@pytest.mark.timeout(300)
def test_bad_config_is_one_line_naming_the_key(tmp_path):
    conf = tmp_path / "c.yaml"
    conf.write_text("variants: [{name: x, method: int4_gptq, group_size: 64, dampening: 0.1}]\n")
    out, _ = _cli("validate", "--config", str(conf)).communicate(timeout=120)
    assert out.strip().splitlines() == [
        f"error: {conf}: variants[x].dampening: unknown key (check its spelling and section)"]


def test_missing_model_fails_the_run_with_what_to_fix(tmp_path):
    conf = _config(tmp_path, str(tmp_path / "no-model"))
    proc = _cli("run", "--config", str(conf))
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1
    assert f"error: ModelSourceError: model.name: {tmp_path / 'no-model'} does not exist" in out, \
        out[-2000:]


def _processes_serving(*ports: int) -> list[str]:
    """Command lines of live processes started with `--port` one of `ports`."""
    wanted = {f"--port\0{p}\0" for p in ports}
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            raw = cmdline.read_text()
        except OSError:  # exited while we looked
            continue
        if any(w in raw for w in wanted):
            found.append(raw.replace("\0", " "))
    return found


@pytest.mark.timeout(300)
def test_ui_serves_both_and_sigterm_stops_its_servers(tmp_path, tiny_model):
    import urllib.request

    conf = _config(tmp_path, tiny_model)
    runtime = yaml.safe_load(conf.read_text())["runtime"]
    prefect, mlflow = runtime["prefect_port"], runtime["mlflow_ui_port"]
    proc = _cli("ui", "--config", str(conf), own_prefect=True)
    deadline, lines = time.monotonic() + 120, []
    while not any("Ctrl-C" in line for line in lines):
        assert time.monotonic() < deadline and proc.poll() is None, lines
        lines.append(proc.stdout.readline())
    assert f"Prefect UI: http://127.0.0.1:{prefect}" in "".join(lines)
    assert f"MLflow UI:  http://127.0.0.1:{mlflow}" in "".join(lines)
    for url in (f"http://127.0.0.1:{prefect}/api/health", f"http://127.0.0.1:{mlflow}/"):
        for _ in range(60):
            try:
                assert urllib.request.urlopen(url, timeout=5).status == 200
                break
            except OSError:
                time.sleep(0.5)
        else:
            raise AssertionError(f"{url} never answered")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    # Gone, not going: a server still shutting down holds its port a moment longer (seen in CI).
    assert not _processes_serving(prefect, mlflow), "a server outlived `quantgate ui`"
    for port in (prefect, mlflow):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still served"
