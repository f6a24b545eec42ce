"""The rollout's state: an append-only log, each transition written (and fsynced) before it takes
effect, so a rollout killed anywhere can be read back and resumed or rolled back.

Events, in order: `started`, then per step `step` (weight about to be set), `window` (its
measurements), `decision`; `paused` / `resumed` around a person's decision; finally `promoting` →
`promoted`, or `rolling_back` → `rolled_back`. A log whose last event is `promoted` or `rolled_back`
is finished.

One rollout per model at a time: `RolloutLock` is an exclusive `flock` on a file next to the logs.
The kernel drops it when its holder dies (even by `kill -9`), so a dead holder never keeps it; the
file says who holds it, for the refusal message.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TERMINAL = ("promoted", "rolled_back")


def rollouts_dir(state_dir: Path, registered_model: str) -> Path:
    return state_dir / "rollouts" / registered_model


@dataclass
class RolloutLog:
    path: Path
    entries: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def create(cls, folder: Path) -> RolloutLog:
        folder.mkdir(parents=True, exist_ok=True)
        rid = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
        return cls(folder / rid / "log.jsonl")

    @classmethod
    def read(cls, path: Path) -> RolloutLog:
        entries = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line cut by a kill mid-write: everything before it stands
        return cls(path, entries)

    @property
    def rollout_id(self) -> str:
        return self.path.parent.name

    @property
    def finished(self) -> bool:
        return bool(self.entries) and self.entries[-1]["event"] in TERMINAL

    def append(self, event: str, **data: Any) -> dict[str, Any]:
        entry = {"seq": len(self.entries), "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "t": time.time(), "event": event, **data}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.entries.append(entry)
        return entry

    def last(self, *events: str) -> dict[str, Any] | None:
        return next((e for e in reversed(self.entries) if e["event"] in events), None)


def unfinished(folder: Path) -> RolloutLog | None:
    """The newest rollout of this model that did not reach a terminal event."""
    for path in sorted(folder.glob("*/log.jsonl"), reverse=True):
        log = RolloutLog.read(path)
        if log.entries and not log.finished:
            return log
    return None


def newest(folder: Path) -> RolloutLog | None:
    paths = sorted(folder.glob("*/log.jsonl"))
    return RolloutLog.read(paths[-1]) if paths else None


class RolloutBusy(RuntimeError):
    """Another rollout of this model is running."""


class RolloutLock:
    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "rollout.lock"
        self.fd: int | None = None

    def __enter__(self) -> RolloutLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RolloutBusy(f"another rollout of this model is running ({holder}); wait for it, or "
                              "`quantgate rollback` to stop it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since "
                      f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}".encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
