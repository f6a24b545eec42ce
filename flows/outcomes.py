"""Waiting on task futures: a failing variant fails alone, a user's stop stops the run."""

from __future__ import annotations

from typing import Any

from prefect.futures import PrefectFuture

from quantgate.tasks.runtime.stop import raise_if_stopping
from quantgate.tasks.runtime.waiting import wait_ready


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
