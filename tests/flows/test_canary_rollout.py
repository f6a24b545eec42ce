"""`quantgate rollout` as a user runs it, on a real Ray Serve app (tiny models), real MLflow, a real
Prefect server: a good canary is promoted; injected errors and latency roll back at the first
failing step; promote and rollback twice change nothing the second time; a second concurrent
rollout is refused; a rollout killed with -9 mid-step and started again ends consistent; a person's
rollback during a rollout stops it before its next window."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from quantgate.tasks.registry.champion import aliases

from factories import cli_env, rollout_state

pytestmark = pytest.mark.timeout(900)
EXE = str(Path(sys.executable).parent / "quantgate")


def quantgate(*args: str, timeout: float = 420) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *args], capture_output=True, text=True, env=cli_env(), timeout=timeout)


def state_for(tmp_path: Path, tiny_model: str, **rollout) -> tuple[Path, MlflowClient]:
    good = shutil.copytree(tiny_model, tmp_path / "good")
    conf = rollout_state(tmp_path, tiny_model, {"good": (str(good), "pass")}, rollout=rollout or None)
    return conf, MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'state' / 'mlflow.db'}")


def rollout_log(tmp_path: Path) -> list[dict]:
    (path,) = (tmp_path / "state" / "rollouts" / "tiny").glob("*/log.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def rollout_run(client: MlflowClient):
    (run,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id],
                                "tags.`quantgate.kind` = 'rollout'")
    return run


def test_good_canary_is_promoted_then_promote_and_rollback_are_idempotent(tmp_path, tiny_model):
    conf, client = state_for(tmp_path, tiny_model)
    proc = quantgate("rollout", "--config", str(conf), "--variant", "good")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "rollout: promoted" in proc.stdout
    assert aliases(client, "tiny") == {"champion": "2", "canary": None, "previous-champion": "1"}
    log = rollout_log(tmp_path)
    assert [e["weight"] for e in log if e["event"] == "step"] == [0.25, 0.5, 1.0]
    assert [e["event"] for e in log][-2:] == ["promoting", "promoted"]
    measured = {m["metric"]: m for e in log if e["event"] == "window" for m in e["measurements"]}
    assert set(measured) == {"error_rate", "latency", "tpot", "energy"}  # no judge: a `pass` variant
    assert "J/token" in measured["energy"]["reason"] and measured["energy"]["value"]["champion_p95"] > 0
    run = rollout_run(client)
    assert run.data.tags["rollout.outcome"] == "promoted"
    assert {a.path for a in client.list_artifacts(run.info.run_id, "rollout")} >= {
        "rollout/log.jsonl", "rollout/report.md", "rollout/timeline.png"}

    again = quantgate("promote", "--config", str(conf))
    assert again.returncode == 0 and "nothing to promote" in again.stdout, again.stdout + again.stderr
    back = quantgate("rollback", "--config", str(conf))
    assert back.returncode == 3, back.stdout + back.stderr
    assert aliases(client, "tiny")["champion"] == "1"
    twice = quantgate("rollback", "--config", str(conf))
    assert twice.returncode == 0 and "already" in twice.stdout
    assert aliases(client, "tiny")["champion"] == "1"
    status = quantgate("status", "--config", str(conf), "--json")
    st = json.loads(status.stdout)
    assert st["rollout"]["state"] == "promoted" and st["aliases"]["champion"]["variant"] == "baseline"


@pytest.mark.parametrize(("inject", "metric"), [("errors=0.6", "error_rate"), ("latency_ms=400", "latency")])
def test_misbehaving_canary_rolls_back_at_the_first_failing_step(tmp_path, tiny_model, inject, metric):
    conf, client = state_for(tmp_path, tiny_model)
    proc = quantgate("rollout", "--config", str(conf), "--variant", "good", "--inject", inject)
    assert proc.returncode == 3, (proc.stdout + proc.stderr)[-3000:]
    assert aliases(client, "tiny") == {"champion": "1", "canary": None, "previous-champion": None}
    log = rollout_log(tmp_path)
    decisions = [e for e in log if e["event"] == "decision"]
    assert decisions[-1]["outcome"] == "failed" and metric in decisions[-1]["failed_metrics"]
    failed_at = decisions[-1]["step"]
    assert all(e["step"] <= failed_at for e in log if e["event"] == "step")  # no step after the failure
    assert [e["event"] for e in log][-2:] == ["rolling_back", "rolled_back"]
    run = rollout_run(client)
    assert run.data.tags["rollout.outcome"] == "rolled_back"
    assert run.data.tags["rollout.reason"].startswith(f"step {failed_at + 1}")
    assert client.get_model_version("tiny", "2").tags["rollout.rolled_back"]


def test_second_rollout_refused_and_kill_minus_9_resumes(tmp_path, tiny_model):
    # A first step paced to last ~40 s (160 requests at 4/s, no shadow copies), whatever the machine's
    # speed: time for the second rollout to be refused and for the kill to land in the middle of it.
    conf, client = state_for(tmp_path, tiny_model, window_canary_requests=40, window_max_requests=400,
                             replay_concurrency=1, replay_rate_per_s=4, shadow_share=0.0)
    # Started again with the fixture's small unpaced windows: the same state, a quicker finish.
    raw = yaml.safe_load(conf.read_text())
    raw["rollout"] |= {"window_canary_requests": 4, "window_max_requests": 48, "replay_rate_per_s": 0}
    (again := tmp_path / "again.yaml").write_text(yaml.safe_dump(raw))
    first = _rollout_in_background(conf)
    try:
        _wait_for_a_step(first, tmp_path)
        second = quantgate("rollout", "--config", str(conf), "--variant", "good")
        assert second.returncode == 1 and "another rollout of this model is running" in second.stderr
        assert first.poll() is None
        os.kill(first.pid, signal.SIGKILL)  # the flow process only: mid-step, no cleanup
        first.wait()
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    printed = first.stdout.read() if first.stdout else ""
    assert aliases(client, "tiny")["canary"] == "2", (printed[-3000:], _safe_log(tmp_path)[-4:])
    resumed = quantgate("rollout", "--config", str(again))
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    assert "(resumed)" in resumed.stdout + resumed.stderr
    log = rollout_log(tmp_path)
    restarted = next(i for i, e in enumerate(log) if e["event"] == "restarted")
    assert log[restarted - 1]["event"] in ("step", "window")  # it had died in the middle of a step
    assert sum(e["event"] == "started" for e in log) == 1  # the same rollout, resumed
    assert [e["event"] for e in log][-1] == "promoted"
    assert aliases(client, "tiny") == {"champion": "2", "canary": None, "previous-champion": "1"}


def test_a_person_rolls_back_a_running_rollout_and_it_stops_before_its_next_window(tmp_path, tiny_model):
    """`quantgate rollback` while the canary is being measured: `promote` is refused (the rollout
    promotes itself), `rollback` removes the `canary` alias at once, and the rollout fails the step it
    is in before its next window and rolls itself back. The windows are paced (60 requests at 1/s,
    then 30, then 15) so that both commands land inside the rollout even when each CLI takes tens of
    seconds to start on a loaded machine (in CI, 16 s of windows were not enough)."""
    conf, client = state_for(tmp_path, tiny_model, window_canary_requests=15, window_max_requests=400,
                             replay_concurrency=1, replay_rate_per_s=1, shadow_share=0.0)
    first = _rollout_in_background(conf)
    try:
        _wait_for_a_step(first, tmp_path)
        promote = quantgate("promote", "--config", str(conf))
        assert promote.returncode == 1 and "it promotes itself" in promote.stderr, promote.stderr
        back = quantgate("rollback", "--config", str(conf))
        assert back.returncode == 0 and "`canary` alias removed" in back.stdout, back.stdout + back.stderr
        printed, _ = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert first.returncode == 3, printed[-3000:]
    log = rollout_log(tmp_path)
    (decision,) = [e for e in log if e["event"] == "decision" and e["outcome"] != "passed"]
    assert decision["outcome"] == "failed" and "alias was removed" in decision["reason"]
    assert decision["failed_metrics"] == []  # no metric failed: a person decided
    assert [e["step"] for e in log if e["event"] == "step"][-1] == decision["step"]  # no step after it
    assert [e["event"] for e in log][-2:] == ["rolling_back", "rolled_back"]
    assert aliases(client, "tiny") == {"champion": "1", "canary": None, "previous-champion": None}
    assert rollout_run(client).data.tags["rollout.outcome"] == "rolled_back"


def _rollout_in_background(conf: Path) -> subprocess.Popen:
    return subprocess.Popen([EXE, "rollout", "--config", str(conf), "--variant", "good"], env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _wait_for_a_step(proc: subprocess.Popen, tmp_path: Path) -> None:
    deadline = time.monotonic() + 300
    while not any(e["event"] == "step" for e in _safe_log(tmp_path)):
        assert proc.poll() is None and time.monotonic() < deadline, "the rollout never took a step"
        time.sleep(0.5)


def _safe_log(tmp_path: Path) -> list[dict]:
    try:
        return rollout_log(tmp_path)
    except (ValueError, json.JSONDecodeError):
        return []


def test_a_variant_no_engine_serves_is_refused_before_anything_starts(tmp_path, tiny_model):
    """A QuIP# variant the gate passed (quality measured on the reference path) cannot be canaried:
    no production engine serves it. `quantgate rollout` says so and why, and nothing moves: no alias,
    no rollout log, no engine started."""
    quip = shutil.copytree(tiny_model, tmp_path / "quip")
    config = json.loads((quip / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "quip_sharp", "bits": 2}
    (quip / "config.json").write_text(json.dumps(config))
    conf = rollout_state(tmp_path, tiny_model, {"quip": (str(quip), "pass")})
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'state' / 'mlflow.db'}")
    proc = quantgate("rollout", "--config", str(conf), "--variant", "quip")
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-3000:]
    assert ("error: quip (version 2) cannot be canaried: not servable on vllm: no production engine serves "
            "QuIP#") in proc.stderr, proc.stderr[-3000:]
    assert aliases(client, "tiny") == {"champion": "1", "canary": None, "previous-champion": None}
    assert not list((tmp_path / "state").glob("rollouts/*/*/log.jsonl"))
    assert not (tmp_path / "state" / "engine-logs").exists()
