"""A user's stop (SIGTERM, Ctrl-C) that unwinds the run within seconds.

The handler records the request and raises `StopRequested` in the main thread. Waits inside Ray
can turn that exception into an ordinary Ray error, which the flow would take for one variant's
failure and go on; so whoever converts failures into results (`flows.outcomes.outcome`) asks
`stop_requested()` first and re-raises. Everything the run started is stopped by the `with` blocks
that started it (the judge actor, Ray, the Prefect server) while the exception unwinds; finished
work is content-addressed on disk, so the next run resumes from it.
"""

from __future__ import annotations

import signal
import threading

_requested = threading.Event()
_signal_name: list[str] = []
_installed: list[bool] = []


class StopRequested(KeyboardInterrupt):  # noqa: N818 - a request, as KeyboardInterrupt is
    """The user asked the run to stop."""


def _handler(signum: int, frame: object) -> None:
    name = signal.Signals(signum).name
    if _requested.is_set():
        # Raising again would abort the cleanup the first stop started (servers would be left
        # running); it is bounded by timeouts, so a second signal only says so.
        print(f"\n{name}: already stopping, the servers are going down", flush=True)
        return
    note_stop(name)
    raise StopRequested(name)


def note_stop(name: str) -> None:
    """Record a stop that another handler raised (Prefect's own SIGTERM handler during a flow run)."""
    if not _requested.is_set():
        _requested.set()
        _signal_name.append(name)
        print(f"\nstopping ({name}): stopping the servers this run started; finished work is kept "
              "and the next run resumes from it", flush=True)


def install_stop_handlers() -> None:
    """SIGTERM and SIGINT both unwind the run (call from the main thread)."""
    _installed.append(True)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _handler)


def keep_stop_handlers() -> None:
    """Inside a flow run: Prefect swaps in its own SIGTERM handler, whose exception other code can
    turn into an ordinary error (a failed serialization, a Ray error) that nothing recognizes as a
    stop. Where the CLI installed ours, put it back for the run (Prefect restores ours at the end).
    Processes the CLI did not start (a served deployment's runs) keep Prefect's cancellation."""
    if _installed and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, _handler)


def stop_requested() -> bool:
    return _requested.is_set()


def stop_signal() -> str:
    """The first signal that asked to stop ("" when none did)."""
    return _signal_name[0] if _signal_name else ""


def raise_if_stopping() -> None:
    if _requested.is_set():
        raise StopRequested(stop_signal())
