"""Whether the serving engine loads each of several checkpoints here, asked of one engine process.

The format probe's question (`probe.py`) needs the engine's own kernel choice, not a server: its
answer is whether the checkpoint loads and computes a token, and which kernels vLLM logged for it.
A server start-up per format is two processes that each import vLLM and torch, ~20 s of one core;
here one process (`load_check_engine.py`, run by the engine's Python with the server's engine
arguments, `server.engine_args`) loads the checkpoints in turn, ~3 s each after one import. It runs
on cores of its own, as a server does. A process that crashes mid-checkpoint has answered for that
checkpoint (killed with SIGKILL, or out of time, it has not: that is the machine's); it is started
again for the rest.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from quantgate.tasks.engine.cpus import claimed_cpus, machine_lock_dir
from quantgate.tasks.engine.server import (
    MACHINE_REASONS,
    EngineSpec,
    EngineStartError,
    engine_args,
    engine_env,
    pinned_child,
    reason_from_log,
)
from quantgate.tasks.runtime.stop import raise_if_stopping

ENGINE_SIDE = Path(__file__).with_name("load_check_engine.py")


def load_log(state_dir: Path, name: str) -> Path:
    """Where the engine's output for checkpoint `name` goes: beside the servers' logs."""
    return state_dir / "engine-logs" / f"{name}.log"


def check_loads(specs: dict[str, EngineSpec], *, python: str, state_dir: Path, timeout_s: float
                ) -> dict[str, EngineStartError | None]:
    """Name -> None (the engine loaded it and computed a token) or why not (`transient`: the
    machine's trouble, or no answer in time). Logs: `load_log`."""
    work = state_dir / "load-check" / f"{os.getpid()}-{time.time_ns()}"
    load_log(state_dir, "").parent.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    first = next(iter(specs.values()))
    answers: dict[str, EngineStartError | None] = {}
    with claimed_cpus(machine_lock_dir(), first.threads if first.device == "cpu" else 0,
                      timeout_s=timeout_s) as cpus:
        while todo := [n for n in specs if n not in answers]:
            jobs = [{"name": n, "log": str(load_log(state_dir, n)), "args": engine_args(specs[n])}
                    for n in todo]
            (jobs_path := work / "jobs.json").write_text(json.dumps(jobs))
            (said := work / "answers.jsonl").write_text("")
            code, out = _run([python, str(ENGINE_SIDE), str(jobs_path), str(said)], first, cpus,
                             work / "process.log", timeout_s * len(todo))
            last = {a["name"]: a["status"] for a in map(json.loads, said.read_text().splitlines())}
            for name, status in last.items():
                log = load_log(state_dir, name)
                if status == "served":
                    answers[name] = None
                elif status == "refused":
                    answers[name] = _refusal(name, "refused it", log)
                elif code is None or code == -signal.SIGKILL:  # out of time, or killed from outside (the
                    # OOM killer, a person): the machine's trouble, not the format's
                    what = f"gave no answer in {timeout_s:.0f} s" if code is None else "was killed loading it"
                    answers[name] = EngineStartError(f"engine for {name} {what}", log, transient=True)
                else:  # it crashed loading it (a missing instruction, say): the engine's answer for it
                    answers[name] = _refusal(name, f"exited ({code}) loading it", log, extra=out)
            if not any(n in answers for n in todo):  # it died before its first checkpoint
                raise EngineStartError(f"the engine's process exited ({code}) before loading anything: "
                                       f"{reason_from_log(out, 0)}", work / "process.log", transient=True)
    return answers


def _refusal(name: str, what: str, log: Path, extra: str = "") -> EngineStartError:
    try:
        text = log.read_text(errors="replace")[-64_000:]
    except OSError:
        text = ""
    reason = reason_from_log(text + extra, 0)
    return EngineStartError(f"engine for {name} {what}: {reason}", log,
                            transient=reason.startswith(MACHINE_REASONS))


def _run(cmd: list[str], spec: EngineSpec, cpus: tuple[int, ...], log_path: Path, timeout_s: float
         ) -> tuple[int | None, str]:
    """(exit code, or None when it ran out of time; its output's tail), stopped with the run."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=engine_env(spec, cpus),
                                preexec_fn=pinned_child(cpus))
        deadline, timed_out = time.monotonic() + timeout_s, False
        try:
            while proc.poll() is None and not timed_out:
                raise_if_stopping()
                time.sleep(0.2)
                timed_out = time.monotonic() > deadline
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # its own session (`pinned_child`): all of it
            proc.wait()
    return None if timed_out else proc.returncode, log_path.read_text(errors="replace")[-16_000:]
