"""A finished future as (value, one-line error): how the flow lets a failing variant fail alone."""

from __future__ import annotations

from typing import Any

from prefect.futures import PrefectFuture


def outcome(future: PrefectFuture[Any]) -> tuple[Any, str]:
    """(result, "") or (None, one-line error) of a finished task. A task that raised comes back as a
    failed state; a worker that died (OOM kill, segfault) raises from Ray itself."""
    try:
        value = future.result(raise_on_failure=False)
    except Exception as exc:  # noqa: BLE001 - any way a worker dies is this variant's failure
        value = exc
    if not isinstance(value, BaseException):
        return value, ""
    text = f"{type(value).__name__}: {value}".strip()
    return None, text.splitlines()[0]
