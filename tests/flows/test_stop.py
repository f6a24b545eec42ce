"""A run killed outright (kill -9), then stopped by a user at the stages where different servers run:
each stop unwinds and stops every server it started, and the next run resumes from what was
finished, the crash's work included, and publishes once. Real CLI, Prefect server, Ray,
judge and MLflow, tiny model."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml
from mlflow.tracking import MlflowClient

from quantgate.tasks.registry.aliases import CHECKPOINT_TAG
from quantgate.tasks.runtime.child_process import free_port

from factories import cli_env, mixed_records, write_traffic

# (the line the run prints when it enters the stage, the signal, sent as whom): the stages where
# different servers run (Ray tasks and engine servers; the judge's server; the gate after them all),
# each signal as a terminal and as a service manager send it. Calibration and the bench run Ray tasks
# as quantizing does: stopping there took two more CLI runs (~2 min in CI) and covered nothing new.
STOPS = [("[4/7] quantizing", signal.SIGINT, "group"),        # Ctrl-C in a terminal
         ("[5/7] judging", signal.SIGTERM, "process"),        # systemd's stop, `kill`
         ("[7/7] gate", signal.SIGTERM, "process")]
UNWIND_S = 90  # a hang detector, not a timing assert: a stop that works takes seconds


def _config(tmp_path, model):
    traffic = write_traffic(tmp_path / "traffic.jsonl", mixed_records(80))
    conf = {"model": {"name": model, "served_name": "tiny"},
            "traffic": {"path": str(traffic), "calibration_size": 8, "heldout_size": 24},
            "calibration": {"max_seq_len": 64},
            "eval": {"window": 64, "batch_size": 8, "min_slice_tokens": 50},
            # Scored by the engine: a stop while the variants are evaluated stops their engine servers.
            "variants": [{"name": "int8_w8a8", "method": "int8_w8a8", "num_samples": 4},
                         {"name": "int4_rtn", "method": "int4_rtn", "group_size": 32, "control": True}],
            # Task evals on the HF path (else an engine start-up each; the engine's: test_lmeval_engine).
            "lmeval": {"backend": "hf", "tasks": ["qg_facts_mc", "qg_replay"], "limit": 4, "replay_size": 6,
                       "batch_size": 4, "min_slice_items": 2},
            "judge": {"max_pairs": 3},
            "bench": {"backend": "reference", "batch_sizes": [1], "prompt_tokens": 8, "new_tokens": 3,
                      "warmup": 0, "repeats": 1},
            "runtime": {"state_dir": str(tmp_path / "state"), "prefect_port": free_port()}}
    path = tmp_path / "conf.yaml"
    path.write_text(yaml.safe_dump(conf))
    return path, conf["runtime"]["prefect_port"]


def _start(conf):
    env = cli_env(own_prefect=True)  # its stops must stop the server the CLI started
    proc = subprocess.Popen([str(Path(sys.executable).parent / "quantgate"), "run", "--config", str(conf)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    return proc, lines, reader


def _stop_at(conf, marker, sig, whom):
    proc, lines, reader = _start(conf)
    while not any(marker in line for line in lines):
        assert proc.poll() is None, f"finished before {marker!r}:\n" + "".join(lines[-30:])
        reader.join(0.05)
    started = [p for p in psutil.Process(proc.pid).children(recursive=True) if p.is_running()]
    _telemetry_is_off(started)
    (os.killpg if whom == "group" else os.kill)(proc.pid, sig)
    proc.wait(timeout=UNWIND_S)
    reader.join(10)
    _, alive = psutil.wait_procs(started, timeout=15)
    return proc.returncode, "".join(lines), [" ".join(p.cmdline()[:3]) for p in alive if p.is_running()]


def _telemetry_is_off(processes):
    """The CLI was started without the telemetry switches (cli_env): it set them for every server."""
    off = {"RAY_USAGE_STATS_ENABLED": "0", "DO_NOT_TRACK": "true", "MLFLOW_DISABLE_TELEMETRY": "true",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    # An engine server's DO_NOT_TRACK is "1": vLLM reads that variable as off only when it is "1".
    spelt = {"DO_NOT_TRACK": {"true", "1"}}
    for p in processes:
        try:
            env = p.environ()
        except psutil.Error:  # exited meanwhile
            continue
        if not env:  # Ray's agents rename themselves over /proc/<pid>/environ: nothing to read
            continue
        got = {k: "true" if k in spelt and env.get(k) in spelt[k] else env.get(k) for k in off}
        assert got == off, " ".join(p.cmdline()[:3])


def _crash_after_the_first_variant(conf, variants):
    """kill -9 to the whole run (a crash, an OOM kill) once a variant is quantized: nothing unwinds.
    The quantizations finished by then, with their files' times."""
    proc, lines, reader = _start(conf)
    deadline = time.monotonic() + 300
    while not list(variants.glob("*/DONE")):
        assert time.monotonic() < deadline and proc.poll() is None, "".join(lines[-30:])
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    reader.join(10)
    return {p.parent.name: p.stat().st_mtime_ns for p in variants.glob("*/DONE")}


@pytest.mark.timeout(1500)
def test_a_stop_at_any_stage_unwinds_stops_everything_and_the_next_run_resumes(tmp_path, tiny_model):
    conf, port = _config(tmp_path, tiny_model)
    variants = tmp_path / "state" / "variants"
    crashed = _crash_after_the_first_variant(conf, variants)
    for marker, sig, whom in STOPS:
        code, out, alive = _stop_at(conf, marker, sig, whom)
        assert code == 128 + sig, f"stop at {marker}: exit {code}\n{out[-3000:]}"
        assert f"stopped by {sig.name}" in out and "Run the same command again to resume" in out, out[-2000:]
        assert not alive, f"stop at {marker} left {alive}"
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"stop at {marker}: Prefect server still up"
    proc, lines, reader = _start(conf)
    proc.wait(timeout=900)
    reader.join(10)
    out = "".join(lines)
    assert proc.returncode == 0, out[-3000:]
    for name in ("int8_w8a8", "int4_rtn"):  # quantized before the later stops: not redone
        assert f"{name}: quantized in" in out and "(reused)" in out.split(f"{name}: quantized in")[1][:40]
    for name, mtime in crashed.items():  # nor what the crash left finished
        assert (variants / name / "DONE").stat().st_mtime_ns == mtime, name
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'state' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("model").experiment_id])
    assert len([r for r in runs if "mlflow.parentRunId" not in r.data.tags]) == 1  # published once
    checkpoints = [v.tags[CHECKPOINT_TAG] for v in client.search_model_versions("name='tiny'")]
    assert checkpoints and len(checkpoints) == len(set(checkpoints))
