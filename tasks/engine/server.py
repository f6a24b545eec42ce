"""One engine server: vLLM's OpenAI-compatible server for one checkpoint, on a loopback port.

Started as a child process in a session of its own (vLLM runs an API server, an engine core and a
worker process: a stop signals the whole group) and tied to its parent (PDEATHSIG: a killed run does
not orphan it). Ready when `/health` answers 200; the seconds that took are the server's start-up,
reported on their own and never inside a latency. A server that cannot start raises
`EngineStartError` with the engine's own reason, read from its log.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

from quantgate.tasks.engine.cpus import bind_list, claimed_cpus, machine_lock_dir
from quantgate.tasks.engine.environment import find_engine
from quantgate.tasks.runtime.child_process import free_port, own_session_tied_to_parent
from quantgate.tasks.runtime.stop import raise_if_stopping


class EngineStartError(RuntimeError):
    """The engine server did not come up; `reason` is the engine's own words, `log` where to read more."""

    def __init__(self, reason: str, log: Path, transient: bool = False) -> None:
        super().__init__(f"{reason} (engine log: {log})")
        # transient: about the machine at that moment (a taken port, memory, a start-up past its
        # time), not about what was asked to be served; `support.py` remembers only the others.
        self.reason, self.log, self.transient = reason, log, transient

    def __reduce__(self):  # across processes (Ray, Prefect) with every field
        return (type(self), (self.reason, self.log, self.transient))


@dataclass(frozen=True)
class EngineSpec:
    """What one server serves and how much of the machine it gets."""

    model: str  # a checkpoint folder (HF layout; compressed-tensors checkpoints load as they are)
    served_name: str
    dtype: str  # float32 | bfloat16 | float16 (resolve `auto` with environment.serving_dtype first)
    threads: int = 1
    kv_cache_gb: int = 1
    max_model_len: int = 2048
    max_num_seqs: int = 32
    max_logprobs: int = 20
    kv_cache_dtype: str = "auto"  # "fp8": the FP8 KV-cache variant, served as the engine quantizes it
    enforce_eager: bool = True
    device: str = "cpu"
    port: int | None = None  # None: a free port
    # CPU: the worker inside the engine core ("uni", two processes) or a process of its own ("mp",
    # vLLM's CPU default); kept for bench/engine_startup.py, which measures the difference.
    executor: str = "uni"


# The server runs under this supervisor, the leader of the server's process group: vLLM's API server
# starts an engine core (and a worker) that outlive it when it dies abruptly (seen: orphans holding
# 1.7 GB each after a killed replica). Told to stop (SIGTERM/SIGINT, or PDEATHSIG when whoever started
# it dies), or when the server exits by itself, the supervisor ends the whole group. Killed outright
# itself (Ray SIGKILLs a dead replica's child processes, the supervisor among them: seen, two engines
# left running per rollout killed with -9), it cannot: the server is tied to it by PDEATHSIG and stops
# as on SIGTERM, its engine core with it.
SUPERVISOR = """
import ctypes, os, signal, subprocess, sys, time
def tied():
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: this supervisor's death stops it
server = subprocess.Popen(sys.argv[1:], preexec_fn=tied)
def exited():  # not server.poll(): inside this handler, the interrupted server.wait() holds its lock
    try:
        return os.waitpid(server.pid, os.WNOHANG)[0] != 0
    except ChildProcessError:
        return True
def end_group(*_):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while not exited() and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGTERM, end_group)
signal.signal(signal.SIGINT, end_group)
server.wait()
end_group()
"""


def engine_args(spec: EngineSpec) -> dict[str, str | int | bool]:
    """vLLM's engine arguments for `spec`, by their Python names: the server's flags (`engine_command`)
    and the format probe's `LLM(...)` (`probe.py`) load a checkpoint the same way."""
    args: dict[str, str | int | bool] = {
        "model": spec.model, "dtype": spec.dtype, "max_model_len": spec.max_model_len,
        "max_num_seqs": spec.max_num_seqs, "max_logprobs": spec.max_logprobs,
        "kv_cache_dtype": spec.kv_cache_dtype, "seed": 0,
        "generation_config": "vllm"}  # sampling defaults are the request's, not the checkpoint's
    if spec.device == "cpu":  # "uni": the worker inside the engine core, a process fewer (engine_env)
        args["distributed_executor_backend"] = spec.executor
    return args | {"enforce_eager": spec.enforce_eager}


def engine_command(python: str, spec: EngineSpec, port: int) -> list[str]:
    """The command line, under the supervisor: loopback only, no key on it (`ps` shows it)."""
    cmd = [python, "-c", SUPERVISOR, python, "-m", "vllm.entrypoints.openai.api_server",
           "--served-model-name", spec.served_name, "--host", "127.0.0.1", "--port", str(port),
           "--disable-uvicorn-access-log"]
    for name, value in engine_args(spec).items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            cmd.append(flag)
        elif value is not False:
            cmd += [flag, str(value)]
    return cmd


def engine_env(spec: EngineSpec, cpus: tuple[int, ...]) -> dict[str, str]:
    """Telemetry off, offline, the KV-cache space and the cores this server's threads are bound to."""
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_API_KEY", "OMP_NUM_THREADS")}
    env |= {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONNOUSERSITE": "1",
            "VLLM_CPU_KVCACHE_SPACE": str(spec.kv_cache_gb), "VLLM_LOGGING_LEVEL": "INFO"}
    if spec.device == "cpu":  # the whole process tree runs on these cores (`pinned_child`)
        env |= {"VLLM_CPU_OMP_THREADS_BIND": bind_list(cpus), "OMP_NUM_THREADS": str(len(cpus) or 1)}
        # vLLM's CPU platform turns `uni` back into the multiprocess executor unless V1 multiprocessing
        # is off (the API server and engine core stay two processes; only the worker moves in). The
        # executor would set OpenMP's placement for its worker; with it gone, it is set here. Measured
        # on an EPYC Milan, tiny Llama, 1 core: start-up 27-31 s instead of 40-49 s, decode no slower
        # (bench/engine_startup.py; docs/results/2026-12-06-engine.md).
        env |= {"VLLM_ENABLE_V1_MULTIPROCESSING": "0" if spec.executor == "uni" else "1"}
        if cpus and spec.executor == "uni":
            env |= {"OMP_PLACES": "{" + ",".join(map(str, cpus)) + "}", "OMP_PROC_BIND": "true"}
    return env


def pinned_child(cpus: tuple[int, ...]) -> Callable[[], None]:
    """The child's own session, tied to its parent, on `cpus` (inherited by every process it starts)."""
    def preexec() -> None:
        own_session_tied_to_parent()
        if cpus:
            os.sched_setaffinity(0, cpus)
    return preexec


# The engine's last words, most specific first: what a person should read in the error. Warnings are
# skipped (vLLM warns about "Too many open files" it might hit, at every start).
MACHINE_REASONS = ("port ", "out of memory")  # the first two forms below: the machine's, not the format's
_REASONS = [
    (re.compile(r"address already in use", re.I), "port {port} is taken"),
    (re.compile(r"(out of memory|cannot allocate memory|no available memory for the cache blocks"
                r"|insufficient memory)", re.I), "out of memory: {line}"),
    (re.compile(r"(?:^|\] )(?:[\w.]+\.)?\w+(?:Error|Exception): (.+)|Value error, (.+)"), "{match}"),
]


# vLLM's pointers to the real reason, which it logged before them
_GENERIC = re.compile(r"See stack trace|encountered an issue|check the stack trace above|See root cause",
                      re.I)


def reason_from_log(text: str, port: int) -> str:
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and " WARNING " not in ln and not _GENERIC.search(ln)]
    for pattern, form in _REASONS:
        for i in reversed(range(len(lines))):
            if m := pattern.search(lines[i]):
                match = m.group(m.lastindex or 0)[:300]
                if match.endswith(":"):  # "... Reasons:": the lines that follow, to the next header
                    items = list(itertools.takewhile(lambda ln: not ln.endswith(":"), lines[i + 1:i + 5]))
                    match = (match + " " + "; ".join(items))[:500]
                return form.format(port=port, line=lines[i][-300:], match=match)
    return lines[-1][-300:] if lines else "the engine printed nothing"


class EngineServer:
    """A running server; `stop()` ends it and every process it started."""

    def __init__(self, spec: EngineSpec, process: subprocess.Popen[bytes], port: int, log_path: Path,
                 log: IO[bytes], cpus: tuple[int, ...]) -> None:
        self.spec, self.process, self.port, self.log_path, self._log, self.cpus = (
            spec, process, port, log_path, log, cpus)
        self.base_url = f"http://127.0.0.1:{port}"
        self.startup_s = float("nan")

    @classmethod
    def start(cls, spec: EngineSpec, *, log_path: Path, cpus: tuple[int, ...] = (),
              python: str | None = None, timeout_s: float = 600) -> EngineServer:
        python = python or find_engine().python
        port = spec.port or free_port()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = log_path.open("ab")
        started = time.monotonic()
        proc = subprocess.Popen(engine_command(python, spec, port), stdout=log, stderr=subprocess.STDOUT,
                                env=engine_env(spec, cpus), preexec_fn=pinned_child(cpus))
        server = cls(spec, proc, port, log_path, log, cpus)
        try:
            server._wait_healthy(started, timeout_s)
        except BaseException:
            server.stop()
            raise
        server.startup_s = time.monotonic() - started
        return server

    def _wait_healthy(self, started: float, timeout_s: float) -> None:
        while True:
            if self.process.poll() is not None:
                self._log.flush()
                reason = self.reason()
                raise EngineStartError(f"engine for {self.spec.served_name} exited "
                                       f"({self.process.returncode}): {reason}", self.log_path,
                                       transient=reason.startswith(MACHINE_REASONS))
            if self.healthy():
                self._first_token(timeout_s)
                return
            if time.monotonic() - started > timeout_s:
                raise EngineStartError(f"engine for {self.spec.served_name} not healthy after "
                                       f"{timeout_s:.0f} s: {self.reason()}", self.log_path, transient=True)
            raise_if_stopping()
            time.sleep(0.5)

    def _first_token(self, timeout_s: float) -> None:
        """One token before the server counts as started: a kernel the engine's build lacks fails only
        at the first forward (W4A16 on vLLM's AVX2 CPU build: no `cpu_gemm_wna16`), after /health."""
        try:
            r = httpx.post(f"{self.base_url}/v1/completions", timeout=timeout_s, json={
                "model": self.spec.served_name, "prompt": [0, 0], "max_tokens": 1, "temperature": 0.0})
            ok = r.status_code == 200
        except httpx.HTTPError:
            ok = False
        if not ok:
            time.sleep(1)  # the engine's last words reach its log
            reason = self.reason()
            raise EngineStartError(f"engine for {self.spec.served_name} failed its first token: "
                                   f"{reason}", self.log_path, transient=reason.startswith(MACHINE_REASONS))

    def healthy(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200
        return False

    def alive(self) -> bool:
        return self.process.poll() is None

    def server_pid(self) -> int | None:
        """vLLM's API server (the supervisor's child), e.g. to kill it in a drill."""
        import psutil

        with contextlib.suppress(psutil.Error):
            children = psutil.Process(self.process.pid).children()
            return children[0].pid if children else None
        return None

    def reason(self) -> str:
        """Why the engine stopped or failed, in its own words (the log's most telling line)."""
        try:
            text = self.log_path.read_bytes()[-64_000:].decode("utf-8", "replace")
        except OSError:
            return "no engine log"
        return reason_from_log(text, self.port)

    def stop(self, grace_s: float = 10) -> None:
        """SIGTERM to the server's process group, SIGKILL to what is left after `grace_s`."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)  # the engine core and workers, if still there
        self.process.wait()
        self._log.close()


@contextlib.contextmanager
def engine_server(spec: EngineSpec, *, state_dir: Path, log_name: str, python: str | None = None,
                  timeout_s: float = 600) -> Iterator[EngineServer]:
    """A server for the `with` block, on `spec.threads` cores of its own; its log under state_dir."""
    threads = spec.threads if spec.device == "cpu" else 0
    with claimed_cpus(machine_lock_dir(), threads, timeout_s=timeout_s) as cpus:
        server = EngineServer.start(spec, log_path=state_dir / "engine-logs" / f"{log_name}.log", cpus=cpus,
                                    python=python, timeout_s=timeout_s)
        try:
            yield server
        finally:
            server.stop()
