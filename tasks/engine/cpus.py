"""Each engine server's share of the CPUs: cores of its own, claimed with one lock file per core.

Ray counts CPUs but does not say which cores a task may use, and two engine servers whose OpenMP
threads are bound to the same core halve each other's speed. A server claims its cores with `flock`,
which the kernel releases when the holder dies (a crashed run frees its cores), and binds its threads
there (VLLM_CPU_OMP_THREADS_BIND). With too few free cores it waits. The locks are machine-wide
(`machine_lock_dir`): another run's engines on the same machine count too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from quantgate.tasks.runtime.stop import raise_if_stopping


def machine_lock_dir() -> Path:
    """Machine-wide, not per run: two runs on one machine must not bind their engines to one core."""
    return Path(tempfile.gettempdir()) / "quantgate-engine-cpus"


def machine_cpus() -> list[int]:
    """The cores this process may run on."""
    return sorted(os.sched_getaffinity(0))


def _try_claim(path: Path) -> int | None:
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def claimed_cpus(lock_dir: Path, count: int, *, timeout_s: float = 600, poll_s: float = 0.5
                 ) -> Iterator[tuple[int, ...]]:
    """`count` cores nobody else under `lock_dir` holds, for the `with` block."""
    cpus = machine_cpus()
    if count > len(cpus):
        raise ValueError(f"engine.threads={count}: this machine offers {len(cpus)} CPUs ({cpus})")
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    while (held := _claim_all(lock_dir, cpus, count)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {count} free CPUs for an engine server after {timeout_s:.0f} s "
                               f"(locks under {lock_dir})")
        raise_if_stopping()
        time.sleep(poll_s * (0.5 + random.random()))  # jitter: two waiters do not retry in step
    try:
        yield tuple(sorted(held))
    finally:
        for fd in held.values():
            os.close(fd)  # closing the descriptor releases its lock


def _claim_all(lock_dir: Path, cpus: list[int], count: int) -> dict[int, int] | None:
    """All `count` cores or none: two servers that each held half of what they need would wait on
    each other for ever."""
    held: dict[int, int] = {}
    for cpu in cpus:
        if len(held) == count:
            break
        if (fd := _try_claim(lock_dir / f"cpu{cpu}")) is not None:
            held[cpu] = fd
    if len(held) == count:
        return held
    for fd in held.values():
        os.close(fd)
    return None


def bind_list(cpus: tuple[int, ...]) -> str:
    """vLLM's VLLM_CPU_OMP_THREADS_BIND form: "0,1"."""
    return ",".join(str(c) for c in cpus)
