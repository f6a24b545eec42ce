"""The recent traffic window the drift watch reads: the last N complete lines of a log that may still
be being written. A last line without its newline is a write in progress, not a bad line: it is left
for the next look instead of being quarantined half-written."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

_CHUNK = 1 << 16


@dataclass(frozen=True)
class TrafficWindow:
    path: str  # the window's lines, content-addressed under the state dir
    requests: int
    digest: str
    source: str
    partial_tail_bytes: int  # bytes after the last newline: left for the next look


def last_complete_lines(path: Path, n: int) -> tuple[list[bytes], int]:
    """The last `n` newline-terminated, non-blank lines of `path` (oldest first), and how many bytes
    follow the last newline. Reads backwards in chunks: an hourly look at a large log stays cheap."""
    with path.open("rb") as f:
        end = f.seek(0, os.SEEK_END)
        buf, pos = b"", end
        while pos > 0 and buf.count(b"\n") <= n:
            step = min(_CHUNK, pos)
            pos -= step
            f.seek(pos)
            buf = f.read(step) + buf
    complete, newline, tail = buf.rpartition(b"\n")
    if not newline:  # no newline in the whole file: nothing is complete yet
        return [], len(buf)
    lines = complete.split(b"\n")
    if pos > 0:  # the first piece may be the end of an earlier line
        lines = lines[1:]
    lines = [ln for ln in lines if ln.strip()]
    return lines[-n:], len(tail)


def cut_window(source: Path, n: int, out_dir: Path) -> TrafficWindow:
    """Copy the last `n` complete lines of `source` to `out_dir/<digest>.jsonl` (written once: the
    same window read twice is the same file)."""
    if not source.is_file():
        raise FileNotFoundError(f"traffic.path: {source} does not exist")
    lines, tail = last_complete_lines(source, n)
    if not lines:
        raise ValueError(f"traffic.path: {source} holds no complete line yet")
    body = b"\n".join(lines) + b"\n"
    digest = hashlib.sha256(body).hexdigest()[:16]
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{digest}.jsonl"
    if not target.is_file():
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(body)
        tmp.replace(target)
    return TrafficWindow(str(target), len(lines), digest, str(source), tail)
