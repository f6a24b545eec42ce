"""Waiting on task futures: a failing variant fails alone, a user's stop stops the run."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from prefect.futures import PrefectFuture

from quantgate.tasks.runtime.stop import raise_if_stopping
from quantgate.tasks.runtime.waiting import first_ready, wait_ready

L = TypeVar("L")


def wait(future: PrefectFuture[Any]) -> None:
    """Block until `future` is done; a user's stop unwinds at once, not when the task ends."""
    ref = getattr(future, "wrapped_future", None)  # a Ray future (prefect-ray): wait in slices
    if ref is not None:
        wait_ready(ref)
    else:
        future.wait()


def value(future: PrefectFuture[Any]) -> Any:
    """The result of a task the run cannot go on without (it raises if the task failed)."""
    wait(future)
    return future.result()


def outcome(future: PrefectFuture[Any]) -> tuple[Any, str]:
    """(result, "") or (None, one-line error) of a finished task. A task that raised comes back as a
    failed state; a worker that died (OOM kill, segfault) raises from Ray itself. A user's stop
    is not a failure: waiting inside Ray can turn it into a Ray error, so it is re-raised."""
    try:
        wait(future)
        result = future.result(raise_on_failure=False)
    except Exception as exc:  # noqa: BLE001 - any way a worker dies is this variant's failure
        result = exc
    raise_if_stopping()
    if not isinstance(result, BaseException):
        return result, ""
    text = f"{type(result).__name__}: {result}".strip()
    return None, text.splitlines()[0]


def as_finished(pending: dict[PrefectFuture[Any], L], *,
                heartbeat: Callable[[dict[L, float]], None] | None = None,
                every_s: float = 60.0) -> Iterator[tuple[PrefectFuture[Any], L]]:
    """Each future of `pending` with its label as it finishes; the caller may add futures to `pending`
    between items (a stage submitted when the one before it ends). Every `every_s` without a
    finish, `heartbeat` gets the labels of those running with the epoch second each started (the
    rest wait for a CPU), so a long stage is never silent."""
    last = time.monotonic()
    while pending:
        refs = {getattr(f, "wrapped_future", None): f for f in pending}
        if None in refs:  # not Ray futures (a test's thread pool): wait on each in turn
            done = [f for f in pending if f.state.is_final()] or [_waited(next(iter(pending)))]
        else:
            done = [refs[r] for r in first_ready(list(refs))]
        if not done:
            if heartbeat is not None and time.monotonic() - last >= every_s:
                last = time.monotonic()
                try:  # states come from the Prefect API; a progress line is not worth a failed run
                    states = {label: f.state for f, label in pending.items()}
                except Exception:  # noqa: BLE001
                    continue
                heartbeat({label: s.timestamp.timestamp() for label, s in states.items() if s.is_running()})
            continue
        last = time.monotonic()
        for f in done:
            yield f, pending.pop(f)


def _waited(future: PrefectFuture[Any]) -> PrefectFuture[Any]:
    wait(future)
    return future
