"""Waiting on Ray without swallowing a stop.

A signal that arrives while the main thread blocks in `ray.get` runs its handler inside Ray's C++
wait: the handler's exception is only noticed when the whole wait ends (minutes, for a
quantization), and then as a `SystemError` whose cause is the stop. Prefect's Ray futures turn that
into a crashed task, so the flow would take a user's stop for one variant's failure and go on.
Waiting in short `ray.wait` slices instead hands control back to Python twice a second, and the
stop that interrupted a slice is re-raised as itself.
"""

from __future__ import annotations

import signal
from typing import Any

from quantgate.tasks.runtime.stop import note_stop, raise_if_stopping

POLL_S = 0.5


def _interrupt_in(exc: BaseException) -> BaseException | None:
    """The stop (a BaseException that is not an Exception) a SystemError from Ray was raised over."""
    seen: BaseException | None = exc
    while seen is not None:
        if not isinstance(seen, Exception):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _signal_of(stop: BaseException) -> str:
    number = getattr(stop, "signal", None)  # Prefect's TerminationSignal carries the signal number
    if isinstance(number, int):
        return signal.Signals(number).name
    return "SIGINT" if isinstance(stop, KeyboardInterrupt) else "SIGTERM"


def wait_ready(ref: Any, *, poll_s: float = POLL_S) -> None:
    """Return when the Ray object `ref` is ready (or failed); a stop unwinds within `poll_s`."""
    while not first_ready([ref], poll_s=poll_s):
        pass


def first_ready(refs: list[Any], *, poll_s: float = POLL_S) -> list[Any]:
    """The Ray objects among `refs` that are ready after at most `poll_s` (possibly none)."""
    import ray

    try:
        ready, _ = ray.wait(refs, num_returns=1, timeout=poll_s)
    except SystemError as exc:
        if (stop := _interrupt_in(exc)) is not None:
            note_stop(_signal_of(stop))
            raise stop from None
        raise
    raise_if_stopping()
    if ready:  # ray.wait returns one; take every other that is ready too, without waiting
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
    return ready
