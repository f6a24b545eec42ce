"""`quantgate up`, `quantgate deploy` and `quantgate down` on a tiny Llama, as an operator runs them: the
real Prefect server (schedules, events, automations, concurrency limits), the real Ray head, MLflow
behind its server. The drift watch fires on its schedule; a quantize_and_gate run's passing gate starts
the rollout through its event; two runs of one deployment never overlap; drifted traffic starts
requantization on its window and the same traffic does not."""

import contextlib
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from browser import chromium_page, screenshot
from mlflow.tracking import MlflowClient

from quantgate.tasks.runtime.child_process import free_port

from factories import MECHANICS, cli_env, record, write_traffic

pytestmark = pytest.mark.timeout(1200)
EXE = Path(sys.executable).parent / "quantgate"


def _env(tmp):
    """A Prefect home of this module's own: the stack's server must not share the session's database
    with the other tests' servers."""
    return cli_env(own_prefect=True, PREFECT_HOME=str(tmp / "prefect-home"),
                   PREFECT_RUNNER_POLL_FREQUENCY="2")


def _quantgate(tmp, *args, timeout=180):
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, env=_env(tmp), timeout=timeout)


def _wait(what, check, timeout=300, every=1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.contextmanager
def _prefect(api):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: api}), get_client(sync_client=True) as client:
        yield client


def _runs(api, flow_name):
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    with _prefect(api) as client:
        return client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])))


def _states(api, run_id):
    with _prefect(api) as client:
        return [s.name for s in client.read_flow_run_states(run_id)]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, tiny_model):
    tmp = tmp_path_factory.mktemp("deploy")
    traffic = write_traffic(tmp / "traffic.jsonl", [record(i, domain="support") for i in range(80)])
    conf = {"model": {"name": tiny_model, "served_name": "tiny"},
            "traffic": {"path": str(traffic), "calibration_size": 12, "heldout_size": 36},
            "calibration": {"max_seq_len": 64},
            # the deployments' mechanics: perplexity on the reference path; the canary is on the engine
            "eval": {"window": 64, "batch_size": 8, "min_slice_tokens": 50, "backend": "reference"},
            "variants": [{"name": "int8_w8a8", "method": "int8_w8a8", "num_samples": 4}],
            # Task evals on the HF path (else an engine start-up each; the engine's: test_lmeval_engine).
            "lmeval": {"backend": "hf", "tasks": ["qg_facts_mc"], "limit": 4, "batch_size": 4,
                       "min_slice_items": 2},
            "judge": {"enabled": False}, "long_context": {"enabled": False}, "bench": {"enabled": False},
            "plan": {"target": "a100-80gb"},
            "gate": {"budgets": {"ppl": {"enable": 1.0, "monitor": 1.0, "investigate": 1.0},
                                 "kl": {"enable": 5.0, "monitor": 5.0, "investigate": 5.0},
                                 "task": {"enable": 1.0, "monitor": 1.0, "investigate": 1.0}}},
            "rollout": {"steps": [50, 100], "window_canary_requests": 4, "replay_max_tokens": 6,
                        # INT8 W8A8 decodes slower than fp32 on AVX2-only CPUs (oneDNN's per-token
                        # activation quantization): a strict TPOT budget rolls it back, rightly; the
                        # deployments' mechanics are what is tested here.
                        "pause_timeout_s": 20, "analysis": {"min_error_samples": 8, **MECHANICS},
                        "serving": {"port": free_port(), "replica_cpus": 0.25}},
            # The tiny model: another window of the same traffic measured ~0.01 from its calibration,
            # code traffic against support traffic ~0.2 (tests/tasks/calibrate/test_drift.py).
            "drift": {"threshold": 0.05},
            "deploy": {"drift_interval_s": 10},
            "runtime": {"state_dir": str(tmp / "state"), "prefect_port": free_port(),
                        "mlflow_ui_port": free_port(), "ray_port": free_port()}}
    path = tmp / "conf.yaml"
    path.write_text(yaml.safe_dump(conf))
    first, again = _quantgate(tmp, "up", "--config", str(path)), _quantgate(tmp, "up", "--config", str(path))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "started: prefect, mlflow, ray" in first.stdout, first.stdout
    assert "started: nothing; already up: prefect, mlflow, ray" in again.stdout, again.stdout
    stack = json.loads((tmp / "state" / "stack.json").read_text())
    log = (tmp / "deploy.log").open("w")
    proc = subprocess.Popen([str(EXE), "deploy", "--config", str(path)], stdout=log, stderr=subprocess.STDOUT,
                            env=_env(tmp))
    _wait("the deployments", lambda: "Prefect UI:" in (tmp / "deploy.log").read_text(), timeout=120)
    yield tmp, path, stack["prefect"]["address"], stack["mlflow"]["address"], traffic, proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    log.close()
    down = _quantgate(tmp, "down", "--config", str(path))
    assert "stopped: ray, mlflow, prefect" in down.stdout, down.stdout + down.stderr


def test_up_shows_the_stack_on_loopback_and_status_says_what_runs(deployed):
    tmp, path, api, mlflow, _, _ = deployed
    assert api.startswith("http://127.0.0.1:") and mlflow.startswith("http://127.0.0.1:")
    out = _quantgate(tmp, "status", "--config", str(path)).stdout
    assert "stack (`quantgate down` stops it):" in out
    for name in ("prefect", "mlflow", "ray"):
        assert f"  {name:8} up   " in out, out
    ui = _quantgate(tmp, "ui", "--config", str(path), timeout=60)  # returns: the stack serves both UIs
    assert ui.returncode == 0 and f"MLflow UI:  {mlflow}" in ui.stdout, ui.stdout + ui.stderr
    assert f"Prefect UI: {api.removesuffix('/api')}" in ui.stdout, ui.stdout


def test_the_drift_watch_fires_on_its_schedule_and_completes(deployed):
    _, _, api, _, _, _ = deployed
    runs = _wait("two scheduled drift_watch runs", lambda: [
        r for r in _runs(api, "drift_watch") if r.state and r.state.is_completed()][1:] or None, timeout=240)
    assert all(r.name == "drift-watch-tiny" and r.deployment_id for r in runs)
    assert "Scheduled" in _states(api, runs[0].id)  # created by the schedule, not by hand


def test_a_passing_gate_starts_the_rollout_and_two_runs_never_overlap(deployed):
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    tmp, _, api, mlflow, _, _ = deployed
    with temporary_settings(updates={PREFECT_API_URL: api}):
        first = run_deployment("quantize_and_gate/tiny", timeout=0)
        second = run_deployment("quantize_and_gate/tiny", timeout=0)
    done = _wait("both quantize_and_gate runs", lambda: [
        r for r in _runs(api, "quantize_and_gate") if r.state and r.state.is_final()][1:] or None,
        timeout=600)
    assert all(r.state.is_completed() for r in done), [r.state for r in done]
    by_id = {r.id: r for r in _runs(api, "quantize_and_gate")}
    a, b = sorted((by_id[first.id], by_id[second.id]), key=lambda r: r.start_time)
    assert b.start_time >= a.end_time  # the deployment's concurrency limit held the second back
    assert "AwaitingConcurrencySlot" in _states(api, b.id)
    # The first gate's event started the canary_rollout deployment with its winner and run.
    rollouts = _wait("the triggered rollout", lambda: [
        r for r in _runs(api, "canary_rollout")
        if r.parameters.get("run") == str(a.id) and r.state and r.state.is_final()] or None, timeout=400)
    assert rollouts[0].state.is_completed() and rollouts[0].parameters["variant"] == "int8_w8a8"
    client = MlflowClient(tracking_uri=mlflow)
    assert client.get_model_version_by_alias("tiny", "champion").tags["variant"] == "int8_w8a8"
    # The second run's gate named the same version: its rollout (if its event came after the
    # promotion) found nothing to do, and no run failed.
    _wait("every rollout ended", lambda: all(r.state and r.state.is_final()
                                             for r in _runs(api, "canary_rollout")), timeout=300)
    assert all(r.state.is_completed() for r in _runs(api, "canary_rollout"))


def test_drifted_traffic_requantizes_on_its_window_and_the_same_traffic_does_not(deployed):
    tmp, _, api, _, traffic, _ = deployed

    def drift_reports():
        return [json.loads(p.read_text()) for p in (tmp / "state" / "drift").glob("*/report.json")]

    # The same traffic as the champion's calibration: looked at, within the threshold, no event.
    _wait("a drift report", lambda: drift_reports() or None, timeout=240)
    assert not any(r["trigger"] for r in drift_reports())
    assert not [r for r in _runs(api, "quantize_and_gate") if r.parameters.get("traffic_window")]
    # The traffic moves to another domain; a line still being written ends the log.
    with traffic.open("ab") as f:
        for i in range(100, 170):
            f.write(json.dumps(record(i, domain="code")).encode() + b"\n")
        f.write(b'{"id": "r-00170", "request": {"mess')
    triggered = _wait("a requantization on the drifted window", lambda: [
        r for r in _runs(api, "quantize_and_gate") if r.parameters.get("traffic_window")] or None,
        timeout=240)
    window = Path(triggered[0].parameters["traffic_window"])
    assert window.parent == tmp / "state" / "drift" / "windows"
    assert b"r-00170" not in window.read_bytes() and window.read_bytes().count(b'"domain": "code"') == 60
    (report,) = [r for r in drift_reports() if r["trigger"]]
    assert report["score"] > report["threshold"] and report["window"]["partial_tail_bytes"] > 0
    done = _wait("the requantization", lambda: [r for r in _runs(api, "quantize_and_gate")
                                                if r.id == triggered[0].id and r.state.is_final()] or None,
                 timeout=600)
    assert done[0].state.is_completed()
    # Only one requantization for this traffic, however many times the watch has looked since.
    time.sleep(25)
    assert len([r for r in _runs(api, "quantize_and_gate") if r.parameters.get("traffic_window")]) == 1


def test_the_uis_show_the_runs_in_a_real_browser(deployed):
    """Debian's Chromium opens what an operator opens: the quantize_and_gate flow-run page (state,
    deployment, tags, its gate-report artifact), the artifacts page (gate report, rollout timelines,
    drift report), the deployments page, and MLflow's compare view of the run's variants."""
    _, _, api, mlflow, _, _ = deployed
    ui = api.removesuffix("/api")
    run = next(r for r in _runs(api, "quantize_and_gate") if r.state.is_completed())
    client = MlflowClient(tracking_uri=mlflow)
    exp = client.get_experiment_by_name("model")
    parent = client.search_runs([exp.experiment_id], f"tags.`prefect.flow_run_ids` LIKE '%{run.id}%'")[0]
    children = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    with chromium_page() as page:
        page.goto(f"{ui}/runs/flow-run/{run.id}")
        page.get_by_text(run.name).first.wait_for()
        page.get_by_text("Completed").first.wait_for()
        page.get_by_text("[1/7] model: resolving").first.wait_for()  # the run's logs
        body = page.inner_text("body")
        assert "quantize_and_gate" in body and "model:tiny" in body and "[1/7] model: resolving" in body
        screenshot(page, "prefect-flow-run")
        page.locator("li.p-tab#artifacts").click()
        page.get_by_text("gate-report").first.wait_for()
        screenshot(page, "prefect-flow-run-artifacts")

        page.goto(f"{ui}/artifacts")
        page.get_by_text("gate-report").first.wait_for()
        # The cards' descriptions go through a markdown renderer that paints after the keys.
        page.get_by_text("canary rollout of int8_w8a8:").first.wait_for()
        body = page.inner_text("body")
        assert "drift-report" in body and "canary rollout of int8_w8a8: promoted" in body, body[:2000]
        assert "variants-progress" in body, body[:2000]  # the long stage's progress artifact
        screenshot(page, "prefect-artifacts")

        page.goto(f"{ui}/deployments")
        page.get_by_text("drift_watch").first.wait_for()
        body = page.inner_text("body")
        assert all(f in body for f in ("quantize_and_gate", "canary_rollout", "rollback")), body[:2000]
        screenshot(page, "prefect-deployments")

        ids = json.dumps([c.info.run_id for c in children])
        page.goto(f"{mlflow}/#/compare-runs?runs={quote(ids)}&experiments={quote(json.dumps([exp.experiment_id]))}")
        page.get_by_text("Comparing 2 Runs").first.wait_for()
        page.get_by_text("gate.verdict").first.wait_for()
        body = page.inner_text("body")
        assert "int8_w8a8" in body and "baseline" in body and "ppl" in body, body[:2000]
        screenshot(page, "mlflow-compare-variants")


def test_stopping_deploy_leaves_the_schedules_on(deployed):
    """Last in the file: stops the deploy process (SIGTERM, as a service manager does)."""
    _, _, api, _, _, proc = deployed
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) is not None
    with _prefect(api) as client:
        deployments = {client.read_flow(d.flow_id).name: d for d in client.read_deployments()}
    assert set(deployments) == {"quantize_and_gate", "drift_watch", "canary_rollout", "rollback"}
    assert {d.name for d in deployments.values()} == {"tiny"}
    assert not any(d.paused for d in deployments.values())
    assert [s.schedule.cron for s in deployments["quantize_and_gate"].schedules] == ["0 3 * * 1"]
    assert all(s.active for d in deployments.values() for s in d.schedules)


def test_deploy_to_a_work_pool_registers_what_a_worker_needs(deployed):
    """After the served deployments are stopped: `deploy --work-pool` registers the same flows on a pool
    (the cluster profile; the rehearsal runs them with workers), and each flow run's environment rides
    on the deployment: Prefect's result storage under the state dir that the nodes share, the Ray head.
    No secret among it. Run twice, it changes nothing."""
    from prefect.client.schemas.actions import WorkPoolCreate

    tmp, path, api, _, _, _ = deployed
    conf = yaml.safe_load(path.read_text())
    conf["deploy"] = {**conf["deploy"], "name": "tiny-pool"}
    conf["runtime"]["ray_address"] = "ray://head.example:10001"
    conf["runtime"]["state_dir"] = str(tmp / "claim")  # the workers' (a cluster's claim), not this host's
    pooled = tmp / "pool.yaml"
    pooled.write_text(yaml.safe_dump(conf))

    def deploy():
        return subprocess.run([str(EXE), "deploy", "--work-pool", "qg-pool", "--config", str(pooled)],
                              capture_output=True, text=True, env={**_env(tmp), "PREFECT_API_URL": api},
                              timeout=180)

    missing = deploy()
    assert missing.returncode == 2 and "no work pool 'qg-pool'" in missing.stderr, missing.stderr
    with _prefect(api) as client:
        client.create_work_pool(WorkPoolCreate(name="qg-pool", type="process"))
    first, again = deploy(), deploy()
    assert not (tmp / "claim").exists()  # registering creates nothing where it runs
    assert first.returncode == 0 and again.returncode == 0, first.stdout + first.stderr
    assert "registered on work pool 'qg-pool'" in first.stdout, first.stdout
    assert "quantize_and_gate/tiny-pool" in first.stdout
    with _prefect(api) as client:
        pooled_deps = [d for d in client.read_deployments() if d.name == "tiny-pool"]
    assert len(pooled_deps) == 4 and {d.work_pool_name for d in pooled_deps} == {"qg-pool"}
    results = str((Path(conf["runtime"]["state_dir"]) / "prefect" / "results").resolve())
    for d in pooled_deps:
        env = d.job_variables["env"]
        assert env["PREFECT_LOCAL_STORAGE_PATH"] == results
        assert env["RAY_ADDRESS"] == "ray://head.example:10001"
        assert not [k for k in env if re.search(r"_KEY|TOKEN$|SECRET|PASSWORD", k)], env
        assert d.parameters["config"]["rollout"]["auto"] is False  # the gate's event starts the rollout
